//! Bugs found in review of the SSD tier wiring, each a way to lose fsync-acknowledged bytes or serve stale ones: cleaning let the tier drop its copy before BACKING had synced the bytes; a shrinking truncate then kill -9 grew the file back; a detached tier kept an old copy that recovery wrote over newer bytes; an append patched below memory lost its size after kill -9; a failed patch below lost the acknowledged block.
#![allow(clippy::unwrap_used)]
mod common;
use common::*;
use std::collections::HashSet;
use std::fs::File;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tiercache_core::placement::Placement;
use tiercache_flash::{
    CleanerConfig, CleanerMode, FaultyDevice, FlashConfig, FlashDevice, FlashTier, MemDevice,
};
use tiercache_manager::{BackingIo, Class, FileId, LowerTier, MemCache, RealBacking};
use tiercache_tier::{Cleaning, Persistence};
use tiercache_tier::{DataTier, TierKey};

const BS: u64 = 512;

fn cfg(cleaner: Option<CleanerConfig>, max_errors: u64) -> FlashConfig {
    flash_config(cleaner, max_errors)
}

/// RealBacking that remembers which files have writes not yet synced (what a power cut loses).
#[derive(Debug, Default)]
struct SyncTrack {
    unsynced: Mutex<HashSet<u64>>,
}

impl BackingIo for SyncTrack {
    fn read_at(&self, file: FileId, fd: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        RealBacking.read_at(file, fd, buf, offset)
    }
    fn write_at(&self, file: FileId, fd: &File, buf: &[u8], offset: u64) -> io::Result<()> {
        RealBacking.write_at(file, fd, buf, offset)?;
        self.unsynced.lock().unwrap().insert(file.0);
        Ok(())
    }
    fn sync(&self, file: FileId, fd: &File, datasync: bool) -> io::Result<()> {
        RealBacking.sync(file, fd, datasync)?;
        self.unsynced.lock().unwrap().remove(&file.0);
        Ok(())
    }
    fn set_len(&self, file: FileId, fd: &File, len: u64) -> io::Result<()> {
        RealBacking.set_len(file, fd, len)?;
        self.unsynced.lock().unwrap().insert(file.0);
        Ok(())
    }
}

/// Idle cleaning writes an fsync-acknowledged block to BACKING and makes the tier's clean
/// state durable (tier sync) while BACKING's write is still unsynced.
#[test]
fn cleaning_syncs_backing_before_the_tier_lets_its_copy_go() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_file(dir.path(), "f", &pattern(0, 32 * BS as usize, 0));
    let dev: Arc<MemDevice> = Arc::new(MemDevice::new(1 << 20));
    let mut cl = CleanerConfig::new(CleanerMode::Idle, 10_000);
    cl.wait = Duration::from_millis(20);
    let c = cfg(Some(cl), 16);
    let tier = Arc::new(FlashTier::create(dev.clone(), c.clone()).unwrap());
    let track = Arc::new(SyncTrack::default());
    let lower = vec![LowerTier::new(tier.clone(), Placement::Inclusive)];
    let cache = MemCache::with_tiers(small_config(64), track.clone(), lower).unwrap();
    let id = open(&cache, &path, Class::NORMAL);
    cache
        .write(id, 3 * BS, &pattern(3 * BS, BS as usize, 1))
        .unwrap();
    cache.fsync(id, true).unwrap(); // acknowledged: durable in the tier
    assert_eq!(tier.flash_stats().dirty_blocks, 1);
    assert!(!track.unsynced.lock().unwrap().contains(&id.0));
    wait_until("the idle cleaner", || tier.flash_stats().dirty_blocks == 0);
    std::thread::sleep(Duration::from_millis(300));
    // What a power cut now would leave: the device as written, BACKING without unsynced writes.
    let again = FlashTier::open(dev.clone() as Arc<dyn FlashDevice>, c).unwrap();
    let tier_has_it = !again.recovered_files().is_empty();
    let backing_durable = !track.unsynced.lock().unwrap().contains(&id.0);
    eprintln!(
        "tier still holds it dirty on the device: {tier_has_it}; BACKING synced: {backing_durable}"
    );
    assert!(
        tier_has_it || backing_durable,
        "the acknowledged block is durable nowhere: a power cut now loses it"
    );
    std::mem::forget(cache);
}

/// ftruncate shrinks a file whose blocks were in the tier; a kill -9 afterwards (before any
/// tier sync) makes recovery grow the file back to its old size.
#[test]
fn a_shrinking_truncate_then_kill_does_not_grow_the_file_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_file(dir.path(), "f", &pattern(0, 32 * BS as usize, 0));
    let dev: Arc<MemDevice> = Arc::new(MemDevice::new(1 << 20));
    let c = cfg(None, 16);
    let tier = Arc::new(FlashTier::create(dev.clone(), c.clone()).unwrap());
    let lower = vec![LowerTier::new(tier.clone(), Placement::Inclusive)];
    let cache = MemCache::with_tiers(small_config(8), Arc::new(RealBacking), lower).unwrap();
    let id = open(&cache, &path, Class::NORMAL);
    // In rounds of 4 blocks, each fsync'ed: memory (8 blocks) keeps only the last ones.
    for r in 0..8u64 {
        let at = r * 4 * BS;
        cache
            .write(id, at, &pattern(at, 4 * BS as usize, 1))
            .unwrap();
        cache.fsync(id, true).unwrap();
    }
    assert_eq!(tier.flash_stats().dirty_blocks, 32);
    eprintln!(
        "after fsync: dirty on device {}",
        FlashTier::check(&*dev).unwrap().dirty_blocks
    );
    cache.truncate(id, 12388).unwrap();
    eprintln!(
        "after truncate: dirty on device {} ram {}",
        FlashTier::check(&*dev).unwrap().dirty_blocks,
        tier.flash_stats().dirty_blocks
    );
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 12388);
    // kill -9: nothing more happens in the daemon; the device keeps what was written.
    std::mem::forget(cache);
    let again = FlashTier::open(dev.clone() as Arc<dyn FlashDevice>, c).unwrap();
    eprintln!("recovered: {:?}", again.recovered_files());
    let rep = tiercache_manager::clean_recovered(
        &again,
        dir.path(),
        &tiercache_manager::UncachedBacking::new(),
    )
    .unwrap();
    eprintln!("{rep:?}");
    let len = std::fs::metadata(&path).unwrap().len();
    assert_eq!(
        len, 12388,
        "the truncated file came back at {len} bytes after recovery"
    );
}

/// After a detach that could not read a dirty block, newer bytes of it go to BACKING without
/// the tier discarding its old dirty copy; the next mount's recovery writes the old copy back.
#[test]
fn a_detached_tiers_old_copy_never_comes_back_over_newer_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_file(dir.path(), "f", &pattern(0, 32 * BS as usize, 0));
    let mem_dev: Arc<MemDevice> = Arc::new(MemDevice::new(1 << 20));
    let dev = Arc::new(FaultyDevice::new(mem_dev.clone(), 7));
    let c = cfg(None, 2);
    let tier = Arc::new(FlashTier::create(dev.clone(), c.clone()).unwrap());
    let lower = vec![LowerTier::new(tier.clone(), Placement::Inclusive)];
    let cache = MemCache::with_tiers(small_config(64), Arc::new(RealBacking), lower).unwrap();
    let id = open(&cache, &path, Class::NORMAL);
    for b in [1u64, 9] {
        cache
            .write(id, b * BS, &pattern(b * BS, BS as usize, 1))
            .unwrap();
    }
    cache.fsync(id, true).unwrap();
    assert_eq!(tier.flash_stats().dirty_blocks, 2);
    // The device stops reading (a bad patch): two read errors degrade it.
    dev.fail_reads_after(Some(0));
    let fk = tier.dirty_blocks(10)[0].key.file;
    let v = tier.dirty_blocks(10)[0].version;
    let mut buf = vec![0u8; BS as usize];
    let _ = tier.read_dirty(&TierKey::new(fk, 1), v, &mut buf);
    let _ = tier.read_dirty(&TierKey::new(fk, 9), v, &mut buf);
    assert!(tier.detaching());
    wait_until("detached", || {
        cache
            .stats()
            .lower
            .is_some_and(|l| l.detached == vec!["flash".to_string()])
    });
    // Block 1 rewritten whole: goes to BACKING (tier detached), fsync'ed.
    cache.write(id, BS, &pattern(BS, BS as usize, 2)).unwrap();
    // Block 9 is still only in the detached tier, which still cannot read it: fsync and flush
    // say so (the device's error), never "done".
    let e = cache.fsync(id, true).unwrap_err();
    assert!(e.to_string().contains("read fault"), "{e}");
    assert!(cache.flush_all().is_err());
    assert_bytes(
        &read_file(&path)[BS as usize..2 * BS as usize],
        &pattern(BS, BS as usize, 2),
        "BACKING before restart",
    );
    // Restart: the bad patch is readable again.
    dev.fail_reads_after(None);
    drop(cache);
    drop(tier); // closes (degraded, not tainted: clean flag written)
    let again = FlashTier::open(mem_dev.clone() as Arc<dyn FlashDevice>, c).unwrap();
    eprintln!("recovered: {:?}", again.recovered_files());
    tiercache_manager::clean_recovered(
        &again,
        dir.path(),
        &tiercache_manager::UncachedBacking::new(),
    )
    .unwrap();
    assert_bytes(
        &read_file(&path)[BS as usize..2 * BS as usize],
        &pattern(BS, BS as usize, 2),
        "block 1 after recovery (fsync-acknowledged pattern 2 expected)",
    );
}

/// An append into a lower-dirty EOF block with no memory slot is patched in the tier
/// (write_through_below) without a new file meta; fsync sets none either (nothing in memory);
/// after a kill -9 recovery clips the block at the old logical size.
#[test]
fn an_append_patched_below_memory_keeps_its_size_after_kill() {
    let dir = tempfile::tempdir().unwrap();
    let a = make_file(dir.path(), "a", &pattern(0, BS as usize + 100, 0));
    let b = make_file(dir.path(), "b", &pattern(0, 16 * BS as usize, 0));
    let dev: Arc<MemDevice> = Arc::new(MemDevice::new(1 << 20));
    let c = cfg(None, 16);
    let tier = Arc::new(FlashTier::create(dev.clone(), c.clone()).unwrap());
    let lower = vec![LowerTier::new(tier.clone(), Placement::Inclusive)];
    let mut mc = small_config(8);
    mc.dirty_ratio = 1.0;
    mc.dirty_background_ratio = 1.0;
    let cache = MemCache::with_tiers(mc, Arc::new(RealBacking), lower).unwrap();
    let ia = open(&cache, &a, Class::NORMAL);
    let ib = open(&cache, &b, Class::NORMAL);
    cache.write(ia, BS, &pattern(BS, 100, 1)).unwrap();
    cache.fsync(ia, true).unwrap();
    assert_eq!(tier.flash_stats().dirty_blocks, 1);
    // Memory fills with B's dirty blocks: A's clean copy of block 1 is evicted.
    for i in 0..8u64 {
        cache
            .write(ib, i * BS, &pattern(i * BS, BS as usize, 3))
            .unwrap();
    }
    let before = cache.stats();
    cache
        .write(ia, BS + 100, &pattern(BS + 100, 200, 2))
        .unwrap();
    let after = cache.stats();
    eprintln!(
        "write-through blocks before/after: {:?} / {:?}",
        before.paths.write_through_blocks, after.paths.write_through_blocks
    );
    cache.fsync(ia, true).unwrap(); // acknowledged: BS + 300 bytes
    let got = cache.read(ia, 0, 2 * BS as usize).unwrap();
    eprintln!("size through the cache: {}", got.len());
    std::mem::forget(cache);
    let again = FlashTier::open(dev.clone() as Arc<dyn FlashDevice>, c).unwrap();
    eprintln!("recovered: {:?}", again.recovered_files());
    tiercache_manager::clean_recovered(
        &again,
        dir.path(),
        &tiercache_manager::UncachedBacking::new(),
    )
    .unwrap();
    let on_disk = read_file(&a);
    assert_eq!(on_disk.len() as u64, BS + 300, "length after recovery");
    assert_bytes(
        &on_disk[(BS + 100) as usize..],
        &pattern(BS + 100, 200, 2),
        "appended bytes",
    );
}

/// A write-through patch of a lower-dirty block fails on the device: the tier drops its dirty
/// copy (the acknowledged bytes), the manager keeps the block listed; cleaning then finds it
/// "lost" and the file serves BACKING's older bytes.
#[test]
fn a_failed_patch_below_keeps_the_acknowledged_block() {
    let dir = tempfile::tempdir().unwrap();
    let a = make_file(dir.path(), "a", &pattern(0, 2 * BS as usize, 0));
    let b = make_file(dir.path(), "b", &pattern(0, 16 * BS as usize, 0));
    let mem_dev: Arc<MemDevice> = Arc::new(MemDevice::new(1 << 20));
    let dev = Arc::new(FaultyDevice::new(mem_dev.clone(), 7));
    let c = cfg(None, 16);
    let tier = Arc::new(FlashTier::create(dev.clone(), c.clone()).unwrap());
    let lower = vec![LowerTier::new(tier.clone(), Placement::Inclusive)];
    let mut mc = small_config(8);
    mc.dirty_ratio = 1.0;
    mc.dirty_background_ratio = 1.0;
    let cache = MemCache::with_tiers(mc, Arc::new(RealBacking), lower).unwrap();
    let ia = open(&cache, &a, Class::NORMAL);
    let ib = open(&cache, &b, Class::NORMAL);
    cache.write(ia, BS, &pattern(BS, BS as usize, 1)).unwrap();
    cache.fsync(ia, true).unwrap(); // acknowledged, in the tier
    for i in 0..8u64 {
        cache
            .write(ib, i * BS, &pattern(i * BS, BS as usize, 3))
            .unwrap();
    }
    dev.fail_writes_after(Some(0));
    let r = cache.write(ia, BS + 10, &pattern(BS + 10, 20, 2));
    eprintln!("patch write: {r:?}");
    dev.fail_writes_after(None);
    let f = cache.flush_all();
    eprintln!("flush_all: {f:?}");
    let got = cache.read(ia, BS, BS as usize);
    eprintln!(
        "read block 1: {:?}; pattern0 {:?} pattern1 {:?}",
        got.as_ref().map(|g| g[..4].to_vec()),
        &pattern(BS, 4, 0),
        &pattern(BS, 4, 1)
    );
    let disk = read_file(&a);
    assert_bytes(
        &disk[BS as usize..BS as usize + 10],
        &pattern(BS, 10, 1),
        "acknowledged bytes of block 1 on BACKING",
    );
}
