//! Shared helpers for the flash tier's tests.
#![allow(dead_code, clippy::unwrap_used)]

use std::sync::Arc;
use tiercache_core::Class;
use tiercache_flash::{FaultyDevice, FlashConfig, FlashDevice, FlashTier, MemDevice};
use tiercache_tier::StoreExt as _;
use tiercache_tier::{Admit, DataTier, FileKey, Lookup, TierKey};

pub const V: u64 = 7;

pub fn file(ino: u64) -> FileKey {
    FileKey {
        dev: 9,
        ino,
        birth: 100 + ino,
    }
}

pub fn key(ino: u64, block: u64) -> TierKey {
    TierKey::new(file(ino), block)
}

/// Bytes that differ per key and per `seed`, and per sector (so torn mixes are visible).
pub fn data(k: &TierKey, seed: u64, bs: usize) -> Vec<u8> {
    let mut x = k.file.ino * 1_000_003 + k.block.0 * 7919 + seed * 104_729 + 1;
    (0..bs)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// 4 KiB blocks, 256-block sets, on a memory device of `sets` sets (plus metadata).
pub fn config() -> FlashConfig {
    FlashConfig::new("flash0")
}

/// A tiny geometry for model tests: 2 KiB blocks (4 sectors), 4-block sets.
pub fn small_config() -> FlashConfig {
    let mut c = FlashConfig::new("flash-small");
    c.block_shift = 11;
    c.set_shift = 2;
    c
}

pub fn yes() -> bool {
    true
}

pub fn mem(len: u64) -> Arc<MemDevice> {
    Arc::new(MemDevice::new(len))
}

pub fn faulty(len: u64, seed: u64) -> Arc<FaultyDevice> {
    let inner: Arc<dyn FlashDevice> = mem(len);
    Arc::new(FaultyDevice::new(inner, seed))
}

pub fn fill(t: &FlashTier, k: &TierKey, seed: u64) -> Admit {
    let bs = t.info().block_size;
    t.fill(k, V, Class::NORMAL, &data(k, seed, bs), &yes)
        .unwrap()
}

pub fn write(t: &FlashTier, k: &TierKey, seed: u64) -> Admit {
    let bs = t.info().block_size;
    t.write_dirty(k, V, Class::NORMAL, &data(k, seed, bs))
        .unwrap()
}

pub fn read(t: &FlashTier, k: &TierKey) -> (Lookup, Vec<u8>) {
    let mut buf = vec![0u8; t.info().block_size];
    let l = t.read(k, V, &mut buf).unwrap();
    (l, buf)
}

/// Which pages of `path` in `range` are in the page cache.
pub fn resident_pages(path: &std::path::Path, range: std::ops::Range<u64>) -> Vec<bool> {
    let f = std::fs::File::open(path).unwrap();
    tiercache_flash::resident_pages(&f, range).unwrap()
}

/// A cache file of `len` bytes at `path` read and written in `mode`; a machine where the mode
/// does not work fails the test naming what it needs (never a silent skip).
pub fn open_file_device(
    path: &std::path::Path,
    len: u64,
    mode: tiercache_flash::IoMode,
) -> tiercache_flash::FileDevice {
    tiercache_flash::FileDevice::open(path, Some(len), tiercache_flash::IoChoice::Only(mode))
        .unwrap_or_else(|e| {
            panic!(
                "{mode}: {e} (this test needs the cache file on a disk file system with \
                 RWF_DONTCACHE: Linux 6.14 or later, e.g. ext4 or xfs)"
            )
        })
}
