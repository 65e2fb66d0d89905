//! Bug: superblock slot 1 was read at the opening device's sector size (an older copy won), and a hostile superblock's lengths overflowed the geometry arithmetic (panic in debug, wrap in release).
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use std::sync::Arc;
use tiercache_flash::format::{Geometry, Superblock};
use tiercache_flash::{FlashDevice, FlashTier, MemDevice};
use tiercache_tier::{Admit, DataTier, Lookup};

/// A device formatted with 4096-byte sectors (O_DIRECT) and reopened with 512-byte sectors:
/// superblock slot 1 is looked for at 512 instead of 4096, so an older "clean" superblock in
/// slot 0 wins over the newer "not clean" one after a crash, and clean blocks invalidated in
/// RAM only are served again (stale bytes).
#[test]
fn reopening_with_another_sector_size_reads_the_newest_superblock() {
    let len = 8 * ((1 << 20) + 8192) + 65536;
    let dev4k = Arc::new(MemDevice::with_sector(len, 4096));
    let d: Arc<dyn FlashDevice> = dev4k.clone();
    let t = FlashTier::create(d.clone(), config()).unwrap(); // sb gen 1 -> slot 1
    let k = key(1, 0);
    assert_eq!(fill(&t, &k, 1), Admit::Stored);
    t.close().unwrap(); // gen 2, clean -> slot 0
    drop(t);
    let t = FlashTier::open(d.clone(), config()).unwrap(); // gen 3, not clean -> slot 1 (4096)
    assert_eq!(read(&t, &k).0, Lookup::Hit { dirty: false });
    // The manager wrote newer bytes to BACKING and invalidates the copy (RAM only: lazy).
    t.invalidate(&k);
    t.abandon(); // crash
                 // Same bytes, opened without O_DIRECT (512-byte sectors).
    let dev512 = Arc::new(MemDevice::new(len));
    dev512.poke(0, &dev4k.snapshot());
    let d512: Arc<dyn FlashDevice> = dev512;
    let t = FlashTier::open(d512, config()).unwrap();
    let (l, buf) = read(&t, &k);
    assert!(
        l == Lookup::Miss,
        "after a crash an invalidated clean block was served: {l:?} opened_clean={} stale={}",
        t.flash_stats().opened_clean,
        buf == data(&k, 1, 4096)
    );
}

/// A crafted superblock (valid CRC) naming a huge device length: `check`/`open` must return
/// an error, not panic.
#[test]
fn a_crafted_superblock_with_a_huge_device_length_is_refused_without_panic() {
    let len = 8 * ((1 << 20) + 1024) + 8192;
    let dev = mem(len);
    let geo = Geometry::compute(len, 512, 12, 8).unwrap();
    for device_len in [u64::MAX, u64::MAX - 4096, u64::MAX / 2 + (1 << 40)] {
        let mut geo = geo;
        geo.set_shift = 0; // any shifts 9..=24 / 0..=16 are accepted by `check`
        let sb = Superblock {
            flags: 0,
            gen: 5,
            geo,
            device_len,
            instance: 1,
        };
        dev.poke(0, &sb.encode());
        let r = std::panic::catch_unwind(|| FlashTier::check(&*dev).map(|_| ()));
        assert!(r.is_ok(), "check panicked for device_len {device_len:#x}");
        assert!(
            matches!(r, Ok(Err(_))),
            "check accepted device_len {device_len:#x}"
        );
        let d: Arc<dyn FlashDevice> = dev.clone();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            FlashTier::open(d, config()).map(|_| ())
        }));
        assert!(
            matches!(r, Ok(Err(_))),
            "open panicked or accepted {device_len:#x}"
        );
    }
}

/// `Geometry::compute` on hostile lengths (a superblock's device length) must not panic.
#[test]
fn geometry_compute_does_not_overflow_on_hostile_lengths() {
    let mut bad = Vec::new();
    for bshift in 9..=24u8 {
        for sshift in 0..=16u8 {
            for len in [
                u64::MAX,
                u64::MAX - 1,
                u64::MAX - (1 << 20),
                u64::MAX - (1 << 30),
            ] {
                for sector in [512usize, 4096] {
                    if std::panic::catch_unwind(|| Geometry::compute(len, sector, bshift, sshift))
                        .is_err()
                    {
                        bad.push((len, sector, bshift, sshift));
                    }
                }
            }
        }
    }
    assert!(
        bad.is_empty(),
        "{} panics, e.g. {:?}",
        bad.len(),
        &bad[..bad.len().min(4)]
    );
}
