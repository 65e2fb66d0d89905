//! A pinned lower tier (paper 004's third placement) on the live cache, as in `sim`: it is
//! filled only with blocks whose index is in its range `[first, first + capacity)`, only into
//! room it has (it never evicts for them), and serves them after memory let them go.
#![allow(clippy::unwrap_used)]
mod common;
use common::*;
use std::sync::Arc;
use tiercache_core::placement::Placement;
use tiercache_manager::{Class, LowerTier, MemCache, RealBacking};
use tiercache_tier::DataTier;

const BS: u64 = 512;

#[test]
fn a_pinned_tier_holds_its_range_and_serves_it_after_memory_evicts() {
    let dir = tempfile::tempdir().unwrap();
    let data = pattern(0, 64 * BS as usize, 0);
    let path = make_file(dir.path(), "f", &data);
    let tier = test_tier(16);
    let lower = vec![LowerTier::new(tier.clone(), Placement::Pinned { first: 8 })];
    // 8 memory blocks: reading 64 evicts nearly everything.
    let cache = MemCache::with_tiers(small_config(8), Arc::new(RealBacking), lower).unwrap();
    let id = open(&cache, &path, Class::NORMAL);
    for pass in 0..2 {
        // Backwards, one block a time (no read-ahead, no sequential run).
        for b in (0..64u64).rev() {
            let got = cache.read(id, b * BS, BS as usize).unwrap();
            assert_bytes(
                &got,
                &data[(b * BS) as usize..((b + 1) * BS) as usize],
                "read",
            );
        }
        cache.settle_lower();
        let st = tier.stats();
        assert_eq!(st.used_blocks, 16, "pass {pass}: {st:?}");
        assert_eq!(st.fills, 16, "filled once, never evicted: {st:?}");
    }
    // The second pass found blocks 8..24 below (not on BACKING).
    let st = tier.stats();
    assert!(st.hits >= 15, "{st:?}");
}
