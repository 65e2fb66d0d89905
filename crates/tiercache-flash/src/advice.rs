//! The tier's cleaning advice: [`Cleaner`](crate::cleaner::Cleaner) (paper 001's idle-time
//! policy, or eager) fed from the tier's own index under its lock, with a monotonic clock.
//!
//! - `on_request` (a memory miss or a write-back reached the tier): `idle` mode answers
//!   `Bypass` when no set is free of dirty blocks (counted in `bypassed`), else `Idle`, and
//!   interrupts a writeback; `eager` mode answers `Clean` with the LRU dirty set's blocks
//!   while free sets < floor (cleaning in the request path, 001's old scheme).
//! - `on_tick`: `idle` mode answers `Clean` with up to `max_sets_at_once` LRU dirty sets'
//!   blocks once no request came for `wait` and free sets < floor, until the floor is back
//!   (and, busy but above `dirty_max` dirty, at most every `busy_interval`).
//! - Detaching (degraded or tainted): requests are told to `Bypass`, ticks ask to clean the
//!   LRU dirty sets (whatever the state), so the manager writes back what is readable.
//!
//! "Free sets" here are sets holding no dirty block (free, or reusable at once); the
//! unmapped ones are `unmapped_sets` in [`FlashStats`](crate::FlashStats).

use crate::cleaner::{Decision, View};
use crate::index::SetId;
use crate::tier::{FlashTier, State};
use std::time::Duration;
use tiercache_tier::CleanAdvice;

impl FlashTier {
    /// The cleaner's floor: `free_floor` of the config, or when 0, a tenth of the sets (at
    /// least 1).
    pub(crate) fn floor_for(free_floor: u32, sets: u32) -> u32 {
        if free_floor == 0 {
            sets.div_ceil(10).max(1)
        } else {
            free_floor
        }
    }

    /// Time on the tier's monotonic clock (since it was created or opened).
    pub fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    /// `Cleaning::on_request` at a given time of the tier's clock (tests drive time).
    pub fn on_request_at(&self, now: Duration) -> CleanAdvice {
        self.advise(now, true)
    }

    /// `Cleaning::on_tick` at a given time of the tier's clock (tests drive time).
    pub fn on_tick_at(&self, now: Duration) -> CleanAdvice {
        self.advise(now, false)
    }

    fn advise(&self, now: Duration, request: bool) -> CleanAdvice {
        if !request {
            // Quiet ticks let the device drop what it keeps of past I/O (the cache file's
            // pages); outside the lock, it needs none.
            self.dev.settle();
        }
        let mut st = self.st();
        if st.closed {
            return CleanAdvice::Idle;
        }
        let batch = self.cfg.cleaner.max_sets_at_once.max(1);
        if st.fs.degraded {
            if request {
                st.bypassed += 1;
                return CleanAdvice::Bypass;
            }
            let lru = Self::lru_dirty_of(&st, batch);
            return self.advice_clean(&mut st, &lru);
        }
        let free = self.geo.sets - st.idx.dirty_sets;
        let fraction = st.idx.dirty_blocks as f64 / self.geo.capacity_blocks() as f64;
        // The cleaner looks at the list only below the floor or above dirty_max (walking the
        // LRU list on every request would cost O(sets) when its cold end is clean).
        let lru = if free < self.cfg.cleaner.free_floor || fraction > self.cfg.cleaner.dirty_max {
            Self::lru_dirty_of(&st, batch)
        } else {
            Vec::new()
        };
        let view = View {
            free_sets: free,
            dirty_fraction: fraction,
            lru_dirty: &lru,
        };
        let d = if request {
            st.cleaner.on_request(now, &view)
        } else {
            st.cleaner.on_tick(now, &view)
        };
        match d {
            Decision::Idle => CleanAdvice::Idle,
            Decision::Bypass => {
                st.bypassed += 1;
                CleanAdvice::Bypass
            }
            Decision::CleanSets(sets) => self.advice_clean(&mut st, &sets),
        }
    }

    fn lru_dirty_of(st: &State, max: usize) -> Vec<SetId> {
        st.idx
            .lru_from_cold()
            .filter(|&id| st.idx.set_dirty_any(id))
            .take(max)
            .map(SetId)
            .collect()
    }

    /// The dirty blocks of `sets` in that order (LRU first), block order within a set.
    fn advice_clean(&self, st: &mut State, sets: &[SetId]) -> CleanAdvice {
        let blocks: Vec<_> = sets
            .iter()
            .flat_map(|s| Self::dirty_of(st, s.0, self.geo.set_shift))
            .collect();
        if blocks.is_empty() {
            CleanAdvice::Idle
        } else {
            CleanAdvice::Clean(blocks)
        }
    }
}
