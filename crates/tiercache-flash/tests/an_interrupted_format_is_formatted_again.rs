//! Bug (review of issue 17): a crash in the middle of `create` — a new cache file, or the
//! reformat that ends a format-2 upgrade — left zeroed superblocks over freshly written
//! records: a device that `open_or_create` refused as "other data" and `is_formatted` called
//! no cache, so the next mount refused it for good instead of starting again.
//!
//! Now `create` first puts a formatting marker in superblock slot 0 (synced), and the
//! superblock replaces it last: a device with the marker and no valid superblock is an
//! interrupted format, which `open_or_create` formats again (logged), `is_formatted` counts
//! as a cache (so a mount goes on to `open_or_create`), and `open` and `check` name in one
//! line. A valid superblock always wins over the marker: a cache is never formatted away.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use std::sync::Arc;
use tiercache_flash::format::formatting_marker;
use tiercache_flash::{is_formatted, FlashDevice, FlashTier};
use tiercache_tier::Cleaning;
use tiercache_tier::{DataTier, Lookup};

const LEN: u64 = 16 * ((1 << 20) + 2048) + 8192;

/// Device writes of a whole `create` on a device of `LEN`.
fn create_writes() -> u64 {
    let dev = faulty(LEN, 0);
    let d: Arc<dyn FlashDevice> = dev.clone();
    FlashTier::create(d, config()).unwrap().abandon();
    dev.counts().0
}

#[test]
fn a_crash_at_any_point_of_a_format_leaves_a_device_the_next_open_or_create_takes() {
    let writes = create_writes();
    assert!(writes >= 3, "{writes}");
    for landed in 0..=writes {
        for volatile in [false, true] {
            let dev = faulty(LEN, landed);
            // An older cache was there (as before the reformat of an upgrade).
            let d: Arc<dyn FlashDevice> = dev.clone();
            let old = FlashTier::create(d.clone(), config()).unwrap();
            write(&old, &key(9, 0), 1);
            old.close().unwrap();
            drop(old);
            dev.set_volatile(volatile).unwrap();
            dev.drop_writes_after(Some(landed));
            if let Ok(t) = FlashTier::create(d.clone(), config()) {
                t.abandon();
            }
            dev.crash().unwrap();
            let what = format!("{landed} of {writes} writes landed (volatile {volatile})");
            assert!(is_formatted(dev.as_ref()), "{what}");
            let (t, _) = FlashTier::open_or_create(d.clone(), config())
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            // Whichever it is (the old cache when nothing of the format landed, else a new
            // one), it works and holds nothing bad.
            let k = key(1, 0);
            write(&t, &k, 2);
            t.sync().unwrap();
            assert_eq!(
                read(&t, &k),
                (Lookup::Hit { dirty: true }, data(&k, 2, 4096))
            );
            assert_eq!(t.flash_stats().checksum_errors, 0, "{what}");
            t.close().unwrap();
            drop(t);
            let (t, created) = FlashTier::open_or_create(d, config()).unwrap();
            assert!(!created, "{what}: formatted twice");
            let mut buf = vec![0u8; 4096];
            assert!(t.read_dirty(&k, V, &mut buf).unwrap().is_some(), "{what}");
            assert_eq!(buf, data(&k, 2, 4096), "{what}");
        }
    }
}

#[test]
fn an_interrupted_format_is_named_by_open_and_check_and_formatted_again_by_open_or_create() {
    let dev = faulty(LEN, 1);
    let d: Arc<dyn FlashDevice> = dev.clone();
    dev.drop_writes_after(Some(2)); // the marker and the records land, not the superblock
    FlashTier::create(d.clone(), config()).unwrap().abandon();
    dev.crash().unwrap();
    let e = FlashTier::open(d.clone(), config())
        .unwrap_err()
        .to_string();
    assert!(e.contains("interrupted") && !e.contains('\n'), "{e}");
    let e = FlashTier::check(dev.as_ref()).unwrap_err().to_string();
    assert!(e.contains("interrupted"), "{e}");
    let (t, created) = FlashTier::open_or_create(d.clone(), config()).unwrap();
    assert!(created);
    drop(t);
    let r = FlashTier::check(dev.as_ref()).unwrap();
    assert_eq!((r.superblocks_valid, r.format_version), (2, 3), "{r:?}");
}

#[test]
fn the_marker_never_makes_a_cache_with_a_valid_superblock_be_formatted_away() {
    let m = mem(LEN);
    let d: Arc<dyn FlashDevice> = m.clone();
    let t = FlashTier::create(d.clone(), config()).unwrap();
    let k = key(1, 4);
    write(&t, &k, 1);
    t.sync().unwrap();
    t.abandon(); // a crash: the dirty block is the only copy
                 // Slot 0 turns into a marker (as a torn write of a format that was never started would
                 // leave it); slot 1 still holds a valid superblock.
    let t = FlashTier::open(d.clone(), config()).unwrap();
    t.abandon();
    m.poke(0, &formatting_marker(512));
    let (t, created) = FlashTier::open_or_create(d, config()).unwrap();
    assert!(!created, "a cache holding dirty data was formatted away");
    let mut buf = vec![0u8; 4096];
    assert!(t.read_dirty(&k, V, &mut buf).unwrap().is_some());
    assert_eq!(buf, data(&k, 1, 4096));
}
