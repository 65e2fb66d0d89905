//! Statistics of the memory tier: atomic counters bumped on the data path, the windowed view of
//! the engine's hit counters, and the plain [`MemStats`] snapshot (serde `Serialize`).
//!
//! Window: the engine's per-class and per-pool hit counters are snapshotted every
//! `MemConfig::stats_window` (default 10 s; rolled by the flusher tick and by `stats()`).
//! [`MemStats::window`] is the last *completed* window (or, before the first one completes, the
//! partial window since start, with `complete = false`). Time windows rather than ω accesses so
//! that an idle mount still shows recent behaviour.

use crate::backing::EmulationStats;
use crate::lower::LowerStats;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};
use tiercache_core::stats::{HitCounts, TierStats};
use tiercache_core::{Class, PoolId};
use tiercache_tier::TierSnapshot;

/// Counters bumped outside the engine lock.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub backing_reads: AtomicU64,
    pub backing_writes: AtomicU64,
    pub backing_bytes_read: AtomicU64,
    pub backing_bytes_written: AtomicU64,
    pub backing_syncs: AtomicU64,
    /// Time spent in successful BACKING reads and writes, in ns.
    pub backing_read_ns: AtomicU64,
    pub backing_write_ns: AtomicU64,
    pub bypass_blocks: AtomicU64,
    pub write_through_blocks: AtomicU64,
    pub readahead_blocks: AtomicU64,
    pub writeback_blocks: AtomicU64,
    pub writeback_errors: AtomicU64,
    pub throttled_writes: AtomicU64,
}

impl Counters {
    #[inline]
    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Relaxed);
    }
    #[inline]
    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Relaxed)
    }
}

/// Hits and misses of one pool, with its current size.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PoolStats {
    pub pool: PoolId,
    pub blocks: u64,
    pub hits: u64,
    pub misses: u64,
}

/// Hits and misses of one class, with its resident blocks now.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ClassStats {
    pub class: Class,
    pub hits: u64,
    pub misses: u64,
    /// Blocks of the class the tier holds now (the same in a window's view).
    pub blocks: u64,
}

/// One class of the table in force: its name and hit-ratio target, and whether the
/// partitioner judges the target reachable (`mrc`; `None` when it cannot tell).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClassInfo {
    pub class: Class,
    pub name: String,
    pub target: Option<f64>,
    pub target_reachable: Option<bool>,
    /// The partitioner's estimated curve of the class's pool (`mrc`; `normal`'s is the rest
    /// pool's): `(blocks, hit ratio)` at 16 sizes up to the tier, smallest first.
    pub curve: Option<Vec<(u64, f64)>>,
}

/// Sizes at which `stats` shows a class's estimated curve (sixteenths of the tier).
pub const CURVE_POINTS: u64 = 16;

impl ClassStats {
    /// Hits / (hits + misses), or `None` without accesses.
    pub fn hit_ratio(&self) -> Option<f64> {
        HitCounts {
            hits: self.hits,
            misses: self.misses,
        }
        .ratio()
    }
}

/// Counts over one statistics window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WindowStats {
    /// Length of the window in seconds.
    pub secs: f64,
    /// False while the first window is still running (then this is "since start").
    pub complete: bool,
    pub classes: Vec<ClassStats>,
    /// Per pool hits and misses in the window (`blocks` is the current size).
    pub pools: Vec<PoolStats>,
}

/// Backing I/O done by the tier (after coalescing: one request per `pread`/`pwrite`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct BackingStats {
    pub reads: u64,
    pub writes: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub syncs: u64,
    /// Time spent in successful reads and writes of BACKING, in ns (divided by `reads` /
    /// `writes`: their mean latency).
    pub read_ns: u64,
    pub write_ns: u64,
    /// How BACKING I/O treats the kernel page cache ([`crate::IoMode`]).
    pub io_mode: crate::IoMode,
}

/// How requests were served, in blocks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct PathStats {
    /// Blocks read from BACKING without caching (no slot could be had, or a slot was not ready).
    pub bypass_blocks: u64,
    /// Blocks written straight to BACKING because no slot could be had.
    pub write_through_blocks: u64,
    /// Blocks brought in by read-ahead.
    pub readahead_blocks: u64,
    /// Blocks written back (made clean).
    pub writeback_blocks: u64,
    /// Failed write-back requests.
    pub writeback_errors: u64,
    /// Times a writer had to help flush (dirty ratio exceeded).
    pub throttled_writes: u64,
    pub evictions: u64,
    pub insertions: u64,
}

/// A plain snapshot of the memory tier.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemStats {
    pub uptime_secs: f64,
    pub capacity_blocks: u64,
    pub block_size: u64,
    pub used_blocks: u64,
    pub dirty_blocks: u64,
    pub policy: String,
    pub partition: String,
    /// The partitioner's protected-pool target, when it has one.
    pub s_target: Option<u64>,
    /// The class table in force, in index order (names, targets, reachability).
    pub class_table: Vec<ClassInfo>,
    /// Blocks in the protected pool.
    pub s_cur: u64,
    /// Since start.
    pub pools: Vec<PoolStats>,
    /// Since start.
    pub classes: Vec<ClassStats>,
    pub window: WindowStats,
    pub backing: BackingStats,
    /// Blocks made clean per second over the last sampling interval (flusher tick).
    pub writeback_blocks_per_sec: f64,
    pub paths: PathStats,
    /// Trace records dropped because the trace channel was full.
    pub trace_dropped: u64,
    /// The backing device MODEL's counters when `--emulate` is in use.
    pub emulation: Option<EmulationStats>,
    /// Every data tier, top (memory) first.
    pub tiers: Vec<TierSnapshot>,
    /// The stack below memory (transit, drops), when there is one.
    pub lower: Option<LowerStats>,
}

impl MemStats {
    /// The since-start counts of `class`.
    pub fn class(&self, class: Class) -> ClassStats {
        self.classes
            .iter()
            .copied()
            .find(|c| c.class == class)
            .unwrap_or(ClassStats {
                class,
                hits: 0,
                misses: 0,
                blocks: 0,
            })
    }

    /// The class named `name` in the table in force.
    pub fn class_named(&self, name: &str) -> Option<Class> {
        self.class_table
            .iter()
            .find(|c| c.name == name)
            .map(|c| c.class)
    }
}

/// Keeps the snapshots bounding the current and the last completed window, and the write-back
/// rate sample. Lives in the engine (its counters are the tier's).
#[derive(Debug)]
pub(crate) struct Windows {
    len: Duration,
    start: Instant,
    at_start: TierStats,
    last: Option<(Duration, TierStats)>,
    rate_at: Instant,
    rate_total: u64,
    rate: f64,
}

impl Windows {
    pub fn new(len: Duration, now: Instant) -> Self {
        Self {
            len,
            start: now,
            at_start: TierStats::default(),
            last: None,
            rate_at: now,
            rate_total: 0,
            rate: 0.0,
        }
    }

    /// Closes the current window if it is due.
    pub fn roll(&mut self, now: Instant, current: &TierStats) {
        let age = now.saturating_duration_since(self.start);
        if age >= self.len {
            self.last = Some((age, diff(current, &self.at_start)));
            self.start = now;
            self.at_start = *current;
        }
    }

    /// Moves the snapshots' class counts as `Engine::set_classes` moves the live ones, so that
    /// a window's difference stays per class.
    pub fn remap_classes(&mut self, new: &dyn Fn(Class) -> Class) {
        remap_classes(&mut self.at_start, new);
        if let Some((_, s)) = &mut self.last {
            remap_classes(s, new);
        }
    }

    /// The last completed window, or the running one since start.
    pub fn view(&self, now: Instant, current: &TierStats) -> (Duration, bool, TierStats) {
        match &self.last {
            Some((d, s)) => (*d, true, *s),
            None => (
                now.saturating_duration_since(self.start),
                false,
                diff(current, &self.at_start),
            ),
        }
    }

    /// Samples the write-back rate if at least `min_gap` passed since the last sample.
    pub fn sample_rate(&mut self, now: Instant, total: u64, min_gap: Duration) -> f64 {
        let dt = now.saturating_duration_since(self.rate_at);
        if dt >= min_gap && !dt.is_zero() {
            self.rate = total.saturating_sub(self.rate_total) as f64 / dt.as_secs_f64();
            self.rate_at = now;
            self.rate_total = total;
        }
        self.rate
    }
}

fn diff(now: &TierStats, then: &TierStats) -> TierStats {
    let mut d = *now;
    for i in 0..d.pools.len() {
        d.pools[i] = sub(&now.pools[i], &then.pools[i]);
    }
    for i in 0..d.classes.len() {
        d.classes[i] = sub(&now.classes[i], &then.classes[i]);
    }
    d.requests = now.requests.saturating_sub(then.requests);
    d.hits = now.hits.saturating_sub(then.hits);
    d
}

fn sub(a: &HitCounts, b: &HitCounts) -> HitCounts {
    HitCounts {
        hits: a.hits.saturating_sub(b.hits),
        misses: a.misses.saturating_sub(b.misses),
    }
}

/// Moves the class counts of `s` from each class `c` to `new(c)` (counts landing on one class
/// add up).
pub(crate) fn remap_classes(s: &mut TierStats, new: &dyn Fn(Class) -> Class) {
    let old = s.classes;
    s.classes = Default::default();
    for c in Class::all() {
        let (from, to) = (old[c.index()], &mut s.classes[new(c).index()]);
        to.hits += from.hits;
        to.misses += from.misses;
    }
}

/// Per-class counts of `s` for the first `blocks.len()` classes, with their resident blocks.
pub(crate) fn classes_of(s: &TierStats, blocks: &[u64]) -> Vec<ClassStats> {
    Class::all()
        .zip(blocks)
        .map(|(class, &blocks)| {
            let c = s.class(class);
            ClassStats {
                class,
                hits: c.hits,
                misses: c.misses,
                blocks,
            }
        })
        .collect()
}

/// Per-pool counts of `s`, with current sizes `sizes` (indexed by `PoolId::index`).
pub(crate) fn pools_of(s: &TierStats, sizes: [u64; 2]) -> Vec<PoolStats> {
    PoolId::BUILT_IN
        .iter()
        .map(|&pool| {
            let c = s.pool(pool);
            PoolStats {
                pool,
                blocks: sizes[pool.index()],
                hits: c.hits,
                misses: c.misses,
            }
        })
        .collect()
}
