//! Bug: a read-only open replaced the file's writable backing descriptor while dirty blocks were pending, so their write-back failed with EBADF (and the FUSE adapter reopened BACKING read-write for every read-only open to hide it).
#![allow(clippy::unwrap_used)]

mod common;

use common::{make_file, open, pattern, read_file, small_config};
use std::fs::{File, OpenOptions};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use tiercache_manager::{Class, FileId, FileStamp, MemCache};

fn open_ro(cache: &MemCache, path: &Path, id: FileId) {
    let f = OpenOptions::new().read(true).open(path).unwrap();
    let stamp = FileStamp::of_file(&f).unwrap();
    cache.open(id, Arc::new(f), Class::NORMAL, stamp).unwrap();
}

#[test]
fn a_read_only_open_keeps_the_writable_descriptor_of_pending_write_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_file(dir.path(), "f", &pattern(0, 3000, 0));
    let cache = MemCache::with_real_device(small_config(32)).unwrap();
    let id = open(&cache, &path, Class::NORMAL); // read-write
    cache.write(id, 100, b"dirty data").unwrap();
    open_ro(&cache, &path, id);
    // The read-write handle closes (the read-only one stays open), then write-back.
    cache.flush_all().unwrap();
    let mut want = pattern(0, 3000, 0);
    want[100..110].copy_from_slice(b"dirty data");
    assert_eq!(read_file(&path), want);
    // Later writes, with only the read-only open left, are written back too.
    cache.write(id, 0, b"again").unwrap();
    cache.fsync(id, true).unwrap();
    want[..5].copy_from_slice(b"again");
    assert_eq!(read_file(&path), want);
}

#[test]
fn write_back_with_only_a_read_only_descriptor_reopens_it_read_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_file(dir.path(), "f", &pattern(0, 2000, 0));
    let cache = MemCache::with_real_device(small_config(32)).unwrap();
    let ro = OpenOptions::new().read(true).open(&path).unwrap();
    let id = FileId(std::os::unix::fs::MetadataExt::ino(&ro.metadata().unwrap()));
    let stamp = FileStamp::of_file(&ro).unwrap();
    cache.open(id, Arc::new(ro), Class::NORMAL, stamp).unwrap();
    cache.write(id, 10, b"cached").unwrap();
    cache.flush_all().unwrap();
    assert_eq!(&read_file(&path)[10..16], b"cached");
    assert_eq!(cache.file_blocks(id).1, 0);
}

fn chattr(flag: &str, path: &Path) -> bool {
    Command::new("chattr")
        .arg(flag)
        .arg(path)
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn write_back_that_cannot_get_a_writable_descriptor_fails_and_keeps_the_data() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_file(dir.path(), "f", &pattern(0, 2000, 0));
    let cache = MemCache::with_real_device(small_config(32)).unwrap();
    let ro = File::open(&path).unwrap();
    let id = FileId(std::os::unix::fs::MetadataExt::ino(&ro.metadata().unwrap()));
    let stamp = FileStamp::of_file(&ro).unwrap();
    cache.open(id, Arc::new(ro), Class::NORMAL, stamp).unwrap();
    cache.write(id, 10, b"cached").unwrap();
    // Immutable: not even root may open it for writing.
    assert!(
        chattr("+i", &path),
        "chattr +i {} failed: needs root, chattr (e2fsprogs: scripts/setup-deps.sh) and a \
         filesystem with the immutable flag (ext4, xfs, btrfs) under TMPDIR",
        path.display()
    );
    let err = cache.flush_all().unwrap_err();
    let dirty = cache.file_blocks(id).1;
    assert!(chattr("-i", &path));
    assert_eq!(err.raw_os_error(), Some(libc::EPERM), "{err}");
    assert_eq!(dirty, 1, "never marked clean");
    cache.flush_all().unwrap();
    assert_eq!(&read_file(&path)[10..16], b"cached");
}
