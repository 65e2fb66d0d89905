//! The protected pool's target as `dirprio` and `mrc` keep it: resolved from the user's
//! parameters against the tier's capacity and held within 000's bounds.
//!
//! Invariant: B_pmin ≤ S_target ≤ B − B_nmin, across every change of value, capacity or
//! parameters.

use super::dirprio::{DirprioParams, Resolved};
use super::{release_rule, PoolSizes};
use crate::class::PoolId;
use crate::error::CoreError;

#[derive(Debug, Clone)]
pub(super) struct Target {
    p: Resolved,
    params: DirprioParams,
    value: u64,
}

impl Target {
    /// Starts at B_pmin (the paper gives no initial value; the floor is the smallest target
    /// the user accepted).
    pub(super) fn new(params: DirprioParams, capacity: u64) -> Result<Self, CoreError> {
        let p = params.resolved(capacity)?;
        Ok(Self {
            p,
            params,
            value: p.b_pmin,
        })
    }

    /// The parameters in force, resolved against the capacity.
    pub(super) fn resolved(&self) -> &Resolved {
        &self.p
    }

    pub(super) fn get(&self) -> u64 {
        self.value
    }

    /// The largest target allowed: B − B_nmin.
    pub(super) fn ceiling(&self) -> u64 {
        self.p.capacity - self.p.b_nmin
    }

    /// Moves the target to `value`, clamped into the bounds; true when it moved.
    pub(super) fn set(&mut self, value: u64) -> bool {
        let before = self.value;
        self.value = value.clamp(self.p.b_pmin, self.ceiling());
        self.value != before
    }

    /// The pool that gives up a block (000's release rule for this target).
    pub(super) fn victim_pool(&self, incoming: PoolId, sizes: PoolSizes) -> PoolId {
        release_rule(self.value, incoming, sizes)
    }

    /// The tier's capacity changed: the parameters resolve again and the target keeps its
    /// value within the new bounds (parameters that no longer fit keep the old bounds).
    pub(super) fn set_capacity(&mut self, blocks: u64) {
        if let Ok(p) = self.params.resolved(blocks) {
            self.p = p;
            self.set(self.value);
        }
    }

    /// New parameters (a reload): checked first, nothing changes on an error; the target keeps
    /// its value within the new bounds.
    pub(super) fn set_params(
        &mut self,
        params: DirprioParams,
        capacity: u64,
    ) -> Result<(), CoreError> {
        self.p = params.resolved(capacity)?;
        self.params = params;
        self.set(self.value);
        Ok(())
    }
}
