//! Regression: write-back moved BACKING's mtime and ctime to the write-back time — an mtime set
//! with `utimensat` after a cached write (`touch -d`) was lost, a write's own mtime showed only
//! once written back (and then the wrong one), and a ctime that moved under a reader made `tar`
//! fail with "file changed as we read it". The tier now keeps the logical mtime, applies it at
//! write-back, and maps the ctime its own write-back causes back to the logical one.
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, SystemTime};
use tiercache_manager::{Class, MemCache};

/// Lets the file system clock move on (coarse timestamps).
fn tick() {
    std::thread::sleep(Duration::from_millis(30));
}

fn mtime(p: &Path) -> SystemTime {
    std::fs::metadata(p).unwrap().modified().unwrap()
}

fn ctime(p: &Path) -> SystemTime {
    let m = std::fs::metadata(p).unwrap();
    SystemTime::UNIX_EPOCH + Duration::new(m.ctime() as u64, m.ctime_nsec() as u32)
}

#[test]
fn explicit_mtime_survives_the_write_back_of_earlier_writes() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_file(dir.path(), "t", b"0123456789");
    let cache = MemCache::with_real_device(small_config(32)).unwrap();
    let id = open(&cache, &path, Class::NORMAL);
    cache.write(id, 0, b"abcd").unwrap(); // cached, dirty
    let want = SystemTime::UNIX_EPOCH + Duration::from_secs(981_173_106);
    let fd = file_handle(&path);
    cache
        .set_times(id, true, &mut || fd.set_modified(want), &mut || {
            tiercache_manager::FileStamp::of_file(&fd)
        })
        .unwrap();
    assert_eq!(mtime(&path), want);
    assert_eq!(
        cache.logical_times(id, ctime(&path)).mtime,
        Some(want),
        "dirty data: the explicit time is the logical one"
    );
    tick();
    cache.flush_all().unwrap();
    assert_eq!(read_file(&path), b"abcd456789");
    assert_eq!(
        mtime(&path),
        want,
        "write-back moved the mtime set explicitly"
    );
    assert_eq!(cache.logical_times(id, ctime(&path)).mtime, None);
}

#[test]
fn a_write_shows_its_own_mtime_before_and_after_write_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_file(dir.path(), "w", b"old");
    let cache = MemCache::with_real_device(small_config(32)).unwrap();
    let id = open(&cache, &path, Class::NORMAL);
    let before_write = mtime(&path);
    tick();
    let t0 = SystemTime::now();
    cache.write(id, 0, b"new!").unwrap();
    let t1 = SystemTime::now();
    assert_eq!(mtime(&path), before_write, "write-back, not write-through");
    let logical = cache.logical_times(id, ctime(&path));
    let m = logical.mtime.expect("cached write has a logical mtime");
    assert!(t0 <= m && m <= t1, "{m:?} not within the write");
    assert!(logical.ctime.unwrap() >= m, "a write moves the ctime too");
    tick();
    cache.fsync(id, false).unwrap();
    assert_eq!(mtime(&path), m, "BACKING got the write-back time");
}

#[test]
fn write_back_does_not_move_the_reported_ctime() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_file(dir.path(), "c", &pattern(0, 4000, 0));
    let cache = MemCache::with_real_device(small_config(32)).unwrap();
    let id = open(&cache, &path, Class::NORMAL);
    cache.write(id, 100, &pattern(100, 3000, 1)).unwrap();
    let seen = cache.logical_times(id, ctime(&path)).ctime.unwrap();
    tick();
    cache.flush_all().unwrap();
    let backing_after = ctime(&path);
    assert!(
        backing_after > seen,
        "the write-back changed BACKING's ctime"
    );
    assert_eq!(cache.logical_times(id, backing_after).ctime, Some(seen));
    // A stat taken before the write-back maps to the same time.
    assert_eq!(cache.logical_times(id, seen).ctime, Some(seen));
    // Closing the file and evicting its blocks keeps the mapping.
    cache.release(id);
    cache.invalidate(id);
    assert_eq!(cache.file_blocks(id), (0, 0));
    assert_eq!(cache.logical_times(id, backing_after).ctime, Some(seen));
    // Someone else's change (chmod) shows as is.
    tick();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let chmod = ctime(&path);
    assert!(chmod > backing_after);
    assert_eq!(cache.logical_times(id, chmod).ctime, Some(chmod));
}

#[test]
fn forget_drops_the_ctime_mapping_with_the_rest_of_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_file(dir.path(), "c", &pattern(0, 4000, 0));
    let cache = MemCache::with_real_device(small_config(32)).unwrap();
    let id = open(&cache, &path, Class::NORMAL);
    cache.write(id, 100, &pattern(100, 3000, 1)).unwrap();
    let seen = cache.logical_times(id, ctime(&path)).ctime.unwrap();
    tick();
    cache.flush_all().unwrap();
    let backing_after = ctime(&path);
    assert_eq!(cache.logical_times(id, backing_after).ctime, Some(seen));
    cache.release(id);
    // The kernel forgot the inode: its number may name a new file, whose times are BACKING's.
    cache.forget(id);
    assert_eq!(cache.file_blocks(id).1, 0, "nothing dirty stays");
    assert_eq!(
        cache.logical_times(id, backing_after),
        tiercache_manager::LogicalTimes::default()
    );
}

#[test]
fn truncate_time_survives_the_write_back_of_earlier_writes() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_file(dir.path(), "x", &pattern(0, 2000, 0));
    let cache = MemCache::with_real_device(small_config(32)).unwrap();
    let id = open(&cache, &path, Class::NORMAL);
    cache.write(id, 0, b"dirty").unwrap();
    tick();
    cache.truncate(id, 100_000).unwrap(); // BACKING's mtime: now; block 0 stays dirty
    let truncated = mtime(&path);
    assert_eq!(cache.file_blocks(id).1, 1);
    assert_eq!(cache.logical_times(id, ctime(&path)).mtime, Some(truncated));
    tick();
    cache.flush_all().unwrap();
    assert_eq!(mtime(&path), truncated);
    assert_eq!(&read_file(&path)[..5], b"dirty");
}
