//! Configuration of the memory tier: [`MemConfig`] with the defaults users of
//! `tiercache mount` get, and its validation.
//!
//! Invariant after [`MemConfig::validate`]: `capacity_blocks × block_size` fits in memory
//! addressing, ratios are in `(0, 1]` with `dirty_background_ratio ≤ dirty_ratio`, and a tier
//! with flusher threads has a non-zero flush interval.

use crate::error::MemError;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;
use tiercache_core::partition::PartitionConfig;
use tiercache_core::policy::PolicyKind;
use tiercache_core::BlockSize;

/// How the memory tier is built. Construct with struct update syntax from `Default`:
/// `MemConfig { capacity_blocks: 1024, ..MemConfig::default() }`.
#[derive(Debug, Clone)]
pub struct MemConfig {
    /// Number of slots B (blocks the tier holds). Default 16384 (64 MiB of 4 KiB blocks).
    pub capacity_blocks: usize,
    /// Bytes per block (power of two, 512 B..1 MiB). Default 4 KiB.
    pub block_size: BlockSize,
    /// Eviction policy inside each pool. Default LRU.
    pub policy: PolicyKind,
    /// Pool partitioner (`none`, `basic`, `dirprio`, `static`). Default `none`.
    pub partition: PartitionConfig,
    /// Largest read-ahead window in blocks for a sequential stream; 0 disables read-ahead.
    /// Default 32 (128 KiB at 4 KiB blocks).
    pub readahead_max_blocks: u32,
    /// How often the background flusher wakes. Default 1 s.
    pub flush_interval: Duration,
    /// A file dirty for longer than this is written back by the flusher. Default 5 s.
    pub dirty_expire: Duration,
    /// Above this share of the capacity in dirty blocks the flusher writes back regardless of
    /// age. Default 0.10.
    pub dirty_background_ratio: f64,
    /// Above this share of the capacity in dirty blocks writers help flush before adding more
    /// (throttling). Default 0.40.
    pub dirty_ratio: f64,
    /// Background flusher threads. 0 = none: data is then written back only by throttled
    /// writers, `fsync`, `flush_all` and shutdown (useful for deterministic tests). Default 1.
    pub flusher_threads: usize,
    /// Length of the statistics window ([`crate::MemStats::window`]). Default 10 s.
    pub stats_window: Duration,
    /// Capacity of the trace channel in records; records beyond it are dropped and counted.
    /// Default 65536.
    pub trace_queue: usize,
    /// Keep the arena in a zero-copy shared region that clients may map (`shm`). Default off.
    pub zero_copy: bool,
}

impl Default for MemConfig {
    fn default() -> Self {
        Self {
            capacity_blocks: 16384,
            block_size: BlockSize::DEFAULT,
            policy: PolicyKind::Lru,
            partition: PartitionConfig::none(),
            readahead_max_blocks: 32,
            flush_interval: Duration::from_secs(1),
            dirty_expire: Duration::from_secs(5),
            dirty_background_ratio: 0.10,
            dirty_ratio: 0.40,
            flusher_threads: 1,
            stats_window: Duration::from_secs(10),
            trace_queue: 65536,
            zero_copy: false,
        }
    }
}

impl MemConfig {
    /// Checks every value; the error names the offending parameter.
    pub fn validate(&self) -> Result<(), MemError> {
        if self.capacity_blocks == 0 || self.capacity_blocks >= u32::MAX as usize {
            return Err(MemError::config(
                "capacity-blocks",
                format!("{} is out of range 1..2^32-1", self.capacity_blocks),
            ));
        }
        let bytes = (self.capacity_blocks as u64).checked_mul(self.block_size.bytes());
        if bytes.is_none_or(|b| b > isize::MAX as u64) {
            return Err(MemError::config(
                "capacity-blocks",
                "capacity × block size overflows the address space",
            ));
        }
        for (name, r) in [
            ("dirty-ratio", self.dirty_ratio),
            ("dirty-background-ratio", self.dirty_background_ratio),
        ] {
            if r.is_nan() || r <= 0.0 || r > 1.0 {
                return Err(MemError::config(name, format!("{r} is outside (0, 1]")));
            }
        }
        if self.dirty_background_ratio > self.dirty_ratio {
            return Err(MemError::config(
                "dirty-background-ratio",
                format!(
                    "{} is above dirty-ratio {}",
                    self.dirty_background_ratio, self.dirty_ratio
                ),
            ));
        }
        if self.flusher_threads > 0 && self.flush_interval.is_zero() {
            return Err(MemError::config("flush-interval", "must be above zero"));
        }
        if self.flusher_threads > 64 {
            return Err(MemError::config(
                "flusher-threads",
                format!("{} is more than 64", self.flusher_threads),
            ));
        }
        if self.stats_window.is_zero() {
            return Err(MemError::config("stats-window", "must be above zero"));
        }
        if self.trace_queue == 0 {
            return Err(MemError::config("trace-queue", "must be at least 1"));
        }
        Ok(())
    }

    /// Dirty blocks at which writers start helping to flush (at least 1).
    pub(crate) fn dirty_limit(&self) -> usize {
        share(self.capacity_blocks, self.dirty_ratio)
    }

    /// Dirty blocks above which the flusher writes back regardless of age (at least 1).
    pub(crate) fn dirty_background_limit(&self) -> usize {
        share(self.capacity_blocks, self.dirty_background_ratio)
    }
}

fn share(capacity: usize, ratio: f64) -> usize {
    ((capacity as f64 * ratio).ceil() as usize).clamp(1, capacity)
}

/// The flusher's timings in force, in nanoseconds (read at every flusher round).
#[derive(Debug)]
pub(crate) struct FlushTimings {
    interval_ns: AtomicU64,
    dirty_expire_ns: AtomicU64,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl FlushTimings {
    pub fn new(interval: Duration, dirty_expire: Duration) -> Self {
        Self {
            interval_ns: AtomicU64::new(nanos(interval)),
            dirty_expire_ns: AtomicU64::new(nanos(dirty_expire)),
        }
    }
    /// Puts new timings in force (the next flusher round reads them).
    pub fn set(&self, interval: Duration, dirty_expire: Duration) {
        self.interval_ns.store(nanos(interval), Relaxed);
        self.dirty_expire_ns.store(nanos(dirty_expire), Relaxed);
    }
    /// How often the background flusher wakes.
    pub fn interval(&self) -> Duration {
        Duration::from_nanos(self.interval_ns.load(Relaxed))
    }
    /// A file dirty for longer than this is written back by the flusher.
    pub fn dirty_expire(&self) -> Duration {
        Duration::from_nanos(self.dirty_expire_ns.load(Relaxed))
    }
}
