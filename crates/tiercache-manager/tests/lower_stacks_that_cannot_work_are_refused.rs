//! Tier stacks the live manager cannot run as configured are refused when the cache is built,
//! with the tier's name, instead of silently doing nothing: an exclusive tier not right below
//! memory (it would receive no demotions).
#![allow(clippy::unwrap_used)]
mod common;
use common::*;
use std::sync::Arc;
use tiercache_core::placement::Placement;
use tiercache_manager::{LowerTier, MemCache, RealBacking};

#[test]
fn an_exclusive_tier_below_another_lower_tier_is_refused() {
    let lower = vec![
        LowerTier::new(test_tier(16), Placement::Exclusive),
        LowerTier::new(test_tier(16), Placement::Exclusive),
    ];
    let err = MemCache::with_tiers(small_config(8), Arc::new(RealBacking), lower).unwrap_err();
    assert!(err.to_string().contains("only right below memory"), "{err}");
    // Exclusive right below memory, inclusive further down: fine.
    let lower = vec![
        LowerTier::new(test_tier(16), Placement::Exclusive),
        LowerTier::new(test_tier(16), Placement::Inclusive),
    ];
    MemCache::with_tiers(small_config(8), Arc::new(RealBacking), lower).unwrap();
}
