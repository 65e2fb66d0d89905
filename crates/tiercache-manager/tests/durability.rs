#![allow(clippy::unwrap_used)]
//! Durability and failure handling: fsync really puts bytes on BACKING (checked after the cache
//! is leaked, as in a crash), backing write errors keep data dirty and are reported, failed
//! reads never produce wrong bytes, and files changed behind the cache's back are re-read.

mod common;

use common::*;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tiercache_manager::{BackingIo, Class, FaultyBacking, MemCache, RealBacking};

#[test]
fn fsync_puts_bytes_on_backing_before_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_file(dir.path(), "d", &pattern(0, 1000, 0));
    let cache = MemCache::with_real_device(small_config(32)).unwrap();
    let id = open(&cache, &path, Class::NORMAL);
    cache.write(id, 300, &pattern(300, 2000, 1)).unwrap(); // extends to 2300
    cache.write(id, 5000, b"tail").unwrap(); // hole 2300..5000
    assert_eq!(
        read_file(&path),
        pattern(0, 1000, 0),
        "write-back, not write-through"
    );
    cache.fsync(id, false).unwrap();
    let mut want = pattern(0, 300, 0);
    want.extend(pattern(300, 2000, 1));
    want.resize(5000, 0);
    want.extend_from_slice(b"tail");
    // More writes after the fsync that are lost in the "crash".
    cache.write(id, 0, b"lost").unwrap();
    std::mem::forget(cache);
    assert_eq!(std::fs::read(&path).unwrap(), want);
}

#[test]
fn write_error_keeps_data_dirty_and_is_retried_after_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let orig = pattern(0, 4096, 0);
    let path = make_file(dir.path(), "e", &orig);
    let faulty = Arc::new(FaultyBacking::new(Arc::new(RealBacking)));
    let cache = MemCache::new(small_config(32), faulty.clone() as Arc<dyn BackingIo>).unwrap();
    let id = open(&cache, &path, Class::NORMAL);
    let new = pattern(100, 1500, 9);
    cache.write(id, 100, &new).unwrap();
    let dirty = cache.file_blocks(id).1;
    assert!(dirty >= 3);
    faulty.fail_writes_after(0);
    let err = cache.fsync(id, true).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO));
    assert_eq!(
        cache.file_blocks(id).1,
        dirty,
        "unwritten data must stay dirty"
    );
    assert_eq!(read_file(&path), orig, "nothing reached BACKING");
    let mut want = orig.clone();
    want[100..1600].copy_from_slice(&new);
    assert_eq!(
        cache.read(id, 0, 5000).unwrap(),
        want,
        "the cache still has the data"
    );
    assert!(cache.flush_all().is_err());
    // Recovery: the retry succeeds and the bytes land.
    faulty.heal();
    cache.fsync(id, true).unwrap();
    assert_eq!(cache.file_blocks(id).1, 0);
    assert_eq!(read_file(&path), want);
    assert!(cache.stats().paths.writeback_errors >= 2);
}

#[test]
fn background_write_error_is_reported_by_the_next_fsync() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_file(dir.path(), "b", &pattern(0, 2048, 0));
    let faulty = Arc::new(FaultyBacking::new(Arc::new(RealBacking)));
    let mut cfg = small_config(32);
    cfg.flusher_threads = 1;
    cfg.flush_interval = Duration::from_millis(2);
    cfg.dirty_expire = Duration::ZERO;
    let cache = MemCache::new(cfg, faulty.clone() as Arc<dyn BackingIo>).unwrap();
    let id = open(&cache, &path, Class::NORMAL);
    faulty.fail_writes_after(0);
    cache.write(id, 10, b"hello").unwrap();
    // Wait (no timing assertion) until the flusher has failed at least once.
    while cache.stats().paths.writeback_errors == 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(cache.file_blocks(id).1, 1);
    faulty.heal();
    // Wait until the flusher has written it back after recovery.
    while cache.file_blocks(id).1 != 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let err = cache.fsync(id, false).unwrap_err();
    assert_eq!(
        err.raw_os_error(),
        Some(libc::EIO),
        "remembered background error"
    );
    cache.fsync(id, false).unwrap();
    let mut want = pattern(0, 2048, 0);
    want[10..15].copy_from_slice(b"hello");
    assert_eq!(read_file(&path), want);
}

#[test]
fn failed_reads_return_errors_never_wrong_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let content = pattern(0, 8192, 4);
    let path = make_file(dir.path(), "r", &content);
    let faulty = Arc::new(FaultyBacking::new(Arc::new(RealBacking)));
    let cache = MemCache::new(small_config(32), faulty.clone() as Arc<dyn BackingIo>).unwrap();
    let id = open(&cache, &path, Class::NORMAL);
    assert_eq!(cache.read(id, 0, 1024).unwrap(), content[..1024]);
    faulty.fail_reads_after(0);
    // Cached: still served.
    assert_eq!(cache.read(id, 0, 1024).unwrap(), content[..1024]);
    // Not cached: an error, not zeros.
    let err = cache.read(id, 6000, 100).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO));
    // A partial write needing read-modify-write fails too, without caching garbage.
    assert!(cache.write(id, 7000, b"x").is_err());
    cache.check_invariants().unwrap();
    faulty.heal();
    assert_eq!(cache.read(id, 0, 9000).unwrap(), content);
    cache.write(id, 7000, b"x").unwrap();
    let mut want = content.clone();
    want[7000] = b'x';
    assert_eq!(cache.read(id, 0, 9000).unwrap(), want);
    cache.flush_all().unwrap();
    assert_eq!(read_file(&path), want);
}

#[test]
fn silently_dropped_writes_are_caught_by_the_backing_check() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_file(dir.path(), "s", &pattern(0, 1024, 0));
    let faulty = Arc::new(FaultyBacking::new(Arc::new(RealBacking)));
    let cache = MemCache::new(small_config(8), faulty.clone() as Arc<dyn BackingIo>).unwrap();
    let id = open(&cache, &path, Class::NORMAL);
    faulty.drop_writes_after(0);
    cache.write(id, 0, b"gone").unwrap();
    cache.fsync(id, true).unwrap(); // the device lied
    assert_eq!(faulty.dropped_writes(), 1);
    assert_ne!(
        &read_file(&path)[..4],
        b"gone",
        "the comparison with BACKING detects it"
    );
}

#[test]
fn file_changed_behind_the_cache_is_reread_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_file(dir.path(), "c", &pattern(0, 4096, 0));
    let cache = MemCache::with_real_device(small_config(32)).unwrap();
    let id = open(&cache, &path, Class::NORMAL);
    assert_eq!(cache.read(id, 0, 4096).unwrap(), pattern(0, 4096, 0));
    cache.release(id);
    // Reopening unchanged keeps the blocks.
    let out = reopen(&cache, &path, id, Class::NORMAL);
    assert_eq!(out.dropped_blocks, 0);
    assert!(out.reused_blocks > 0);
    cache.release(id);
    // Someone else rewrites the file (same size) and its mtime moves.
    std::fs::write(&path, pattern(0, 4096, 1)).unwrap();
    file_handle(&path)
        .set_modified(SystemTime::now() + Duration::from_secs(5))
        .unwrap();
    let out = reopen(&cache, &path, id, Class::NORMAL);
    assert!(out.dropped_blocks > 0);
    assert_eq!(cache.read(id, 0, 4096).unwrap(), pattern(0, 4096, 1));
}

#[test]
fn changed_file_with_dirty_blocks_keeps_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_file(dir.path(), "k", &pattern(0, 2048, 0));
    let cache = MemCache::with_real_device(small_config(32)).unwrap();
    let id = open(&cache, &path, Class::NORMAL);
    cache.read(id, 0, 2048).unwrap();
    cache.write(id, 0, b"mine").unwrap();
    std::fs::write(&path, pattern(0, 2048, 1)).unwrap();
    file_handle(&path)
        .set_modified(SystemTime::now() + Duration::from_secs(5))
        .unwrap();
    let out = reopen(&cache, &path, id, Class::NORMAL);
    assert_eq!(out.kept_dirty, 1);
    assert!(out.dropped_blocks >= 1);
    let mut want = pattern(0, 2048, 1);
    want[..4].copy_from_slice(b"mine");
    want[4..512].copy_from_slice(&pattern(4, 508, 0)); // the dirty block is kept whole
    assert_eq!(cache.read(id, 0, 2048).unwrap(), want);
    cache.flush_all().unwrap();
    assert_eq!(read_file(&path), want);
}

#[test]
fn released_dirty_file_is_written_back_at_drop() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_file(dir.path(), "r", b"");
    let cache = MemCache::with_real_device(small_config(16)).unwrap();
    let id = open(&cache, &path, Class::NORMAL);
    cache.write(id, 0, &pattern(0, 3000, 2)).unwrap();
    cache.release(id);
    assert!(cache.file_blocks(id).1 > 0, "dirty blocks survive release");
    drop(cache);
    assert_eq!(read_file(&path), pattern(0, 3000, 2));
}

#[test]
fn writers_are_throttled_to_keep_the_dirty_set_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_file(dir.path(), "big", b"");
    let mut cfg = small_config(32);
    cfg.dirty_ratio = 0.25; // 8 blocks
    cfg.dirty_background_ratio = 0.1;
    let cache = MemCache::with_real_device(cfg).unwrap();
    let id = open(&cache, &path, Class::NORMAL);
    let mut max_dirty = 0;
    for i in 0..200u64 {
        cache
            .write(id, i * 1024, &pattern(i * 1024, 1024, 5))
            .unwrap(); // 2 blocks each
        max_dirty = max_dirty.max(cache.stats().dirty_blocks);
    }
    assert!(max_dirty <= 8 + 2, "dirty set grew to {max_dirty}");
    let s = cache.stats();
    assert!(s.paths.throttled_writes > 0);
    assert_eq!(
        s.paths.write_through_blocks, 0,
        "throttling keeps slots available"
    );
    cache.flush_all().unwrap();
    assert_eq!(read_file(&path), pattern(0, 200 * 1024, 5));
}

#[test]
fn background_flusher_writes_back_expired_data_without_fsync() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_file(dir.path(), "bg", &pattern(0, 4096, 0));
    let mut cfg = small_config(32);
    cfg.flusher_threads = 1;
    cfg.flush_interval = Duration::from_millis(5);
    cfg.dirty_expire = Duration::from_millis(10);
    let cache = MemCache::with_real_device(cfg).unwrap();
    let id = open(&cache, &path, Class::NORMAL);
    cache.write(id, 1000, &pattern(1000, 2000, 6)).unwrap();
    // Wait for the event, not for a time.
    while cache.file_blocks(id).1 != 0 {
        std::thread::sleep(Duration::from_millis(2));
    }
    let mut want = pattern(0, 4096, 0);
    want[1000..3000].copy_from_slice(&pattern(1000, 2000, 6));
    assert_eq!(read_file(&path), want);
    let s = cache.stats();
    assert!(s.paths.writeback_blocks >= 4);
    assert_eq!(
        s.backing.writes, 1,
        "contiguous dirty blocks merged into one pwrite"
    );
}
