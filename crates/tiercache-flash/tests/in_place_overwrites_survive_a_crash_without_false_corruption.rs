//! With block checksums (format 3, issue 17 item 8), an overwrite in place of a dirty block
//! the device already holds durably is the one write a crash can leave half old, half new
//! (rule 6 of the crash ordering): the durable checksum is the old one. Such a block must not
//! be taken for corruption — a power cut would otherwise refuse the next mount — while rot in
//! any other block is still found after a crash.
//!
//! Such an overwrite waits in RAM ("parked") until the next `sync()`, which makes the in-place
//! bits of all parked blocks durable in one round before writing them (a crash before that
//! brings back the acknowledged bytes); a block rewritten between every sync keeps its bit
//! and is overwritten in place directly. After a crash a block with the bit is taken as it
//! is, sector by sector old or new bytes (`unverified_blocks`), and its checksum recomputed;
//! after a clean close every block is checked again.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use std::sync::Arc;
use tiercache_flash::{FlashDevice, FlashTier};
use tiercache_tier::Cleaning;
use tiercache_tier::{DataTier, Lookup};

const LEN: u64 = 16 * ((1 << 20) + 2048) + 8192;

fn sector_wise_from(got: &[u8], a: &[u8], b: &[u8]) -> bool {
    got.chunks(512)
        .zip(a.chunks(512).zip(b.chunks(512)))
        .all(|(g, (x, y))| g == x || g == y)
}

fn t_geometry() -> tiercache_flash::Geometry {
    tiercache_flash::Geometry::compute(LEN, 512, 12, 8).unwrap()
}

#[test]
fn an_overwrite_cut_by_a_power_cut_reads_back_old_or_new_sectors_never_as_corrupt() {
    let (mut mixed, mut new, mut old) = (0, 0, 0);
    for seed in 0..120 {
        let dev = faulty(LEN, seed);
        let d: Arc<dyn FlashDevice> = dev.clone();
        let t = FlashTier::create(d.clone(), config()).unwrap();
        dev.set_volatile(true).unwrap();
        let k = key(1, 3);
        write(&t, &k, 1);
        t.sync().unwrap();
        write(&t, &k, 2); // parked until the sync, which sets the block's in-place bit
        t.sync().unwrap();
        write(&t, &k, 3); // in place at once: the bit is durable
        let s = t.flash_stats();
        assert_eq!((s.parked_blocks, s.in_place_records), (1, 1), "{s:?}");
        t.abandon();
        dev.crash().unwrap();
        let report = FlashTier::check(dev.as_ref()).unwrap();
        let t = FlashTier::open(d, config()).unwrap();
        let mut buf = vec![0u8; 4096];
        let got = t.read_dirty(&k, V, &mut buf);
        assert!(got.is_ok(), "seed {seed}: {got:?}");
        assert!(
            got.unwrap().is_some(),
            "seed {seed}: the synced block was lost"
        );
        let (d2, d3) = (data(&k, 2, 4096), data(&k, 3, 4096));
        assert!(
            sector_wise_from(&buf, &d2, &d3),
            "seed {seed}: bytes never written"
        );
        // Unverified only when it does not match the durable checksum (a mix never does;
        // old or new bytes may, depending on which table write landed).
        let unverified = t.flash_stats().unverified_blocks;
        match (buf == d2, buf == d3) {
            (true, _) => old += 1,
            (_, true) => new += 1,
            _ => {
                mixed += 1;
                assert_eq!(unverified, 1, "seed {seed}");
            }
        }
        assert!(unverified <= 1, "seed {seed}");
        assert_eq!(
            report.unverified_blocks, unverified,
            "seed {seed}: check agrees"
        );
        assert_eq!(report.corrupt_blocks, 0, "seed {seed}");
        assert_eq!(t.flash_stats().checksum_errors, 0, "seed {seed}");
        // Taken as it is: it reads back the same, now checked against its new checksum.
        assert_eq!(read(&t, &k), (Lookup::Hit { dirty: true }, buf.clone()));
        // The first sync drops the bit: a later crash checks the block again.
        t.sync().unwrap();
        t.abandon();
        dev.crash().unwrap();
        let t = FlashTier::open(dev.clone(), config()).unwrap();
        assert_eq!(t.flash_stats().unverified_blocks, 0, "seed {seed}");
        assert_eq!(read(&t, &k), (Lookup::Hit { dirty: true }, buf));
    }
    assert!(
        mixed > 0 && new > 0 && old > 0,
        "old {old}, new {new}, mixed {mixed}"
    );
}

#[test]
fn a_parked_overwrite_lost_in_a_crash_brings_back_the_acknowledged_bytes() {
    let dev = faulty(LEN, 9);
    let d: Arc<dyn FlashDevice> = dev.clone();
    let t = FlashTier::create(d.clone(), config()).unwrap();
    dev.set_volatile(true).unwrap();
    let k = key(2, 0);
    write(&t, &k, 1);
    t.sync().unwrap();
    write(&t, &k, 2);
    assert_eq!(
        read(&t, &k),
        (Lookup::Hit { dirty: true }, data(&k, 2, 4096))
    );
    let mut buf = vec![0u8; 4096];
    t.read_dirty(&k, V, &mut buf).unwrap();
    assert_eq!(
        buf,
        data(&k, 2, 4096),
        "read_dirty returns the parked bytes"
    );
    t.abandon();
    dev.crash().unwrap();
    let t = FlashTier::open(d, config()).unwrap();
    assert!(t.read_dirty(&k, V, &mut buf).unwrap().is_some());
    assert_eq!(buf, data(&k, 1, 4096), "the bytes of the last sync");
    assert_eq!(t.flash_stats().unverified_blocks, 0);
}

#[test]
fn a_block_rewritten_between_every_sync_pays_for_its_in_place_bit_once() {
    let d: Arc<dyn FlashDevice> = mem(LEN);
    let t = FlashTier::create(d, config()).unwrap();
    let k = key(1, 0);
    write(&t, &k, 1);
    t.sync().unwrap();
    assert_eq!(
        t.flash_stats().parked_blocks,
        0,
        "not durable before: written at once"
    );
    let syncs = t.flash_stats().device_syncs;
    write(&t, &k, 2);
    assert_eq!(
        t.flash_stats().device_syncs,
        syncs,
        "no device sync in the store"
    );
    t.sync().unwrap();
    for i in 3..7 {
        write(&t, &k, i);
        t.sync().unwrap();
    }
    let s = t.flash_stats();
    assert_eq!((s.parked_blocks, s.in_place_records), (1, 1), "{s:?}");
    // A record of the set without a rewrite of the block drops its bit; the next overwrite
    // is parked again.
    write(&t, &key(1, 1), 1);
    t.sync().unwrap();
    write(&t, &k, 9);
    assert_eq!(
        read(&t, &k),
        (Lookup::Hit { dirty: true }, data(&k, 9, 4096))
    );
    t.sync().unwrap();
    let s = t.flash_stats();
    assert_eq!((s.parked_blocks, s.in_place_records), (2, 2), "{s:?}");
    assert_eq!(
        read(&t, &k),
        (Lookup::Hit { dirty: true }, data(&k, 9, 4096))
    );
}

#[test]
fn after_a_crash_rot_in_a_block_not_being_overwritten_is_found_and_check_reports_both_kinds() {
    let dev = faulty(LEN, 3);
    let d: Arc<dyn FlashDevice> = dev.clone();
    let t = FlashTier::create(d.clone(), config()).unwrap();
    let (rotten, hot) = (key(1, 5), key(1, 6));
    write(&t, &rotten, 1);
    write(&t, &hot, 1);
    t.sync().unwrap();
    write(&t, &hot, 2);
    t.sync().unwrap(); // its in-place bit is durable now
    write(&t, &hot, 3); // in place
    t.abandon();
    dev.flip_bit(t_geometry().block_off(0, 5) + 100, 3).unwrap();
    let r = FlashTier::check(dev.as_ref()).unwrap();
    // The hot block has its bit, but its overwrite landed whole: it matches, so it is checked.
    assert_eq!((r.corrupt_blocks, r.unverified_blocks), (1, 0), "{r:?}");
    let t = FlashTier::open(d, config()).unwrap();
    let mut buf = vec![0u8; 4096];
    assert!(t.read_dirty(&rotten, V, &mut buf).is_err());
    assert!(t.read_dirty(&hot, V, &mut buf).unwrap().is_some());
    assert_eq!(
        buf,
        data(&hot, 3, 4096),
        "not volatile here: the overwrite landed"
    );
}

#[test]
fn after_a_clean_close_every_block_is_checked_in_place_bit_or_not() {
    let dev = faulty(LEN, 4);
    let d: Arc<dyn FlashDevice> = dev.clone();
    let t = FlashTier::create(d.clone(), config()).unwrap();
    let k = key(1, 2);
    write(&t, &k, 1);
    t.sync().unwrap();
    write(&t, &k, 2);
    t.sync().unwrap();
    write(&t, &k, 3);
    t.close().unwrap();
    drop(t);
    dev.flip_bit(t_geometry().block_off(0, 2), 0).unwrap();
    let r = FlashTier::check(dev.as_ref()).unwrap();
    assert_eq!((r.corrupt_blocks, r.unverified_blocks), (1, 0), "{r:?}");
    let t = FlashTier::open(d, config()).unwrap();
    assert_eq!(t.flash_stats().unverified_blocks, 0);
    let mut buf = vec![0u8; 4096];
    assert!(t.read_dirty(&k, V, &mut buf).is_err());
}

#[test]
fn more_than_a_mebibyte_parked_goes_in_place_at_once_and_every_block_stays_right() {
    let dev = faulty(LEN, 6);
    let d: Arc<dyn FlashDevice> = dev.clone();
    let t = FlashTier::create(d.clone(), config()).unwrap();
    let keys: Vec<_> = (0..300).map(|b| key(3, b)).collect();
    for k in &keys {
        write(&t, k, 1);
    }
    t.sync().unwrap();
    for k in &keys {
        write(&t, k, 2);
    }
    let s = t.flash_stats();
    assert!(s.in_place_records >= 1, "unparked before any sync: {s:?}");
    for k in &keys {
        assert_eq!(read(&t, k), (Lookup::Hit { dirty: true }, data(k, 2, 4096)));
    }
    t.sync().unwrap();
    t.abandon();
    let t = FlashTier::open(d, config()).unwrap();
    let mut buf = vec![0u8; 4096];
    for k in &keys {
        t.read_dirty(k, V, &mut buf).unwrap();
        assert_eq!(buf, data(k, 2, 4096));
    }
    assert_eq!(t.flash_stats().checksum_errors, 0);
}
