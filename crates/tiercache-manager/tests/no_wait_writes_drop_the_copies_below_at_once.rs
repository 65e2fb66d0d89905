//! Issue #17 (`bench flash` rand_write twice as slow): with any tier below memory, `try_write` handed every write to an I/O worker, because invalidating the copies below might wait for a tier's I/O. It now drops them at once (`DataTier::try_invalidate`) and serves the write, and still hands it back, untouched, when a tier cannot say at once.
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use std::sync::Arc;
use tiercache_core::placement::Placement;
use tiercache_manager::{Class, LowerTier, MemCache, NoWait, RealBacking};
use tiercache_tier::DataTier;

const BS: usize = 512;

#[test]
fn a_write_hit_above_a_tier_is_served_and_leaves_no_old_copy_below() {
    let dir = tempfile::tempdir().unwrap();
    let t = test_tier(64);
    let lower = vec![LowerTier::new(t.clone(), Placement::Inclusive)];
    let cache = MemCache::with_tiers(small_config(16), Arc::new(RealBacking), lower).unwrap();
    let path = make_file(dir.path(), "f", &pattern(0, 4 * BS, 1));
    let id = open(&cache, &path, Class::NORMAL);
    // A read brings the blocks into memory; the inclusive tier gets clean copies.
    assert_bytes(
        &cache.read(id, 0, 4 * BS).unwrap(),
        &pattern(0, 4 * BS, 1),
        "read",
    );
    wait_until("the copies below", || t.stats().used_blocks == 4);

    // Busy tier: handed back, nothing written, nothing counted dirty.
    t.busy(true);
    let new = pattern(BS as u64, BS, 2);
    assert!(matches!(
        cache.try_write(id, BS as u64, &new),
        NoWait::Wait(Class::NORMAL)
    ));
    assert_eq!(
        cache.stats().dirty_blocks,
        0,
        "a handed-back write changed memory"
    );
    assert_bytes(
        &cache.read(id, 0, 4 * BS).unwrap(),
        &pattern(0, 4 * BS, 1),
        "untouched",
    );

    // Free tier: served on the spot, the old copy below is gone before it returns.
    t.busy(false);
    match cache.try_write(id, BS as u64, &new) {
        NoWait::Done(r) => assert_eq!(r.unwrap(), BS),
        NoWait::Wait(c) => panic!("handed back ({c:?}) above a tier that can invalidate at once"),
    }
    assert_eq!(
        t.stats().used_blocks,
        3,
        "the old copy of the written block stayed below"
    );
    let mut want = pattern(0, 4 * BS, 1);
    want[BS..2 * BS].copy_from_slice(&new);
    assert_bytes(
        &cache.read(id, 0, 4 * BS).unwrap(),
        &want,
        "after the write",
    );
    cache.flush_all().unwrap();
    assert_bytes(&read_file(&path), &want, "BACKING after write-back");
}
