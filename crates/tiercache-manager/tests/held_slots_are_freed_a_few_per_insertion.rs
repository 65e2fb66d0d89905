//! Regression (issue 17, review item 5): every insertion into a shared arena looked at *every*
//! slot held back for zero-copy clients (removed while pinned), under the engine lock — work
//! that grew with what clients keep pinned, on every miss. An insertion now looks at a bounded
//! share of them, round robin; a client that goes frees all of its slots at once. Shown here:
//! the share is bounded, and every slot no client pins is still freed, within one sweep.
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use std::sync::Arc;
use tiercache_manager::{Class, MemCache, MemConfig, RealBacking};
use tiercache_memtier::shm::{ClientId, RegionView};

const BS: u64 = 512;
/// Slots held back in the test (several shares' worth).
const HELD: u64 = 128;
/// What one insertion looks at (`engine::HELD_SCAN`).
const SHARE: u64 = 16;

#[test]
fn insertions_free_unpinned_held_slots_a_bounded_share_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = MemConfig {
        zero_copy: true,
        // One insertion per read below: nothing read ahead.
        readahead_max_blocks: 0,
        ..small_config(2 * HELD as usize + 32)
    };
    let cache = MemCache::with_tiers(cfg, Arc::new(RealBacking), Vec::new()).unwrap();
    let p = make_file(
        dir.path(),
        "f",
        &pattern(0, 4 * HELD as usize * BS as usize, 3),
    );
    let id = open(&cache, &p, Class::NORMAL);
    let region = cache.zero_copy_region().unwrap();
    let client = ClientId(3);
    let pins = region.add_client(client).unwrap();
    let view = RegionView::open(region.file().try_clone().unwrap(), pins, client).unwrap();

    // The client pins HELD blocks; removing them holds every slot back.
    let slots: Vec<u32> = cache
        .pin_blocks(id, 0, HELD, client)
        .unwrap()
        .into_iter()
        .map(Option::unwrap)
        .collect();
    cache.invalidate(id);
    assert_eq!(cache.held_slots(), HELD as usize);
    // It lets go of half of them (and keeps the other half).
    for &s in slots.iter().step_by(2) {
        view.unpin(s);
    }
    let unpinned = (HELD / 2) as usize;

    let mut buf = vec![0u8; BS as usize];
    let mut next = 2 * HELD;
    let mut insert = || {
        cache.read_into(id, next * BS, &mut buf).unwrap();
        assert_bytes(&buf, &pattern(next * BS, BS as usize, 3), "read");
        next += 1;
    };
    // One insertion looks at no more than its share: it frees at most SHARE slots (all
    // HELD/2 unpinned ones at once before the fix).
    insert();
    let held = cache.held_slots();
    assert!(
        held >= (HELD - SHARE) as usize,
        "one insertion freed {} held slots (at most {SHARE})",
        HELD as usize - held
    );
    // One sweep (HELD / SHARE insertions in all) frees every slot the client let go of, and
    // only those.
    for _ in 1..HELD / SHARE {
        insert();
    }
    assert_eq!(cache.held_slots(), HELD as usize - unpinned);
    cache.check_invariants().unwrap();
    for _ in 0..HELD / SHARE {
        insert();
    }
    assert_eq!(
        cache.held_slots(),
        HELD as usize - unpinned,
        "a pinned slot was freed"
    );

    // The client goes: every slot still held for it is freed at once, more than a share.
    cache.release_client(client);
    assert_eq!(cache.held_slots(), 0);
    assert_eq!(region.pinned_slots(), 0);
    cache.check_invariants().unwrap();
    // And the freed slots serve again.
    for _ in 0..HELD {
        insert();
    }
    cache.check_invariants().unwrap();
}
