//! Bug (review of issue 17 item 8): the cache of checksum tables stopped evicting at the
//! first table whose write failed, so while the device failed writes every read of another
//! set added a table for good (4 B per block of each), past the RAM budget.
//!
//! Now a table whose write fails is kept (its entries are the only record of its blocks'
//! checksums) and skipped: the others are still evicted, and the kept one is written later.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use std::sync::Arc;
use tiercache_flash::{FlashDevice, FlashTier};
use tiercache_tier::Cleaning;
use tiercache_tier::DataTier;

/// 64 sets of 256 4-KiB blocks: two checksum tables are cached.
const LEN: u64 = 64 * ((1 << 20) + 2048) + 8192;

#[test]
fn failing_table_writes_keep_those_tables_but_the_cache_stays_within_its_cap() {
    let dev = faulty(LEN, 3);
    let d: Arc<dyn FlashDevice> = dev.clone();
    let t = FlashTier::create(d.clone(), config()).unwrap();
    let sets = u64::from(t.geometry().sets);
    assert_eq!(sets, 64);
    for s in 0..sets {
        write(&t, &key(1, s * 256), 1);
    }
    t.sync().unwrap();
    // Two tables changed in the cache (not written yet).
    for s in 0..2 {
        write(&t, &key(1, s * 256 + 1), 1);
    }
    let before = t.flash_stats().ram_bytes_per_block;
    dev.fail_writes_after(Some(0));
    let mut buf = vec![0u8; 4096];
    for s in 0..sets {
        let k = key(1, s * 256);
        assert!(t.read_dirty(&k, V, &mut buf).unwrap().is_some());
        assert_eq!(buf, data(&k, 1, 4096));
    }
    let during = t.flash_stats().ram_bytes_per_block;
    assert!(
        during <= before + 0.15,
        "the table cache grew: {before:.3} -> {during:.3} B per block"
    );
    dev.fail_writes_after(None);
    // The kept tables are written with their sets' records: every checksum is right.
    t.sync().unwrap();
    t.close().unwrap();
    drop(t);
    let r = FlashTier::check(dev.as_ref()).unwrap();
    assert_eq!((r.corrupt_blocks, r.dirty_blocks), (0, sets + 2), "{r:?}");
}
