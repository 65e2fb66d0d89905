#![allow(clippy::unwrap_used)]
//! Priority behaviour seen through the stats snapshot: `set_class` moves a file's blocks
//! between pools, and paper 000's `dirprio` partition keeps a priority file cached while a
//! larger normal file is scanned, where an unpartitioned LRU tier loses it.

mod common;

use common::*;
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use tiercache_core::partition::{DirprioParams, PartitionConfig, PartitionKind};
use tiercache_core::PoolId;
use tiercache_manager::{Class, MemCache, MemConfig, MemStats};

fn pool_blocks(s: &MemStats, pool: PoolId) -> u64 {
    s.pools.iter().find(|p| p.pool == pool).unwrap().blocks
}

fn dirprio(capacity: usize) -> PartitionConfig {
    PartitionConfig {
        kind: PartitionKind::Dirprio,
        params: DirprioParams::guidance(capacity as u64, false).into(),
    }
}

#[test]
fn set_class_moves_blocks_between_pools() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_file(dir.path(), "p", &pattern(0, 16 * 512, 0));
    let cfg = MemConfig {
        partition: dirprio(64),
        ..small_config(64)
    };
    let cache = MemCache::with_real_device(cfg).unwrap();
    let id = open(&cache, &path, Class::NORMAL);
    cache.read(id, 0, 16 * 512).unwrap();
    let s = cache.stats();
    assert_eq!(pool_blocks(&s, PoolId::NORMAL), 16);
    assert_eq!(s.s_cur, 0);
    cache.set_class(id, Class::PRIORITY);
    let s = cache.stats();
    assert_eq!(pool_blocks(&s, PoolId::PROTECTED), 16);
    assert_eq!(pool_blocks(&s, PoolId::NORMAL), 0);
    assert_eq!(s.s_cur, 16);
    // Later fills follow the new class, and the hits are counted for it.
    cache.read(id, 0, 512).unwrap();
    assert_eq!(cache.stats().class(Class::PRIORITY).hits, 1);
    cache.set_class(id, Class::NORMAL);
    assert_eq!(pool_blocks(&cache.stats(), PoolId::NORMAL), 16);
    cache.check_invariants().unwrap();
}

/// Reads the priority file block by block in a random order (no read-ahead help) after every
/// slice of a sequential scan of the normal file; returns the priority hit ratio.
fn priority_hit_ratio(partition: PartitionConfig) -> f64 {
    const CAP: usize = 256;
    const PRIO_BLOCKS: u64 = 64;
    const SCAN_BLOCKS: u64 = 4096;
    const SLICE: u64 = 256;
    let dir = tempfile::tempdir().unwrap();
    let prio = make_file(
        dir.path(),
        "prio",
        &pattern(0, (PRIO_BLOCKS * 512) as usize, 1),
    );
    let big = make_file(
        dir.path(),
        "big",
        &pattern(0, (SCAN_BLOCKS * 512) as usize, 2),
    );
    let cfg = MemConfig {
        partition,
        readahead_max_blocks: 32,
        ..small_config(CAP)
    };
    let cache = MemCache::with_real_device(cfg).unwrap();
    let p = open(&cache, &prio, Class::PRIORITY);
    let n = open(&cache, &big, Class::NORMAL);
    let mut rng = SmallRng::seed_from_u64(5);
    let mut order: Vec<u64> = (0..PRIO_BLOCKS).collect();
    let mut scan = 0;
    for _round in 0..20 {
        order.shuffle(&mut rng);
        for &b in &order {
            let got = cache.read(p, b * 512, 512).unwrap();
            assert_eq!(got, pattern(b * 512, 512, 1));
        }
        for _ in 0..SLICE {
            let got = cache.read(n, scan * 512, 512).unwrap();
            assert_eq!(got, pattern(scan * 512, 512, 2));
            scan = (scan + 1) % SCAN_BLOCKS;
        }
    }
    let s = cache.stats();
    assert!(s.window.classes.iter().any(|c| c.class == Class::PRIORITY));
    s.class(Class::PRIORITY).hit_ratio().unwrap()
}

#[test]
fn dirprio_keeps_priority_file_cached_during_a_scan() {
    let with = priority_hit_ratio(dirprio(256));
    let without = priority_hit_ratio(PartitionConfig::none());
    eprintln!("priority hit ratio: dirprio {with:.3}, none {without:.3}");
    assert!(with >= 0.9, "dirprio priority hit ratio {with}");
    assert!(without < 0.5, "unpartitioned priority hit ratio {without}");
}

#[test]
fn stats_snapshot_serializes() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_file(dir.path(), "s", &pattern(0, 4096, 0));
    let cache = MemCache::with_real_device(small_config(16)).unwrap();
    let id = open(&cache, &path, Class::PRIORITY);
    cache.read(id, 0, 100).unwrap();
    cache.read(id, 0, 100).unwrap();
    cache.write(id, 0, b"z").unwrap();
    let s = cache.stats();
    assert_eq!(s.capacity_blocks, 16);
    assert_eq!(s.dirty_blocks, 1);
    assert!(s.used_blocks >= 1);
    assert_eq!(s.class(Class::PRIORITY).hits, 2);
    assert_eq!(s.class(Class::PRIORITY).misses, 1);
    assert!(s.backing.reads >= 1);
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["capacity_blocks"], 16);
    assert_eq!(json["classes"][0]["class"], "priority");
    assert_eq!(json["window"]["complete"], false);
    assert!(json["emulation"].is_null());
}
