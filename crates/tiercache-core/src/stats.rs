//! Counters kept per tier, per pool and per class. Plain integers: the engine is single-threaded
//! per tier (the live cache wraps a tier in a lock), and snapshots are cheap copies.

use crate::class::{Class, PoolId, MAX_CLASSES};
use serde::Serialize;

/// Hits and misses of one pool or class.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct HitCounts {
    pub hits: u64,
    pub misses: u64,
}

impl HitCounts {
    #[inline]
    pub fn record(&mut self, hit: bool) {
        if hit {
            self.hits += 1;
        } else {
            self.misses += 1;
        }
    }
    pub const fn requests(&self) -> u64 {
        self.hits + self.misses
    }
    /// Hits / requests, or `None` with no requests.
    pub fn ratio(&self) -> Option<f64> {
        let r = self.requests();
        (r > 0).then(|| self.hits as f64 / r as f64)
    }
    /// Counts since `earlier` (a previous snapshot of the same counter).
    pub fn since(&self, earlier: &HitCounts) -> HitCounts {
        HitCounts {
            hits: self.hits - earlier.hits,
            misses: self.misses - earlier.misses,
        }
    }
}

/// Everything a tier counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct TierStats {
    /// Lookups that reached this tier.
    pub requests: u64,
    pub hits: u64,
    /// By pool (`PoolId::index`).
    pub pools: [HitCounts; MAX_CLASSES],
    /// By class (`Class::index`).
    pub classes: [HitCounts; MAX_CLASSES],
    /// Blocks brought in after a miss (fills), demotions excluded.
    pub insertions: u64,
    pub evictions: u64,
    /// Blocks demoted into this tier from the tier above.
    pub demotions: u64,
    /// Blocks moved from this tier up to a tier above on a hit here.
    pub promotions: u64,
    /// Sum of sampled duplication fractions and number of samples.
    pub duplication_sum: f64,
    pub duplication_samples: u64,
}

impl TierStats {
    pub fn pool(&self, pool: PoolId) -> &HitCounts {
        &self.pools[pool.index()]
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
    /// Mean sampled fraction of this tier's blocks also held above (0 for the top tier).
    pub fn duplication(&self) -> f64 {
        if self.duplication_samples == 0 {
            0.0
        } else {
            self.duplication_sum / self.duplication_samples as f64
        }
    }
}
