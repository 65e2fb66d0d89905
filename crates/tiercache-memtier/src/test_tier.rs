//! [`TestTier`]: the memory tier ([`MemoryTier`]) with a latency MODEL and injectable faults,
//! for tests and experiments.
//!
//! Latency is slept, not measured: every read that hits sleeps `read_latency`, every store
//! `write_latency`. Faults are injected per operation kind: a failing read returns an error
//! (the manager then reads the next source), a failing store returns an error (the manager
//! drops a clean block, and falls back to BACKING for a dirty one). Volatile, like the memory
//! tier: it must not hold data that has to survive a crash.

use crate::memory::{MemoryTier, MemoryTierConfig};
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tiercache_core::policy::PolicyKind;
use tiercache_core::InvariantViolation;
use tiercache_tier::{
    Admit, Cleaning, DataTier, DirtyBlock, FileKey, Lookup, SpillSink, TierError, TierInfo,
    TierKey, TierKind, TierSnapshot,
};

/// How a [`TestTier`] is built.
#[derive(Debug, Clone)]
pub struct TestTierConfig {
    pub name: String,
    pub capacity_blocks: usize,
    pub block_size: usize,
    pub policy: PolicyKind,
    /// Slept on every read that hits (a latency MODEL).
    pub read_latency: Duration,
    /// Slept on every store.
    pub write_latency: Duration,
    pub accepts_dirty: bool,
}

impl TestTierConfig {
    pub fn new(name: impl Into<String>, capacity_blocks: usize, block_size: usize) -> Self {
        Self {
            name: name.into(),
            capacity_blocks,
            block_size,
            policy: PolicyKind::Lru,
            read_latency: Duration::ZERO,
            write_latency: Duration::ZERO,
            accepts_dirty: false,
        }
    }
}

/// The memory tier with latency and faults; see the module docs.
#[derive(Debug)]
pub struct TestTier {
    inner: MemoryTier,
    read_latency: Duration,
    write_latency: Duration,
    fail_reads: AtomicBool,
    fail_writes: AtomicBool,
    busy: AtomicBool,
}

impl TestTier {
    pub fn new(cfg: TestTierConfig) -> Result<Self, tiercache_core::CoreError> {
        let mc = MemoryTierConfig {
            name: cfg.name,
            capacity_blocks: cfg.capacity_blocks,
            block_size: cfg.block_size,
            policy: cfg.policy,
            accepts_dirty: cfg.accepts_dirty,
        };
        Ok(Self {
            inner: MemoryTier::with_kind(&mc, TierKind::Test)?,
            read_latency: cfg.read_latency,
            write_latency: cfg.write_latency,
            fail_reads: AtomicBool::new(false),
            fail_writes: AtomicBool::new(false),
            busy: AtomicBool::new(false),
        })
    }

    /// From now on every read fails (`true`) or works again (`false`).
    pub fn fail_reads(&self, on: bool) {
        self.fail_reads.store(on, Ordering::Relaxed);
    }
    /// From now on every store fails (`true`) or works again (`false`).
    pub fn fail_writes(&self, on: bool) {
        self.fail_writes.store(on, Ordering::Relaxed);
    }

    /// From now on `try_invalidate` answers "not now" (`true`), as a tier whose lock is held
    /// across its own I/O may, or does the invalidation again (`false`).
    pub fn busy(&self, on: bool) {
        self.busy.store(on, Ordering::Relaxed);
    }

    /// Checks the tier's own invariants (tests).
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        self.inner.check_invariants()
    }

    fn fault(&self, flag: &AtomicBool, what: &str) -> Result<(), TierError> {
        if flag.load(Ordering::Relaxed) {
            self.inner.count_error();
            return Err(TierError::Io {
                tier: self.inner.info().name.clone(),
                source: io::Error::other(format!("injected {what} fault")),
            });
        }
        Ok(())
    }

    /// A store's injected fault, then its modelled latency.
    fn before_store(&self) -> Result<(), TierError> {
        self.fault(&self.fail_writes, "write")?;
        Self::sleep(self.write_latency);
        Ok(())
    }

    fn sleep(d: Duration) {
        if !d.is_zero() {
            std::thread::sleep(d);
        }
    }

    fn after_read(&self, r: Result<Lookup, TierError>) -> Result<Lookup, TierError> {
        if matches!(r, Ok(Lookup::Hit { .. })) {
            Self::sleep(self.read_latency);
        }
        r
    }
}

impl DataTier for TestTier {
    fn info(&self) -> &TierInfo {
        self.inner.info()
    }

    fn contains(&self, key: &TierKey) -> bool {
        self.inner.contains(key)
    }

    fn read(&self, key: &TierKey, version: u64, buf: &mut [u8]) -> Result<Lookup, TierError> {
        self.fault(&self.fail_reads, "read")?;
        self.after_read(self.inner.read(key, version, buf))
    }

    fn take(&self, key: &TierKey, version: u64, buf: &mut [u8]) -> Result<Lookup, TierError> {
        self.fault(&self.fail_reads, "read")?;
        self.after_read(self.inner.take(key, version, buf))
    }

    fn store(
        &self,
        req: &tiercache_tier::Store<'_>,
        current: &dyn Fn() -> bool,
    ) -> Result<Admit, TierError> {
        self.before_store()?;
        self.inner.store(req, current)
    }

    fn can_spill(&self) -> bool {
        true
    }

    fn set_spill_hook(&self, hook: Arc<dyn SpillSink>) -> Result<(), TierError> {
        self.inner.set_spill_hook(hook)
    }

    fn invalidate(&self, key: &TierKey) {
        self.inner.invalidate(key);
    }

    /// Invalidation sleeps no modelled latency (as `invalidate`); see [`TestTier::busy`].
    fn try_invalidate(&self, key: &TierKey) -> bool {
        !self.busy.load(Ordering::Relaxed) && self.inner.try_invalidate(key)
    }

    fn discard(&self, key: &TierKey) {
        self.inner.discard(key);
    }

    fn invalidate_file(&self, file: &FileKey, from_block: u64) {
        self.inner.invalidate_file(file, from_block);
    }

    fn sync(&self) -> Result<(), TierError> {
        self.inner.sync()
    }

    fn stats(&self) -> TierSnapshot {
        self.inner.stats()
    }

    /// As the wrapped memory tier; its dirty reads fail when reads are made to.
    fn cleaning(&self) -> Option<&dyn Cleaning> {
        self.inner.cleaning().map(|_| self as &dyn Cleaning)
    }
}

impl Cleaning for TestTier {
    fn read_dirty(
        &self,
        key: &TierKey,
        version: u64,
        buf: &mut [u8],
    ) -> Result<Option<u64>, TierError> {
        self.fault(&self.fail_reads, "read")?;
        self.inner.read_dirty(key, version, buf)
    }

    fn dirty_blocks(&self, max: usize) -> Vec<DirtyBlock> {
        self.inner.dirty_blocks(max)
    }

    fn mark_clean(&self, key: &TierKey, seq: u64) -> bool {
        self.inner.mark_clean(key, seq)
    }
}
