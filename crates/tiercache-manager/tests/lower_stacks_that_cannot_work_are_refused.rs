//! Tier stacks the live manager cannot run as configured are refused when the cache is built,
//! with the tier's name, instead of silently doing nothing: a tier whose block size is not the
//! memory tier's, or more tiers than the planner takes. Exclusive placement is accepted at any
//! level (evictions cascade, see `evictions_cascade_through_exclusive_tiers`).
#![allow(clippy::unwrap_used)]
mod common;
use common::*;
use std::sync::Arc;
use tiercache_core::placement::Placement;
use tiercache_manager::{LowerTier, MemCache, RealBacking};
use tiercache_memtier::{TestTier, TestTierConfig};

#[test]
fn a_tier_with_another_block_size_is_refused() {
    let big = Arc::new(TestTier::new(TestTierConfig::new("big", 16, 1024)).unwrap());
    let lower = vec![LowerTier::new(big, Placement::Exclusive)];
    let err = MemCache::with_tiers(small_config(8), Arc::new(RealBacking), lower).unwrap_err();
    assert!(
        err.to_string()
            .contains("tier big: block size 1024 differs"),
        "{err}"
    );
}

#[test]
fn more_tiers_than_the_planner_takes_are_refused() {
    let lower = |n: usize| -> Vec<LowerTier> {
        (0..n)
            .map(|_| LowerTier::new(test_tier(16), Placement::Exclusive))
            .collect()
    };
    let err = MemCache::with_tiers(small_config(8), Arc::new(RealBacking), lower(8)).unwrap_err();
    assert!(err.to_string().contains("1 to 8 tiers"), "{err}");
    // Memory and seven exclusive tiers, one below the other: fine.
    MemCache::with_tiers(small_config(8), Arc::new(RealBacking), lower(7)).unwrap();
}

#[test]
fn an_exclusive_tier_below_one_that_hands_nothing_down_is_refused() {
    // A pinned range never evicts, so the exclusive tier below it would never get a block.
    let lower = vec![
        LowerTier::new(test_tier(16), Placement::Pinned { first: 0 }),
        LowerTier::new(test_tier(16), Placement::Exclusive),
    ];
    let err = MemCache::with_tiers(small_config(8), Arc::new(RealBacking), lower).unwrap_err();
    assert!(err.to_string().contains("does not hand down"), "{err}");
    // Inclusive there is fine.
    let lower = vec![
        LowerTier::new(test_tier(16), Placement::Pinned { first: 0 }),
        LowerTier::new(test_tier(16), Placement::Inclusive),
    ];
    MemCache::with_tiers(small_config(8), Arc::new(RealBacking), lower).unwrap();
}
