#![allow(clippy::unwrap_used)]
//! Zero-copy clients (a second mapping of the shared arena, as another process has) pin blocks
//! with no call into the cache, or through `pin_blocks` on a miss, while other clients, writes
//! through the cache and invalidations evict and remove blocks all the time: a pinned slot
//! always holds the block it was pinned for (its identity stamp and header never change), and
//! once every client is gone no slot stays held.

mod common;

use common::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use tiercache_manager::{Class, FileId, MemCache, MemConfig, RealBacking};
use tiercache_memtier::shm::{ClientId, RegionView};

const BS: usize = 512;
const BLOCKS: u64 = 64;
const FILES: usize = 4;

/// Block `b` of file `f`: `[f, b]` as two little-endian u64s, then a payload.
fn block_bytes(f: u64, b: u64, version: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(BS);
    v.extend_from_slice(&f.to_le_bytes());
    v.extend_from_slice(&b.to_le_bytes());
    v.extend(pattern(b * BS as u64 + 16, BS - 16, version));
    v
}

fn zc_cache(capacity: usize) -> MemCache {
    let cfg = MemConfig {
        zero_copy: true,
        ..small_config(capacity)
    };
    MemCache::with_tiers(cfg, Arc::new(RealBacking), Vec::new()).unwrap()
}

#[test]
fn pinned_blocks_are_never_reused_under_eviction_writes_and_invalidation() {
    let dir = tempfile::tempdir().unwrap();
    let cache = Arc::new(zc_cache(24));
    let ids: Vec<FileId> = (0..FILES)
        .map(|f| {
            let bytes: Vec<u8> = (0..BLOCKS)
                .flat_map(|b| block_bytes(f as u64, b, 0))
                .collect();
            let p = make_file(dir.path(), &format!("f{f}"), &bytes);
            open(&cache, &p, Class::NORMAL)
        })
        .collect();
    let region = cache.zero_copy_region().expect("shared arena");
    let stop = Arc::new(AtomicBool::new(false));
    let (hits, fills) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));

    let mut handles = Vec::new();
    for t in 0..3u32 {
        let id = ClientId(t);
        // Each client maps the region and its own pin area from the descriptors, as a client
        // process does.
        let pins = region.add_client(id).unwrap();
        let client = RegionView::open(region.file().try_clone().unwrap(), pins, id).unwrap();
        let (cache, ids) = (Arc::clone(&cache), ids.clone());
        let (hits, fills) = (Arc::clone(&hits), Arc::clone(&fills));
        handles.push(std::thread::spawn(move || {
            let mut rng = SmallRng::seed_from_u64(t as u64);
            for _ in 0..4000 {
                let f = rng.gen_range(0..FILES);
                let (file, b) = (ids[f], rng.gen_range(0..BLOCKS));
                let hit = client
                    .hints(file.0, b)
                    .find(|&s| client.try_pin(s, file.0, b).is_some());
                let slot = match hit {
                    Some(s) => {
                        hits.fetch_add(1, Relaxed);
                        s
                    }
                    None => match cache.pin_blocks(file, b, 1, id).unwrap()[0] {
                        Some(s) => {
                            fills.fetch_add(1, Relaxed);
                            s
                        }
                        None => continue,
                    },
                };
                for _ in 0..3 {
                    // SAFETY: `slot` is in range (the header exists) and pinned: the daemon
                    // does not reuse it; other writers only change the payload.
                    let stamp = unsafe { std::slice::from_raw_parts(client.data_ptr(slot), 16) };
                    assert_eq!(
                        &stamp[..8],
                        &(f as u64).to_le_bytes(),
                        "another file's bytes"
                    );
                    assert_eq!(&stamp[8..], &b.to_le_bytes(), "another block's bytes");
                    assert!(client.names(slot, file.0, b), "header changed under a pin");
                    std::thread::yield_now();
                }
                client.unpin(slot);
            }
        }));
    }
    // Writes through the cache (payload only), and invalidations removing clean blocks.
    {
        let (cache, ids, stop) = (Arc::clone(&cache), ids.clone(), Arc::clone(&stop));
        handles.push(std::thread::spawn(move || {
            let mut rng = SmallRng::seed_from_u64(99);
            let mut v = 1;
            while !stop.load(Relaxed) {
                let f = rng.gen_range(0..FILES);
                let b = rng.gen_range(0..BLOCKS);
                let bytes = block_bytes(f as u64, b, v);
                cache
                    .write(ids[f], b * BS as u64 + 16, &bytes[16..])
                    .unwrap();
                v += 1;
                if v % 16 == 0 {
                    cache.flush_all().unwrap();
                    cache.invalidate(ids[rng.gen_range(0..FILES)]);
                }
            }
        }));
    }
    for h in handles.drain(..3) {
        h.join().unwrap();
    }
    stop.store(true, Relaxed);
    for h in handles {
        h.join().unwrap();
    }
    assert!(hits.load(Relaxed) > 100, "hits {}", hits.load(Relaxed));
    assert!(fills.load(Relaxed) > 100, "fills {}", fills.load(Relaxed));
    for t in 0..3 {
        cache.release_client(ClientId(t));
    }
    assert_eq!(cache.held_slots(), 0);
    assert_eq!(region.pinned_slots(), 0);
    cache.check_invariants().unwrap();
}

#[test]
fn a_gone_clients_pins_are_released_and_its_held_slots_freed() {
    let dir = tempfile::tempdir().unwrap();
    let cache = zc_cache(8);
    let p = make_file(dir.path(), "f", &pattern(0, 16 * BS, 1));
    let id = open(&cache, &p, Class::NORMAL);
    let region = cache.zero_copy_region().unwrap();
    let _pins = region.add_client(ClientId(7)).unwrap();
    let slots = cache.pin_blocks(id, 0, 8, ClientId(7)).unwrap();
    assert!(slots.iter().all(Option::is_some), "{slots:?}");
    // Every slot is pinned: a miss on another block cannot evict any, so it is served uncached.
    let mut buf = vec![0u8; BS];
    cache.read_into(id, 12 * BS as u64, &mut buf).unwrap();
    assert_bytes(&buf, &pattern(12 * BS as u64, BS, 1), "bypass read");
    // Removal while pinned holds the slots back.
    cache.invalidate(id);
    assert_eq!(cache.held_slots(), 8);
    cache.check_invariants().unwrap();
    // The client dies: its pins go and the slots are free for the next reads.
    cache.release_client(ClientId(7));
    assert_eq!(cache.held_slots(), 0);
    let _pins = region.add_client(ClientId(0)).unwrap();
    let slots = cache.pin_blocks(id, 8, 8, ClientId(0)).unwrap();
    assert!(slots.iter().all(Option::is_some), "{slots:?}");
    // Past EOF there is nothing to pin.
    assert_eq!(
        cache.pin_blocks(id, 16, 2, ClientId(0)).unwrap(),
        vec![None, None]
    );
    cache.release_client(ClientId(0));
}
