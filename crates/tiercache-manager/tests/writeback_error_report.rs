//! Bug: close() never reported write-back errors: the tier had no cheap call that returns (once) the file's remembered background write-back error for the FUSE `flush`.
#![allow(clippy::unwrap_used)]

mod common;

use common::{make_file, open, small_config};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tiercache_manager::{BackingIo, Class, FaultyBacking, FileId, MemCache, RealBacking};

#[test]
fn a_background_write_back_error_is_reported_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_file(dir.path(), "f", &[0u8; 1000]);
    let faulty = Arc::new(FaultyBacking::new(Arc::new(RealBacking)));
    let mut cfg = small_config(32);
    cfg.flusher_threads = 1;
    cfg.flush_interval = Duration::from_millis(2);
    cfg.dirty_expire = Duration::ZERO;
    let cache = MemCache::new(cfg, faulty.clone() as Arc<dyn BackingIo>).unwrap();
    let id = open(&cache, &path, Class::NORMAL);
    assert!(
        cache.take_writeback_error(id).is_none(),
        "nothing failed yet"
    );
    faulty.fail_writes_after(0);
    cache.write(id, 10, b"hello").unwrap();
    let t = Instant::now();
    while cache.stats().paths.writeback_errors == 0 {
        assert!(t.elapsed() < Duration::from_secs(20));
        std::thread::sleep(Duration::from_millis(1));
    }
    // Recovered and written back since: the failure is still reported, once.
    faulty.heal();
    while cache.file_blocks(id).1 > 0 {
        assert!(t.elapsed() < Duration::from_secs(20));
        std::thread::sleep(Duration::from_millis(1));
    }
    let writes = faulty.writes();
    let err = cache
        .take_writeback_error(id)
        .expect("the failure is reported");
    assert_eq!(err.raw_os_error(), Some(libc::EIO));
    assert!(cache.take_writeback_error(id).is_none(), "reported once");
    assert_eq!(faulty.writes(), writes, "no write-back for the report");
    cache.fsync(id, false).unwrap();
    assert!(cache.take_writeback_error(FileId(u64::MAX)).is_none());
}

#[test]
fn the_error_is_reported_by_either_flush_or_fsync_not_both() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_file(dir.path(), "f", &[0u8; 1000]);
    let faulty = Arc::new(FaultyBacking::new(Arc::new(RealBacking)));
    let mut cfg = small_config(32);
    cfg.flusher_threads = 1;
    cfg.flush_interval = Duration::from_millis(2);
    cfg.dirty_expire = Duration::ZERO;
    let cache = MemCache::new(cfg, faulty.clone() as Arc<dyn BackingIo>).unwrap();
    let id = open(&cache, &path, Class::NORMAL);
    faulty.fail_writes_after(0);
    cache.write(id, 10, b"hello").unwrap();
    let t = Instant::now();
    while cache.stats().paths.writeback_errors == 0 {
        assert!(t.elapsed() < Duration::from_secs(20));
        std::thread::sleep(Duration::from_millis(1));
    }
    faulty.heal();
    let err = cache.fsync(id, false).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO));
    assert!(cache.take_writeback_error(id).is_none(), "fsync took it");
}
