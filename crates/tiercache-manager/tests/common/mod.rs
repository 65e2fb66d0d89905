#![allow(clippy::unwrap_used)]
#![allow(dead_code)]
//! Helpers shared by the integration tests: backing files in a tempdir, opening them in the
//! cache with their current stamp, and byte patterns.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tiercache_manager::{Class, FileId, FileStamp, MemCache, MemConfig};

/// A small, deterministic configuration: no background flusher, 512-byte blocks.
pub fn small_config(capacity: usize) -> MemConfig {
    MemConfig {
        capacity_blocks: capacity,
        block_size: tiercache_core::BlockSize::new(512).unwrap(),
        readahead_max_blocks: 4,
        flusher_threads: 0,
        ..MemConfig::default()
    }
}

/// Creates `name` in `dir` with `content`; returns its path.
pub fn make_file(dir: &Path, name: &str, content: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, content).unwrap();
    p
}

/// Opens `path` read-write and registers it; returns its id (inode number).
pub fn open(cache: &MemCache, path: &Path, class: Class) -> FileId {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let m = f.metadata().unwrap();
    let id = FileId(m.ino());
    cache
        .open(id, Arc::new(f), class, FileStamp::from_metadata(&m))
        .unwrap();
    id
}

/// Reopens an already registered file (fresh fd and stamp); returns the outcome.
pub fn reopen(
    cache: &MemCache,
    path: &Path,
    id: FileId,
    class: Class,
) -> tiercache_manager::OpenOutcome {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let m = f.metadata().unwrap();
    cache
        .open(id, Arc::new(f), class, FileStamp::from_metadata(&m))
        .unwrap()
}

pub fn read_file(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

pub fn file_handle(path: &Path) -> File {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap()
}

/// A byte that depends on the position and a version (distinct versions mostly differ).
pub fn pat(pos: u64, version: u64) -> u8 {
    let x = pos
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(version.wrapping_mul(0xD1B5_4A32_D192_ED03));
    (x >> 56) as u8
}

pub fn pattern(start: u64, len: usize, version: u64) -> Vec<u8> {
    (0..len as u64).map(|i| pat(start + i, version)).collect()
}

/// Panics with a short description of where `got` and `want` differ.
#[track_caller]
pub fn assert_bytes(got: &[u8], want: &[u8], ctx: &str) {
    if got == want {
        return;
    }
    let first = got.iter().zip(want).position(|(a, b)| a != b);
    let last = got.iter().zip(want).rposition(|(a, b)| a != b);
    panic!(
        "{ctx}: bytes differ: len {} vs expected {}, first difference at {first:?}, last at {last:?}",
        got.len(),
        want.len()
    );
}

/// An in-memory lower tier of `blocks` 512-byte blocks that keeps clean data only.
pub fn test_tier(blocks: usize) -> Arc<tiercache_memtier::TestTier> {
    let cfg = tiercache_memtier::TestTierConfig::new("test", blocks, 512);
    Arc::new(tiercache_memtier::TestTier::new(cfg).unwrap())
}

/// An in-memory lower tier of `blocks` 512-byte blocks that takes dirty data (write-back).
pub fn dirty_tier(blocks: usize) -> Arc<tiercache_memtier::TestTier> {
    let mut cfg = tiercache_memtier::TestTierConfig::new("dirty", blocks, 512);
    cfg.accepts_dirty = true;
    Arc::new(tiercache_memtier::TestTier::new(cfg).unwrap())
}

/// An SSD-tier config for these tests: 512-byte blocks in sets of 16, `max_errors`, and the
/// cleaner `cleaner` (the default idle one when `None`).
pub fn flash_config(
    cleaner: Option<tiercache_flash::CleanerConfig>,
    max_errors: u64,
) -> tiercache_flash::FlashConfig {
    let mut c = tiercache_flash::FlashConfig {
        block_shift: 9,
        set_shift: 4,
        max_errors,
        ..tiercache_flash::FlashConfig::new("flash")
    };
    if let Some(cl) = cleaner {
        c.cleaner = cl;
    }
    c
}

/// Polls `ok` every 10 ms for up to 20 s; panics naming `what` when it never holds.
pub fn wait_until(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// A flash tier in a real cache file at `path` (created when missing, reopened as it is).
pub fn flash_at(path: &Path) -> tiercache_flash::FlashTier {
    tiercache_flash::FlashTier::open_path(
        path,
        1 << 20,
        tiercache_flash::IoChoice::Auto,
        flash_config(None, 16),
    )
    .unwrap()
    .0
}

/// Birth time of `f` in ns (0 when the file system does not report one), as the manager keys
/// files in its tiers.
pub fn birth_ns(f: &File) -> u64 {
    // SAFETY: an all-zero statx is a valid value; statx writes only into it.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: valid fd, empty NUL-terminated path with AT_EMPTY_PATH, `stx` outlives the call.
    let rc = unsafe {
        libc::statx(
            std::os::fd::AsRawFd::as_raw_fd(f),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_BTIME,
            &mut stx,
        )
    };
    if rc != 0 || stx.stx_mask & libc::STATX_BTIME == 0 {
        return 0;
    }
    stx.stx_btime.tv_sec as u64 * 1_000_000_000 + u64::from(stx.stx_btime.tv_nsec)
}
