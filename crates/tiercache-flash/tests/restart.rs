//! Warm restart after a clean close; a crash keeps dirty blocks only; file devices.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use std::sync::Arc;
use tiercache_flash::{FileDevice, FlashDevice, FlashError, FlashTier, IoChoice, IoMode};
use tiercache_tier::Cleaning;
use tiercache_tier::{Admit, DataTier, Lookup};

const LEN: u64 = 8 * ((1 << 20) + 2048) + 8192;

#[test]
fn warm_restart_after_clean_close_serves_cached_blocks_on_first_read() {
    let dev = mem(LEN);
    let d: Arc<dyn FlashDevice> = dev.clone();
    let t = FlashTier::create(d.clone(), config()).unwrap();
    for b in 0..600 {
        fill(&t, &key(1, b), 1);
    }
    write(&t, &key(2, 7), 1);
    t.close().unwrap();
    drop(t);
    let t = FlashTier::open(d, config()).unwrap();
    assert!(t.flash_stats().opened_clean);
    for b in 0..600 {
        let k = key(1, b);
        let (l, buf) = read(&t, &k);
        assert_eq!(l, Lookup::Hit { dirty: false }, "block {b}");
        assert_eq!(buf, data(&k, 1, 4096));
    }
    let (l, buf) = read(&t, &key(2, 7));
    assert_eq!(l, Lookup::Hit { dirty: true });
    assert_eq!(buf, data(&key(2, 7), 1, 4096));
    // The manager's version decides: another version is never served.
    let mut b = vec![0u8; 4096];
    assert_eq!(t.read(&key(1, 0), V + 1, &mut b).unwrap(), Lookup::Miss);
}

#[test]
fn drop_closes_cleanly() {
    let d: Arc<dyn FlashDevice> = mem(LEN);
    {
        let t = FlashTier::create(d.clone(), config()).unwrap();
        fill(&t, &key(1, 1), 1);
    }
    let t = FlashTier::open(d, config()).unwrap();
    assert_eq!(read(&t, &key(1, 1)).0, Lookup::Hit { dirty: false });
}

#[test]
fn after_a_crash_synced_dirty_blocks_survive_and_clean_ones_are_dropped() {
    let dev = faulty(LEN, 3);
    let d: Arc<dyn FlashDevice> = dev.clone();
    let t = FlashTier::create(d.clone(), config()).unwrap();
    dev.set_volatile(true).unwrap();
    fill(&t, &key(1, 0), 1);
    write(&t, &key(1, 1), 1);
    write(&t, &key(3, 9), 1);
    t.sync().unwrap();
    write(&t, &key(4, 0), 1); // not synced: may or may not survive
    t.abandon();
    dev.crash().unwrap();
    let t = FlashTier::open(d, config()).unwrap();
    let fs = t.flash_stats();
    assert!(!fs.opened_clean);
    assert!(fs.recovered_dirty_blocks >= 2);
    assert_eq!(read(&t, &key(1, 0)).0, Lookup::Miss);
    for k in [key(1, 1), key(3, 9)] {
        let (l, buf) = read(&t, &k);
        assert_eq!(l, Lookup::Hit { dirty: true });
        assert_eq!(buf, data(&k, 1, 4096));
    }
    let listed: Vec<_> = t.dirty_blocks(100).into_iter().map(|d| d.key).collect();
    assert!(listed.contains(&key(1, 1)) && listed.contains(&key(3, 9)));
}

#[test]
fn opening_with_another_geometry_is_refused() {
    let d: Arc<dyn FlashDevice> = mem(LEN);
    FlashTier::create(d.clone(), config())
        .unwrap()
        .close()
        .unwrap();
    let mut c = config();
    c.set_shift = 7;
    assert!(matches!(
        FlashTier::open(d, c),
        Err(FlashError::Mismatch(_))
    ));
}

#[test]
fn opening_an_unformatted_device_is_refused() {
    let d: Arc<dyn FlashDevice> = mem(LEN);
    assert!(matches!(
        FlashTier::open(d, config()),
        Err(FlashError::NotFormatted(_))
    ));
}

#[test]
fn a_file_device_is_created_preallocated_and_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flash.img");
    let d: Arc<dyn FlashDevice> =
        Arc::new(FileDevice::open(&path, Some(LEN), IoChoice::Auto).unwrap());
    assert_eq!(d.len(), LEN);
    let t = FlashTier::create(d, config()).unwrap();
    assert_eq!(write(&t, &key(1, 5), 4), Admit::Stored);
    t.sync().unwrap();
    t.close().unwrap();
    drop(t);
    let d: Arc<dyn FlashDevice> = Arc::new(FileDevice::open(&path, None, IoChoice::Auto).unwrap());
    let t = FlashTier::open(d, config()).unwrap();
    let (l, buf) = read(&t, &key(1, 5));
    assert_eq!(l, Lookup::Hit { dirty: true });
    assert_eq!(buf, data(&key(1, 5), 4, 4096));
}

#[test]
fn a_file_device_with_o_direct_works_where_the_filesystem_allows_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("direct.img");
    let dev = match FileDevice::open(&path, Some(LEN), IoChoice::Only(IoMode::Direct)) {
        Ok(dev) => dev,
        // Refused with a reason, never opened in another mode; this test needs a file system
        // that takes O_DIRECT (ext4, xfs, btrfs; tmpfs since Linux 6.6) under TMPDIR.
        Err(e) => panic!(
            "{}: {e} (this test needs a TMPDIR whose file system takes O_DIRECT)",
            path.display()
        ),
    };
    assert_eq!(dev.io_mode(), IoMode::Direct);
    let d: Arc<dyn FlashDevice> = Arc::new(dev);
    let t = FlashTier::create(d, config()).unwrap();
    write(&t, &key(1, 2), 1);
    t.sync().unwrap();
    assert_eq!(read(&t, &key(1, 2)).1, data(&key(1, 2), 1, 4096));
    t.close().unwrap();
    drop(t);
    // The same cache reopened in the default mode (and back in direct) reads the same.
    for io in [IoChoice::Auto, IoChoice::Only(IoMode::Direct)] {
        let d: Arc<dyn FlashDevice> = Arc::new(FileDevice::open(&path, None, io).unwrap());
        let t = FlashTier::open(d, config()).unwrap();
        assert_eq!(read(&t, &key(1, 2)).1, data(&key(1, 2), 1, 4096));
        t.close().unwrap();
    }
}
