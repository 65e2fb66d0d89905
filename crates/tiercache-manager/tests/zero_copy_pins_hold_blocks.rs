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
use tiercache_memtier::shm::Region;

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
            open(&cache, &p, Class::Normal)
        })
        .collect();
    let region = cache.zero_copy_region().expect("shared arena");
    // A client maps the region from the descriptor, as a client process does.
    let client = Arc::new(Region::open(region.file().try_clone().unwrap()).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let (hits, fills) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));

    let mut handles = Vec::new();
    for (t, bit) in [1u64, 2, 4].into_iter().enumerate() {
        let (cache, client, ids) = (Arc::clone(&cache), Arc::clone(&client), ids.clone());
        let (hits, fills) = (Arc::clone(&hits), Arc::clone(&fills));
        handles.push(std::thread::spawn(move || {
            let mut rng = SmallRng::seed_from_u64(t as u64);
            for _ in 0..4000 {
                let f = rng.gen_range(0..FILES);
                let (id, b) = (ids[f], rng.gen_range(0..BLOCKS));
                let hit = client.hints(id.0, b).find(|&s| {
                    client
                        .header(s)
                        .is_some_and(|h| h.try_pin(id.0, b, bit).is_some())
                });
                let slot = match hit {
                    Some(s) => {
                        hits.fetch_add(1, Relaxed);
                        s
                    }
                    None => match cache.pin_blocks(id, b, 1, bit).unwrap()[0] {
                        Some(s) => {
                            fills.fetch_add(1, Relaxed);
                            s
                        }
                        None => continue,
                    },
                };
                let h = client.header(slot).unwrap();
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
                    assert_eq!(h.file.load(Relaxed), id.0, "header changed under a pin");
                    assert_eq!(h.block.load(Relaxed), b, "header changed under a pin");
                    std::thread::yield_now();
                }
                h.unpin(bit);
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
    for bit in [1, 2, 4] {
        cache.release_client(bit);
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
    let id = open(&cache, &p, Class::Normal);
    let slots = cache.pin_blocks(id, 0, 8, 1 << 7).unwrap();
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
    cache.release_client(1 << 7);
    assert_eq!(cache.held_slots(), 0);
    let slots = cache.pin_blocks(id, 8, 8, 1).unwrap();
    assert!(slots.iter().all(Option::is_some), "{slots:?}");
    // Past EOF there is nothing to pin.
    assert_eq!(cache.pin_blocks(id, 16, 2, 1).unwrap(), vec![None, None]);
    cache.release_client(1);
}

#[test]
fn a_block_updated_in_place_stays_dirty_until_the_update_ends_and_then_reaches_backing() {
    let dir = tempfile::tempdir().unwrap();
    let cache = zc_cache(8);
    let p = make_file(dir.path(), "f", &pattern(0, 4 * BS, 1));
    let id = open(&cache, &p, Class::Normal);
    let region = cache.zero_copy_region().unwrap();
    let client = Region::open(region.file().try_clone().unwrap()).unwrap();
    let slot = cache.pin_for_write(id, 2, 1 << 3).unwrap();
    let h = client.header(slot).unwrap();
    assert!(h.writing());
    // The client writes part of the block; write-back meanwhile must not call it clean.
    // SAFETY: pinned slot in range; this test is the only writer.
    unsafe {
        client
            .data_ptr(slot)
            .add(100)
            .copy_from(b"zero-copy".as_ptr(), 9)
    };
    cache.flush_all().unwrap();
    assert_eq!(
        cache.file_blocks(id).1,
        1,
        "cleaned while a client was writing"
    );
    // More bytes, then the update ends: the next write-back takes them all.
    // SAFETY: as above.
    unsafe {
        client
            .data_ptr(slot)
            .add(200)
            .copy_from(b"more".as_ptr(), 4)
    };
    h.end_write(1 << 3);
    cache.flush_all().unwrap();
    assert_eq!(cache.file_blocks(id).1, 0);
    let mut want = pattern(0, 4 * BS, 1);
    want[2 * BS + 100..2 * BS + 109].copy_from_slice(b"zero-copy");
    want[2 * BS + 200..2 * BS + 204].copy_from_slice(b"more");
    assert_bytes(&read_file(&p), &want, "BACKING after the update");
    h.unpin(1 << 3);
    // A client that dies mid-update: its write bit goes and the block is written back again.
    let slot = cache.pin_for_write(id, 0, 1 << 4).unwrap();
    // SAFETY: as above.
    unsafe { client.data_ptr(slot).copy_from(b"dying".as_ptr(), 5) };
    cache.release_client(1 << 4);
    assert!(!client.header(slot).unwrap().writing());
    cache.flush_all().unwrap();
    assert_eq!(&read_file(&p)[..5], b"dying");
    cache.check_invariants().unwrap();
}

/// Review: blocks a client updated past EOF were marked clean by a write-back (nothing of
/// them is within EOF) and then evicted, so a later `sync_extend` lost their bytes.
#[test]
fn blocks_updated_past_eof_survive_write_back_and_eviction_until_synced() {
    let dir = tempfile::tempdir().unwrap();
    let cache = zc_cache(8);
    let p = make_file(dir.path(), "f", &pattern(0, 612, 1));
    let id = open(&cache, &p, Class::Normal);
    let other = make_file(dir.path(), "g", &pattern(0, 64 * BS, 2));
    let other = open(&cache, &other, Class::Normal);
    let region = cache.zero_copy_region().unwrap();
    let client = Region::open(region.file().try_clone().unwrap()).unwrap();
    let bit = 1 << 9;
    for (block, text) in [(1u64, b"tail"), (2, b"two!"), (3, b"thre")] {
        let slot = cache.pin_for_write(id, block, bit).unwrap();
        let at = if block == 1 { 612 - BS } else { 0 };
        // SAFETY: pinned slot in range; this test is the only writer.
        unsafe { client.data_ptr(slot).add(at).copy_from(text.as_ptr(), 4) };
        let h = client.header(slot).unwrap();
        h.end_write(bit);
        h.unpin(bit);
    }
    // Write-back, then memory pressure from another file: the held blocks stay.
    cache.fsync(id, false).unwrap();
    let mut buf = vec![0u8; BS];
    for b in 0..64 {
        cache.read_into(other, b * BS as u64, &mut buf).unwrap();
    }
    assert_eq!(
        read_file(&p).len(),
        612,
        "past EOF reached BACKING before a sync"
    );
    let size = cache.sync_extend(id, Some(3 * BS as u64 + 4)).unwrap();
    assert_eq!(size, 3 * BS as u64 + 4);
    let mut want = pattern(0, 612, 1);
    want.extend_from_slice(b"tail");
    want.resize(2 * BS, 0);
    want.extend_from_slice(b"two!");
    want.resize(3 * BS, 0);
    want.extend_from_slice(b"thre");
    assert_bytes(&read_file(&p), &want, "BACKING after sync_extend");
    cache.release_client(bit);
    cache.check_invariants().unwrap();
}
