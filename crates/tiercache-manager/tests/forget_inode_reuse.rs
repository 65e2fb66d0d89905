//! Bug: wrong bytes after inode reuse — `forget` of a file that was dirty dropped only its clean blocks; its state survived, write-back later left clean blocks behind, and a new file reusing the inode number with the same size and mtime was served the old bytes.
//!
//! Inode reuse is emulated: a *different* backing file is opened under the forgotten file's id
//! with the stamp BACKING would report for a new file with that inode number, size and mtime.
#![allow(clippy::unwrap_used)]

mod common;

use common::{file_handle, make_file, open, read_file, small_config};
use std::fs::{File, OpenOptions};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tiercache_manager::{
    BackingIo, Class, FaultyBacking, FileId, FileStamp, MemCache, RealBacking,
};

const LEN: usize = 8192;

/// Opens `path` under `id` with the stamp a file reusing `id`'s inode number would show.
fn open_as(cache: &MemCache, id: FileId, path: &Path, mtime: std::time::SystemTime) {
    let f = file_handle(path);
    f.set_modified(mtime).unwrap();
    let stamp = FileStamp {
        size: f.metadata().unwrap().len(),
        mtime,
        // as identical as a stamp can be: only the birth time tells the files apart
        ctime: mtime,
        ino: id.0,
    };
    cache.open(id, Arc::new(f), Class::NORMAL, stamp).unwrap();
}

fn read_only(path: &Path) -> File {
    OpenOptions::new().read(true).open(path).unwrap()
}

#[test]
fn a_new_file_with_the_same_id_size_and_mtime_reads_its_own_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let old = make_file(dir.path(), "old", b"");
    let cache = MemCache::with_real_device(small_config(64)).unwrap();
    let id = open(&cache, &old, Class::NORMAL);
    cache.write(id, 0, &[b'X'; LEN]).unwrap();
    assert!(cache.file_blocks(id).1 > 0, "dirty before the forget");
    cache.release(id);
    cache.forget(id); // the kernel forgot the inode
                      // Whatever the flusher would do later.
    cache.flush_all().unwrap();
    assert_eq!(read_file(&old), vec![b'X'; LEN], "written back at forget");
    assert_eq!(
        cache.file_blocks(id).1,
        0,
        "nothing dirty of the old file stays (clean blocks may, told apart by birth time)"
    );
    assert!(cache.take_writeback_error(id).is_none());
    // BACKING gives the number to a new file with the same size and mtime.
    let mtime = std::fs::metadata(&old).unwrap().modified().unwrap();
    let new = make_file(dir.path(), "new", &[b'Y'; LEN]);
    open_as(&cache, id, &new, mtime);
    assert_eq!(cache.read(id, 0, LEN).unwrap(), vec![b'Y'; LEN]);
    cache.check_invariants().unwrap();
}

#[test]
fn forget_of_a_clean_file_keeps_its_blocks_but_a_different_file_reads_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let old = make_file(dir.path(), "old", &[b'X'; LEN]);
    let cache = MemCache::with_real_device(small_config(64)).unwrap();
    let id = open(&cache, &old, Class::NORMAL);
    assert_eq!(cache.read(id, 0, LEN).unwrap(), vec![b'X'; LEN]);
    cache.release(id);
    let cached = cache.file_blocks(id).0;
    assert!(cached > 0);
    cache.forget(id);
    assert_eq!(
        cache.file_blocks(id),
        (cached, 0),
        "clean blocks survive FORGET"
    );
    let mtime = std::fs::metadata(&old).unwrap().modified().unwrap();
    let new = make_file(dir.path(), "new", &[b'Y'; LEN]);
    open_as(&cache, id, &new, mtime);
    assert_eq!(cache.read(id, 0, LEN).unwrap(), vec![b'Y'; LEN]);
    cache.check_invariants().unwrap();
}

#[test]
fn an_unlinked_file_is_forgotten_without_writing_it_back() {
    let dir = tempfile::tempdir().unwrap();
    let old = make_file(dir.path(), "old", b"");
    let faulty = Arc::new(FaultyBacking::new(Arc::new(RealBacking)));
    let cache = MemCache::new(small_config(64), faulty.clone() as Arc<dyn BackingIo>).unwrap();
    let id = open(&cache, &old, Class::NORMAL);
    cache.write(id, 0, &[b'X'; LEN]).unwrap();
    std::fs::remove_file(&old).unwrap();
    cache.release(id);
    cache.forget(id);
    assert_eq!(
        faulty.writes(),
        0,
        "nobody can read an unlinked inode's data"
    );
    assert_eq!(cache.file_blocks(id), (0, 0));
    assert_eq!(cache.stats().dirty_blocks, 0);
    cache.check_invariants().unwrap();
}

#[test]
fn a_forget_while_open_takes_effect_at_the_last_release() {
    let dir = tempfile::tempdir().unwrap();
    let old = make_file(dir.path(), "old", &[b'0'; LEN]);
    let cache = MemCache::with_real_device(small_config(64)).unwrap();
    let id = open(&cache, &old, Class::NORMAL);
    cache.read(id, 0, LEN).unwrap();
    cache.write(id, 0, b"XX").unwrap();
    // FORGET overtook RELEASE: nothing is dropped yet, the dirty block goes to the flusher.
    cache.forget(id);
    assert_eq!(cache.file_blocks(id).1, 1);
    cache.release(id);
    cache.flush_all().unwrap();
    assert_eq!(&read_file(&old)[..3], b"XX0");
    assert_eq!(cache.file_blocks(id).1, 0);
    let mtime = std::fs::metadata(&old).unwrap().modified().unwrap();
    let new = make_file(dir.path(), "new", &[b'Y'; LEN]);
    open_as(&cache, id, &new, mtime);
    assert_eq!(cache.read(id, 0, LEN).unwrap(), vec![b'Y'; LEN]);
    cache.check_invariants().unwrap();
}

/// A forgotten file whose write-back failed keeps only its dirty blocks.
fn forgotten_with_failed_write_back(
    dir: &Path,
) -> (MemCache, Arc<FaultyBacking>, FileId, std::path::PathBuf) {
    let old = make_file(dir, "old", &[b'0'; 4 * LEN]);
    let faulty = Arc::new(FaultyBacking::new(Arc::new(RealBacking)));
    let cache = MemCache::new(small_config(128), faulty.clone() as Arc<dyn BackingIo>).unwrap();
    let id = open(&cache, &old, Class::NORMAL);
    cache.read(id, 0, 4 * LEN).unwrap();
    cache.write(id, 0, &[b'X'; LEN]).unwrap();
    let dirty = cache.file_blocks(id).1;
    cache.release(id);
    faulty.fail_writes_after(0);
    cache.forget(id);
    assert_eq!(
        cache.file_blocks(id),
        (dirty, dirty),
        "dirty data kept, clean blocks dropped"
    );
    (cache, faulty, id, old)
}

#[test]
fn a_failed_write_back_at_forget_keeps_the_data_for_the_same_file() {
    let dir = tempfile::tempdir().unwrap();
    let (cache, faulty, id, old) = forgotten_with_failed_write_back(dir.path());
    faulty.heal();
    // The same file, looked up again: identical stamp, the state and its data are reused.
    let f = file_handle(&old);
    let stamp = FileStamp::of_file(&f).unwrap();
    cache.open(id, Arc::new(f), Class::NORMAL, stamp).unwrap();
    assert_eq!(cache.read(id, 0, LEN).unwrap(), vec![b'X'; LEN]);
    // Nothing was lost, so nothing to report: the retry puts the data on BACKING.
    cache.fsync(id, false).unwrap();
    assert_eq!(&read_file(&old)[..LEN], &[b'X'; LEN][..]);
    cache.check_invariants().unwrap();
}

#[test]
fn a_failed_write_back_at_forget_does_not_leak_into_a_different_file() {
    let dir = tempfile::tempdir().unwrap();
    let (cache, faulty, id, old) = forgotten_with_failed_write_back(dir.path());
    faulty.heal();
    // A different stamp: another file. The old data still goes to the old inode...
    let new = make_file(dir.path(), "new", &[b'Y'; LEN]);
    let f = file_handle(&new);
    let stamp = FileStamp::of_file(&f).unwrap();
    let out = cache.open(id, Arc::new(f), Class::NORMAL, stamp).unwrap();
    assert_eq!(out.reused_blocks, 0);
    assert_eq!(&read_file(&old)[..LEN], &[b'X'; LEN][..]);
    // ...and the new file sees its own bytes, size and no error of the old one.
    assert_eq!(cache.read(id, 0, 4 * LEN).unwrap(), vec![b'Y'; LEN]);
    assert_eq!(cache.logical_size(id), None);
    assert!(cache.take_writeback_error(id).is_none());
    cache.fsync(id, false).unwrap();
    cache.check_invariants().unwrap();
}

#[test]
fn a_forgotten_file_whose_write_back_keeps_failing_is_replaced_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let (cache, _faulty, id, _old) = forgotten_with_failed_write_back(dir.path());
    // Still failing: the old data cannot be kept under an id that names another file.
    let new = make_file(dir.path(), "new", &[b'Y'; LEN]);
    let f = read_only(&new);
    let stamp = FileStamp::of_file(&f).unwrap();
    cache.open(id, Arc::new(f), Class::NORMAL, stamp).unwrap();
    assert_eq!(cache.read(id, 0, 4 * LEN).unwrap(), vec![b'Y'; LEN]);
    assert_eq!(cache.stats().dirty_blocks, 0);
    assert!(cache.take_writeback_error(id).is_none());
    cache.check_invariants().unwrap();
}

#[test]
fn a_forgotten_file_is_written_back_by_the_flusher_and_not_served_to_another_file() {
    let dir = tempfile::tempdir().unwrap();
    let old = make_file(dir.path(), "old", &[b'0'; LEN]);
    let faulty = Arc::new(FaultyBacking::new(Arc::new(RealBacking)));
    let mut cfg = small_config(64);
    cfg.flusher_threads = 1;
    cfg.flush_interval = Duration::from_millis(5);
    cfg.dirty_expire = Duration::ZERO;
    let cache = MemCache::new(cfg, faulty.clone() as Arc<dyn BackingIo>).unwrap();
    let id = open(&cache, &old, Class::NORMAL);
    faulty.fail_writes_after(0);
    cache.write(id, 0, b"XX").unwrap();
    cache.release(id);
    cache.forget(id);
    faulty.heal();
    let t = Instant::now();
    while cache.file_blocks(id).1 != 0 {
        assert!(t.elapsed() < Duration::from_secs(20), "never written back");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(&read_file(&old)[..3], b"XX0");
    // A different file with the old stamp is read from BACKING.
    let mtime = std::fs::metadata(&old).unwrap().modified().unwrap();
    let new = make_file(dir.path(), "new", &[b'Y'; LEN]);
    open_as(&cache, id, &new, mtime);
    assert_eq!(cache.read(id, 0, LEN).unwrap(), vec![b'Y'; LEN]);
}

#[test]
fn a_changed_file_does_not_inherit_the_old_versions_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_file(dir.path(), "f", &[b'0'; LEN]);
    let faulty = Arc::new(FaultyBacking::new(Arc::new(RealBacking)));
    let mut cfg = small_config(64);
    cfg.flusher_threads = 1;
    cfg.flush_interval = Duration::from_millis(2);
    cfg.dirty_expire = Duration::ZERO;
    let cache = MemCache::new(cfg, faulty.clone() as Arc<dyn BackingIo>).unwrap();
    let id = open(&cache, &path, Class::NORMAL);
    faulty.fail_writes_after(0);
    cache.write(id, 0, b"XX").unwrap();
    let t = Instant::now();
    while cache.stats().paths.writeback_errors == 0 {
        assert!(t.elapsed() < Duration::from_secs(20));
        std::thread::sleep(Duration::from_millis(1));
    }
    faulty.heal();
    while cache.file_blocks(id).1 > 0 {
        assert!(t.elapsed() < Duration::from_secs(20));
        std::thread::sleep(Duration::from_millis(1));
    }
    // Someone replaces the contents behind the cache's back; the next open sees a new version.
    std::fs::write(&path, [b'Z'; 100]).unwrap();
    let f = file_handle(&path);
    let stamp = FileStamp::of_file(&f).unwrap();
    cache.open(id, Arc::new(f), Class::NORMAL, stamp).unwrap();
    assert!(
        cache.take_writeback_error(id).is_none(),
        "the old version's error is not the new one's"
    );
    cache.fsync(id, false).unwrap();
    assert_eq!(cache.read(id, 0, LEN).unwrap(), vec![b'Z'; 100]);
}
