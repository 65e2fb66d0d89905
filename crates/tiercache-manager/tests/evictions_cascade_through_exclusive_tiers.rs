//! Memory over two exclusive lower tiers: what memory evicts goes into the first, what the
//! first evicts for it goes on into the second (as in the simulator), reads find a block in
//! either tier or on its way between them, and a write never lets the old bytes of a block
//! on its way down be read again.
#![allow(clippy::unwrap_used)]
mod common;
use common::*;
use std::sync::Arc;
use std::time::Duration;
use tiercache_core::placement::Placement;
use tiercache_flash::{FlashTier, MemDevice};
use tiercache_manager::{Class, FileId, LowerTier, MemCache, MemConfig, RealBacking};
use tiercache_memtier::{TestTier, TestTierConfig};
use tiercache_tier::DataTier;

const BS: u64 = 512;

fn tier(name: &str, blocks: usize, write_latency: Duration) -> Arc<TestTier> {
    let mut c = TestTierConfig::new(name, blocks, BS as usize);
    c.write_latency = write_latency;
    Arc::new(TestTier::new(c).unwrap())
}

/// `blocks` memory blocks, no read-ahead (each read brings exactly its blocks).
fn memory(blocks: usize) -> MemConfig {
    MemConfig {
        readahead_max_blocks: 0,
        ..small_config(blocks)
    }
}

/// `upper` over `lower`, both exclusive, below memory.
fn exclusive(upper: Arc<dyn DataTier>, lower: Arc<dyn DataTier>) -> Vec<LowerTier> {
    vec![
        LowerTier::new(upper, Placement::Exclusive),
        LowerTier::new(lower, Placement::Exclusive),
    ]
}

/// Reads blocks `range` one at a time and checks them against version `v` of the pattern.
fn read_blocks(cache: &MemCache, id: FileId, range: std::ops::Range<u64>, v: u64) {
    for b in range {
        let got = cache.read(id, b * BS, BS as usize).unwrap();
        assert_bytes(
            &got,
            &pattern(b * BS, BS as usize, v),
            &format!("block {b}"),
        );
    }
}

fn backing_reads(cache: &MemCache) -> u64 {
    cache.stats().backing.reads
}

#[test]
fn blocks_the_first_lower_tier_evicts_are_hit_in_the_second() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_file(dir.path(), "f", &pattern(0, 40 * BS as usize, 1));
    let a = tier("a", 16, Duration::ZERO);
    let b = tier("b", 64, Duration::ZERO);
    let lower = exclusive(a.clone(), b.clone());
    let cache = MemCache::with_tiers(memory(8), Arc::new(RealBacking), lower).unwrap();
    let id = open(&cache, &path, Class::NORMAL);
    // 40 blocks through 8 of memory and 16 of A: the oldest 16 can only be in B.
    for blk in 0..40 {
        read_blocks(&cache, id, blk..blk + 1, 1);
        cache.settle_lower();
    }
    assert_eq!(a.stats().demotions_in, 32, "{:?}", a.stats());
    assert_eq!(b.stats().demotions_in, 16, "{:?}", b.stats());
    let before = backing_reads(&cache);
    read_blocks(&cache, id, 0..16, 1);
    assert_eq!(
        backing_reads(&cache),
        before,
        "served below, not from BACKING"
    );
    assert_eq!(b.stats().hits, 16, "{:?}", b.stats());
    assert_eq!(b.stats().promotions_out, 16, "exclusive: handed up");
    a.check_invariants().unwrap();
    b.check_invariants().unwrap();
    let s = cache.stats().lower.unwrap();
    assert_eq!((s.demotions_dropped, s.errors), (0, 0), "{s:?}");
}

/// Memory holds 8..15 and A (8 blocks) 0..7; reading 16..23 demotes 8..15 into A, which
/// spills 0..7 towards B, whose stores are slow: those wait in transit.
fn spills_waiting_in_transit() -> (tempfile::TempDir, MemCache, FileId, Arc<TestTier>) {
    let dir = tempfile::tempdir().unwrap();
    let path = make_file(dir.path(), "f", &pattern(0, 24 * BS as usize, 1));
    let a = tier("a", 8, Duration::ZERO);
    let b = tier("b", 64, Duration::from_millis(250));
    let lower = exclusive(a.clone(), b.clone());
    let cache = MemCache::with_tiers(memory(8), Arc::new(RealBacking), lower).unwrap();
    let id = open(&cache, &path, Class::NORMAL);
    read_blocks(&cache, id, 0..16, 1);
    cache.settle_lower();
    assert_eq!((a.stats().demotions_in, b.stats().demotions_in), (8, 0));
    read_blocks(&cache, id, 16..24, 1);
    wait_until("A took 8..15", || a.stats().demotions_in == 16);
    // The last spills cannot have reached B yet (each store there takes 250 ms).
    assert!(b.stats().demotions_in < 8, "{:?}", b.stats());
    (dir, cache, id, b)
}

#[test]
fn blocks_on_their_way_between_lower_tiers_are_read_from_transit() {
    let (_dir, cache, id, b) = spills_waiting_in_transit();
    let before = backing_reads(&cache);
    // Block 7 was spilled last: it is still in transit.
    read_blocks(&cache, id, 7..8, 1);
    assert_eq!(backing_reads(&cache), before, "served from transit");
    let s = cache.stats().lower.unwrap();
    assert!(s.transit_hits >= 1, "{s:?}");
    cache.settle_lower();
    // Memory took it back: its store into B was cancelled. B got 0..6, and 8 (A's victim for
    // 16, which block 7 pushed out of memory).
    assert_eq!(b.stats().demotions_in, 8, "{:?}", b.stats());
    read_blocks(&cache, id, 0..7, 1);
    assert_eq!(backing_reads(&cache), before, "0..6 from B");
}

#[test]
fn a_write_to_a_block_on_its_way_down_never_lets_its_old_bytes_be_read() {
    let (dir, cache, id, b) = spills_waiting_in_transit();
    let new = pattern(7 * BS, BS as usize, 2);
    cache.write(id, 7 * BS, &new).unwrap();
    cache.flush_all().unwrap();
    // Memory lets go of everything it holds of the file (clean now) without demoting it: the
    // next read of block 7 asks the lower tiers, where no copy of the old bytes may be.
    cache.invalidate(id);
    cache.settle_lower();
    // 0..6, not 7 (16, which the write pushed out of memory, never reached A: a write turns
    // down the file's pending demotions from memory, so A spilled nothing more).
    assert_eq!(b.stats().demotions_in, 7, "{:?}", b.stats());
    let got = cache.read(id, 7 * BS, BS as usize).unwrap();
    assert_bytes(&got, &new, "block 7 after the write");
    assert_bytes(
        &read_file(&dir.path().join("f"))[7 * BS as usize..8 * BS as usize],
        &new,
        "BACKING",
    );
    // The blocks spilled before it are still served from B, unchanged.
    let before = backing_reads(&cache);
    read_blocks(&cache, id, 0..7, 1);
    assert_eq!(backing_reads(&cache), before);
}

#[test]
fn an_ssd_tiers_reused_sets_cascade_into_the_tier_below() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_file(dir.path(), "f", &pattern(0, 128 * BS as usize, 1));
    // Sets of 16 blocks; a few sets on a small device, so reading 8 backing sets reuses them.
    let dev = Arc::new(MemDevice::new(48 << 10));
    let ssd = Arc::new(FlashTier::create(dev, flash_config(None, 16)).unwrap());
    let sets = ssd.geometry().sets;
    assert!((2..8).contains(&sets), "{sets} sets");
    let b = tier("b", 256, Duration::ZERO);
    let lower = exclusive(ssd.clone(), b.clone());
    let cache = MemCache::with_tiers(memory(8), Arc::new(RealBacking), lower).unwrap();
    let id = open(&cache, &path, Class::NORMAL);
    for blk in 0..128 {
        read_blocks(&cache, id, blk..blk + 1, 1);
        cache.settle_lower();
    }
    assert!(b.stats().demotions_in >= 16, "{:?}", b.stats());
    let before = backing_reads(&cache);
    read_blocks(&cache, id, 0..16, 1);
    assert_eq!(b.stats().hits, 16, "{:?}", b.stats());
    assert_eq!(
        backing_reads(&cache),
        before,
        "the first set came back from B"
    );
}
