//! Bugs found in a second review of the SSD tier fixes: eager cleaning of a file's own write-back batch left a block listed below that the tier no longer had (EIO); a cleaning's failed BACKING sync swallowed the error the next fsync had to report; a failing truncate dropped the tail's acknowledged blocks; a forgotten file with a detached tier's leftovers could not be opened; a write patched below memory did not move the mtime.
#![allow(clippy::unwrap_used)]
mod common;
use common::*;
use std::sync::Arc;
use tiercache_core::placement::Placement;
use tiercache_flash::{CleanerConfig, CleanerMode, FlashConfig, FlashTier, MemDevice};
use tiercache_manager::{Class, FaultyBacking, LowerTier, MemCache, RealBacking};

const BS: u64 = 512;
const SET: u64 = 16; // blocks per set (set_shift 4)

fn cfg(cleaner: CleanerConfig) -> FlashConfig {
    flash_config(Some(cleaner), 16)
}

/// Eager cleaning in the request path may clean, from inside this file's own write-back, a
/// block that was lower-dirty before and was stored again earlier in the same batch. The batch
/// used to put it back into `lower_dirty` although the tier had dropped it, and a later memory
/// miss of that block read EIO although BACKING held its newest bytes; it must read them.
#[test]
fn eager_clean_of_own_batch_leaves_no_phantom_lower_dirty_block() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_file(dir.path(), "f", &pattern(0, 64 * BS as usize, 0));
    // Learn the number of sets of this geometry first.
    let sets = {
        let dev = Arc::new(MemDevice::new(1 << 20));
        let t = FlashTier::create(dev, cfg(CleanerConfig::new(CleanerMode::Eager, 1))).unwrap();
        t.flash_stats().sets
    };
    // Floor = sets - 1: with one dirty set nothing is advised, with two the LRU set is cleaned.
    let dev = Arc::new(MemDevice::new(1 << 20));
    let tier = Arc::new(
        FlashTier::create(dev, cfg(CleanerConfig::new(CleanerMode::Eager, sets - 1))).unwrap(),
    );
    let lower = vec![LowerTier::new(tier.clone(), Placement::Inclusive)];
    let cache = MemCache::with_tiers(small_config(64), Arc::new(RealBacking), lower).unwrap();
    let id = open(&cache, &path, Class::NORMAL);
    // 1. Block 0 into the tier (lower-dirty), acknowledged.
    cache.write(id, 0, &pattern(0, BS as usize, 1)).unwrap();
    cache.fsync(id, true).unwrap();
    assert_eq!(tier.flash_stats().dirty_blocks, 1);
    // 2. Block 0 again (held: memory dirty over a lower-dirty copy), and blocks in sets 1, 2.
    for (b, v) in [(0, 2), (SET, 2), (2 * SET, 2)] {
        cache
            .write(id, b * BS, &pattern(b * BS, BS as usize, v))
            .unwrap();
    }
    cache.fsync(id, true).unwrap();
    // 3. Memory lets go of its clean copies; read block 0 back.
    cache.invalidate(id);
    let got = cache.read(id, 0, BS as usize);
    match got {
        Ok(b) => assert_bytes(&b, &pattern(0, BS as usize, 2), "block 0"),
        Err(e) => panic!(
            "block 0 read failed ({e}) although BACKING has its newest bytes: {:?}",
            std::fs::read(&path).unwrap()[..8] == pattern(0, 8, 2)[..]
        ),
    }
    // And a flush_all must not complain of a lost dirty block.
    cache.flush_all().unwrap();
    assert_bytes(
        &read_file(&path)[..BS as usize],
        &pattern(0, BS as usize, 2),
        "BACKING block 0",
    );
}

/// BACKING that can be told to fail writes (ENOSPC) or set_len (EIO).
fn failed_truncate(fail_writes: bool) {
    let dir = tempfile::tempdir().unwrap();
    let path = make_file(dir.path(), "f", &pattern(0, 32 * BS as usize, 0));
    let dev = Arc::new(MemDevice::new(1 << 20));
    let tier =
        Arc::new(FlashTier::create(dev, cfg(CleanerConfig::new(CleanerMode::Idle, 1))).unwrap());
    let lower = vec![LowerTier::new(tier.clone(), Placement::Inclusive)];
    let backing = Arc::new(FaultyBacking::new(Arc::new(RealBacking)));
    let cache = MemCache::with_tiers(small_config(64), backing.clone(), lower).unwrap();
    let id = open(&cache, &path, Class::NORMAL);
    for b in [2u64, 20] {
        cache
            .write(id, b * BS, &pattern(b * BS, BS as usize, 1))
            .unwrap();
    }
    cache.fsync(id, true).unwrap(); // acknowledged: blocks 2 and 20 durable in the tier
    assert_eq!(tier.flash_stats().dirty_blocks, 2);
    cache.invalidate(id); // memory lets go of its clean copies
    if fail_writes {
        backing.fail_writes_after(0);
    } else {
        backing.fail_set_len();
    }
    let r = cache.truncate(id, 10 * BS);
    assert!(r.is_err(), "the truncate succeeded: {r:?}");
    backing.heal();
    // The truncate failed: the file still has 32 blocks, block 20 the acknowledged bytes.
    let got = cache.read(id, 20 * BS, BS as usize);
    match got {
        Ok(b) => assert_bytes(
            &b,
            &pattern(20 * BS, BS as usize, 1),
            "block 20 after a failed truncate",
        ),
        Err(e) => panic!("read of block 20: {e}"),
    }
}

#[test]
fn a_truncate_failing_on_a_full_backing_keeps_the_tail_blocks() {
    failed_truncate(true);
}

#[test]
fn a_truncate_whose_set_len_fails_keeps_the_tail_blocks() {
    failed_truncate(false);
}

/// After the tier is detached with a block it cannot return, the kernel forgets the inode
/// and opens it again: the open runs `clean_lower_locked`, which fails for the detached
/// leftovers. That used to fail the whole open (EIO); only that block may fail, the open and
/// the file's other blocks must work.
#[test]
fn a_file_with_a_detached_leftover_can_still_be_opened_after_forget() {
    use tiercache_flash::{FaultyDevice, FlashDevice};
    use tiercache_tier::{Cleaning, TierKey};
    let dir = tempfile::tempdir().unwrap();
    let path = make_file(dir.path(), "f", &pattern(0, 32 * BS as usize, 0));
    let mem_dev: Arc<MemDevice> = Arc::new(MemDevice::new(1 << 20));
    let dev = Arc::new(FaultyDevice::new(mem_dev.clone(), 7));
    let mut c = cfg(CleanerConfig::new(CleanerMode::Idle, 1));
    c.max_errors = 2;
    let tier = Arc::new(FlashTier::create(dev.clone() as Arc<dyn FlashDevice>, c).unwrap());
    let lower = vec![LowerTier::new(tier.clone(), Placement::Inclusive)];
    let cache = MemCache::with_tiers(small_config(64), Arc::new(RealBacking), lower).unwrap();
    let id = open(&cache, &path, Class::NORMAL);
    for b in [1u64, 9] {
        cache
            .write(id, b * BS, &pattern(b * BS, BS as usize, 1))
            .unwrap();
    }
    cache.fsync(id, true).unwrap();
    dev.fail_reads_after(Some(0));
    let fk = tier.dirty_blocks(10)[0].key.file;
    let v = tier.dirty_blocks(10)[0].version;
    let mut buf = vec![0u8; BS as usize];
    let _ = tier.read_dirty(&TierKey::new(fk, 1), v, &mut buf);
    let _ = tier.read_dirty(&TierKey::new(fk, 9), v, &mut buf);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while cache.stats().lower.is_none_or(|l| l.detached.is_empty()) {
        assert!(std::time::Instant::now() < deadline);
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    cache.release(id);
    cache.forget(id);
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let m = f.metadata().unwrap();
    let r = cache.open(
        id,
        Arc::new(f),
        Class::NORMAL,
        tiercache_manager::FileStamp::from_metadata(&m),
    );
    assert!(r.is_ok(), "open failed: {r:?}");
    // Block 20 was never dirty anywhere: it must read.
    assert_bytes(
        &cache.read(id, 20 * BS, BS as usize).unwrap(),
        &pattern(20 * BS, BS as usize, 0),
        "block 20",
    );
}

/// A write patched into the tier below memory (write_through_below) used to move no mtime:
/// not the logical one, and not BACKING's once cleaned. After a flush BACKING's mtime must be
/// no older than the write.
#[test]
fn a_write_patched_below_memory_moves_the_mtime() {
    use std::time::{Duration, SystemTime};
    let dir = tempfile::tempdir().unwrap();
    let a = make_file(dir.path(), "a", &pattern(0, 2 * BS as usize, 0));
    let b = make_file(dir.path(), "b", &pattern(0, 16 * BS as usize, 0));
    let old = SystemTime::UNIX_EPOCH + Duration::from_secs(946_684_800);
    std::fs::File::options()
        .write(true)
        .open(&a)
        .unwrap()
        .set_modified(old)
        .unwrap();
    let dev = Arc::new(MemDevice::new(1 << 20));
    let tier =
        Arc::new(FlashTier::create(dev, cfg(CleanerConfig::new(CleanerMode::Idle, 1))).unwrap());
    let lower = vec![LowerTier::new(tier.clone(), Placement::Inclusive)];
    let mut mc = small_config(8);
    mc.dirty_ratio = 1.0;
    mc.dirty_background_ratio = 1.0;
    let cache = MemCache::with_tiers(mc, Arc::new(RealBacking), lower).unwrap();
    let ia = open(&cache, &a, Class::NORMAL);
    let ib = open(&cache, &b, Class::NORMAL);
    cache.write(ia, BS, &pattern(BS, 100, 1)).unwrap();
    cache.fsync(ia, true).unwrap();
    for i in 0..8u64 {
        cache
            .write(ib, i * BS, &pattern(i * BS, BS as usize, 3))
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(1500));
    let t0 = SystemTime::now();
    let before = cache.stats().paths.write_through_blocks;
    cache.write(ia, BS + 10, &pattern(BS + 10, 20, 2)).unwrap();
    assert!(
        cache.stats().paths.write_through_blocks > before,
        "not patched below"
    );
    let l2 = cache.logical_times(ia, SystemTime::now()).mtime;
    assert!(
        l2.is_some_and(|l| l >= t0),
        "logical mtime after the patched write is {l2:?}, the write was at {t0:?}"
    );
    cache.flush_all().unwrap();
    let m3 = std::fs::metadata(&a).unwrap().modified().unwrap();
    assert!(
        m3 >= t0,
        "mtime after a write and flush is {m3:?}, the write was at {t0:?}"
    );
}

/// BACKING whose page cache loses a write: the next sync of that file reports EIO once (as
/// Linux's errseq does per open file description), later syncs succeed.
#[derive(Debug, Default)]
struct Errseq {
    poison_at: std::sync::Mutex<Option<(u64, u64)>>, // (file, offset)
    pending: std::sync::Mutex<std::collections::HashSet<u64>>,
}
impl tiercache_manager::BackingIo for Errseq {
    fn read_at(
        &self,
        f: tiercache_manager::FileId,
        fd: &std::fs::File,
        b: &mut [u8],
        o: u64,
    ) -> std::io::Result<usize> {
        RealBacking.read_at(f, fd, b, o)
    }
    fn write_at(
        &self,
        f: tiercache_manager::FileId,
        fd: &std::fs::File,
        b: &[u8],
        o: u64,
    ) -> std::io::Result<()> {
        if *self.poison_at.lock().unwrap() == Some((f.0, o)) {
            self.pending.lock().unwrap().insert(f.0);
        }
        RealBacking.write_at(f, fd, b, o)
    }
    fn sync(
        &self,
        f: tiercache_manager::FileId,
        fd: &std::fs::File,
        d: bool,
    ) -> std::io::Result<()> {
        if self.pending.lock().unwrap().remove(&f.0) {
            return Err(std::io::Error::from_raw_os_error(libc::EIO));
        }
        RealBacking.sync(f, fd, d)
    }
    fn set_len(
        &self,
        f: tiercache_manager::FileId,
        fd: &std::fs::File,
        len: u64,
    ) -> std::io::Result<()> {
        RealBacking.set_len(f, fd, len)
    }
}

/// Another file's write-back runs an eager cleaning of F in the request path; the cleaning's
/// fdatasync of F gets the EIO of F's earlier failed write-back. It used to only log it, and
/// F's next fsync succeeded although that write never reached the disk; that fsync must fail.
#[test]
fn a_cleanings_failed_sync_is_reported_to_the_next_fsync() {
    let dir = tempfile::tempdir().unwrap();
    let fpath = make_file(dir.path(), "f", &pattern(0, 16 * BS as usize, 0));
    let gpath = make_file(dir.path(), "g", &pattern(0, 16 * BS as usize, 0));
    let sets = {
        let dev = Arc::new(MemDevice::new(1 << 20));
        let t = FlashTier::create(dev, cfg(CleanerConfig::new(CleanerMode::Eager, 1))).unwrap();
        t.flash_stats().sets
    };
    let dev = Arc::new(MemDevice::new(1 << 20));
    let tier = Arc::new(
        FlashTier::create(dev, cfg(CleanerConfig::new(CleanerMode::Eager, sets - 1))).unwrap(),
    );
    let lower = vec![LowerTier::new(tier.clone(), Placement::Inclusive)];
    let backing = Arc::new(Errseq::default());
    let mut mc = small_config(8);
    mc.dirty_ratio = 1.0;
    mc.dirty_background_ratio = 1.0;
    let cache = MemCache::with_tiers(mc, backing.clone(), lower).unwrap();
    let f = open(&cache, &fpath, Class::NORMAL);
    let g = open(&cache, &gpath, Class::NORMAL);
    cache.write(f, 0, &pattern(0, BS as usize, 1)).unwrap();
    cache.fsync(f, true).unwrap(); // F block 0 in the tier
    for i in 0..8u64 {
        cache
            .write(g, i * BS, &pattern(i * BS, BS as usize, 1))
            .unwrap(); // memory all dirty
    }
    *backing.poison_at.lock().unwrap() = Some((f.0, 5 * BS));
    let wt = cache.stats().paths.write_through_blocks;
    cache
        .write(f, 5 * BS, &pattern(5 * BS, BS as usize, 1))
        .unwrap(); // to BACKING; writeback will fail
    assert!(
        cache.stats().paths.write_through_blocks > wt,
        "not a write-through"
    );
    cache.fsync(g, true).unwrap(); // G's batch: eager cleaning of F's set in the request path
    let r = cache.fsync(f, true);
    assert!(
        r.is_err(),
        "fsync reported success for a write whose write-back failed"
    );
}
