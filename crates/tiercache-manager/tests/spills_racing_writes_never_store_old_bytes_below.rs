#![allow(clippy::unwrap_used)]
//! Cascade review: a block that a lower tier spills (under its lock) while a write to it waits
//! for that lock must not be stored in the tier below — the write's invalidation removes the
//! block's transit entry again after each tier that spills (`Lower::invalidate_from`). Without
//! that second removal the old bytes were stored below and served after memory let go.
mod common;
use common::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tiercache_core::placement::Placement;
use tiercache_core::Class;
use tiercache_manager::{LowerTier, MemCache, MemConfig, RealBacking};
use tiercache_memtier::TestTier;
use tiercache_tier::*;

/// A test tier whose next spilling demotion (once armed) pauses inside the tier's lock before
/// handing over its victim (its spill hook wraps the one it is given), and again after the
/// store, outside the lock.
#[derive(Debug)]
struct Gate {
    inner: Arc<TestTier>,
    armed: AtomicBool,
    /// Set while the armed store runs: its spills pause.
    pausing: Arc<AtomicBool>,
}
const PAUSE: Duration = Duration::from_millis(400);

/// The spill hook the gate gives its inner tier: pauses while `pausing`, then hands over.
#[derive(Debug)]
struct GateHook {
    inner: Arc<dyn SpillSink>,
    pausing: Arc<AtomicBool>,
}
impl SpillSink for GateHook {
    fn spill(&self, s: Spilled<'_>) {
        if self.pausing.load(Ordering::SeqCst) {
            std::thread::sleep(PAUSE);
        }
        self.inner.spill(s)
    }
}

impl DataTier for Gate {
    fn info(&self) -> &TierInfo {
        self.inner.info()
    }
    fn contains(&self, k: &TierKey) -> bool {
        self.inner.contains(k)
    }
    fn read(&self, k: &TierKey, v: u64, b: &mut [u8]) -> Result<Lookup, TierError> {
        self.inner.read(k, v, b)
    }
    fn take(&self, k: &TierKey, v: u64, b: &mut [u8]) -> Result<Lookup, TierError> {
        self.inner.take(k, v, b)
    }
    fn can_spill(&self) -> bool {
        self.inner.can_spill()
    }
    fn set_spill_hook(&self, hook: Arc<dyn SpillSink>) -> Result<(), TierError> {
        let pausing = Arc::clone(&self.pausing);
        self.inner.set_spill_hook(Arc::new(GateHook {
            inner: hook,
            pausing,
        }))
    }
    fn store(&self, req: &Store<'_>, cur: &dyn Fn() -> bool) -> Result<Admit, TierError> {
        if !(req.may_spill && req.kind == StoreKind::Demote) {
            return self.inner.store(req, cur);
        }
        if !self.armed.swap(false, Ordering::SeqCst) {
            return self.inner.store(req, cur);
        }
        self.pausing.store(true, Ordering::SeqCst);
        let r = self.inner.store(req, cur);
        self.pausing.store(false, Ordering::SeqCst);
        std::thread::sleep(PAUSE);
        r
    }
    fn invalidate(&self, k: &TierKey) {
        self.inner.invalidate(k)
    }
    fn discard(&self, k: &TierKey) {
        self.inner.discard(k)
    }
    fn invalidate_file(&self, f: &FileKey, from: u64) {
        self.inner.invalidate_file(f, from)
    }
    fn cleaning(&self) -> Option<&dyn Cleaning> {
        self.inner.cleaning()
    }
    fn sync(&self) -> Result<(), TierError> {
        self.inner.sync()
    }
    fn stats(&self) -> TierSnapshot {
        self.inner.stats()
    }
}

#[test]
fn a_block_spilled_while_its_write_waits_for_the_tier_is_not_stored_below() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_file(dir.path(), "f", &pattern(0, 16 * 512, 1));
    let a = Arc::new(Gate {
        inner: test_tier(4),
        armed: AtomicBool::new(false),
        pausing: Arc::new(AtomicBool::new(false)),
    });
    let b = test_tier(64);
    let lower = vec![
        LowerTier::new(a.clone(), Placement::Exclusive),
        LowerTier::new(b.clone(), Placement::Exclusive),
    ];
    let cfg = MemConfig {
        readahead_max_blocks: 0,
        ..small_config(4)
    };
    let cache = MemCache::with_tiers(cfg, Arc::new(RealBacking), lower).unwrap();
    let id = open(&cache, &path, Class::NORMAL);
    for blk in 0..8u64 {
        cache.read(id, blk * 512, 512).unwrap();
        cache.settle_lower();
    }
    // memory 4..7, A 0..3. Reading 8 demotes 4 into A, which evicts 0 (paused in A's lock).
    a.armed.store(true, Ordering::SeqCst);
    cache.read(id, 8 * 512, 512).unwrap();
    std::thread::sleep(PAUSE / 4);
    let v2 = pattern(0, 512, 2);
    cache.write(id, 0, &v2).unwrap(); // its invalidation of A waits for A's lock
    cache.fsync(id, false).unwrap();
    cache.invalidate(id); // memory lets block 0 go (clean now)
    cache.settle_lower();
    let got = cache.read(id, 0, 512).unwrap();
    assert_bytes(&got, &v2, "block 0 after its write");
}

/// Cleaning a block whose newer bytes memory holds drops the dirty tier's now-clean older copy
/// (and nothing older reaches the tier below): after memory lets go, the new bytes are read.
#[test]
fn cleaning_a_block_memory_holds_newer_drops_the_tiers_clean_copy() {
    let dir = tempfile::tempdir().unwrap();
    let d = dirty_tier(64);
    let b = test_tier(64);
    let lower = vec![
        LowerTier::new(d.clone(), Placement::Exclusive),
        LowerTier::new(b.clone(), Placement::Exclusive),
    ];
    let mut cfg = small_config(8);
    cfg.dirty_ratio = 0.25;
    cfg.dirty_background_ratio = 0.1;
    let cache = MemCache::with_tiers(cfg, Arc::new(RealBacking), lower).unwrap();
    let path = make_file(dir.path(), "f", &pattern(0, 8 * 512, 0));
    let id = open(&cache, &path, Class::NORMAL);
    for blk in 0..6u64 {
        cache
            .write(id, blk * 512, &pattern(blk * 512, 512, 1))
            .unwrap();
    }
    let dirty = d.dirty_blocks(64);
    let k = dirty
        .first()
        .expect("some block written back into the dirty tier")
        .key;
    let blk = k.block.0;
    // Memory gets newer bytes of that block; the tier keeps its older dirty copy.
    let v2 = pattern(blk * 512, 512, 2);
    cache.write(id, blk * 512, &v2).unwrap();
    let still = d.dirty_blocks(64).iter().any(|x| x.key == k);
    assert!(
        still,
        "setup: the tier must still hold the older dirty copy"
    );
    // fsync: the tier's copy is cleaned to BACKING, then memory's newer one overwrites it.
    cache.fsync(id, false).unwrap();
    cache.settle_lower();
    assert!(!b.contains(&k));
    cache.invalidate(id);
    let got = cache.read(id, blk * 512, 512).unwrap();
    assert_bytes(&got, &v2, "block after fsync and memory drop");
}
