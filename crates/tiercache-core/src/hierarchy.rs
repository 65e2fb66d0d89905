//! An ordered list of tiers, top first, and how blocks move between them.
//!
//! Placement of each lower tier (the top tier is always filled on a miss):
//! - `inclusive`: filled when a miss passes through it (the papers' setup, paper 004);
//! - `exclusive`: never filled on a miss; clean blocks evicted from the tier above are demoted
//!   into it, and a hit there moves the block up (a promotion) and removes it here;
//! - `pinned`: paper 004's remedy: only blocks of a fixed index range
//!   `[first, first + capacity)` are admitted, into free slots, and never evicted.
//!
//! Duplication of tier i > 0 = fraction of its blocks also held in some tier above, sampled every
//! `max(1000, Σ capacities)` requests and averaged. A sample looks at up to 1024 evenly spaced
//! slots (all of them in a tier that small; the start rotates between samples), so its cost does
//! not grow with the tier.

use crate::class::Class;
use crate::error::CoreError;
use crate::ids::{BlockKey, SlotId};
use crate::stats::HitCounts;
use crate::tier::{Evicted, Tier, TierConfig};
use crate::Access;
use std::fmt;
use std::str::FromStr;

/// How a lower tier is kept relative to the tiers above it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Placement {
    #[default]
    Inclusive,
    Exclusive,
    /// Admit blocks with index in `[first, first + capacity)`.
    Pinned {
        first: u64,
    },
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Placement::Inclusive => f.write_str("inclusive"),
            Placement::Exclusive => f.write_str("exclusive"),
            Placement::Pinned { first: 0 } => f.write_str("pinned"),
            Placement::Pinned { first } => write!(f, "pinned={first}"),
        }
    }
}

impl FromStr for Placement {
    type Err = String;
    /// `inclusive`, `exclusive`, `pinned` or `pinned=FIRST_BLOCK`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "inclusive" => Ok(Placement::Inclusive),
            "exclusive" => Ok(Placement::Exclusive),
            "pinned" => Ok(Placement::Pinned { first: 0 }),
            _ => match s.strip_prefix("pinned=") {
                Some(n) => n
                    .parse()
                    .map(|first| Placement::Pinned { first })
                    .map_err(|_| format!("`{s}`: pinned=FIRST needs a block number")),
                None => Err(format!(
                    "unknown placement `{s}` (expected inclusive|exclusive|pinned[=FIRST])"
                )),
            },
        }
    }
}

/// One level of a hierarchy.
#[derive(Debug, Clone)]
pub struct LevelConfig {
    pub tier: TierConfig,
    pub placement: Placement,
}

/// Tiers top first, with overall and per-class counters.
#[derive(Debug)]
pub struct Hierarchy {
    tiers: Vec<Tier>,
    placement: Vec<Placement>,
    requests: u64,
    hits: u64,
    classes: [HitCounts; Class::COUNT],
    dup_interval: u64,
    since_sample: u64,
    samples_taken: u64,
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
            .map(|l| Tier::new(&l.tier))
            .collect::<Result<Vec<_>, _>>()?;
        let mut placement: Vec<Placement> = levels.iter().map(|l| l.placement).collect();
        placement[0] = Placement::Inclusive;
        let total: usize = tiers.iter().map(Tier::capacity).sum();
        Ok(Self {
            tiers,
            placement,
            requests: 0,
            hits: 0,
            classes: Default::default(),
            dup_interval: (total as u64).max(1000),
            since_sample: 0,
            samples_taken: 0,
        })
    }

    pub fn tiers(&self) -> &[Tier] {
        &self.tiers
    }
    pub fn tier_mut(&mut self, i: usize) -> &mut Tier {
        &mut self.tiers[i]
    }
    pub fn placement(&self, i: usize) -> Placement {
        self.placement[i]
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
        self.requests += 1;
        let n = self.tiers.len();
        let mut hit = None;
        for (i, t) in self.tiers.iter_mut().enumerate() {
            if t.lookup(a.key, a.class).is_some() {
                hit = Some(i);
                break;
            }
        }
        self.classes[a.class.index()].record(hit.is_some());
        if hit.is_some() {
            self.hits += 1;
        }
        let missed_above = match hit {
            Some(j) => {
                if j > 0
                    && self.placement[j] == Placement::Exclusive
                    && self.tiers[j].remove(&a.key).is_some()
                {
                    self.tiers[j].stats_mut().promotions += 1;
                }
                j
            }
            None => n,
        };
        // Fill bottom-up so that a demotion cascading down meets already-filled tiers.
        for i in (0..missed_above).rev() {
            self.fill(i, a.key, a.class);
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

    fn fill(&mut self, i: usize, key: BlockKey, class: Class) {
        match self.placement[i] {
            Placement::Inclusive => {
                // A tier that cannot take the block (all pinned/dirty) just does not cache it.
                if let Ok(ins) = self.tiers[i].insert(key, class) {
                    if let Some(ev) = ins.evicted {
                        self.demote(i + 1, ev);
                    }
                }
            }
            Placement::Exclusive => {}
            Placement::Pinned { first } => {
                let b = key.block.0;
                if b >= first && b - first < self.tiers[i].capacity() as u64 {
                    self.tiers[i].insert_if_free(key, class);
                }
            }
        }
    }

    /// Pushes a clean block evicted above into the exclusive tiers below, cascading. A block
    /// still held higher up (an inclusive middle tier evicted its copy) is not demoted, so an
    /// exclusive tier never duplicates a tier above it.
    fn demote(&mut self, mut i: usize, mut ev: Evicted) {
        while i < self.tiers.len() && self.placement[i] == Placement::Exclusive {
            // Tier i − 1 just evicted the block; only the tiers above it may still hold it.
            if self.tiers[..i - 1].iter().any(|t| t.contains(&ev.key)) {
                return;
            }
            match self.tiers[i].demote_into(ev.key, ev.class) {
                Ok(ins) => match ins.evicted {
                    Some(next) => {
                        ev = next;
                        i += 1;
                    }
                    None => return,
                },
                Err(_) => return,
            }
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
