//! Bug (issue 17, item 8): the SSD tier served whatever its device returned — a block flipped
//! at rest reached readers through the memory tier, and a corrupt dirty block would have been
//! written over BACKING's good bytes by the cleaner.
//!
//! The real flash tier on a fault-injecting device under the memory tier: a clean block that
//! fails its checksum is read from BACKING instead (right bytes, counted); a dirty one fails
//! with EIO — never its corrupt bytes, never BACKING's older ones — and cleaning never
//! writes it to BACKING.
#![allow(clippy::unwrap_used)]
mod common;
use common::*;
use std::sync::Arc;
use std::time::Duration;
use tiercache_core::placement::Placement;
use tiercache_flash::{CleanerConfig, CleanerMode, FaultyDevice, FlashTier, MemDevice};
use tiercache_manager::{Class, LowerTier, MemCache, RealBacking};
use tiercache_tier::DataTier;

const BS: u64 = 512;

/// A cache of 8 memory blocks over the flash tier (512-byte blocks, sets of 16) on a
/// fault-injecting device; the tier's cleaner waits an hour (nothing is cleaned unasked).
fn rig() -> (Arc<FaultyDevice>, Arc<FlashTier>, MemCache) {
    let dev = Arc::new(FaultyDevice::new(Arc::new(MemDevice::new(1 << 20)), 3));
    let mut cl = CleanerConfig::new(CleanerMode::Idle, 0);
    cl.wait = Duration::from_secs(3600);
    let tier = Arc::new(FlashTier::create(dev.clone(), flash_config(Some(cl), 16)).unwrap());
    let lower = vec![LowerTier::new(tier.clone(), Placement::Inclusive)];
    let cache = MemCache::with_tiers(small_config(8), Arc::new(RealBacking), lower).unwrap();
    (dev, tier, cache)
}

#[test]
fn a_clean_block_flipped_on_the_ssd_is_read_from_backing_instead() {
    let dir = tempfile::tempdir().unwrap();
    let want = pattern(0, 32 * BS as usize, 0);
    let path = make_file(dir.path(), "f", &want);
    let (dev, tier, cache) = rig();
    let id = open(&cache, &path, Class::NORMAL);
    // Read once: the blocks go into the SSD tier (inclusive) and out of the small memory.
    assert_bytes(&cache.read(id, 0, want.len()).unwrap(), &want, "first read");
    // (The tier is filled in the background.)
    wait_until("the blocks to be filled into the tier", || {
        tier.flash_stats().valid_blocks == 32
    });
    let g = tier.geometry();
    for b in [2usize, 9] {
        dev.flip_bit(g.block_off(0, b) + 17, 4).unwrap();
    }
    let hits = tier.stats().hits;
    for pass in 0..2 {
        let mut got = Vec::new();
        for b in 0..32u64 {
            got.extend(cache.read(id, b * BS, BS as usize).unwrap());
        }
        assert_bytes(&got, &want, &format!("read {pass} after the flips"));
    }
    assert!(
        tier.stats().hits > hits,
        "the good blocks still hit the tier"
    );
    assert_eq!(
        tier.flash_stats().checksum_errors,
        2,
        "{:?}",
        tier.flash_stats()
    );
}

#[test]
fn a_dirty_block_flipped_on_the_ssd_is_eio_and_never_reaches_backing() {
    let dir = tempfile::tempdir().unwrap();
    let old = pattern(0, 32 * BS as usize, 0);
    let path = make_file(dir.path(), "f", &old);
    let (dev, tier, cache) = rig();
    let id = open(&cache, &path, Class::NORMAL);
    let new = pattern(5 * BS, BS as usize, 1);
    cache.write(id, 5 * BS, &new).unwrap();
    cache.fsync(id, true).unwrap();
    assert_eq!(
        tier.flash_stats().dirty_blocks,
        1,
        "{:?}",
        tier.flash_stats()
    );
    // Other blocks push block 5 out of the 8 blocks of memory: it is only in the tier now.
    cache.read(id, 16 * BS, 16 * BS as usize).unwrap();
    dev.flip_bit(tier.geometry().block_off(0, 5) + 300, 6)
        .unwrap();
    let e = cache.read(id, 5 * BS, BS as usize).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    assert!(
        cache.read(id, 0, 8 * BS as usize).is_err(),
        "a read over it fails too"
    );
    // Cleaning it to BACKING fails; BACKING keeps its own (older) bytes, never corrupt ones.
    assert!(cache.flush_all().is_err());
    assert_bytes(&read_file(&path), &old, "BACKING after the failed flush");
    assert_eq!(
        tier.flash_stats().dirty_blocks,
        1,
        "still dirty in the tier"
    );
    assert!(tier.flash_stats().checksum_errors >= 2);
    // Rewritten, it is good again and reaches BACKING.
    let newer = pattern(5 * BS, BS as usize, 2);
    cache.write(id, 5 * BS, &newer).unwrap();
    cache.flush_all().unwrap();
    let mut want = old.clone();
    want[5 * BS as usize..6 * BS as usize].copy_from_slice(&newer);
    assert_bytes(&read_file(&path), &want, "BACKING after the rewrite");
}
