#![allow(clippy::unwrap_used)]
//! Concurrent readers and writers on one file (and a second file competing for slots), on
//! disjoint and overlapping ranges, with a small cache and a busy background flusher. Readers
//! check that every byte they see is one some writer could have put there; at the end the
//! cache and, after `flush_all`, the backing file equal the model.

mod common;

use common::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::fs::File;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tiercache_manager::{BackingIo, Class, FileId, MemCache, RealBacking};

const BS: u64 = 512;
/// Per-writer private regions, then one region every writer overwrites with the same bytes.
const REGION: u64 = 8 * 1024;
const WRITERS: u64 = 3;
const SHARED_VERSION: u64 = 100;
const ROUNDS: u64 = 6;

fn shared_start() -> u64 {
    REGION * WRITERS
}

/// The versions byte `pos` may hold at any time.
fn allowed(pos: u64) -> Vec<u8> {
    if pos >= shared_start() {
        vec![pat(pos, 0), pat(pos, SHARED_VERSION)]
    } else {
        (0..=ROUNDS).map(|v| pat(pos, v)).collect()
    }
}

#[test]
fn concurrent_readers_and_writers_end_equal_to_model() {
    for (cap, seed) in [(16usize, 1u64), (48, 2), (6, 3)] {
        let dir = tempfile::tempdir().unwrap();
        let total = shared_start() + REGION;
        let path = make_file(dir.path(), "data", &pattern(0, total as usize, 0));
        let other = make_file(dir.path(), "other", &pattern(0, 64 * 1024, 7));
        let mut cfg = small_config(cap);
        cfg.flusher_threads = 1;
        cfg.flush_interval = Duration::from_millis(3);
        cfg.dirty_expire = Duration::from_millis(1);
        let cache = MemCache::with_real_device(cfg).unwrap();
        let id = open(&cache, &path, Class::NORMAL);
        let oid = open(&cache, &other, Class::PRIORITY);
        let finished = AtomicU64::new(0);
        std::thread::scope(|s| {
            for w in 0..WRITERS {
                let (cache, finished) = (&cache, &finished);
                s.spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(seed * 100 + w);
                    let base = w * REGION;
                    for v in 1..=ROUNDS {
                        // Rewrite the private region in random chunks, in random order.
                        let mut cuts: Vec<u64> = (0..REGION).step_by(300).collect();
                        cuts.push(REGION);
                        let mut chunks: Vec<(u64, u64)> =
                            cuts.windows(2).map(|c| (c[0], c[1])).collect();
                        for i in (1..chunks.len()).rev() {
                            chunks.swap(i, rng.gen_range(0..=i));
                        }
                        for (a, b) in chunks {
                            let off = base + a;
                            let n = cache
                                .write(id, off, &pattern(off, (b - a) as usize, v))
                                .unwrap();
                            assert_eq!(n as u64, b - a);
                        }
                        // And some of the shared region, identical for every writer.
                        for _ in 0..8 {
                            let a = rng.gen_range(0..REGION - 1);
                            let len = rng.gen_range(1..=(REGION - a).min(1500));
                            let off = shared_start() + a;
                            cache
                                .write(id, off, &pattern(off, len as usize, SHARED_VERSION))
                                .unwrap();
                        }
                        if rng.gen_bool(0.3) {
                            cache.fsync(id, true).unwrap();
                        }
                    }
                    finished.fetch_add(1, Ordering::SeqCst);
                });
            }
            for r in 0..3u64 {
                let (cache, finished) = (&cache, &finished);
                s.spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(seed * 1000 + r);
                    let mut reads = 0;
                    while finished.load(Ordering::SeqCst) < WRITERS || reads < 50 {
                        reads += 1;
                        let off = if rng.gen_bool(0.3) {
                            rng.gen_range(0..total / BS) * BS
                        } else {
                            rng.gen_range(0..total)
                        };
                        let len = rng.gen_range(1..3000usize);
                        let got = cache.read(id, off, len).unwrap();
                        assert_eq!(got.len() as u64, (total - off).min(len as u64));
                        for (i, &b) in got.iter().enumerate() {
                            let pos = off + i as u64;
                            assert!(allowed(pos).contains(&b), "byte {pos} = {b} is impossible");
                        }
                        // Competing traffic on another file.
                        let o = rng.gen_range(0..128u64) * BS;
                        let got = cache.read(oid, o, 700).unwrap();
                        let want = pattern(o, 700.min(64 * 1024 - o as usize), 7);
                        assert!(got == want, "other file at {o}: wrong bytes");
                    }
                });
            }
        });
        // Model: private regions at the last version; shared bytes written at least once are
        // the shared version, the rest still the original — read it and check each byte.
        let got = cache.read(id, 0, total as usize + 10).unwrap();
        assert_eq!(got.len() as u64, total);
        for (i, &b) in got.iter().enumerate() {
            let pos = i as u64;
            if pos < shared_start() {
                assert_eq!(b, pat(pos, ROUNDS), "cap {cap}: byte {pos}");
            } else {
                assert!(allowed(pos).contains(&b), "cap {cap}: byte {pos}");
            }
        }
        cache.flush_all().unwrap();
        assert_eq!(read_file(&path), got, "cap {cap}: backing after flush_all");
        assert_eq!(read_file(&other), pattern(0, 64 * 1024, 7));
        drop(cache);
    }
}

/// Many threads writing disjoint blocks of one file with a cache far smaller than the data:
/// throttling, write-through and write-back all happen; every byte ends up on BACKING.
#[test]
fn many_writers_small_cache_nothing_lost() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_file(dir.path(), "w", &[]);
    let mut cfg = small_config(8);
    cfg.flusher_threads = 2;
    cfg.flush_interval = Duration::from_millis(1);
    let cache = MemCache::with_real_device(cfg).unwrap();
    let id = open(&cache, &path, Class::NORMAL);
    const PER: u64 = 40;
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let cache = &cache;
            s.spawn(move || {
                for i in 0..PER {
                    // Interleaved 700-byte records: thread t owns records t, t+4, ...
                    let rec = i * 4 + t;
                    let off = rec * 700;
                    cache.write(id, off, &pattern(off, 700, 3)).unwrap();
                }
            });
        }
    });
    let want = pattern(0, (PER * 4 * 700) as usize, 3);
    assert_eq!(cache.read(id, 0, want.len() + 1).unwrap(), want);
    cache.flush_all().unwrap();
    assert_eq!(read_file(&path), want);
    let s = cache.stats();
    assert_eq!(s.dirty_blocks, 0);
}

/// Delays every write before doing it, widening the window in which a write-through is in
/// flight while other requests touch the same block.
#[derive(Debug)]
struct SlowWrites(RealBacking);

impl BackingIo for SlowWrites {
    fn read_at(&self, f: FileId, fd: &File, buf: &mut [u8], off: u64) -> std::io::Result<usize> {
        self.0.read_at(f, fd, buf, off)
    }
    fn write_at(&self, f: FileId, fd: &File, buf: &[u8], off: u64) -> std::io::Result<()> {
        std::thread::sleep(Duration::from_micros(300));
        self.0.write_at(f, fd, buf, off)
    }
    fn sync(&self, f: FileId, fd: &File, datasync: bool) -> std::io::Result<()> {
        self.0.sync(f, fd, datasync)
    }
    fn set_len(&self, f: FileId, fd: &File, len: u64) -> std::io::Result<()> {
        self.0.set_len(f, fd, len)
    }
}

/// Threads write disjoint 100-byte records that share 512-byte blocks, with a 4-slot cache:
/// write-throughs (no slot) race with read-modify-writes of the same blocks by other threads.
/// No record may be lost.
#[test]
fn write_through_racing_read_modify_write_loses_nothing() {
    const THREADS: u64 = 4;
    const RECORDS: u64 = 60;
    let dir = tempfile::tempdir().unwrap();
    let len = (THREADS * RECORDS * 100) as usize;
    let path = make_file(dir.path(), "wt", &pattern(0, len, 0));
    let mut cfg = small_config(4);
    // Let dirty blocks fill the cache so that writers often find no slot.
    cfg.dirty_ratio = 1.0;
    cfg.dirty_background_ratio = 1.0;
    cfg.dirty_expire = Duration::ZERO;
    cfg.flusher_threads = 1;
    cfg.flush_interval = Duration::from_millis(1);
    let cache = MemCache::new(cfg, Arc::new(SlowWrites(RealBacking))).unwrap();
    let id = open(&cache, &path, Class::NORMAL);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let cache = &cache;
            s.spawn(move || {
                for i in 0..RECORDS {
                    let off = (i * THREADS + t) * 100;
                    cache.write(id, off, &pattern(off, 100, 1)).unwrap();
                }
            });
        }
    });
    let want = pattern(0, len, 1);
    assert!(
        cache.read(id, 0, len).unwrap() == want,
        "cache lost a record"
    );
    cache.flush_all().unwrap();
    assert!(read_file(&path) == want, "backing lost a record");
    let s = cache.stats();
    eprintln!("write-through blocks: {}", s.paths.write_through_blocks);
    assert!(
        s.paths.write_through_blocks > 0,
        "no write-through happened"
    );
}
