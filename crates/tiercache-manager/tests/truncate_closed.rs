//! Bug: `truncate(2)` by path failed with EBADF for a closed, clean file that still had cached blocks: the tier had let go of its backing descriptor and ignored the writable one the FUSE layer passes.
#![allow(clippy::unwrap_used)]

mod common;

use common::{make_file, open, pattern, read_file, small_config};
use std::fs::OpenOptions;
use std::sync::Arc;
use tiercache_manager::{Class, FileStamp, MemCache};

#[test]
fn truncate_of_a_closed_cached_file_goes_through_the_given_descriptor() {
    let dir = tempfile::tempdir().unwrap();
    let content = pattern(0, 4000, 1);
    let path = make_file(dir.path(), "f", &content);
    let cache = MemCache::with_real_device(small_config(32)).unwrap();
    let id = open(&cache, &path, Class::NORMAL);
    assert_eq!(cache.read(id, 0, 4000).unwrap(), content);
    cache.release(id); // clean and synced: the backing descriptor goes, the blocks stay
    assert!(cache.file_blocks(id).0 > 0);
    let no_fd = cache.truncate(id, 10).unwrap_err();
    assert_eq!(no_fd.raw_os_error(), Some(libc::EBADF), "documented");
    // What the FUSE layer passes for truncate(2): a temporary write-only descriptor.
    let w = OpenOptions::new().write(true).open(&path).unwrap();
    cache.truncate_with(id, &w, 10).unwrap();
    assert_eq!(read_file(&path), content[..10]);
    assert_eq!(
        cache.file_blocks(id).0,
        1,
        "blocks past the new size dropped"
    );
    // The next open agrees with BACKING (the tier's stamp was refreshed), and so do reads.
    let f = OpenOptions::new().read(true).open(&path).unwrap();
    let stamp = FileStamp::of_file(&f).unwrap();
    let out = cache.open(id, Arc::new(f), Class::NORMAL, stamp).unwrap();
    assert_eq!(out.dropped_blocks, 0);
    assert_eq!(cache.read(id, 0, 4000).unwrap(), content[..10]);
    // Growing again reads zeros past the old end, not stale cached bytes.
    cache.truncate_with(id, &w, 600).unwrap();
    let mut want = content[..10].to_vec();
    want.resize(600, 0);
    assert_eq!(cache.read(id, 0, 4000).unwrap(), want);
    cache.check_invariants().unwrap();
}

#[test]
fn truncate_with_of_an_unknown_file_truncates_backing() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_file(dir.path(), "f", &pattern(0, 3000, 2));
    let cache = MemCache::with_real_device(small_config(32)).unwrap();
    let w = OpenOptions::new().write(true).open(&path).unwrap();
    let id = tiercache_manager::FileId(std::os::unix::fs::MetadataExt::ino(&w.metadata().unwrap()));
    cache.truncate_with(id, &w, 7).unwrap();
    assert_eq!(read_file(&path), pattern(0, 7, 2));
    assert_eq!(cache.file_blocks(id), (0, 0));
}

#[test]
fn truncate_with_keeps_dirty_data_of_an_open_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_file(dir.path(), "f", &pattern(0, 3000, 3));
    let cache = MemCache::with_real_device(small_config(32)).unwrap();
    let id = open(&cache, &path, Class::NORMAL);
    cache.write(id, 0, b"dirty").unwrap();
    let w = OpenOptions::new().write(true).open(&path).unwrap();
    cache.truncate_with(id, &w, 100).unwrap();
    cache.flush_all().unwrap();
    let mut want = pattern(0, 100, 3);
    want[..5].copy_from_slice(b"dirty");
    assert_eq!(read_file(&path), want);
}
