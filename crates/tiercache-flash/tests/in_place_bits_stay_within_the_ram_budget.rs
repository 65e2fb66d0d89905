//! Bug (review of issue 17 item 8): the in-place bits were kept in RAM for every set whose
//! record had some (three bitmaps and a hash-map entry each, never given back), so a workload
//! that overwrites one block in every set between syncs took the tier from 0.94 to 2.15 B of
//! RAM per block, far over the 1-byte budget (issue 17: "RAM per block stays ≤ 1 byte").
//!
//! Now at most `sets / 32` sets (at least 1) keep their bits between operations (the others
//! are forgotten: their next overwrite is parked again), and the map gives its memory back.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use std::sync::Arc;
use tiercache_flash::{FlashDevice, FlashTier};
use tiercache_tier::{DataTier, Lookup};

/// The default geometry's 256 MiB: 255 sets of 256 4-KiB blocks.
const LEN: u64 = 256 << 20;

#[test]
fn overwriting_a_block_of_every_set_between_syncs_stays_within_a_byte_per_block() {
    let d: Arc<dyn FlashDevice> = mem(LEN);
    let t = FlashTier::create(d.clone(), config()).unwrap();
    let sets = u64::from(t.geometry().sets);
    assert_eq!(sets, 255);
    for s in 0..sets {
        write(&t, &key(1, s * 256), 1);
    }
    t.sync().unwrap();
    let before = t.flash_stats().ram_bytes_per_block;
    for round in 2..5 {
        for s in 0..sets {
            write(&t, &key(1, s * 256), round);
        }
        t.sync().unwrap();
        let now = t.flash_stats().ram_bytes_per_block;
        assert!(
            now <= before + 0.01 && now <= 1.0,
            "round {round}: {before:.3} -> {now:.3} B per block"
        );
    }
    for _ in 0..2 {
        t.sync().unwrap();
    }
    let after = t.flash_stats().ram_bytes_per_block;
    assert!(after <= before + 0.01, "{before:.3} -> {after:.3}");
    // What it costs: sets over the cap are parked again at every round.
    let s = t.flash_stats();
    assert!(s.parked_blocks > 2 * sets, "{s:?}");
    for s in 0..sets {
        let k = key(1, s * 256);
        assert_eq!(
            read(&t, &k),
            (Lookup::Hit { dirty: true }, data(&k, 4, 4096))
        );
    }
    t.close().unwrap();
    drop(t);
    let r = FlashTier::check(d.as_ref()).unwrap();
    assert_eq!((r.corrupt_blocks, r.dirty_blocks), (0, sets), "{r:?}");
}
