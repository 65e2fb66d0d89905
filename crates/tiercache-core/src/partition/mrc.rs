//! The `mrc` partitioner: the protected pool's target sized from miss-ratio curves instead of
//! by trial.
//!
//! Each class's accesses feed its own fixed-size SHARDS sampler (spatially hashed: a block is
//! sampled on every access or never; at most [`MAX_SAMPLES`] blocks tracked per class, so
//! memory is fixed). Every ω accesses the partitioner reads each class's estimated LRU curve
//! and [`allocate`]s the tier: each reachable hit-ratio target (T_p for the priority class,
//! T_n for the normal one) gets the fewest blocks its curve says meet it, strictest first;
//! an unreachable one is reported ([`Partitioner::target_reachable`]) and not chased; what is
//! left goes where the curves say it buys the most hits. The priority class's share is the
//! protected target, bounded by B_pmin and B − B_nmin; the tier applies it with 000's release
//! rule, as for `dirprio`. Then the counts age by half, so a phase change shows within a few
//! windows.
//!
//! A pool holds blocks of one class, so a class's curve over the accesses the tier sees is
//! the curve of its pool. A target of 1.0 is never reachable (first touches always miss): give
//! `mrc` the hit ratio that is wanted, e.g. 0.95.
//!
//! The target stays within B_pmin ≤ S_target ≤ B − B_nmin (`Target`), as for `dirprio`.

use super::dirprio::DirprioParams;
use super::target::Target;
use super::{Access, PartitionKind, Partitioner, PoolSizes};
use crate::class::{Class, PoolId};
use crate::error::CoreError;
use crate::ids::BlockKey;
use crate::mrc::Shards;
use crate::mrc::{allocate, ClassDemand};

/// Blocks tracked per class (memory: a few tens of bytes each).
pub const MAX_SAMPLES: usize = 8192;
/// Sampling rate before the sampler first fills: every block, so a small working set is
/// measured exactly (fixed-size SHARDS lowers the rate once more blocks than [`MAX_SAMPLES`]
/// are seen; a sample of a few dozen blocks would misplace a cliff by a third).
const INITIAL_RATE: f64 = 0.1;
/// Sizes resolved: the tier in this many steps.
const STEPS: u64 = 64;
/// What a window's counts keep at the next window.
const KEEP: f64 = 0.75;

/// The partitioner's state.
#[derive(Debug)]
pub struct MrcPartitioner {
    target: Target,
    /// One sampler per class, indexed by `Class::index`.
    shards: Vec<Shards>,
    seen: u64,
    reachable: [Option<bool>; Class::COUNT],
}

/// A 64-bit identity of a block for the samplers' hash.
fn block_id(key: &BlockKey) -> u64 {
    key.file.0.rotate_left(40) ^ key.block.0
}

impl MrcPartitioner {
    /// Starts at S_target = B_pmin, as `dirprio` does, until the first window's curves.
    pub fn new(params: DirprioParams, capacity: u64) -> Result<Self, CoreError> {
        Ok(Self {
            target: Target::new(params, capacity)?,
            shards: Self::samplers(capacity),
            seen: 0,
            reachable: [None; Class::COUNT],
        })
    }

    fn samplers(capacity: u64) -> Vec<Shards> {
        let bucket = (capacity / (4 * STEPS)).max(1);
        Class::ALL
            .iter()
            .map(|_| Shards::new(MAX_SAMPLES, INITIAL_RATE, bucket))
            .collect()
    }

    /// Sizes the classes from their curves; ages the counts.
    fn end_window(&mut self) {
        let curves: Vec<_> = self.shards.iter().map(Shards::curve).collect();
        let (pi, ni) = (Class::Priority.index(), Class::Normal.index());
        let p = *self.target.resolved();
        let cap = p.capacity;
        let demand = |i: usize, target: f64, min: u64, max: u64| ClassDemand {
            curve: &curves[i],
            accesses: curves[i].accesses(),
            target: Some(target),
            min,
            max: Some(max),
            sampling_rate: self.shards[i].rate(),
        };
        let demands = [
            demand(pi, p.t_protected, p.b_pmin, cap - p.b_nmin),
            demand(ni, p.t_normal, p.b_nmin, cap - p.b_pmin),
        ];
        let a = allocate(&demands, cap, (cap / STEPS).max(1));
        // A class with no accesses in sight meets any target with what it has.
        for (k, &i) in [pi, ni].iter().enumerate() {
            self.reachable[i] = if curves[i].accesses() > 0.0 {
                a.target_reachable[k]
            } else {
                Some(true)
            };
        }
        self.target.set(a.blocks[0]);
        self.shards.iter_mut().for_each(|s| s.decay(KEEP));
        self.seen = 0;
    }
}

impl Partitioner for MrcPartitioner {
    fn kind(&self) -> PartitionKind {
        PartitionKind::Mrc
    }
    fn pool_of(&self, class: Class) -> PoolId {
        match class {
            Class::Priority => PoolId::Protected,
            _ => PoolId::Normal,
        }
    }
    #[inline]
    fn record(&mut self, access: Access) -> bool {
        self.shards[access.class.index()].access(block_id(&access.key));
        self.seen += 1;
        if self.seen >= self.target.resolved().omega {
            let before = self.target.get();
            self.end_window();
            return self.target.get() != before;
        }
        false
    }
    fn target_reachable(&self, class: Class) -> Option<bool> {
        self.reachable[class.index()]
    }
    fn victim_pool(&self, incoming: PoolId, sizes: PoolSizes) -> PoolId {
        self.target.victim_pool(incoming, sizes)
    }
    fn s_target(&self) -> Option<u64> {
        Some(self.target.get())
    }
    /// New bounds; the curves are in blocks and stay valid, the bucket width stays.
    fn set_capacity(&mut self, blocks: u64) {
        self.target.set_capacity(blocks);
    }
    fn set_params(&mut self, params: DirprioParams, capacity: u64) -> Result<(), CoreError> {
        self.target.set_params(params, capacity)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::ids::{BlockIndex, FileId};
    use crate::partition::Amount;

    fn params(omega: u64, t_p: f64, t_n: f64) -> DirprioParams {
        DirprioParams {
            omega: Some(omega),
            t_protected: t_p,
            t_normal: t_n,
            b_pmin: Amount::Blocks(0),
            b_nmin: 0,
        }
    }

    fn access(class: Class, file: u64, block: u64) -> Access {
        Access {
            key: BlockKey {
                file: FileId(file),
                block: BlockIndex(block),
            },
            class,
            pool: if class == Class::Priority {
                PoolId::Protected
            } else {
                PoolId::Normal
            },
            hit: false,
        }
    }

    /// Priority loops over 3,000 blocks (a cliff at 3,000), normal scans: a target of 0.9 for
    /// the priority class needs its whole loop (within the sampling's error: about 300 blocks
    /// sampled), and the scan gains nothing from more.
    #[test]
    fn a_looping_priority_class_gets_its_working_set() {
        let cap = 10_000;
        let mut m = MrcPartitioner::new(params(20_000, 0.9, 0.0), cap).unwrap();
        let mut scan = 0;
        for _ in 0..20 {
            for b in 0..3000 {
                m.record(access(Class::Priority, 1, b));
                m.record(access(Class::Normal, 2, scan));
                scan += 1;
            }
        }
        let t = m.s_target().unwrap();
        assert!((2700..=3450).contains(&t), "protected target {t}");
        assert_eq!(m.target_reachable(Class::Priority), Some(true));
    }

    /// A priority working set larger than the tier: its target is reported unreachable.
    #[test]
    fn a_target_beyond_the_tier_is_reported_unreachable() {
        let cap = 2000;
        let mut m = MrcPartitioner::new(params(20_000, 0.9, 0.0), cap).unwrap();
        for _ in 0..40 {
            for b in 0..10_000 {
                m.record(access(Class::Priority, 1, b));
            }
        }
        assert_eq!(m.target_reachable(Class::Priority), Some(false));
    }
}
