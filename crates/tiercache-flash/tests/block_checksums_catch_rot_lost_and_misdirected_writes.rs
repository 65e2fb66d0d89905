//! Bug (issue 17, item 8): SSD data blocks had no checksums — a block that read back other
//! bytes than were written (bit rot, a bad read path, a lost or misdirected write) was served
//! as it was, and a dirty one was even written over BACKING's good bytes by the cleaner.
//!
//! Format 3: every read of a block from the device is checked. A clean block that fails is a
//! miss (the caller reads BACKING) and is dropped; a dirty one is an I/O error, never its
//! bytes, never a miss; both are counted (`checksum_errors`). `check` counts them
//! (`corrupt_blocks`) without changing the device.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use std::sync::Arc;
use tiercache_core::Class;
use tiercache_flash::{FaultyDevice, FlashDevice, FlashTier};
use tiercache_tier::Cleaning;
use tiercache_tier::StoreExt as _;
use tiercache_tier::{Admit, DataTier, Lookup, TierKey};

/// 16 sets of 256 4-KiB blocks, on a fault-injecting device.
const LEN: u64 = 16 * ((1 << 20) + 2048) + 8192;

/// A tier on a fault-injecting device; sets are taken lowest first, so file `i`'s first
/// backing set lands in set `i - 1` when files are first stored in order.
fn tier() -> (Arc<FaultyDevice>, FlashTier) {
    let dev = faulty(LEN, 11);
    let d: Arc<dyn FlashDevice> = dev.clone();
    (dev, FlashTier::create(d, config()).unwrap())
}

fn read_err(t: &FlashTier, k: &TierKey) -> bool {
    let mut buf = vec![0u8; t.info().block_size];
    t.read(k, V, &mut buf).is_err()
}

#[test]
fn a_clean_block_flipped_at_rest_is_a_miss_dropped_and_counted() {
    let (dev, t) = tier();
    let k = key(1, 0);
    assert_eq!(fill(&t, &k, 1), Admit::Stored);
    let g = t.geometry();
    dev.flip_bit(g.block_off(0, 0) + 1234, 5).unwrap();
    assert_eq!(read(&t, &k).0, Lookup::Miss);
    assert!(!t.contains(&k), "dropped");
    let s = t.flash_stats();
    assert_eq!(s.checksum_errors, 1, "{s:?}");
    assert!(s.errors >= 1);
    // Stored again, it reads back.
    assert_eq!(fill(&t, &k, 2), Admit::Stored);
    assert_eq!(
        read(&t, &k),
        (Lookup::Hit { dirty: false }, data(&k, 2, 4096))
    );
}

#[test]
fn a_dirty_block_flipped_at_rest_is_an_error_never_its_bytes_and_stays_dirty() {
    let (dev, t) = tier();
    let k = key(1, 7);
    assert_eq!(write(&t, &k, 1), Admit::Stored);
    t.sync().unwrap();
    dev.flip_bit(t.geometry().block_off(0, 7) + 4095, 0)
        .unwrap();
    assert!(
        read_err(&t, &k),
        "a read of the corrupt dirty block must fail"
    );
    let mut buf = vec![0u8; 4096];
    assert!(t.read_dirty(&k, V, &mut buf).is_err(), "read_dirty too");
    assert!(t.take(&k, V, &mut buf).is_err(), "take too");
    assert_eq!(t.dirty_blocks(10).len(), 1, "still dirty (never dropped)");
    assert_eq!(t.flash_stats().checksum_errors, 3);
    // A newer write over it is taken and reads back.
    assert_eq!(write(&t, &k, 2), Admit::Stored);
    assert_eq!(
        read(&t, &k),
        (Lookup::Hit { dirty: true }, data(&k, 2, 4096))
    );
}

#[test]
fn bits_flipped_on_the_read_path_are_caught_and_the_block_comes_back_once_the_path_is_good() {
    let (dev, t) = tier();
    let k = key(3, 1);
    fill(&t, &k, 1);
    let d = key(3, 2);
    write(&t, &d, 1);
    let g = t.geometry();
    dev.corrupt_reads_in(Some(g.block_off(0, 1)..g.block_off(0, 3)));
    assert_eq!(read(&t, &k).0, Lookup::Miss);
    assert!(read_err(&t, &d));
    dev.corrupt_reads_in(None);
    assert_eq!(
        read(&t, &d),
        (Lookup::Hit { dirty: true }, data(&d, 1, 4096))
    );
}

#[test]
fn a_misdirected_write_is_caught_where_it_should_have_landed_and_where_it_did() {
    let (dev, t) = tier();
    let (a, b) = (key(1, 0), key(1, 1));
    fill(&t, &a, 1);
    write(&t, &b, 1);
    t.sync().unwrap();
    let g = t.geometry();
    // The new bytes of `a` land on `b`'s place: `a`'s place keeps its old bytes.
    dev.misdirect_next_write(g.block_off(0, 0), g.block_off(0, 1));
    let bs = t.info().block_size;
    t.fill(&a, V, Class::NORMAL, &data(&a, 2, bs), &yes)
        .unwrap();
    assert_eq!(read(&t, &a).0, Lookup::Miss, "old bytes at a's place");
    assert!(read_err(&t, &b), "a's bytes at b's (dirty) place");
    assert_eq!(t.flash_stats().checksum_errors, 2);
}

#[test]
fn a_lost_data_write_whose_checksum_was_lost_too_is_caught_by_the_blocks_identity() {
    // Fewer than 32 sets: no table is cached, so every check reads the table from the device.
    let dev = faulty(64 << 10, 5);
    let d: Arc<dyn FlashDevice> = dev.clone();
    let t = FlashTier::create(d, small_config()).unwrap();
    let bs = t.info().block_size;
    let (a, b) = (key(1, 0), key(2, 0));
    fill(&t, &a, 1);
    t.invalidate(&a);
    t.sync().unwrap();
    // The set is mapped to another file, whose block's data write and table write are both
    // lost: the device still holds a's bytes and a's checksum in that place, which must not
    // pass for b's (only the identity in the checksum tells them apart).
    dev.drop_writes_after(Some(0));
    t.fill(&b, V, Class::NORMAL, &data(&b, 9, bs), &yes)
        .unwrap();
    let mut buf = vec![0u8; bs];
    assert_eq!(t.read(&b, V, &mut buf).unwrap(), Lookup::Miss);
    assert_eq!(t.flash_stats().checksum_errors, 1);
}

#[test]
fn check_counts_corrupt_blocks_and_changes_nothing() {
    let (dev, t) = tier();
    for i in 0..4 {
        write(&t, &key(1, i), 1);
    }
    fill(&t, &key(2, 0), 1);
    t.close().unwrap();
    drop(t);
    let r = FlashTier::check(dev.as_ref()).unwrap();
    assert_eq!((r.corrupt_blocks, r.unverified_blocks), (0, 0), "{r:?}");
    assert_eq!(r.usable_blocks, 5);
    let g = tiercache_flash::format::Geometry::compute(LEN, 512, 12, 8).unwrap();
    dev.flip_bit(g.block_off(0, 2) + 7, 1).unwrap();
    dev.flip_bit(g.block_off(1, 0), 7).unwrap();
    let mut before = vec![0u8; LEN as usize];
    dev.read_at(&mut before, 0).unwrap();
    let r = FlashTier::check(dev.as_ref()).unwrap();
    assert_eq!(r.corrupt_blocks, 2, "{r:?}");
    let j = serde_json::to_value(&r).unwrap();
    assert_eq!(j["corrupt_blocks"], 2);
    let mut after = vec![0u8; LEN as usize];
    dev.read_at(&mut after, 0).unwrap();
    assert!(before == after, "check changed the device");
}
