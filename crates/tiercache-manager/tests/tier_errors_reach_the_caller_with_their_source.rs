//! Bug (issue 19, errors lose their kind): the write-back paths flattened a tier's error into
//! `io::Error::other(e.to_string())`, so the caller got text only — no `TierError` to match
//! on, no `source` chain down to the device's `io::Error`.
#![allow(clippy::unwrap_used)]
mod common;
use common::*;
use std::error::Error;
use std::sync::Arc;
use tiercache_core::placement::Placement;
use tiercache_manager::{Class, LowerTier, MemCache, RealBacking};
use tiercache_tier::{DataTier, TierError};

/// Dirty blocks only in the tier below, whose reads then fail: `flush_all` cannot write them
/// to BACKING and says why with the tier's own error.
#[test]
fn a_failed_read_of_a_dirty_block_below_keeps_the_tier_error() {
    let dir = tempfile::tempdir().unwrap();
    let t = dirty_tier(64);
    let lower = vec![LowerTier::new(t.clone(), Placement::Exclusive)];
    let mut cfg = small_config(8);
    cfg.dirty_ratio = 0.25;
    cfg.dirty_background_ratio = 0.1;
    let cache = MemCache::with_tiers(cfg, Arc::new(RealBacking), lower).unwrap();
    let path = make_file(dir.path(), "f", &pattern(0, 512, 1));
    let id = open(&cache, &path, Class::NORMAL);
    for b in 1..7u64 {
        cache.write(id, b * 512, &pattern(b * 512, 512, 2)).unwrap();
    }
    assert!(t.stats().dirty_blocks > 0, "no dirty block went below");
    t.fail_reads(true);
    let e = cache.flush_all().unwrap_err();
    let inner = e.get_ref().and_then(|i| i.downcast_ref::<TierError>());
    let inner = inner.unwrap_or_else(|| panic!("flattened: {e:?}"));
    assert!(matches!(inner, TierError::Io { .. }), "{inner:?}");
    let cause = e.source().or_else(|| inner.source()).unwrap();
    assert!(cause.to_string().contains("injected read fault"), "{cause}");
}
