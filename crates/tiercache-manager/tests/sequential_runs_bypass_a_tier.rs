//! Paper 002's sequential bypass on the live manager: reads within a sequential run of at
//! least `n` blocks skip a tier that has a threshold (neither read nor filled), shorter reads
//! use it.
#![allow(clippy::unwrap_used)]
mod common;
use common::*;
use std::sync::Arc;
use tiercache_core::placement::Placement;
use tiercache_core::seqrun::Threshold;
use tiercache_manager::{Class, LowerTier, MemCache, MemConfig, RealBacking};
use tiercache_tier::DataTier;

fn config() -> MemConfig {
    MemConfig {
        readahead_max_blocks: 0,
        ..small_config(4)
    }
}

#[test]
fn long_sequential_runs_neither_fill_nor_read_the_tier() {
    let dir = tempfile::tempdir().unwrap();
    let t = test_tier(256);
    let lower =
        vec![LowerTier::new(t.clone(), Placement::Inclusive).with_seq_bypass(Threshold::Fixed(8))];
    let cache = MemCache::with_tiers(config(), Arc::new(RealBacking), lower).unwrap();
    let content = pattern(0, 64 * 512, 1);
    let path = make_file(dir.path(), "f", &content);
    let id = open(&cache, &path, Class::NORMAL);

    // A sequential scan in 2-block reads: the first 3 reads (runs 2, 4, 6) are short and fill
    // the tier; from the 4th (run 8) on the tier is bypassed.
    for i in 0..16u64 {
        let got = cache.read(id, i * 1024, 1024).unwrap();
        assert_eq!(got, content[i as usize * 1024..(i as usize + 1) * 1024]);
    }
    cache.settle_lower();
    let s = t.stats();
    assert_eq!(
        s.fills, 6,
        "only the blocks of runs shorter than 8 are stored"
    );
    let ls = cache.stats().lower.unwrap();
    assert_eq!(ls.seq_bypass.len(), 1);
    assert_eq!(ls.seq_bypass[0].threshold, 8);
    assert_eq!(ls.seq_bypass[0].bypassed_blocks, 26);

    // Random single-block reads of blocks the tier holds (memory holds 4 blocks, so these
    // are long gone from it) are served by the tier.
    for b in [4u64, 0, 2] {
        let got = cache.read(id, b * 512, 512).unwrap();
        assert_eq!(got, content[b as usize * 512..(b as usize + 1) * 512]);
    }
    assert_eq!(t.stats().hits, 3);

    // The same blocks inside a long run come from BACKING, not the tier.
    let before = t.stats().hits;
    let got = cache.read(id, 0, 16 * 512).unwrap();
    assert_eq!(got, content[..16 * 512]);
    assert_eq!(
        t.stats().hits,
        before,
        "a 16-block run must not read the tier"
    );
}

/// Found in review: a sequential reader whose request size is not a multiple of the block size
/// starts each request inside the block the last one ended in; that must continue the run.
#[test]
fn unaligned_sequential_reads_bypass_the_tier_too() {
    let dir = tempfile::tempdir().unwrap();
    let t = test_tier(256);
    let lower =
        vec![LowerTier::new(t.clone(), Placement::Inclusive).with_seq_bypass(Threshold::Fixed(8))];
    let cache = MemCache::with_tiers(config(), Arc::new(RealBacking), lower).unwrap();
    let content = pattern(0, 64 * 512, 1);
    let path = make_file(dir.path(), "f", &content);
    let id = open(&cache, &path, Class::NORMAL);
    let mut off = 0usize;
    while off + 700 <= content.len() {
        let got = cache.read(id, off as u64, 700).unwrap();
        assert_eq!(got, content[off..off + 700]);
        off += 700;
    }
    cache.settle_lower();
    // Runs reach 8 blocks after 6 requests (4.2 KB): only those first blocks are stored.
    let fills = t.stats().fills;
    assert!(fills <= 8, "the scan kept filling the tier: {fills} fills");
    let ls = cache.stats().lower.unwrap();
    assert!(ls.seq_bypass[0].bypassed_blocks > 50, "{:?}", ls.seq_bypass);
}
