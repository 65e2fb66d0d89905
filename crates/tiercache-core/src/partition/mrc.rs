//! The `mrc` partitioner: pool targets sized from miss-ratio curves instead of by trial.
//!
//! Each pool's accesses feed its own fixed-size SHARDS sampler (spatially hashed: a block is
//! sampled on every access or never; at most [`MAX_SAMPLES`] blocks tracked per pool, so
//! memory is fixed), with the tier as its horizon: blocks whose sampled reuse distance is past
//! the tier are forgotten, so a sampler tracks about the tier × its rate. Every ω accesses the partitioner reads each pool's estimated LRU curve
//! and [`allocate`]s the tier: each reachable hit-ratio target gets the fewest blocks its curve
//! says meet it, strictest first — the curve corrected by the hit ratio the tier measured at
//! the pool's size, and the target aimed one standard error of a window's measurement above
//! itself; an unreachable one is reported ([`Partitioner::target_reachable`]) and not chased;
//! what is left goes where the curves say it buys the most hits, within each class's cap. The
//! tier applies the shares with 000's release rule, as for `dirprio`. Then the counts age, so a
//! phase change shows within a few windows.
//!
//! A pool of its own holds blocks of one class, so its curve over the accesses the tier sees
//! is that class's curve; classes without one share the rest pool and its curve, and
//! `normal`'s target is the rest pool's. A target of 1.0 is never reachable (first touches
//! always miss): give `mrc` the hit ratio that is wanted, e.g. 0.95.
//!
//! The targets stay within their bounds (`Targets`), as for `dirprio`.

use super::classes::{ClassParams, ClassTable};
use super::target::Targets;
use super::{Access, PartitionKind, Partitioner, PoolSizes};
use crate::class::{Class, PoolId, MAX_CLASSES};
use crate::error::CoreError;
use crate::ids::BlockKey;
use crate::mrc::Shards;
use crate::mrc::{allocate, ClassDemand};

/// Blocks tracked per class (memory: a few tens of bytes each).
pub const MAX_SAMPLES: usize = 8192;
/// Blocks a sampler aims to sample among as many as the tier holds: the curve matters only up
/// to the tier's size, and its error there shrinks with the blocks sampled within it (a
/// sample of a few dozen blocks would misplace a cliff by a third); sampling more costs replay
/// speed (`bench classes`: about 1,000 keeps the samplers near 7 % of an `mrc` replay on a
/// 20,000-block tier, with a curve error near 0.01).
pub const SAMPLED_WITHIN_TIER: f64 = 1000.0;
/// Bounds of the starting rate: SHARDS' 0.1 % for the largest tiers, a quarter for the
/// smallest (fixed-size SHARDS lowers it further only where the tier × the rate passes
/// [`MAX_SAMPLES`]: tiers past about 8 million blocks).
const RATE_BOUNDS: (f64, f64) = (0.001, 0.25);

/// The rate a sampler for a tier of `capacity` blocks starts at: `SAMPLED_WITHIN_TIER`
/// blocks of `capacity`, within `RATE_BOUNDS`.
pub fn initial_rate(capacity: u64) -> f64 {
    (SAMPLED_WITHIN_TIER / capacity.max(1) as f64).clamp(RATE_BOUNDS.0, RATE_BOUNDS.1)
}
/// Sizes resolved: the tier in this many steps.
const STEPS: u64 = 64;
/// What a window's counts keep at the next window.
const KEEP: f64 = 0.75;

/// The partitioner's state.
#[derive(Debug)]
pub struct MrcPartitioner {
    targets: Targets,
    /// One sampler per pool, indexed by `PoolId::index` (a pool of its own holds one class, so
    /// its curve is that class's; the rest pool's is the curve of the classes sharing it).
    shards: Vec<Shards>,
    seen: u64,
    reachable: [Option<bool>; MAX_CLASSES],
    /// Per pool: the blocks the last allocation gave its target (see `Allocation::for_target`).
    for_target: [Option<u64>; MAX_CLASSES],
    /// Per pool: this window's hits, accesses and the sum of the pool's size at each access.
    window: [WindowCounts; MAX_CLASSES],
    /// Per pool: how far the hit ratio the tier measured lies above what the curve predicts at
    /// the pool's mean size (smoothed over windows, within ±[`MAX_OFFSET`]). A sampled curve is
    /// a little off in one direction for a while (which hot blocks fall in the sample), so a
    /// target sized from the curve alone settles a little off; the offset closes that gap.
    offset: [f64; MAX_CLASSES],
    /// Per pool: one standard error of the last window's measured hit ratio at its target,
    /// aimed above the target (see [`MrcPartitioner::aim`]).
    headroom: [f64; MAX_CLASSES],
}

/// One pool's counts over a window.
#[derive(Debug, Clone, Copy, Default)]
struct WindowCounts {
    hits: u64,
    accesses: u64,
    blocks_sum: u64,
}

/// The most the measured correction moves a target (hit ratio).
const MAX_OFFSET: f64 = 0.05;
/// The most a target is aimed above itself for the noise of a window's measurement.
const MAX_HEADROOM: f64 = 0.02;
/// Accesses a pool needs in a window for its measured hit ratio to correct the curve (fewer
/// are too noisy).
const MIN_MEASURED: u64 = 256;

/// A 64-bit identity of a block for the samplers' hash (the curves `sim --curves` and
/// `bench classes` draw use the same one).
pub fn sample_id(key: &BlockKey) -> u64 {
    key.file.0.rotate_left(40) ^ key.block.0
}

/// The sampling `mrc` does, alone: the same samplers fed the same way, for measuring what it
/// costs (`bench classes`) without the rest of a replay.
#[derive(Debug)]
pub struct SamplingOnly {
    shards: Vec<Shards>,
    omega: u64,
    seen: u64,
}

impl SamplingOnly {
    /// Samplers for `pools` pools of a tier of `capacity` blocks, aged every `omega` accesses.
    pub fn new(capacity: u64, pools: usize, omega: u64) -> Self {
        Self {
            shards: MrcPartitioner::samplers(capacity, pools),
            omega: omega.max(1),
            seen: 0,
        }
    }
    /// One access to `key` of `pool`, as `MrcPartitioner::record` samples it; every ω accesses
    /// the curves are read and aged, as at a window's end.
    #[inline]
    pub fn access(&mut self, key: &BlockKey, pool: PoolId) {
        if let Some(s) = self.shards.get_mut(pool.index()) {
            s.access(sample_id(key));
        }
        self.seen += 1;
        if self.seen >= self.omega {
            self.seen = 0;
            for s in &mut self.shards {
                s.flush();
                std::hint::black_box(s.curve());
                s.decay(KEEP);
            }
        }
    }
}

impl MrcPartitioner {
    /// Starts every pool at its floor, as `dirprio` does, until the first window's curves.
    pub fn new(params: ClassParams, capacity: u64) -> Result<Self, CoreError> {
        let targets = Targets::new(params, capacity)?;
        let pools = targets.resolved().pool_count();
        Ok(Self {
            targets,
            shards: Self::samplers(capacity, pools),
            seen: 0,
            reachable: [None; MAX_CLASSES],
            for_target: [None; MAX_CLASSES],
            window: [WindowCounts::default(); MAX_CLASSES],
            offset: [0.0; MAX_CLASSES],
            headroom: [0.0; MAX_CLASSES],
        })
    }

    fn samplers(capacity: u64, pools: usize) -> Vec<Shards> {
        let bucket = (capacity / (4 * STEPS)).max(1);
        (0..pools)
            .map(|_| {
                Shards::new(MAX_SAMPLES, initial_rate(capacity), bucket).with_horizon(capacity)
            })
            .collect()
    }

    /// The pools sized: each of its own, and the rest pool, in index order.
    fn sized_pools(&self) -> Vec<PoolId> {
        (0..self.targets.resolved().pool_count())
            .filter_map(PoolId::new)
            .filter(|&p| p == PoolId::NORMAL || self.targets.is_own(p))
            .collect()
    }

    /// Sizes the pools from their curves, corrected by what the tier measured; ages the counts.
    fn end_window(&mut self) {
        let pools = self.sized_pools();
        self.shards.iter_mut().for_each(Shards::flush);
        let curves: Vec<_> = pools
            .iter()
            .map(|p| self.shards[p.index()].curve())
            .collect();
        for (&pool, curve) in pools.iter().zip(&curves) {
            self.measure(pool, curve);
        }
        self.window = [WindowCounts::default(); MAX_CLASSES];
        let p = self.targets.resolved().clone();
        let cap = p.capacity;
        let own_min: u64 = p.own_pools().map(|(_, c)| c.min).sum();
        let demands: Vec<ClassDemand<'_>> = pools
            .iter()
            .zip(&curves)
            .map(|(&pool, curve)| {
                let c = &p.classes[pool.index()];
                let max = if pool == PoolId::NORMAL {
                    cap - own_min
                } else {
                    c.max.min(cap - p.rest_min() - (own_min - c.min))
                };
                ClassDemand {
                    curve,
                    accesses: curve.accesses(),
                    target: c.target,
                    aim: self.aim(pool),
                    min: c.min,
                    max: Some(max),
                    sampling_rate: self.shards[pool.index()].rate(),
                }
            })
            .collect();
        let a = allocate(&demands, cap, (cap / STEPS).max(1));
        self.reachable = [None; MAX_CLASSES];
        for (k, &pool) in pools.iter().enumerate() {
            // A class with no accesses in sight meets any target with what it has.
            self.reachable[pool.index()] = match a.target_reachable[k] {
                Some(_) if curves[k].accesses() <= 0.0 => Some(true),
                r => r,
            };
            self.targets.set(pool, a.blocks[k]);
            self.for_target[pool.index()] = a.for_target[k];
        }
        self.shards.iter_mut().for_each(|s| s.decay(KEEP));
        self.seen = 0;
    }
}

impl MrcPartitioner {
    /// What `pool`'s curve is asked for above its target: less what the tier measured above
    /// the curve, plus one standard error of a window's measurement — a window of n accesses
    /// measures a hit ratio h within about sqrt(h(1 − h)/n), so a pool sized for the target
    /// exactly would measure below it in every other window.
    fn aim(&self, pool: PoolId) -> f64 {
        let i = pool.index();
        self.headroom[i] - self.offset[i]
    }

    /// Updates `pool`'s offset from this window's counts (the measured hit ratio against the
    /// curve's at the pool's mean size) and its headroom (the measurement's standard error).
    fn measure(&mut self, pool: PoolId, curve: &crate::mrc::MissRatioCurve) {
        let i = pool.index();
        let w = self.window[i];
        if w.accesses < MIN_MEASURED || curve.accesses() <= 0.0 {
            self.headroom[i] = 0.0;
            return;
        }
        if let Some(t) = self
            .targets
            .resolved()
            .classes
            .get(i)
            .and_then(|c| c.target)
        {
            self.headroom[i] = (t * (1.0 - t) / w.accesses as f64).sqrt().min(MAX_HEADROOM);
        }
        let measured = w.hits as f64 / w.accesses as f64;
        let size = w.blocks_sum / w.accesses;
        let predicted = 1.0 - curve.miss_ratio(size);
        let o = 0.5 * self.offset[i] + 0.5 * (measured - predicted);
        self.offset[i] = o.clamp(-MAX_OFFSET, MAX_OFFSET);
    }
}

impl Partitioner for MrcPartitioner {
    fn kind(&self) -> PartitionKind {
        PartitionKind::Mrc
    }
    fn measures_pools(&self) -> bool {
        true
    }
    fn pool_of(&self, class: Class) -> PoolId {
        self.targets.params().classes.pool_of(class)
    }
    #[inline]
    fn record(&mut self, access: Access) -> bool {
        let i = access.pool.index();
        self.shards[i].access(sample_id(&access.key));
        if let Some(w) = self.window.get_mut(i) {
            w.hits += u64::from(access.hit);
            w.accesses += 1;
            w.blocks_sum += access.pool_blocks;
        }
        self.seen += 1;
        if self.seen >= self.targets.resolved().omega {
            let before = self.targets.all();
            self.end_window();
            return self.targets.all() != before;
        }
        false
    }
    /// A class sharing the rest pool without being `normal` has no target of its own.
    fn target_reachable(&self, class: Class) -> Option<bool> {
        let pool = self.pool_of(class);
        if pool.class() != class {
            return None;
        }
        self.reachable[pool.index()]
    }
    fn target_blocks(&self, class: Class) -> Option<u64> {
        let pool = self.pool_of(class);
        (pool.class() == class)
            .then(|| self.for_target[pool.index()])
            .flatten()
    }
    fn curve(&self, class: Class, points: u64) -> Option<Vec<(u64, f64)>> {
        let pool = self.pool_of(class);
        if pool.class() != class {
            return None;
        }
        let c = self.shards.get(pool.index())?.curve();
        if c.accesses() <= 0.0 {
            return None;
        }
        let cap = self.targets.resolved().capacity.max(1);
        let n = points.clamp(1, cap);
        Some(
            (1..=n)
                .map(|k| {
                    let blocks = cap * k / n;
                    (blocks, 1.0 - c.miss_ratio(blocks))
                })
                .collect(),
        )
    }
    fn victim_pool(&self, incoming: PoolId, sizes: &PoolSizes) -> PoolId {
        self.targets.victim_pool(incoming, sizes)
    }
    fn target(&self, pool: PoolId) -> Option<u64> {
        self.targets.get(pool)
    }
    /// New bounds; the curves are in blocks and stay valid, the bucket width stays.
    fn set_capacity(&mut self, blocks: u64) {
        self.targets.set_capacity(blocks);
        for s in &mut self.shards {
            s.set_horizon(blocks);
        }
    }
    /// A pool new to the table gets a fresh sampler (a renumbered one keeps its old counts
    /// until they age out).
    fn set_params(&mut self, params: &ClassParams, capacity: u64) -> Result<(), CoreError> {
        self.targets.set_params(params.clone(), capacity)?;
        // Pools may be renumbered: the measured corrections start again.
        self.window = [WindowCounts::default(); MAX_CLASSES];
        self.offset = [0.0; MAX_CLASSES];
        self.headroom = [0.0; MAX_CLASSES];
        let pools = self.targets.resolved().pool_count();
        if pools > self.shards.len() {
            let more = Self::samplers(capacity, pools - self.shards.len());
            self.shards.extend(more);
        }
        Ok(())
    }
    fn classes(&self) -> &ClassTable {
        &self.targets.params().classes
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::ids::{BlockIndex, FileId};
    use crate::partition::{Amount, DirprioParams};

    fn params(omega: u64, t_p: f64, t_n: f64) -> ClassParams {
        DirprioParams {
            omega: Some(omega),
            t_protected: t_p,
            t_normal: t_n,
            b_pmin: Amount::Blocks(0),
            b_nmin: 0,
        }
        .into()
    }

    fn access(class: Class, file: u64, block: u64) -> Access {
        Access {
            key: BlockKey {
                file: FileId(file),
                block: BlockIndex(block),
            },
            class,
            pool: if class == Class::PRIORITY {
                PoolId::PROTECTED
            } else {
                PoolId::NORMAL
            },
            hit: false,
            pool_blocks: 0,
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
                m.record(access(Class::PRIORITY, 1, b));
                m.record(access(Class::NORMAL, 2, scan));
                scan += 1;
            }
        }
        let t = m.s_target().unwrap();
        assert!((2700..=3450).contains(&t), "protected target {t}");
        assert_eq!(m.target_reachable(Class::PRIORITY), Some(true));
    }

    /// The tier measuring fewer hits than the curve predicts at the pool's size moves the
    /// target up, more hits moves it down, by at most `MAX_OFFSET` of hit ratio.
    #[test]
    fn what_the_tier_measures_corrects_the_curve() {
        let run = |hit: bool| {
            let cap = 10_000;
            let mut m = MrcPartitioner::new(params(10_000, 0.5, 0.0), cap).unwrap();
            let mut x = 3u64;
            for i in 0..200_000u64 {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let u = (x >> 11) as f64 / (1u64 << 53) as f64;
                let mut a = access(Class::PRIORITY, 1, (u * u * 4000.0) as u64);
                a.hit = hit;
                a.pool_blocks = m.s_target().unwrap_or(0);
                m.record(a);
                m.record(access(Class::NORMAL, 2, i));
            }
            // What the target itself was given (what is left goes on top of it).
            m.target_blocks(Class::PRIORITY).unwrap()
        };
        let (short, over) = (run(false), run(true));
        assert!(short > over, "measured short {short}, measured over {over}");
    }

    /// A priority working set larger than the tier: its target is reported unreachable.
    #[test]
    fn a_target_beyond_the_tier_is_reported_unreachable() {
        let cap = 2000;
        let mut m = MrcPartitioner::new(params(20_000, 0.9, 0.0), cap).unwrap();
        for _ in 0..40 {
            for b in 0..10_000 {
                m.record(access(Class::PRIORITY, 1, b));
            }
        }
        assert_eq!(m.target_reachable(Class::PRIORITY), Some(false));
    }
}
