//! An ordered list of tiers, top first, and how blocks move between them.
//!
//! Where blocks go is decided by [`Planner`] (see [`crate::placement`]); this module applies
//! its decisions to the tiers' metadata, the way the live cache applies them with I/O.
//!
//! Duplication of tier i > 0 = fraction of its blocks also held in some tier above, sampled every
//! `max(1000, Σ capacities)` requests and averaged. A sample looks at up to 1024 evenly spaced
//! slots (all of them in a tier that small; the start rotates between samples), so its cost does
//! not grow with the tier.
//!
//! A set-associative tier ([`TierIndex::evicts_sets`]) drops a whole set at once: every block
//! it drops is demoted like a single evicted block, in order, before the next access.

use crate::class::Class;
use crate::error::CoreError;
use crate::ids::SlotId;
use crate::index::TierIndex;
pub use crate::placement::Placement;
use crate::placement::{Action, Planner};
use crate::stats::HitCounts;
use crate::tier::{Evicted, Tier, TierConfig};
use crate::Access;

/// One level of a hierarchy.
#[derive(Debug, Clone)]
pub struct LevelConfig {
    pub tier: TierConfig,
    pub placement: Placement,
}

/// Tiers top first, with overall and per-class counters.
#[derive(Debug)]
pub struct Hierarchy {
    tiers: Vec<Box<dyn TierIndex>>,
    planner: Planner,
    requests: u64,
    hits: u64,
    classes: [HitCounts; crate::class::MAX_CLASSES],
    dup_interval: u64,
    since_sample: u64,
    samples_taken: u64,
    /// Bit i set: tier i's evictions may drop several blocks (see the module docs).
    set_evicting: u32,
}

impl Hierarchy {
    pub fn new(levels: &[LevelConfig]) -> Result<Self, CoreError> {
        if levels.is_empty() {
            return Err(CoreError::config(
                "tier",
                "a hierarchy needs at least one tier",
            ));
        }
        let tiers = levels
            .iter()
            .map(|l| Tier::new(&l.tier).map(|t| Box::new(t) as Box<dyn TierIndex>))
            .collect::<Result<Vec<_>, _>>()?;
        let placement: Vec<Placement> = levels.iter().map(|l| l.placement).collect();
        Self::with_indexes(tiers, &placement)
    }

    /// A hierarchy over any tier indexes (e.g. a set-associative one for a flash tier), top
    /// first, with their placements.
    pub fn with_indexes(
        tiers: Vec<Box<dyn TierIndex>>,
        placement: &[Placement],
    ) -> Result<Self, CoreError> {
        if tiers.is_empty() || tiers.len() != placement.len() {
            return Err(CoreError::config(
                "tier",
                "a hierarchy needs at least one tier, each with a placement",
            ));
        }
        let planner = Planner::new(placement)?;
        let total: usize = tiers.iter().map(|t| t.capacity()).sum();
        let set_evicting = tiers
            .iter()
            .enumerate()
            .filter(|(_, t)| t.evicts_sets())
            .fold(0, |m, (i, _)| m | 1 << i);
        Ok(Self {
            tiers,
            planner,
            requests: 0,
            hits: 0,
            classes: Default::default(),
            dup_interval: (total as u64).max(1000),
            since_sample: 0,
            samples_taken: 0,
            set_evicting,
        })
    }

    pub fn tiers(&self) -> &[Box<dyn TierIndex>] {
        &self.tiers
    }
    pub fn tier_mut(&mut self, i: usize) -> &mut dyn TierIndex {
        self.tiers[i].as_mut()
    }
    pub fn placement(&self, i: usize) -> Placement {
        self.planner.placement(i)
    }
    pub fn planner(&self) -> &Planner {
        &self.planner
    }
    pub fn requests(&self) -> u64 {
        self.requests
    }
    pub fn hits(&self) -> u64 {
        self.hits
    }
    pub fn class(&self, class: Class) -> &HitCounts {
        &self.classes[class.index()]
    }
    pub fn hit_ratio(&self) -> f64 {
        if self.requests == 0 {
            0.0
        } else {
            self.hits as f64 / self.requests as f64
        }
    }

    /// Serves one access; returns the index of the tier that hit, if any.
    #[inline]
    pub fn access(&mut self, a: Access) -> Option<usize> {
        self.serve(a, 0)
    }

    /// Like [`Hierarchy::access`] for an access that bypasses the tiers in `skip` (bit `i` =
    /// tier `i`, e.g. a remote tier a sequential run skips, see [`crate::seqrun`]): they are
    /// neither looked up (their counters do not move) nor filled. Evictions above may still
    /// demote into them, as on any access.
    #[inline]
    pub fn access_skipping(&mut self, a: Access, skip: u32) -> Option<usize> {
        self.serve(a, skip)
    }

    // `access` passes a constant 0, so the skip tests fold away on its path.
    #[inline(always)]
    fn serve(&mut self, a: Access, skip: u32) -> Option<usize> {
        self.requests += 1;
        let n = self.tiers.len();
        let mut hit = None;
        for (i, t) in self.tiers.iter_mut().enumerate() {
            if skip & (1 << i) != 0 {
                continue;
            }
            if t.lookup(a.key, a.class).is_some() {
                hit = Some(i);
                break;
            }
        }
        self.classes[a.class.index()].record(hit.is_some());
        if hit.is_some() {
            self.hits += 1;
        }
        for action in self.planner.on_access_skipping(hit, skip).as_slice() {
            match *action {
                Action::ReadFrom(_) => {}
                Action::TakeFrom(j) => {
                    if self.tiers[j].remove(&a.key).is_some() {
                        self.tiers[j].stats_mut().promotions += 1;
                    }
                }
                Action::Fill(i) => {
                    // A tier that cannot take the block (all pinned/dirty) just does not cache it.
                    if let Ok(ins) = self.tiers[i].insert(a.key, a.class) {
                        if let Some(ev) = ins.evicted {
                            self.demote(i, ev);
                            if self.set_evicting & (1 << i) != 0 {
                                self.demote_rest(i);
                            }
                        }
                    }
                }
                Action::FillPinned { tier, first } => {
                    let b = a.key.block.0;
                    if b >= first && b - first < self.tiers[tier].capacity() as u64 {
                        self.tiers[tier].insert_if_free(a.key, a.class);
                    }
                }
            }
        }
        if n > 1 {
            self.since_sample += 1;
            if self.since_sample >= self.dup_interval {
                self.since_sample = 0;
                self.sample_duplication();
            }
        }
        hit
    }

    /// Pushes a clean block evicted above into the exclusive tiers below, cascading. A block
    /// still held higher up (an inclusive middle tier evicted its copy) is not demoted, so an
    /// exclusive tier never duplicates a tier above it.
    fn demote(&mut self, from: usize, mut ev: Evicted) {
        let mut from = from;
        while let Some(i) = self.planner.on_evict(from) {
            // Tier `from` just evicted the block; only the tiers above it may still hold it.
            if self.tiers[..from].iter().any(|t| t.contains(&ev.key)) {
                return;
            }
            match self.tiers[i].demote_into(ev.key, ev.class) {
                Ok(ins) => match ins.evicted {
                    Some(next) if self.set_evicting & (1 << i) != 0 => {
                        self.demote(i, next);
                        self.demote_rest(i);
                        return;
                    }
                    Some(next) => {
                        ev = next;
                        from = i;
                    }
                    None => return,
                },
                Err(_) => return,
            }
        }
    }

    /// Demotes the other blocks a set eviction in tier `from` dropped (its first went through
    /// [`Hierarchy::demote`]). Recursion is bounded by the stack's depth: a set eviction below
    /// is drained before the next block of this one goes down.
    #[cold]
    fn demote_rest(&mut self, from: usize) {
        if self.planner.on_evict(from).is_none() {
            return;
        }
        while let Some(ev) = self.tiers[from].next_evicted() {
            self.demote(from, ev);
        }
    }

    /// Records, for every tier below the top, the fraction of its blocks also held above.
    pub fn sample_duplication(&mut self) {
        const PROBES: usize = 1024;
        self.samples_taken += 1;
        for i in 1..self.tiers.len() {
            let (above, rest) = self.tiers.split_at_mut(i);
            let t = &mut rest[0];
            let cap = t.capacity();
            let step = cap.div_ceil(PROBES).max(1);
            let start = (self.samples_taken as usize).wrapping_mul(7919) % step;
            let (mut held, mut dup) = (0usize, 0usize);
            for pos in (start..cap).step_by(step) {
                if let Some(k) = t.key_at(SlotId(pos as u32)) {
                    held += 1;
                    dup += usize::from(above.iter().any(|u| u.contains(&k)));
                }
            }
            if held == 0 {
                continue;
            }
            let frac = dup as f64 / held as f64;
            let s = t.stats_mut();
            s.duplication_sum += frac;
            s.duplication_samples += 1;
        }
    }
}
