//! The tiers below the memory tier (a stack of [`DataTier`]s) and the background work that
//! moves blocks into them.
//!
//! Placement is decided by [`Planner`] (the simulator's own code): the memory tier is planner
//! tier 0, lower tier `k` is planner tier `k + 1`.
//! - A read that misses memory asks the blocks in transit, then each lower tier in order
//!   (a `contains` pre-check first, so a miss costs no I/O); an exclusive tier hands the block
//!   up (`take`), an inclusive one keeps it. BACKING serves what none has.
//! - Inclusive lower tiers above the source are filled in the background with a copy.
//! - Eviction is two-phase: under the engine lock the victim's bytes are copied into a transit
//!   buffer (before its slot is reused) and registered in the transit map; a background thread
//!   stores them into the exclusive tier below and then removes them from the map. Reads look
//!   in the map, so at every moment the block is in its slot, in transit or in the tier below.
//! - Evictions cascade: what a lower tier evicts while the background thread stores into it
//!   is spilled (a clean `DataTier::store` that may spill) to the spill hook the stack gave
//!   that tier once when it was built, into the transit map and on into the exclusive tier
//!   below it, level by level (`lower_transit`).
//! - Writes and truncation invalidate lower copies (and transit entries) of the blocks they
//!   change, top down (`invalidate_from`); a lower copy is also keyed by the file content
//!   `version`, so one left over from before a change behind the cache's back is never served.
//!
//! Bounds and back-pressure: at most `TRANSIT_MAX` blocks wait (demotions, spills and fills
//! together); past that a clean block is not demoted or filled (counted in
//! `demotions_dropped` / `fills_dropped`) — it is clean, BACKING has it — so the request path
//! never waits for a lower tier. Buffers are recycled: no allocation per block in steady state.
//!
//! Lock order: engine → transit; tier → transit (a tier's callbacks). The background thread
//! takes the engine or the transit lock alone and calls tiers with neither held; tiers never
//! call back into the manager except through the `current` check of each store and the spill
//! hooks it gives them once.

use crate::error::MemError;
use crate::file_state::FileShared;
use crate::locks::lock;
use crate::lower_bypass::{Bypass, MeasuredCosts};
use crate::lower_transit::SpillInto;
use crate::transit::Transit;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;
use tiercache_core::placement::{Action, Placement, Planner};
use tiercache_core::seqrun::Threshold;
use tiercache_core::Class;
use tiercache_tier::{CleanAdvice, DataTier, DirtyBlock, FileKey, Lookup, TierKey, TierSnapshot};

/// One tier of the stack below memory, with its placement.
#[derive(Debug, Clone)]
pub struct LowerTier {
    pub tier: Arc<dyn DataTier>,
    pub placement: Placement,
    /// Reads within a sequential run of at least this many blocks skip the tier (paper 002;
    /// see `lower_bypass`). `None`: never skipped.
    pub seq_bypass: Option<Threshold>,
    /// Write-through: blocks written back to BACKING are also stored here, clean.
    pub fill_on_write: bool,
}

impl LowerTier {
    pub fn new(tier: Arc<dyn DataTier>, placement: Placement) -> Self {
        Self {
            tier,
            placement,
            seq_bypass: None,
            fill_on_write: false,
        }
    }

    #[must_use]
    pub fn with_fill_on_write(mut self) -> Self {
        self.fill_on_write = true;
        self
    }

    #[must_use]
    pub fn with_seq_bypass(mut self, threshold: Threshold) -> Self {
        self.seq_bypass = Some(threshold);
        self
    }
}

/// Counters of the lower stack.
#[derive(Debug, Default)]
pub(crate) struct LowerCounters {
    pub hits: AtomicU64,
    pub transit_hits: AtomicU64,
    pub demotions_dropped: AtomicU64,
    /// Shared with the tiers' spill hooks.
    pub spills_dropped: Arc<AtomicU64>,
    pub fills_dropped: AtomicU64,
    pub errors: AtomicU64,
    pub dirty_bypassed: AtomicU64,
}

/// What `stats` shows about the stack below memory, besides each tier's own snapshot.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct LowerStats {
    /// Blocks served from a lower tier (or from the transit buffers) instead of BACKING.
    pub hits: u64,
    pub transit_hits: u64,
    pub transit_blocks: u64,
    /// Blocks evicted from memory, not passed down: the transit bound was reached.
    pub demotions_dropped: u64,
    /// Blocks a lower tier evicted (spilled), not passed down: spills may fill only half the
    /// transit bound, so they never crowd out memory's own (hotter) victims.
    pub spills_dropped: u64,
    pub fills_dropped: u64,
    pub errors: u64,
    /// Dirty blocks written back to BACKING instead of the dirty tier because its cleaning
    /// policy said there was no room (`Bypass`).
    pub dirty_bypassed: u64,
    /// Tiers detached after device errors (not used any more).
    pub detached: Vec<String>,
    /// Tiers that sequential runs bypass: their current threshold and what bypassed them.
    pub seq_bypass: Vec<SeqBypassStats>,
}

/// One lower tier's sequential-run bypass (paper 002's `n`).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct SeqBypassStats {
    /// Position in the lower stack (0 = right below memory).
    pub tier: usize,
    pub name: String,
    /// Current `n` in blocks (chosen from measurements in `auto` mode).
    pub threshold: u64,
    pub auto: bool,
    /// Blocks read while the tier was bypassed.
    pub bypassed_blocks: u64,
    /// `auto` only: the costs `threshold` is chosen from.
    pub measured: Option<MeasuredCosts>,
}

/// The stack below memory.
#[derive(Debug)]
pub(crate) struct Lower {
    pub planner: Planner,
    tiers: Vec<LowerTier>,
    pub(crate) bs: usize,
    /// Blocks waiting to be stored below (`lower_transit`); shared with the tiers' spill hooks.
    pub(crate) transit: Arc<Mutex<Transit>>,
    pub(crate) cv: Arc<Condvar>,
    pub(crate) counters: LowerCounters,
    /// Per tier (index in `tiers`): its evictions are spilled into the exclusive tier below.
    spills: Vec<bool>,
    /// Any inclusive or pinned lower tier (fills to queue).
    any_inclusive: bool,
    /// Index (in `tiers`) of the first tier that takes dirty data: write-back goes there.
    dirty_target: Option<usize>,
    /// Sequential-run thresholds and their measurements.
    pub bypass: Bypass,
    /// Planner bits of tiers reads never skip (they may hold dirty blocks): a sequential run
    /// only stops allocating in them.
    no_read_skip: u32,
    /// Cleaning the dirty tier's policy asked for outside the write-back path (reads), for
    /// the cleaning thread.
    advised: Mutex<Vec<DirtyBlock>>,
    /// Per tier: detached after too many device errors (`DataTier::detaching`); no longer
    /// read, filled or written back to. Shared with the spill hook of the tier above.
    detached: Vec<Arc<AtomicBool>>,
}

impl Lower {
    pub fn new(tiers: Vec<LowerTier>, bs: usize) -> Result<Self, MemError> {
        let mut placement = vec![Placement::Inclusive];
        for t in &tiers {
            let info = t.tier.info();
            if info.block_size != bs {
                return Err(MemError::config(
                    "tier",
                    format!(
                        "tier {}: block size {} differs from the memory tier's {bs}",
                        info.name, info.block_size
                    ),
                ));
            }
            placement.push(t.placement);
        }
        // An exclusive tier receives only what the tier above hands down: refuse one below a
        // tier that does not (memcached evicts on its own; a pinned range never evicts).
        for w in tiers.windows(2) {
            let (above, below) = (&w[0], &w[1]);
            let hands_down =
                above.tier.can_spill() && !matches!(above.placement, Placement::Pinned { .. });
            if below.placement == Placement::Exclusive && !hands_down {
                return Err(MemError::config(
                    "tier",
                    format!(
                        "tier {}: exclusive below tier {}, which does not hand down what it \
                         evicts (it would never receive a block); make it inclusive",
                        below.tier.info().name,
                        above.tier.info().name
                    ),
                ));
            }
        }
        let planner = Planner::new(&placement)?;
        let any_inclusive = tiers
            .iter()
            .any(|t| matches!(t.placement, Placement::Inclusive | Placement::Pinned { .. }));
        let tiers_bypass: Vec<_> = tiers.iter().map(|t| t.seq_bypass).collect();
        // Dirty blocks may live there: a read never skips it (a run only stops allocating).
        let no_read_skip = tiers
            .iter()
            .enumerate()
            .filter(|(_, t)| t.tier.info().accepts_dirty)
            .fold(0u32, |m, (k, _)| m | 1 << (k + 1));
        let dirty_target = tiers.iter().position(|t| t.tier.info().accepts_dirty);
        let tiers_len = tiers.len();
        let spills = (1..=tiers_len)
            .map(|i| planner.on_evict(i).is_some())
            .collect();
        let transit = Arc::new(Mutex::new(Transit::default()));
        let cv = Arc::new(Condvar::new());
        let counters = LowerCounters::default();
        let detached: Vec<_> = (0..tiers_len)
            .map(|_| Arc::new(AtomicBool::new(false)))
            .collect();
        // Where a tier's evictions go is fixed: given to it once, here.
        for (k, t) in tiers.iter().enumerate() {
            let Some(into) = planner.on_evict(k + 1) else {
                continue;
            };
            let hook = SpillInto {
                into,
                bs,
                transit: Arc::clone(&transit),
                cv: Arc::clone(&cv),
                dropped: Arc::clone(&counters.spills_dropped),
                detached: Arc::clone(&detached[into - 1]),
            };
            t.tier
                .set_spill_hook(Arc::new(hook))
                .map_err(MemError::SpillHook)?;
        }
        Ok(Self {
            planner,
            tiers,
            bs,
            spills,
            transit,
            cv,
            counters,
            any_inclusive,
            dirty_target,
            bypass: Bypass::new(&tiers_bypass),
            no_read_skip,
            advised: Mutex::new(Vec::new()),
            detached,
        })
    }

    /// The dirty tier's sequential cutoff in blocks: write-back runs at least this long go to
    /// BACKING.
    pub fn dirty_seq_cutoff(&self) -> Option<u64> {
        self.bypass.threshold(self.dirty_target?)
    }

    pub fn count_dirty_bypass(&self, blocks: usize) {
        self.counters
            .dirty_bypassed
            .fetch_add(blocks as u64, Relaxed);
    }

    /// Takes the cleaning advised on the read path (for the cleaning thread).
    pub fn take_advised(&self) -> Vec<DirtyBlock> {
        std::mem::take(&mut *lock(&self.advised))
    }

    /// The tier write-back goes to instead of BACKING, if any.
    pub fn dirty_tier(&self) -> Option<&Arc<dyn DataTier>> {
        self.dirty_target
            .filter(|&i| !self.is_detached(i))
            .map(|i| &self.tiers[i].tier)
    }

    /// The tier that takes dirty data, detached or not: its older copies must still be
    /// discarded when newer bytes reach BACKING.
    pub fn dirty_tier_any(&self) -> Option<&Arc<dyn DataTier>> {
        self.dirty_target.map(|i| &self.tiers[i].tier)
    }

    /// Whether lower tier `k` (index in `tiers`) is detached.
    pub(crate) fn is_detached(&self, k: usize) -> bool {
        self.detached.get(k).is_some_and(|d| d.load(SeqCst))
    }

    /// Stops using the dirty tier (its readable dirty blocks were cleaned first).
    pub fn detach_dirty_tier(&self) {
        if let Some(d) = self.dirty_target {
            self.detached[d].store(true, SeqCst);
            log::error!(
                "tier {} detached after device errors: the mount goes on without it",
                self.tiers[d].tier.info().name
            );
        }
    }

    /// The dirty tier while it is attached and asks to be detached.
    pub fn dirty_tier_detaching(&self) -> bool {
        self.dirty_tier().is_some_and(|t| t.detaching())
    }

    /// Whether evictions from memory are demoted (an exclusive tier right below).
    pub fn demotes(&self) -> bool {
        self.planner.on_evict(0).is_some()
    }

    pub(crate) fn tier(&self, planner_index: usize) -> &LowerTier {
        &self.tiers[planner_index - 1]
    }

    /// Looks for `key` (with `version`) below memory: transit buffers first, then each tier.
    /// On a hit `buf` holds the block and the planner tier index is returned. `take`: the block
    /// goes up into memory, so an exclusive tier gives it up. Tiers in `skip` (planner bits)
    /// are not asked.
    pub fn read(
        &self,
        key: TierKey,
        version: u64,
        take: bool,
        skip: u32,
        buf: &mut [u8],
    ) -> Option<usize> {
        if let Some(i) = self.transit_read(key, version, take, buf) {
            return Some(i);
        }
        let skip = skip & !self.no_read_skip;
        if let Some(d) = self.dirty_target.filter(|&d| !self.is_detached(d)) {
            // A request reached the dirty tier's level: its cleaning policy hears of it.
            let advice = self.tiers[d].tier.cleaning().map(|c| c.on_request());
            match advice.unwrap_or(CleanAdvice::Idle) {
                CleanAdvice::Clean(blocks) => {
                    // Until the cleaning thread takes it: one set of advice is enough.
                    let mut a = lock(&self.advised);
                    if a.is_empty() {
                        a.extend(blocks);
                    }
                }
                CleanAdvice::Idle | CleanAdvice::Bypass => {}
            }
        }
        for (k, lt) in self.tiers.iter().enumerate() {
            if skip & (1 << (k + 1)) != 0 || self.is_detached(k) || !lt.tier.contains(&key) {
                continue;
            }
            let t0 = self.bypass.measuring().then(Instant::now);
            let r = if take && lt.placement == Placement::Exclusive {
                lt.tier.take(&key, version, buf)
            } else {
                lt.tier.read(&key, version, buf)
            };
            match r {
                Ok(Lookup::Hit { .. }) => {
                    if let Some(t0) = t0 {
                        self.bypass.tier_sample(k, t0.elapsed());
                    }
                    self.counters.hits.fetch_add(1, Relaxed);
                    return Some(k + 1);
                }
                Ok(Lookup::Miss) => {}
                Err(e) => {
                    // Degrade to the next source, never to wrong bytes.
                    self.counters.errors.fetch_add(1, Relaxed);
                    log::warn!("{e}; reading the block from the next source");
                }
            }
        }
        // A tier may have spilled the block after the first look and before it was asked.
        if self.spills.contains(&true) {
            return self.transit_read(key, version, take, buf);
        }
        None
    }

    /// After a block came from planner tier `from` (the stack's depth for BACKING): queues the
    /// fills the planner asks for below memory (none in the tiers of `skip`), with a copy of
    /// `data`.
    #[allow(clippy::too_many_arguments)]
    pub fn after_read(
        &self,
        from: usize,
        key: TierKey,
        version: u64,
        class: Class,
        data: &[u8],
        file: &Arc<FileShared>,
        change: u64,
        skip: u32,
    ) {
        if !self.any_inclusive {
            return;
        }
        let hit = (from < self.planner.len()).then_some(from);
        for action in self.planner.on_access_skipping(hit, skip).as_slice() {
            let i = match *action {
                Action::Fill(i) => i,
                // Pinned (paper 004): only blocks in the tier's range, and only into room it
                // has — the tier never evicts for them (the simulator's `insert_if_free`).
                Action::FillPinned { tier, first } => {
                    let t = &self.tier(tier).tier;
                    let cap = t.info().capacity_blocks;
                    let b = key.block.0;
                    let in_range = b >= first && b - first < cap;
                    if !in_range || t.contains(&key) || t.stats().used_blocks >= cap {
                        continue;
                    }
                    tier
                }
                _ => continue,
            };
            if i == 0 {
                continue; // memory: the read path fills it
            }
            self.queue_fill(i, key, version, class, data, file, change);
        }
    }

    /// Whether some tier takes a clean copy of what is written back to BACKING.
    pub fn fills_on_write(&self) -> bool {
        self.tiers.iter().any(|t| t.fill_on_write)
    }

    /// `data` (block `key`, read while the file's change counter was `change`) was written
    /// back to BACKING: write-through tiers get a clean copy, in the background.
    #[allow(clippy::too_many_arguments)]
    pub fn after_write(
        &self,
        key: TierKey,
        version: u64,
        class: Class,
        data: &[u8],
        file: &Arc<FileShared>,
        change: u64,
    ) {
        for (k, lt) in self.tiers.iter().enumerate() {
            if lt.fill_on_write {
                self.queue_fill(k + 1, key, version, class, data, file, change);
            }
        }
    }

    /// A write changed `key`: no lower or transit copy of the old bytes may be served.
    pub fn invalidate(&self, key: TierKey) {
        self.invalidate_from(0, key);
    }

    /// [`Lower::invalidate`] without waiting for a tier's I/O (`DataTier::try_invalidate`),
    /// same order; `false` when some tier could not at once (the tiers above it are done).
    pub fn try_invalidate(&self, key: TierKey) -> bool {
        self.drop_copies_from(0, key, |t| t.try_invalidate(&key))
    }

    /// The clean copy of `key` in the dirty tier (cleaned while memory holds newer bytes)
    /// must go, and whatever the tier spilled of it on the way.
    pub fn invalidate_from_dirty_tier(&self, key: TierKey) {
        if let Some(d) = self.dirty_target {
            self.invalidate_from(d, key);
        }
    }

    /// Lower tiers `first..` (indices in `tiers`) drop their clean copies of `key`, and the
    /// transit map its entry. Top down, the map again after each tier that spills: a block a
    /// tier spilled before it was invalidated is in the map by then (see `lower_transit`).
    fn invalidate_from(&self, first: usize, key: TierKey) {
        self.drop_copies_from(first, key, |t| {
            t.invalidate(&key);
            true
        });
    }

    /// The walk of `invalidate_from` with `drop` as each tier's step; stops at the first tier
    /// whose `drop` answers `false` (and answers `false`).
    fn drop_copies_from(
        &self,
        first: usize,
        key: TierKey,
        drop: impl Fn(&dyn DataTier) -> bool,
    ) -> bool {
        lock(&self.transit).demoting.remove(&key);
        for (k, lt) in self.tiers.iter().enumerate().skip(first) {
            if !drop(lt.tier.as_ref()) {
                return false;
            }
            if self.spills[k] {
                lock(&self.transit).demoting.remove(&key);
            }
        }
        true
    }

    /// Blocks of `file` from `from_block` on changed (truncation, change behind our back).
    /// Same order as `invalidate_from`.
    pub fn invalidate_file(&self, file: FileKey, from_block: u64) {
        let doomed = |k: &TierKey| k.file == file && k.block.0 >= from_block;
        lock(&self.transit).demoting.retain(|k, _| !doomed(k));
        for (i, lt) in self.tiers.iter().enumerate() {
            lt.tier.invalidate_file(&file, from_block);
            if self.spills[i] {
                lock(&self.transit).demoting.retain(|k, _| !doomed(k));
            }
        }
    }

    pub fn stats(&self) -> (LowerStats, Vec<TierSnapshot>) {
        let c = &self.counters;
        let transit_blocks = {
            let t = lock(&self.transit);
            (t.queue.len() + t.busy) as u64
        };
        let s = LowerStats {
            hits: c.hits.load(Relaxed),
            transit_hits: c.transit_hits.load(Relaxed),
            transit_blocks,
            demotions_dropped: c.demotions_dropped.load(Relaxed),
            spills_dropped: c.spills_dropped.load(Relaxed),
            fills_dropped: c.fills_dropped.load(Relaxed),
            errors: c.errors.load(Relaxed),
            dirty_bypassed: c.dirty_bypassed.load(Relaxed),
            detached: self
                .tiers
                .iter()
                .enumerate()
                .filter(|&(k, _)| self.is_detached(k))
                .map(|(_, t)| t.tier.info().name.clone())
                .collect(),
            seq_bypass: self
                .tiers
                .iter()
                .enumerate()
                .filter_map(|(k, t)| {
                    Some(SeqBypassStats {
                        tier: k,
                        name: t.tier.info().name.clone(),
                        threshold: self.bypass.threshold(k)?,
                        auto: self.bypass.is_auto(k),
                        bypassed_blocks: self.bypass.bypassed(k),
                        measured: self.bypass.measured(k),
                    })
                })
                .collect(),
        };
        (s, self.tiers.iter().map(|t| t.tier.stats()).collect())
    }
}
