//! Issue #24: a hit waited behind a miss; the memory tier had no way to serve a hit without possibly doing I/O, so the FUSE layer could not tell what to answer on its request thread. `try_read_into`/`try_write` serve hits and I/O-free writes and hand everything else back untouched.
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use tiercache_manager::{Class, MemCache, MemConfig, NoWait};

const BS: u64 = 512;

fn cache(capacity: usize) -> MemCache {
    MemCache::with_real_device(small_config(capacity)).unwrap()
}

#[track_caller]
fn done<T: std::fmt::Debug>(r: NoWait<T>) -> T {
    match r {
        NoWait::Done(r) => r.unwrap(),
        NoWait::Wait(c) => panic!("handed back ({c:?}) where it should have been served"),
    }
}

#[track_caller]
fn waits<T: std::fmt::Debug>(r: NoWait<T>) -> Class {
    match r {
        NoWait::Wait(c) => c,
        NoWait::Done(r) => panic!("served ({r:?}) where it needed BACKING"),
    }
}

#[test]
fn a_miss_is_handed_back_untouched_and_a_hit_is_served_without_backing() {
    let dir = tempfile::tempdir().unwrap();
    let content = pattern(0, 8 * BS as usize, 1);
    let path = make_file(dir.path(), "f", &content);
    let c = cache(64);
    let id = open(&c, &path, Class::NORMAL);
    let mut buf = vec![0u8; 2 * BS as usize];

    assert_eq!(waits(c.try_read_into(id, 100, &mut buf)), Class::NORMAL);
    let s = c.stats();
    assert_eq!(s.backing.reads, 0, "a no-wait read went to BACKING");
    assert_eq!(s.used_blocks, 0, "a no-wait miss took slots");
    let counted = s.class(Class::NORMAL);
    assert_eq!(
        (counted.hits, counted.misses),
        (0, 0),
        "a handed-back read was counted"
    );

    // The waiting read brings the blocks in; the same request is then a hit.
    assert_eq!(c.read_into(id, 100, &mut buf).unwrap(), buf.len());
    let reads = c.stats().backing.reads;
    let mut again = vec![0u8; buf.len()];
    assert_eq!(done(c.try_read_into(id, 100, &mut again)), buf.len());
    assert_bytes(&again, &content[100..100 + buf.len()], "hit");
    assert_eq!(c.stats().backing.reads, reads, "a hit went to BACKING");
    assert!(c.stats().class(Class::NORMAL).hits >= 3);

    // Past EOF: nothing to read, nothing to wait for.
    assert_eq!(done(c.try_read_into(id, 8 * BS, &mut again)), 0);
    // A partly cached request waits as a whole.
    let mut tail = vec![0u8; 4 * BS as usize];
    waits(c.try_read_into(id, 2 * BS, &mut tail));
    assert_eq!(c.stats().backing.reads, reads);
}

#[test]
fn the_class_handed_back_is_the_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_file(dir.path(), "p", &pattern(0, 4 * BS as usize, 2));
    let c = cache(64);
    let id = open(&c, &path, Class::PRIORITY);
    let mut buf = vec![0u8; BS as usize];
    assert_eq!(waits(c.try_read_into(id, 0, &mut buf)), Class::PRIORITY);
    assert_eq!(waits(c.try_write(id, 1, b"x")), Class::PRIORITY);
    assert_eq!(c.class_of(id), Some(Class::PRIORITY));
}

#[test]
fn a_write_needing_backings_bytes_waits_and_others_are_cached() {
    let dir = tempfile::tempdir().unwrap();
    let content = pattern(0, 4 * BS as usize, 3);
    let path = make_file(dir.path(), "w", &content);
    let c = cache(64);
    let id = open(&c, &path, Class::NORMAL);

    // Part of a block BACKING holds and memory does not: a read-modify-write, so it waits,
    // with nothing written or dirtied.
    waits(c.try_write(id, 10, b"partial"));
    let s = c.stats();
    assert_eq!((s.backing.reads, s.dirty_blocks), (0, 0));
    assert_bytes(
        &read_file(&path),
        &content,
        "BACKING after a handed-back write",
    );

    // A whole block needs nothing old: cached and dirty, no I/O.
    let whole = pattern(BS, BS as usize, 9);
    assert_eq!(done(c.try_write(id, BS, &whole)), BS as usize);
    // Part of that block, now resident and valid: cached too.
    assert_eq!(done(c.try_write(id, BS + 5, b"abc")), 3);
    // Past BACKING's end: nothing old to read, cached (the file grows).
    assert_eq!(done(c.try_write(id, 4 * BS + 7, b"tail")), 4);
    let s = c.stats();
    assert_eq!(
        (s.backing.reads, s.backing.writes),
        (0, 0),
        "{:?}",
        s.backing
    );
    assert_eq!(s.dirty_blocks, 2);
    assert_eq!(c.logical_size(id), Some(4 * BS + 11));

    let mut want = content.clone();
    want[BS as usize..2 * BS as usize].copy_from_slice(&whole);
    want[BS as usize + 5..BS as usize + 8].copy_from_slice(b"abc");
    want.resize(4 * BS as usize + 7, 0);
    want.extend_from_slice(b"tail");
    c.flush_all().unwrap();
    assert_bytes(&read_file(&path), &want, "BACKING after write-back");
}

#[test]
fn a_write_above_the_dirty_limit_waits_for_the_throttle() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_file(dir.path(), "d", &[]);
    // 10 slots, dirty limit 4 (40 %).
    let c = MemCache::with_real_device(MemConfig {
        dirty_ratio: 0.4,
        dirty_background_ratio: 0.1,
        ..small_config(10)
    })
    .unwrap();
    let id = open(&c, &path, Class::NORMAL);
    let mut served = 0u64;
    loop {
        let block = pattern(served * BS, BS as usize, 4);
        match c.try_write(id, served * BS, &block) {
            NoWait::Done(r) => {
                assert_eq!(r.unwrap(), BS as usize);
                served += 1;
            }
            NoWait::Wait(_) => break,
        }
        assert!(served <= 10, "no-wait writes went past the dirty limit");
    }
    // Served while at or below the limit (4), handed back once above it.
    assert_eq!(served, 5);
    assert_eq!(c.stats().dirty_blocks, 5);
    assert_eq!(c.stats().backing.writes, 0);
    // The waiting write throttles (writes back) and goes on.
    let block = pattern(served * BS, BS as usize, 4);
    assert_eq!(c.write(id, served * BS, &block).unwrap(), BS as usize);
    assert!(c.stats().backing.writes > 0);
}
