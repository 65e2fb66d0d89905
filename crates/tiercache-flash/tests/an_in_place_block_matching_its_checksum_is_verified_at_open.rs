//! Bug (review of issue 17 item 8): after a crash, `open` took every dirty block with its
//! in-place bit as it was and counted it `unverified` — even when it matched its durable
//! checksum, i.e. the overwrite had not been cut at all — and `check` counted it the same way
//! without reading it.
//!
//! Now such a block is read and checked first: one that matches is an ordinary, checked
//! block; only one that does not is taken as it is (its checksum recomputed) and counted
//! `unverified`, by `open` and `check` alike.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use std::sync::Arc;
use tiercache_flash::{FlashDevice, FlashTier};
use tiercache_tier::{DataTier, Lookup};

const LEN: u64 = 16 * ((1 << 20) + 2048) + 8192;

#[test]
fn a_whole_overwrite_with_its_bit_is_checked_and_only_a_mismatch_is_unverified() {
    for flip in [false, true] {
        let dev = faulty(LEN, 1);
        let d: Arc<dyn FlashDevice> = dev.clone();
        let t = FlashTier::create(d.clone(), config()).unwrap();
        let k = key(1, 3);
        write(&t, &k, 1);
        t.sync().unwrap();
        write(&t, &k, 2); // parked; the sync makes its bit durable and writes it in place
        t.sync().unwrap();
        let off = t.geometry().block_off(0, 3) + 77;
        t.abandon(); // a crash while the record still carries the bit
        if flip {
            dev.flip_bit(off, 2).unwrap();
        }
        let r = FlashTier::check(dev.as_ref()).unwrap();
        let want = u64::from(flip);
        assert_eq!((r.corrupt_blocks, r.unverified_blocks), (0, want), "{r:?}");
        let t = FlashTier::open(d, config()).unwrap();
        assert_eq!(t.flash_stats().unverified_blocks, want, "flip {flip}");
        let (l, got) = read(&t, &k);
        assert_eq!(l, Lookup::Hit { dirty: true });
        assert_eq!(got == data(&k, 2, 4096), !flip);
        assert_eq!(t.flash_stats().checksum_errors, 0);
    }
}
