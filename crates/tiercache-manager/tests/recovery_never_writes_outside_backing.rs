//! Bug (issue 17, item 2): recovery wrote a cache record's dirty blocks into whatever inode the record's file handle opened — a record forged with a valid CRC could make root write into any file of BACKING's file system, also outside the BACKING directory.
#![allow(clippy::unwrap_used)]
mod common;
use common::*;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;
use tiercache_core::placement::Placement;
use tiercache_flash::FlashTier;
use tiercache_manager::{Class, LowerTier, MemCache, RealBacking};
use tiercache_tier::Persistence;
use tiercache_tier::StoreExt as _;
use tiercache_tier::{Admit, DataTier, FileKey, FileMeta, TierKey};

const BS: u64 = 512;

/// Stores dirty block 0 of `key` holding `bytes`, and `meta` for it, with the tier's own code.
fn store(tier: &FlashTier, key: FileKey, meta: &FileMeta, bytes: &[u8]) {
    tier.set_file_meta(&key, meta);
    let admit = tier
        .write_dirty(&TierKey::new(key, 0), 7, Class::NORMAL, bytes)
        .unwrap();
    assert_eq!(admit, Admit::Stored);
    tier.sync().unwrap();
}

/// Writes into `tier`, with the tier's own code (so with a valid CRC), the record an attacker
/// who can write the cache file would: dirty block 0 of `victim` holding `bytes`, with the
/// victim's real identity and file handle.
fn forge_record(tier: &FlashTier, victim: &Path, bytes: &[u8]) {
    let f = File::open(victim).unwrap();
    let m = f.metadata().unwrap();
    let key = FileKey {
        dev: m.dev(),
        ino: m.ino(),
        birth: birth_ns(&f),
    };
    let meta = FileMeta {
        size: m.len(),
        mtime_ns: m.mtime() * 1_000_000_000,
        handle: tiercache_manager::handle::file_handle(&f).unwrap(),
    };
    store(tier, key, &meta, bytes);
}

/// A file outside BACKING on the same file system, named by a forged dirty record next to a
/// legitimate one: recovery writes the legitimate file and leaves the other byte for byte
/// as it was; the forged record is counted as refused.
#[test]
fn a_forged_record_naming_a_file_outside_backing_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let backing = dir.path().join("backing");
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(backing.join("sub")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    let secret = make_file(&outside, "secret", &pattern(0, 4 * BS as usize, 9));
    let secret_before = read_file(&secret);
    assert_eq!(
        std::fs::metadata(&secret).unwrap().dev(),
        std::fs::metadata(&backing).unwrap().dev(),
        "the victim must be on BACKING's file system"
    );
    let legit = make_file(
        &backing.join("sub"),
        "legit",
        &pattern(0, 4 * BS as usize, 0),
    );
    let cache_file = dir.path().join("cache.img");
    // A mount's write-back: block 1 of the legitimate file, fsync'ed into the SSD tier.
    let tier = Arc::new(flash_at(&cache_file));
    let lower = vec![LowerTier::new(tier.clone(), Placement::Inclusive)];
    let cache = MemCache::with_tiers(small_config(64), Arc::new(RealBacking), lower).unwrap();
    let id = open(&cache, &legit, Class::NORMAL);
    cache.write(id, BS, &pattern(BS, BS as usize, 1)).unwrap();
    cache.fsync(id, true).unwrap();
    forge_record(&tier, &secret, &[0xAA; BS as usize]);
    // kill -9: the daemon goes without another word; the cache file stays as written. (The
    // forgotten daemon still holds the file's lock: the next mount is played on a copy of it
    // as it is now.)
    std::mem::forget(cache);
    let crashed = dir.path().join("crashed.img");
    std::fs::copy(&cache_file, &crashed).unwrap();
    let cache_file = crashed;
    let again = flash_at(&cache_file);
    let recovered = again.recovered_files();
    assert_eq!(recovered.len(), 2, "{recovered:?}");
    let rep = tiercache_manager::clean_recovered(
        &again,
        &backing,
        &tiercache_manager::UncachedBacking::new(),
    )
    .unwrap();
    assert!(
        read_file(&secret) == secret_before,
        "recovery wrote into a file outside BACKING"
    );
    assert_eq!((rep.files_refused, rep.blocks_refused), (1, 1), "{rep:?}");
    assert_bytes(
        &read_file(&legit)[BS as usize..2 * BS as usize],
        &pattern(BS, BS as usize, 1),
        "the legitimate file's fsync'ed block after recovery",
    );
    assert_eq!(rep.blocks_written, 1, "{rep:?}");
    // Dropped for good: a later mount finds nothing left to recover.
    drop(again);
    assert!(flash_at(&cache_file).recovered_files().is_empty());
}

/// A cache whose only dirty file lies outside BACKING (on its file system) is refused as a
/// whole, as for a cache used with another BACKING: nothing is written and nothing dropped.
#[test]
fn a_cache_whose_files_all_lie_outside_backing_is_refused_whole() {
    let dir = tempfile::tempdir().unwrap();
    let backing = dir.path().join("backing");
    std::fs::create_dir_all(&backing).unwrap();
    let secret = make_file(dir.path(), "secret", &pattern(0, 2 * BS as usize, 3));
    let before = read_file(&secret);
    let cache_file = dir.path().join("cache.img");
    forge_record(&flash_at(&cache_file), &secret, &[0x55; BS as usize]);
    let again = flash_at(&cache_file);
    let e = tiercache_manager::clean_recovered(
        &again,
        &backing,
        &tiercache_manager::UncachedBacking::new(),
    )
    .unwrap_err();
    assert!(
        matches!(
            e,
            tiercache_manager::RecoverError::File {
                source: tiercache_manager::RecoverFileError::NoneBeneath { .. },
                ..
            }
        ),
        "{e}"
    );
    let e = e.to_string();
    assert!(e.contains("none of the files"), "{e}");
    assert!(
        read_file(&secret) == before,
        "recovery wrote into a file outside BACKING"
    );
    assert_eq!(again.recovered_files().len(), 1, "the record was dropped");
}

/// A record whose handle opens another kind of file than a regular one (here a directory in
/// BACKING) is refused, and so is one naming another inode than its handle opens.
#[test]
fn records_naming_a_directory_or_another_inode_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let backing = dir.path().join("backing");
    std::fs::create_dir_all(backing.join("d")).unwrap();
    let a = make_file(&backing, "a", &pattern(0, 2 * BS as usize, 0));
    let b = make_file(&backing, "b", &pattern(0, 2 * BS as usize, 0));
    let c = make_file(&backing, "c", &pattern(0, 2 * BS as usize, 0));
    let (a_before, b_before) = (read_file(&a), read_file(&b));
    let cache_file = dir.path().join("cache.img");
    let tier = flash_at(&cache_file);
    let key_of = |f: &File| {
        let m = f.metadata().unwrap();
        FileKey {
            dev: m.dev(),
            ino: m.ino(),
            birth: birth_ns(f),
        }
    };
    let meta_with = |f: &File| FileMeta {
        size: 2 * BS,
        mtime_ns: 0,
        handle: tiercache_manager::handle::file_handle(f).unwrap(),
    };
    // A directory's handle under the directory's key.
    let d = File::open(backing.join("d")).unwrap();
    store(&tier, key_of(&d), &meta_with(&d), &[1; BS as usize]);
    // `a`'s key with `b`'s handle.
    let (fa, fb) = (File::open(&a).unwrap(), File::open(&b).unwrap());
    store(&tier, key_of(&fa), &meta_with(&fb), &[2; BS as usize]);
    // And one legitimate record, so that the cache as a whole belongs to this BACKING.
    forge_record(&tier, &c, &pattern(0, BS as usize, 5));
    drop(tier);
    let again = flash_at(&cache_file);
    let rep = tiercache_manager::clean_recovered(
        &again,
        &backing,
        &tiercache_manager::UncachedBacking::new(),
    )
    .unwrap();
    assert_eq!((rep.files_refused, rep.blocks_written), (2, 1), "{rep:?}");
    assert!(
        read_file(&a) == a_before,
        "a was written through a forged record"
    );
    assert!(
        read_file(&b) == b_before,
        "b was written through a's record"
    );
    assert_bytes(
        &read_file(&c)[..BS as usize],
        &pattern(0, BS as usize, 5),
        "c's own record",
    );
}
