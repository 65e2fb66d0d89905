//! Bug (issue 17 review): recovery placed a cache record's dirty block at `block × block size` without checking the product — a forged (or corrupt) block number whose offset does not fit in 64 bits wrapped around to a small offset, and recovery wrote its bytes over another part of the file.
#![allow(clippy::unwrap_used)]
mod common;
use common::*;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use tiercache_flash::FlashTier;
use tiercache_manager::Class;
use tiercache_tier::StoreExt as _;
use tiercache_tier::{Admit, DataTier, FileKey, FileMeta, TierKey};
use tiercache_tier::{Cleaning, Persistence};

const BS: u64 = 512;

/// Stores, with the tier's own code (so with valid checksums), dirty block `block` of the
/// file at `path` holding `bytes`, with the file's real identity, size and handle.
fn store(tier: &FlashTier, path: &Path, block: u64, bytes: &[u8]) {
    let f = File::open(path).unwrap();
    let m = f.metadata().unwrap();
    let key = FileKey {
        dev: m.dev(),
        ino: m.ino(),
        birth: birth_ns(&f),
    };
    tier.set_file_meta(
        &key,
        &FileMeta {
            size: m.len(),
            mtime_ns: m.mtime() * 1_000_000_000,
            handle: tiercache_manager::handle::file_handle(&f).unwrap(),
        },
    );
    let admit = tier
        .write_dirty(&TierKey::new(key, block), 7, Class::NORMAL, bytes)
        .unwrap();
    assert_eq!(admit, Admit::Stored);
    tier.sync().unwrap();
}

/// Block 2^55 + 1 of 512-byte blocks starts at 2^64 + 512, which wraps to 512: the record is
/// refused whole (nothing of that file written, its blocks dropped and counted), and another
/// file's record is written as usual.
#[test]
fn a_block_whose_offset_overflows_is_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let backing = dir.path().join("backing");
    std::fs::create_dir_all(&backing).unwrap();
    let victim = make_file(&backing, "victim", &pattern(0, 4 * BS as usize, 0));
    let other = make_file(&backing, "other", &pattern(0, 2 * BS as usize, 0));
    let before = read_file(&victim);
    let cache_file = dir.path().join("cache.img");
    let tier = flash_at(&cache_file);
    let far = (1u64 << 55) + 1;
    assert_eq!(far.wrapping_mul(BS), BS, "the offset wraps to block 1's");
    store(&tier, &victim, far, &[0xAA; BS as usize]);
    store(&tier, &other, 1, &pattern(BS, BS as usize, 3));
    drop(tier);
    let again = flash_at(&cache_file);
    let blocks: Vec<u64> = again
        .dirty_blocks(usize::MAX)
        .iter()
        .map(|b| b.key.block.0)
        .collect();
    assert!(
        blocks.contains(&far),
        "the tier kept the block number: {blocks:?}"
    );
    let rep = tiercache_manager::clean_recovered(
        &again,
        &backing,
        &tiercache_manager::UncachedBacking::new(),
    )
    .unwrap();
    assert!(
        read_file(&victim) == before,
        "recovery wrote a block whose offset overflows into the file"
    );
    assert_eq!((rep.files_refused, rep.blocks_refused), (1, 1), "{rep:?}");
    assert_eq!(rep.blocks_written, 1, "{rep:?}");
    assert_bytes(
        &read_file(&other)[BS as usize..],
        &pattern(BS, BS as usize, 3),
        "the other file's own record",
    );
    // Dropped for good.
    drop(again);
    assert!(flash_at(&cache_file).recovered_files().is_empty());
}
