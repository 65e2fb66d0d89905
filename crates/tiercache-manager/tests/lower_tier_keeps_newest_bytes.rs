//! Lower-tier bugs found in review: a reopen after a forget zeroed appended data that was still only in the tier below (the cleaning at open moved BACKING's stamp, so the file looked changed behind the cache), and a fill queued by a file state that was then dropped landed after the next state wrote the block (served stale bytes once memory let it go).
#![allow(clippy::unwrap_used)]
mod common;
use common::*;
use std::sync::Arc;
use tiercache_core::placement::Placement;
use tiercache_manager::{Class, LowerTier, MemCache, RealBacking};
use tiercache_memtier::{TestTier, TestTierConfig};
use tiercache_tier::DataTier;

/// Appended data written back into the dirty tier (throttled writer), then the kernel forgets
/// the inode and it is opened again before a cleaning round.
#[test]
fn reopen_after_forget_keeps_appended_data_that_was_only_below() {
    let dir = tempfile::tempdir().unwrap();
    let t = dirty_tier(64);
    let lower = vec![LowerTier::new(t.clone(), Placement::Exclusive)];
    let mut cfg = small_config(8);
    cfg.dirty_ratio = 0.25;
    cfg.dirty_background_ratio = 0.1;
    let cache = MemCache::with_tiers(cfg, Arc::new(RealBacking), lower).unwrap();
    let path = make_file(dir.path(), "f", &pattern(0, 512, 1));
    let id = open(&cache, &path, Class::NORMAL);
    // Append 6 blocks, one write per block: throttled writers push dirty blocks below.
    let mut want = pattern(0, 512, 1);
    for b in 1..7u64 {
        let d = pattern(b * 512, 512, 2);
        cache.write(id, b * 512, &d).unwrap();
        want.extend_from_slice(&d);
    }
    // The scenario needs appended bytes that are only below (else it tests nothing).
    let ts = t.stats();
    assert!(
        ts.writebacks_in > 0 && ts.dirty_blocks > 0,
        "the throttled writer pushed dirty blocks below: {ts:?}"
    );
    // The kernel forgets the inode while it is open; the last release follows.
    cache.forget(id);
    cache.release(id);
    let _ = reopen(&cache, &path, id, Class::NORMAL);
    // A partial write into block 3 (only below before the reopen, on BACKING now).
    let patch = pattern(3 * 512 + 100, 10, 3);
    cache.write(id, 3 * 512 + 100, &patch).unwrap();
    want[3 * 512 + 100..3 * 512 + 110].copy_from_slice(&patch);
    let got = cache.read(id, 0, want.len()).unwrap();
    cache.flush_all().unwrap();
    let on_backing = read_file(&path);
    assert_bytes(&got, &want, "read after partial write");
    assert_bytes(&on_backing, &want, "BACKING after flush_all");
}

/// A fill queued by one file state is stored after the state was dropped and a new state of
/// the same, unchanged file wrote the block: the new state's change counter is another one.
#[test]
fn a_fill_queued_by_a_dropped_state_never_lands_over_a_later_write() {
    let dir = tempfile::tempdir().unwrap();
    let mut tc = TestTierConfig::new("incl", 64, 512);
    tc.write_latency = std::time::Duration::from_millis(300);
    let t = Arc::new(TestTier::new(tc).unwrap());
    let lower = vec![LowerTier::new(t.clone(), Placement::Inclusive)];
    let cache = MemCache::with_tiers(small_config(8), Arc::new(RealBacking), lower).unwrap();
    let old = pattern(0, 1024, 1);
    let path = make_file(dir.path(), "g", &old);
    let id = open(&cache, &path, Class::NORMAL);
    assert_eq!(cache.read(id, 0, 512).unwrap(), old[..512]); // queues a fill of block 0
    cache.invalidate(id); // memory lets the clean block go (as eviction would)
    cache.release(id); // closed, nothing cached: the state goes
    let _ = reopen(&cache, &path, id, Class::NORMAL);
    let new = pattern(0, 512, 2);
    cache.write(id, 0, &new).unwrap();
    cache.flush_all().unwrap();
    assert_eq!(
        read_file(&path)[..512],
        new[..],
        "BACKING has the new bytes"
    );
    std::thread::sleep(std::time::Duration::from_millis(800)); // the fill lands
    cache.invalidate(id); // memory lets the block go again
    let got = cache.read(id, 0, 512).unwrap();
    assert_bytes(&got, &new, "read after the write, from below");
}
