//! Pool targets as `static`, `dirprio` and `mrc` keep them: resolved from the class table
//! against the tier's capacity and held within their bounds.
//!
//! Invariants, across every change of value, capacity or parameters, for each pool `k` of its
//! own: `min_k ≤ S_k ≤ max_k`, and `Σ S_k ≤ B − B_nmin` (the rest pool's floor). The rest
//! pool's target is what the others leave, `B − Σ S_k`. With paper 000's two classes this is
//! B_pmin ≤ S_target ≤ B − B_nmin.

use super::classes::{ClassParams, Resolved};
use super::{release_rule, PoolSizes};
use crate::class::{PoolId, MAX_CLASSES};
use crate::error::CoreError;

#[derive(Debug, Clone)]
pub(super) struct Targets {
    p: Resolved,
    params: ClassParams,
    /// Indexed by `PoolId::index`; meaningful for pools of their own only.
    values: [u64; MAX_CLASSES],
    /// Every pool's target as [`Targets::get`] gives it, kept current by every change (the
    /// release rule reads it on each eviction).
    all: [Option<u64>; MAX_CLASSES],
}

impl Targets {
    /// Starts every pool at its floor (the paper gives no initial value; the floor is the
    /// smallest target the user accepted).
    pub(super) fn new(params: ClassParams, capacity: u64) -> Result<Self, CoreError> {
        let p = params.resolved(capacity)?;
        let mut values = [0; MAX_CLASSES];
        for (pool, c) in p.own_pools() {
            values[pool.index()] = c.min;
        }
        let mut t = Self {
            p,
            params,
            values,
            all: [None; MAX_CLASSES],
        };
        t.refresh();
        Ok(t)
    }

    /// Recomputes `all` from the values.
    fn refresh(&mut self) {
        self.all = std::array::from_fn(|i| PoolId::new(i).and_then(|p| self.compute(p)));
    }

    /// The parameters in force, resolved against the capacity.
    pub(super) fn resolved(&self) -> &Resolved {
        &self.p
    }
    pub(super) fn params(&self) -> &ClassParams {
        &self.params
    }

    /// Whether `pool` is the target of a class of its own (else it is the rest pool, or
    /// unused).
    pub(super) fn is_own(&self, pool: PoolId) -> bool {
        self.p.classes.get(pool.index()).is_some_and(|c| c.own_pool)
    }

    /// The target of `pool`: its own, or what the others leave for the rest pool; `None` for a
    /// pool no class uses.
    #[inline]
    pub(super) fn get(&self, pool: PoolId) -> Option<u64> {
        self.all[pool.index()]
    }

    fn compute(&self, pool: PoolId) -> Option<u64> {
        if self.is_own(pool) {
            Some(self.values[pool.index()])
        } else if pool == PoolId::NORMAL {
            Some(self.p.capacity - self.own_sum())
        } else {
            None
        }
    }

    fn own_sum(&self) -> u64 {
        self.p
            .own_pools()
            .map(|(k, _)| self.values[k.index()])
            .sum()
    }

    /// The most `pool` may have with every other pool's target as it is.
    pub(super) fn ceiling(&self, pool: PoolId) -> u64 {
        let others = self.own_sum() - self.values[pool.index()];
        let c = &self.p.classes[pool.index()];
        c.max
            .min(self.p.capacity - self.p.rest_min())
            .saturating_sub(others)
    }

    /// The floor of `pool`'s target.
    pub(super) fn floor(&self, pool: PoolId) -> u64 {
        self.p.classes.get(pool.index()).map_or(0, |c| c.min)
    }

    /// Moves the target of own pool `pool` to `value`, clamped into its bounds; true when it
    /// moved. Other pools are ignored.
    pub(super) fn set(&mut self, pool: PoolId, value: u64) -> bool {
        if !self.is_own(pool) {
            return false;
        }
        let before = self.values[pool.index()];
        let hi = self.ceiling(pool).max(self.floor(pool));
        self.values[pool.index()] = value.clamp(self.floor(pool), hi);
        self.refresh();
        self.values[pool.index()] != before
    }

    /// The pool that gives up a block ([`release_rule`] for these targets).
    #[inline]
    pub(super) fn victim_pool(&self, incoming: PoolId, sizes: &PoolSizes) -> PoolId {
        release_rule(
            &self.all[..self.p.pool_count().min(MAX_CLASSES)],
            incoming,
            sizes,
        )
    }

    /// Every pool's target (`None`: unused).
    pub(super) fn all(&self) -> [Option<u64>; MAX_CLASSES] {
        self.all
    }

    /// The tier's capacity changed: the parameters resolve again and the targets keep their
    /// values within the new bounds (parameters that no longer fit keep the old bounds).
    pub(super) fn set_capacity(&mut self, blocks: u64) {
        if let Ok(p) = self.params.resolved(blocks) {
            self.p = p;
            self.reclamp();
        }
    }

    /// New parameters (a reload): checked first, nothing changes on an error; the targets keep
    /// their values within the new bounds (a pool new to its own starts at its floor).
    pub(super) fn set_params(
        &mut self,
        params: ClassParams,
        capacity: u64,
    ) -> Result<(), CoreError> {
        let p = params.resolved(capacity)?;
        for (k, c) in p.own_pools() {
            if !self.is_own(k) {
                self.values[k.index()] = c.min;
            }
        }
        self.p = p;
        self.params = params;
        self.reclamp();
        Ok(())
    }

    /// Clamps every own pool into its bounds; when the floors and caps still leave more than
    /// the budget, the pools with the highest indices give back first.
    fn reclamp(&mut self) {
        let budget = self.p.capacity - self.p.rest_min();
        for (i, v) in self.values.iter_mut().enumerate() {
            *v = match self.p.classes.get(i) {
                Some(c) if c.own_pool => (*v).clamp(c.min, c.max.max(c.min)),
                _ => 0,
            };
        }
        let mut excess = self.values.iter().sum::<u64>().saturating_sub(budget);
        for (i, v) in self.values.iter_mut().enumerate().rev() {
            let floor = self.p.classes.get(i).map_or(0, |c| c.min);
            let take = excess.min(v.saturating_sub(floor));
            *v -= take;
            excess -= take;
        }
        self.refresh();
    }
}
