//! The SSD tier (`tiercache-flash`, on an in-memory or fault-injecting device) under the memory
//! tier: fsync makes write-back durable there; write-back runs of at least the sequential
//! cutoff go straight to BACKING while a block the tier holds dirty always goes to it and a
//! read never skips its dirty copy; after too many device errors the tier is detached, its
//! readable dirty blocks written to BACKING first, and the cache goes on without it.
#![allow(clippy::unwrap_used)]
mod common;
use common::*;
use std::sync::Arc;
use tiercache_core::placement::Placement;
use tiercache_core::seqrun::Threshold;
use tiercache_flash::{FaultyDevice, FlashDevice, FlashTier, MemDevice};
use tiercache_manager::{Class, LowerTier, MemCache, RealBacking};
use tiercache_tier::DataTier;

const BS: u64 = 512;

/// A flash tier of 512-byte blocks in sets of 16 on `dev`.
fn flash(dev: Arc<dyn FlashDevice>, max_errors: u64) -> Arc<FlashTier> {
    Arc::new(FlashTier::create(dev, flash_config(None, max_errors)).unwrap())
}

#[test]
fn long_write_back_runs_go_to_backing_and_short_ones_into_the_tier() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_file(dir.path(), "f", &pattern(0, 64 * BS as usize, 0));
    let tier = flash(Arc::new(MemDevice::new(1 << 20)), 16);
    let lower = vec![
        LowerTier::new(tier.clone(), Placement::Inclusive).with_seq_bypass(Threshold::Fixed(8))
    ];
    let cache = MemCache::with_tiers(small_config(128), Arc::new(RealBacking), lower).unwrap();
    let id = open(&cache, &path, Class::NORMAL);
    // Two isolated blocks (runs of 1) and one run of 16.
    cache
        .write(id, 3 * BS, &pattern(3 * BS, BS as usize, 1))
        .unwrap();
    cache
        .write(id, 40 * BS, &pattern(40 * BS, BS as usize, 1))
        .unwrap();
    cache
        .write(id, 10 * BS, &pattern(10 * BS, 16 * BS as usize, 1))
        .unwrap();
    cache.fsync(id, true).unwrap();
    assert_eq!(tier.stats().writebacks_in, 2, "{:?}", tier.stats());
    let on_backing = read_file(&path);
    assert_bytes(
        &on_backing[10 * BS as usize..26 * BS as usize],
        &pattern(10 * BS, 16 * BS as usize, 1),
        "the long run went to BACKING",
    );
    assert_bytes(
        &on_backing[3 * BS as usize..4 * BS as usize],
        &pattern(3 * BS, BS as usize, 0),
        "an isolated block is durable in the tier, not on BACKING yet",
    );
    // A run of 16 over block 3 (dirty in the tier): block 3 goes to the tier again (never
    // around its dirty copy), the rest to BACKING.
    cache
        .write(id, 0, &pattern(0, 16 * BS as usize, 2))
        .unwrap();
    cache.fsync(id, true).unwrap();
    assert_eq!(tier.stats().writebacks_in, 3, "{:?}", tier.stats());
    let mut want = pattern(0, 64 * BS as usize, 0);
    want[40 * BS as usize..41 * BS as usize].copy_from_slice(&pattern(40 * BS, BS as usize, 1));
    want[10 * BS as usize..26 * BS as usize].copy_from_slice(&pattern(
        10 * BS,
        16 * BS as usize,
        1,
    ));
    want[..16 * BS as usize].copy_from_slice(&pattern(0, 16 * BS as usize, 2));
    let got = cache.read(id, 0, want.len()).unwrap();
    assert_bytes(&got, &want, "sequential read after the write-backs");
    cache.flush_all().unwrap();
    assert_bytes(&read_file(&path), &want, "BACKING after flush_all");
    assert_eq!(tier.flash_stats().dirty_blocks, 0);
}

#[test]
fn a_sequential_read_never_skips_the_tiers_dirty_copy() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_file(dir.path(), "f", &pattern(0, 64 * BS as usize, 0));
    let tier = flash(Arc::new(MemDevice::new(1 << 20)), 16);
    let lower = vec![
        LowerTier::new(tier.clone(), Placement::Inclusive).with_seq_bypass(Threshold::Fixed(4))
    ];
    // 8 memory blocks: a 64-block scan evicts what it read.
    let cache = MemCache::with_tiers(small_config(8), Arc::new(RealBacking), lower).unwrap();
    let id = open(&cache, &path, Class::NORMAL);
    for b in [5u64, 20, 33] {
        cache
            .write(id, b * BS, &pattern(b * BS, BS as usize, 7))
            .unwrap();
    }
    cache.fsync(id, true).unwrap();
    assert_eq!(tier.flash_stats().dirty_blocks, 3);
    let mut want = pattern(0, 64 * BS as usize, 0);
    for b in [5u64, 20, 33] {
        let r = (b * BS) as usize..((b + 1) * BS) as usize;
        want[r].copy_from_slice(&pattern(b * BS, BS as usize, 7));
    }
    for pass in 0..2 {
        let mut got = Vec::new();
        for b in 0..64u64 {
            got.extend(cache.read(id, b * BS, BS as usize).unwrap());
        }
        assert_bytes(&got, &want, &format!("scan {pass}"));
    }
    assert!(tier.stats().hits >= 3, "{:?}", tier.stats());
}

#[test]
fn after_max_errors_the_tier_is_detached_and_its_readable_dirty_blocks_reach_backing() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_file(dir.path(), "f", &pattern(0, 32 * BS as usize, 0));
    let dev = Arc::new(FaultyDevice::new(Arc::new(MemDevice::new(1 << 20)), 7));
    let tier = flash(dev.clone(), 2);
    let lower = vec![LowerTier::new(tier.clone(), Placement::Inclusive)];
    let cache = MemCache::with_tiers(small_config(64), Arc::new(RealBacking), lower).unwrap();
    let id = open(&cache, &path, Class::NORMAL);
    for b in [1u64, 9, 17] {
        cache
            .write(id, b * BS, &pattern(b * BS, BS as usize, 1))
            .unwrap();
    }
    cache.fsync(id, true).unwrap();
    assert_eq!(tier.flash_stats().dirty_blocks, 3);
    // The device stops taking writes: the next write-backs fail there and go to BACKING.
    dev.fail_writes_after(Some(0));
    for b in [2u64, 10, 18, 26] {
        cache
            .write(id, b * BS, &pattern(b * BS, BS as usize, 2))
            .unwrap();
        let _ = cache.fsync(id, true);
    }
    assert!(tier.detaching(), "{:?}", tier.flash_stats());
    // The cleaning thread writes the dirty blocks it can still read to BACKING, then detaches.
    wait_until("the tier to be detached", || {
        cache
            .stats()
            .lower
            .is_some_and(|l| l.detached == vec!["flash".to_string()])
    });
    let mut want = pattern(0, 32 * BS as usize, 0);
    for b in [1u64, 9, 17] {
        let r = (b * BS) as usize..((b + 1) * BS) as usize;
        want[r].copy_from_slice(&pattern(b * BS, BS as usize, 1));
    }
    for b in [2u64, 10, 18, 26] {
        let r = (b * BS) as usize..((b + 1) * BS) as usize;
        want[r].copy_from_slice(&pattern(b * BS, BS as usize, 2));
    }
    cache.fsync(id, true).unwrap();
    assert_bytes(&read_file(&path), &want, "BACKING after the detach");
    // Without the tier: writes and reads go on against BACKING.
    cache
        .write(id, 30 * BS, &pattern(30 * BS, BS as usize, 3))
        .unwrap();
    cache.fsync(id, true).unwrap();
    want[(30 * BS) as usize..(31 * BS) as usize].copy_from_slice(&pattern(30 * BS, BS as usize, 3));
    assert_bytes(
        &read_file(&path),
        &want,
        "BACKING after a write without the tier",
    );
    assert_bytes(&cache.read(id, 0, want.len()).unwrap(), &want, "reads");
}
