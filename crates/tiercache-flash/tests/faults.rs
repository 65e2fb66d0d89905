//! Device errors degrade the tier; `check` on good, torn and garbage devices; RAM per block.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use std::sync::Arc;
use tiercache_flash::{FlashDevice, FlashError, FlashTier, MemDevice};
use tiercache_tier::Cleaning;
use tiercache_tier::StoreExt as _;
use tiercache_tier::{Admit, DataTier, Lookup};

const LEN: u64 = 8 * ((1 << 20) + 2048) + 8192;

#[test]
fn write_errors_count_and_past_max_errors_the_tier_degrades_but_dirty_blocks_stay_readable() {
    let dev = faulty(LEN, 1);
    let d: Arc<dyn FlashDevice> = dev.clone();
    let mut cfg = config();
    cfg.max_errors = 3;
    let t = FlashTier::create(d, cfg).unwrap();
    write(&t, &key(1, 0), 1);
    fill(&t, &key(1, 1), 1);
    dev.fail_writes_after(Some(0));
    for b in 10..13 {
        let k = key(1, b);
        assert!(t
            .write_dirty(&k, V, tiercache_core::Class::NORMAL, &data(&k, 1, 4096))
            .is_err());
        assert!(!t.contains(&k), "a failed store leaves nothing behind");
    }
    let fs = t.flash_stats();
    assert!(fs.degraded);
    assert_eq!(fs.errors, 3);
    assert_eq!(t.stats().errors, 3);
    // Degraded: reads miss, stores are turned down ...
    assert_eq!(read(&t, &key(1, 1)).0, Lookup::Miss);
    assert_eq!(write(&t, &key(1, 20), 1), Admit::Rejected);
    // ... but the manager can still write the dirty blocks back.
    let mut buf = vec![0u8; 4096];
    let seq = t.read_dirty(&key(1, 0), V, &mut buf).unwrap().unwrap();
    assert_eq!(buf, data(&key(1, 0), 1, 4096));
    assert!(t.mark_clean(&key(1, 0), seq));
    t.abandon();
}

#[test]
fn read_errors_are_errors_not_wrong_bytes() {
    let dev = faulty(LEN, 1);
    let d: Arc<dyn FlashDevice> = dev.clone();
    let t = FlashTier::create(d, config()).unwrap();
    fill(&t, &key(1, 0), 1);
    dev.fail_reads_after(Some(0));
    let mut buf = vec![0u8; 4096];
    assert!(t.read(&key(1, 0), V, &mut buf).is_err());
    assert_eq!(t.flash_stats().errors, 1);
    assert!(!t.flash_stats().degraded);
    t.abandon();
}

#[test]
fn check_reports_a_good_device() {
    let dev = mem(LEN);
    let d: Arc<dyn FlashDevice> = dev.clone();
    let t = FlashTier::create(d, config()).unwrap();
    for b in 0..300 {
        fill(&t, &key(1, b), 1);
    }
    write(&t, &key(2, 0), 1);
    write(&t, &key(2, 1), 1);
    t.close().unwrap();
    let r = FlashTier::check(dev.as_ref()).unwrap();
    assert!(r.clean_shutdown);
    assert_eq!(r.superblocks_valid, 2);
    assert_eq!(r.sets, 8);
    assert_eq!(r.mapped_sets, 3);
    assert_eq!(r.valid_blocks, 302);
    assert_eq!(r.dirty_blocks, 2);
    assert_eq!(r.usable_blocks, 302);
    assert_eq!(r.torn_records, 0);
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["valid_blocks"], 302);
}

#[test]
fn check_counts_torn_records_and_open_falls_back_to_the_older_slot() {
    let dev = mem(LEN);
    let d: Arc<dyn FlashDevice> = dev.clone();
    let t = FlashTier::create(d.clone(), config()).unwrap();
    write(&t, &key(1, 0), 1);
    t.sync().unwrap(); // record seq 1 (slot 1) says block 0 dirty
    write(&t, &key(1, 1), 1);
    t.sync().unwrap(); // record seq 2 (slot 0) says blocks 0 and 1 dirty
    let geo = t.geometry();
    t.abandon();
    // Tear the newest record: its second half is garbage.
    let off = geo.rec_off(0, 0) + 64;
    dev.poke(off, &[0xAB; 64]);
    let r = FlashTier::check(dev.as_ref()).unwrap();
    assert_eq!(r.torn_records, 1);
    assert!(!r.clean_shutdown);
    assert_eq!(r.dirty_blocks, 1);
    let t = FlashTier::open(d, config()).unwrap();
    assert_eq!(t.flash_stats().torn_records, 1);
    assert_eq!(read(&t, &key(1, 0)).0, Lookup::Hit { dirty: true });
}

#[test]
fn check_refuses_a_garbage_device() {
    let dev = MemDevice::new(LEN);
    let junk: Vec<u8> = (0..LEN as usize).map(|i| (i * 31 % 251) as u8).collect();
    dev.poke(0, &junk);
    assert!(matches!(
        FlashTier::check(&dev),
        Err(FlashError::NotFormatted(_))
    ));
}

#[test]
fn ram_per_cached_block_is_under_one_byte_for_a_256_mib_tier() {
    let d: Arc<dyn FlashDevice> = mem(256 << 20);
    let t = FlashTier::create(d, config()).unwrap();
    // Fill every set with blocks of many files so the index is fully used.
    let sets = t.geometry().sets as u64;
    for s in 0..sets {
        fill(&t, &key(s % 17, (s / 17) * 256 + 3), 1);
    }
    let fs = t.flash_stats();
    eprintln!(
        "256 MiB tier: {} sets, {} blocks, {:.3} index bytes per block",
        fs.sets,
        t.info().capacity_blocks,
        fs.ram_bytes_per_block
    );
    assert!(fs.ram_bytes_per_block > 0.0);
    assert!(fs.ram_bytes_per_block <= 1.0);
}
