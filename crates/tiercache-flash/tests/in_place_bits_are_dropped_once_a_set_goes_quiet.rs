//! Bug (review of issue 17 item 8): a set's in-place bits stayed in its newest record for
//! good once the set went quiet — no later record dropped the bits of blocks not stored since
//! — so after a crash any time later, rot at rest in such a block, or a lost overwrite of it,
//! was taken for an overwrite cut short and served (the old bytes as the acknowledged ones).
//!
//! Now a set whose record carried in-place bits gets another record at the next sync, which
//! keeps only the bits of blocks stored since (and of parked ones); a clean close leaves no
//! bit at all. So a block left alone for one sync after its overwrite is checked again after
//! a crash.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use std::sync::Arc;
use tiercache_flash::{FaultyDevice, FlashDevice, FlashTier};
use tiercache_tier::Cleaning;
use tiercache_tier::{DataTier, TierKey};

/// 16 sets of 256 4-KiB blocks.
const LEN: u64 = 16 * ((1 << 20) + 2048) + 8192;

/// A tier on a fault-injecting device where `k` (in set 0) was overwritten in place: stored,
/// synced, rewritten (parked), synced (its bit durable, the bytes in place).
fn overwritten_in_place(k: &TierKey) -> (Arc<FaultyDevice>, FlashTier) {
    let dev = faulty(LEN, 1);
    let d: Arc<dyn FlashDevice> = dev.clone();
    let t = FlashTier::create(d, config()).unwrap();
    write(&t, k, 1);
    t.sync().unwrap();
    write(&t, k, 2);
    t.sync().unwrap();
    assert_eq!(t.flash_stats().in_place_records, 1);
    (dev, t)
}

fn open(dev: &Arc<FaultyDevice>) -> FlashTier {
    let d: Arc<dyn FlashDevice> = dev.clone();
    FlashTier::open(d, config()).unwrap()
}

#[test]
fn rot_in_a_block_left_alone_after_its_overwrite_is_found_after_a_crash() {
    let k = key(1, 3);
    let (dev, t) = overwritten_in_place(&k);
    t.sync().unwrap(); // a sync that finds the block not stored since: its bit goes
    let off = t.geometry().block_off(0, 3) + 10;
    t.abandon();
    dev.flip_bit(off, 1).unwrap();
    let r = FlashTier::check(dev.as_ref()).unwrap();
    assert_eq!((r.corrupt_blocks, r.unverified_blocks), (1, 0), "{r:?}");
    let t = open(&dev);
    let mut buf = vec![0u8; 4096];
    assert!(
        t.read_dirty(&k, V, &mut buf).is_err(),
        "rotten bytes served as the acknowledged ones"
    );
    assert_eq!(t.flash_stats().unverified_blocks, 0);
}

#[test]
fn a_lost_overwrite_of_a_block_that_then_went_quiet_is_found_after_a_crash() {
    let k = key(1, 3);
    let (dev, t) = overwritten_in_place(&k);
    let g = t.geometry();
    // The next overwrite (in place at once: the bit is durable) lands in an unused block.
    dev.misdirect_next_write(g.block_off(0, 3), g.block_off(5, 0));
    write(&t, &k, 3);
    t.sync().unwrap(); // acknowledged; the record keeps the bit (stored since)
    t.sync().unwrap(); // quiet: the bit goes
    t.abandon();
    dev.crash().unwrap();
    let t = open(&dev);
    let mut buf = vec![0u8; 4096];
    let got = t.read_dirty(&k, V, &mut buf);
    assert!(
        got.is_err(),
        "the older bytes were served for the acknowledged ones"
    );
}

#[test]
fn a_block_rewritten_before_every_sync_keeps_its_bit_and_loses_it_at_the_first_quiet_sync() {
    let k = key(1, 3);
    let (dev, t) = overwritten_in_place(&k);
    for i in 3..6 {
        write(&t, &k, i); // in place, not parked again
        t.sync().unwrap();
    }
    let s = t.flash_stats();
    assert_eq!((s.parked_blocks, s.in_place_records), (1, 1), "{s:?}");
    let records = s.record_writes;
    t.sync().unwrap();
    assert_eq!(
        t.flash_stats().record_writes,
        records + 1,
        "one record drops the bit"
    );
    t.sync().unwrap();
    assert_eq!(
        t.flash_stats().record_writes,
        records + 1,
        "then the set is quiet"
    );
    let off = t.geometry().block_off(0, 3);
    t.abandon();
    dev.flip_bit(off, 0).unwrap();
    let r = FlashTier::check(dev.as_ref()).unwrap();
    assert_eq!((r.corrupt_blocks, r.unverified_blocks), (1, 0), "{r:?}");
}

#[test]
fn a_clean_close_leaves_no_in_place_bit_for_a_crash_after_the_next_open() {
    let k = key(1, 3);
    let (dev, t) = overwritten_in_place(&k);
    write(&t, &k, 3); // in place, stored since the last record: its bit would stay
    t.close().unwrap();
    drop(t);
    let t = open(&dev);
    let off = t.geometry().block_off(0, 3) + 4000;
    t.abandon(); // a crash before the reopened tier wrote anything
    dev.flip_bit(off, 6).unwrap();
    let r = FlashTier::check(dev.as_ref()).unwrap();
    assert_eq!((r.corrupt_blocks, r.unverified_blocks), (1, 0), "{r:?}");
    let t = open(&dev);
    let mut buf = vec![0u8; 4096];
    assert!(t.read_dirty(&k, V, &mut buf).is_err());
}
