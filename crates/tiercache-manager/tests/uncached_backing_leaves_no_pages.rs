//! Bug: BACKING was read and written with plain buffered I/O, so every block the memory tier
//! moved also stayed in the kernel page cache as BACKING's pages. `UncachedBacking`, the
//! default BACKING device now, leaves none: reads (dropped behind with `posix_fadvise`) and
//! both ways of writing (`RWF_DONTCACHE`, and the fallback's plain writes, forced here on a
//! file system that has the flag; each then dropped a little behind) move the right bytes and
//! leave no pages, sequential and random, into new files and over allocated blocks (whose
//! `RWF_DONTCACHE` pages ext4 keeps); written ranges never synced stay within the lag and go
//! at `settle`; a file system that refuses the flag (tmpfs) falls back by itself without
//! changing the others' way; the HDD model and the fault injector work over it. Residency is
//! measured with `fincore`.
//!
//! The files live under the cargo target dir, which must be on a disk file system (on tmpfs
//! the page cache is the storage): the tests fail saying so otherwise.
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use tiercache_manager::{
    BackingIo, Class, DeviceModel, EmulatedBacking, FaultyBacking, FileId, IoMode, MemCache,
    MemConfig, RealBacking, UncachedBacking,
};

const MIB: u64 = 1 << 20;

/// A directory on a disk file system.
fn disk_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    assert!(
        !on_tmpfs(dir.path()),
        "{} is on tmpfs: these tests need a disk file system (set CARGO_TARGET_DIR)",
        dir.path().display()
    );
    dir
}

fn on_tmpfs(p: &Path) -> bool {
    let f = std::fs::File::open(p).unwrap();
    // SAFETY: all-zero is a valid `statfs` (plain integers).
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid out pointer and `f` an open descriptor.
    assert_eq!(unsafe { libc::fstatfs(f.as_raw_fd(), &mut st) }, 0);
    #[allow(clippy::useless_conversion)]
    let magic = i64::from(st.f_type);
    magic == 0x0102_1994
}

/// Bytes of `path` in the page cache, by `fincore` (util-linux).
fn resident(path: &Path) -> u64 {
    let out = Command::new("fincore")
        .args(["--bytes", "--noheadings", "--output", "RES"])
        .arg(path)
        .output()
        .unwrap_or_else(|e| panic!("fincore (util-linux) is needed: {e}"));
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// `size` bytes of `pattern(_, _, 1)` in `dir/name`, synced, none of it in the page cache.
fn cold_file(dir: &Path, name: &str, size: u64) -> PathBuf {
    let p = dir.join(name);
    let mut f = std::fs::File::create(&p).unwrap();
    for i in 0..size / MIB {
        f.write_all(&pattern(i * MIB, MIB as usize, 1)).unwrap();
    }
    f.sync_all().unwrap();
    // SAFETY: posix_fadvise passes no memory; `f` keeps the descriptor open.
    let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(rc, 0);
    assert!(
        resident(&p) <= MIB,
        "could not drop {}'s pages",
        p.display()
    );
    p
}

/// A 1 MiB tier of 4 KiB blocks (a 64 MiB file is 64 times larger), written back by
/// `flush_all` only.
fn config() -> MemConfig {
    MemConfig {
        capacity_blocks: 256,
        block_size: tiercache_core::BlockSize::new(4096).unwrap(),
        readahead_max_blocks: 32,
        flusher_threads: 0,
        ..MemConfig::default()
    }
}

/// Reads all of `path` in 128 KiB requests, then 2,000 random 4 KiB ones, through a tier over
/// `device`; checks the bytes and that the file keeps at most `max` bytes cached.
fn reads_leave_at_most(device: Arc<dyn BackingIo>, path: &Path, size: u64, max: u64) {
    let cache = MemCache::new(config(), device).unwrap();
    let id = open(&cache, path, Class::NORMAL);
    let mut buf = vec![0u8; 128 << 10];
    for off in (0..size).step_by(buf.len()) {
        assert_eq!(cache.read_into(id, off, &mut buf).unwrap(), buf.len());
        assert_bytes(&buf, &pattern(off, buf.len(), 1), "sequential read");
    }
    let seq = resident(path);
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut small = vec![0u8; 4096];
    for _ in 0..2000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let off = (x % (size / 4096)) * 4096;
        cache.read_into(id, off, &mut small).unwrap();
        assert_bytes(&small, &pattern(off, 4096, 1), "random read");
    }
    let random = resident(path);
    assert!(
        seq <= max && random <= max,
        "{path:?}: {} KiB cached after the sequential reads, {} KiB after the random ones",
        seq >> 10,
        random >> 10
    );
}

/// Writes `size` bytes of `pattern(_, _, 2)` at the start of `path` (a new file, or an
/// existing one: an overwrite) through a tier over `device`, writes them back and syncs;
/// checks the bytes on BACKING and that at most `max` stay cached.
fn writes_leave_at_most(device: Arc<dyn BackingIo>, path: &Path, size: u64, max: u64) {
    let cache = MemCache::new(config(), device).unwrap();
    let id = open(&cache, path, Class::NORMAL);
    for off in (0..size).step_by(MIB as usize) {
        let data = pattern(off, MIB as usize, 2);
        assert_eq!(cache.write(id, off, &data).unwrap(), data.len());
    }
    cache.fsync(id, false).unwrap();
    let left = resident(path);
    assert!(
        left <= max,
        "{path:?}: {} KiB cached after fsync",
        left >> 10
    );
    drop(cache);
    let on_backing = read_file(path);
    assert_bytes(
        &on_backing[..size as usize],
        &pattern(0, size as usize, 2),
        "BACKING after fsync",
    );
}

#[test]
fn reads_and_dontcache_writes_move_the_right_bytes_and_leave_no_pages() {
    let dir = disk_dir();
    let path = cold_file(dir.path(), "r", 64 * MIB);
    let device = || Arc::new(UncachedBacking::forced(IoMode::Dontcache)) as Arc<dyn BackingIo>;
    reads_leave_at_most(device(), &path, 64 * MIB, MIB);
    let new = make_file(dir.path(), "w", b"");
    writes_leave_at_most(device(), &new, 32 * MIB, MIB);
    // An overwrite of allocated blocks: on ext4 its writeback ends in interrupt context, where
    // the kernel keeps `RWF_DONTCACHE` pages; they are dropped a little behind the writes.
    writes_leave_at_most(device(), &path, 32 * MIB, MIB);
}

#[test]
fn reads_and_the_fallback_writes_move_the_right_bytes_and_leave_no_pages() {
    let dir = disk_dir();
    let path = cold_file(dir.path(), "r", 64 * MIB);
    let device = || Arc::new(UncachedBacking::forced(IoMode::Fadvise)) as Arc<dyn BackingIo>;
    // What a request leaves: the 2 MiB folio windows around it, and the kernel's read-ahead.
    let max = 2 * tiercache_manager::FOLIO_WINDOW + 8 * MIB;
    reads_leave_at_most(device(), &path, 64 * MIB, max);
    let new = make_file(dir.path(), "w", b"");
    writes_leave_at_most(device(), &new, 32 * MIB, max);
    writes_leave_at_most(device(), &path, 32 * MIB, max);
}

#[test]
fn writes_never_synced_leave_at_most_the_lag_and_nothing_once_settled() {
    // The flusher's background write-back: no fsync, the file stays open.
    let dir = disk_dir();
    let path = cold_file(dir.path(), "o", 64 * MIB);
    let device = UncachedBacking::new();
    assert_eq!(device.probe(dir.path()), IoMode::Dontcache);
    let fd = file_handle(&path);
    for off in (0..64 * MIB).step_by(MIB as usize) {
        device
            .write_at(FileId(1), &fd, &pattern(off, MIB as usize, 7), off)
            .unwrap();
    }
    let lagging = resident(&path);
    // 8 MiB behind the writes, and the large folios around the last drop.
    assert!(lagging <= 12 * MIB, "{} KiB cached", lagging >> 10);
    device.settle();
    assert!(
        resident(&path) <= MIB,
        "{} KiB cached",
        resident(&path) >> 10
    );
    assert_bytes(
        &read_file(&path),
        &pattern(0, (64 * MIB) as usize, 7),
        "after the overwrite",
    );
}

#[test]
fn plain_buffered_io_keeps_the_pages_it_touches() {
    // The contrast (`--backing-cache keep`): the same reads leave the file cached.
    let dir = disk_dir();
    let path = cold_file(dir.path(), "r", 16 * MIB);
    assert_eq!(RealBacking.io_mode(), IoMode::Buffered);
    let cache = MemCache::new(config(), Arc::new(RealBacking)).unwrap();
    let id = open(&cache, &path, Class::NORMAL);
    let mut buf = vec![0u8; 128 << 10];
    for off in (0..16 * MIB).step_by(buf.len()) {
        cache.read_into(id, off, &mut buf).unwrap();
    }
    assert!(resident(&path) >= 15 * MIB, "{}", resident(&path));
}

#[test]
fn a_file_system_refusing_the_flag_falls_back_alone() {
    let dir = disk_dir();
    let shm = Path::new("/dev/shm");
    assert!(
        shm.is_dir() && on_tmpfs(shm),
        "/dev/shm must be a tmpfs (a file system refusing RWF_DONTCACHE) for this test"
    );
    let mem_dir = tempfile::tempdir_in(shm).unwrap();
    let device = UncachedBacking::new();
    assert_eq!(device.io_mode(), IoMode::Unprobed);
    assert_eq!(device.probe(dir.path()), IoMode::Dontcache);
    assert_eq!(device.io_mode(), IoMode::Dontcache);

    // tmpfs refuses the flag at the first write: redone plainly, same bytes.
    let mem_file = make_file(mem_dir.path(), "m", &pattern(0, 1 << 20, 1));
    let fd = file_handle(&mem_file);
    let mut buf = vec![0u8; 1 << 20];
    assert_eq!(
        device.read_at(FileId(1), &fd, &mut buf, 0).unwrap(),
        buf.len()
    );
    assert_bytes(&buf, &pattern(0, 1 << 20, 1), "tmpfs read");
    device
        .write_at(FileId(1), &fd, &pattern(0, 4096, 3), 4096)
        .unwrap();
    assert_bytes(
        &read_file(&mem_file)[4096..8192],
        &pattern(0, 4096, 3),
        "tmpfs write",
    );

    // BACKING's own file system keeps the flag: nothing cached after a read there.
    let disk_file = cold_file(dir.path(), "d", 8 * MIB);
    let fd = file_handle(&disk_file);
    let mut buf = vec![0u8; 8 << 20];
    assert_eq!(
        device.read_at(FileId(2), &fd, &mut buf, 0).unwrap(),
        buf.len()
    );
    assert_bytes(&buf, &pattern(0, 8 << 20, 1), "disk read");
    assert!(resident(&disk_file) <= 64 << 10, "{}", resident(&disk_file));
    // ... and writes with the flag there: nothing cached once synced.
    device
        .write_at(FileId(2), &fd, &pattern(0, 4 << 20, 5), 0)
        .unwrap();
    device.sync(FileId(2), &fd, true).unwrap();
    assert!(resident(&disk_file) <= 64 << 10, "{}", resident(&disk_file));
    assert_bytes(
        &read_file(&disk_file)[..4 << 20],
        &pattern(0, 4 << 20, 5),
        "disk write",
    );
    assert_eq!(device.io_mode(), IoMode::Dontcache);

    let probed = UncachedBacking::new();
    assert_eq!(probed.probe(mem_dir.path()), IoMode::Memory);
}

#[test]
fn the_hdd_model_and_the_fault_injector_work_over_uncached_io() {
    let dir = disk_dir();
    let path = cold_file(dir.path(), "r", 4 * MIB);
    let uncached = UncachedBacking::new();
    uncached.probe(dir.path());
    let model =
        Arc::new(EmulatedBacking::new(Arc::new(uncached), DeviceModel::hdd()).without_sleep());
    let faulty = Arc::new(FaultyBacking::new(model.clone()));
    let cache = MemCache::new(config(), faulty.clone()).unwrap();
    assert_eq!(cache.stats().backing.io_mode, IoMode::Dontcache);
    let id = open(&cache, &path, Class::NORMAL);
    let mut buf = vec![0u8; 1 << 20];
    assert_eq!(cache.read_into(id, MIB, &mut buf).unwrap(), buf.len());
    assert_bytes(&buf, &pattern(MIB, 1 << 20, 1), "read through the model");
    assert!(model.stats().bytes >= MIB, "{:?}", model.stats());
    assert!(resident(&path) <= 64 << 10);

    // A failed write-back is reported by fsync, and succeeds once the device heals.
    faulty.fail_writes_after(0);
    cache.write(id, 0, &pattern(0, 8192, 4)).unwrap();
    assert_eq!(
        cache.fsync(id, false).unwrap_err().raw_os_error(),
        Some(libc::EIO)
    );
    faulty.heal();
    cache.fsync(id, false).unwrap();
    drop(cache);
    assert_bytes(
        &read_file(&path)[..8192],
        &pattern(0, 8192, 4),
        "after heal",
    );
}
