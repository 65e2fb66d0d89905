//! Partitioners: how a tier splits its blocks among its classes' pools.
//!
//! A partitioner only decides: which pool holds a class ([`Partitioner::pool_of`]), which pool
//! gives up a block when a free one is needed ([`Partitioner::victim_pool`]), and — for
//! `dirprio` and `mrc` — how the pools' target sizes move with what it is told about accesses
//! ([`Partitioner::record`]). The tier applies the decisions.
//!
//! The classes come from a [`ClassTable`]: a class with a target, a floor or a cap has a pool
//! of its own, the others share the rest pool ([`PoolId::NORMAL`]). Paper 000's two classes
//! are the table [`ClassTable::two`].

mod classes;
mod dirprio;
mod mrc;
mod target;

pub use classes::{is_class_name, ClassParams, ClassSpec, ClassTable, Resolved, ResolvedClass};
pub use dirprio::{Amount, Dirprio, DirprioParams};
pub use mrc::{initial_rate, sample_id, MrcPartitioner, SamplingOnly, MAX_SAMPLES};

use crate::class::{Class, PoolId, MAX_CLASSES};
use crate::error::{CoreError, ParseError};
use crate::ids::BlockKey;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use target::Targets;

/// Which partitioner a tier runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum PartitionKind {
    /// One shared pool.
    #[default]
    None,
    /// Paper 000's baseline: evict from the normal pool while it has blocks.
    Basic,
    /// Paper 000's controller: pool targets sized from windowed hit ratios, per class in
    /// target order.
    Dirprio,
    /// Fixed pool targets (each class's floor; 000's `b_pmin`), with 000's release rule.
    Static,
    /// Pool targets sized from each class's miss-ratio curve (SHARDS sampling).
    Mrc,
}

impl PartitionKind {
    pub const ALL: [PartitionKind; 5] = [
        PartitionKind::None,
        PartitionKind::Basic,
        PartitionKind::Dirprio,
        PartitionKind::Static,
        PartitionKind::Mrc,
    ];
    pub const fn as_str(self) -> &'static str {
        match self {
            PartitionKind::None => "none",
            PartitionKind::Basic => "basic",
            PartitionKind::Dirprio => "dirprio",
            PartitionKind::Static => "static",
            PartitionKind::Mrc => "mrc",
        }
    }
}

impl fmt::Display for PartitionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for PartitionKind {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PartitionKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| ParseError::unknown("partitioner", s, "none|basic|dirprio|static|mrc"))
    }
}

/// Current pool sizes of a tier, in blocks, indexed by [`PoolId::index`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolSizes([usize; MAX_CLASSES]);

impl PoolSizes {
    /// Sizes from `f(pool index)`.
    #[inline]
    pub fn from_fn(f: impl FnMut(usize) -> usize) -> Self {
        Self(std::array::from_fn(f))
    }
    /// Sizes from a list in pool order (missing pools are empty).
    pub fn from_slice(sizes: &[usize]) -> Self {
        let mut s = [0; MAX_CLASSES];
        for (d, v) in s.iter_mut().zip(sizes) {
            *d = *v;
        }
        Self(s)
    }
    #[inline]
    pub const fn of(&self, pool: PoolId) -> usize {
        self.0[pool.index()]
    }
    pub fn total(&self) -> usize {
        self.0.iter().sum()
    }
    /// Paper 000's S_cur and the rest.
    pub const fn protected(&self) -> usize {
        self.of(PoolId::PROTECTED)
    }
    pub const fn normal(&self) -> usize {
        self.of(PoolId::NORMAL)
    }
}

/// Decides pool membership, victims and (for `dirprio`, `static`, `mrc`) the pools' targets.
pub trait Partitioner: Send + fmt::Debug {
    fn kind(&self) -> PartitionKind;
    /// The pool holding blocks of `class`.
    fn pool_of(&self, class: Class) -> PoolId;
    /// One access finished (a hit or a miss, after any fill). `dirprio` and `mrc` recompute
    /// their targets every ω calls. Returns true when a target moved.
    fn record(&mut self, access: Access) -> bool;
    /// Whether `record` needs [`Access::pool_blocks`] (a look at the pool's size per access,
    /// which the others are spared).
    fn measures_pools(&self) -> bool {
        false
    }
    /// Whether the hit-ratio target of `class` can be met (`mrc`: from its curve, with the
    /// memory stricter targets leave); `None` when the partitioner cannot tell.
    fn target_reachable(&self, class: Class) -> Option<bool> {
        let _ = class;
        None
    }
    /// The blocks the partitioner set aside for `class` to meet its target (`mrc`: what its
    /// curve says the target needs, before what is left is shared out); `None` when it does
    /// not tell.
    fn target_blocks(&self, class: Class) -> Option<u64> {
        let _ = class;
        None
    }
    /// The estimated hit ratio of `class`'s pool at `points` sizes evenly spaced up to the
    /// tier's capacity, smallest first, as `(blocks, hit ratio)`: the curve `mrc` sizes pools
    /// from (before its measured correction; `normal`'s is the rest pool's, shared with the
    /// classes without a pool of their own). Sizes within a bucket of the curve round down to
    /// its start. `None` when the partitioner keeps no curve, the class has no pool of its
    /// own, or its pool saw no access yet.
    fn curve(&self, class: Class, points: u64) -> Option<Vec<(u64, f64)>> {
        let _ = (class, points);
        None
    }
    /// The pool that gives up a block so one of `incoming` can come in. Never names an empty
    /// pool while another has blocks.
    fn victim_pool(&self, incoming: PoolId, sizes: &PoolSizes) -> PoolId;
    /// Target size of `pool`, when the partitioner has one.
    fn target(&self, pool: PoolId) -> Option<u64> {
        let _ = pool;
        None
    }
    /// Paper 000's S_target: the protected pool's target.
    fn s_target(&self) -> Option<u64> {
        self.target(PoolId::PROTECTED)
    }
    /// The tier's capacity changed (live resize); targets are clamped to the new bounds.
    fn set_capacity(&mut self, blocks: u64) {
        let _ = blocks;
    }
    /// New parameters for a tier of `capacity` blocks (a reload): checked first, nothing
    /// changes on an error. Afterwards [`Partitioner::pool_of`] follows the new table.
    fn set_params(&mut self, params: &ClassParams, capacity: u64) -> Result<(), CoreError>;
    /// The class table in force.
    fn classes(&self) -> &ClassTable;
}

/// One access as a partitioner sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    pub key: BlockKey,
    pub class: Class,
    /// The pool the class's blocks are in.
    pub pool: PoolId,
    pub hit: bool,
    /// Blocks `pool` held when the access was counted (before a miss's fill): what `mrc`
    /// compares its curve's prediction with; 0 unless the partitioner
    /// [`measures_pools`](Partitioner::measures_pools).
    pub pool_blocks: u64,
}

/// Settings for building a partitioner; `capacity` is the tier's B.
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionConfig {
    pub kind: PartitionKind,
    pub params: ClassParams,
}

impl PartitionConfig {
    pub fn none() -> Self {
        Self {
            kind: PartitionKind::None,
            params: DirprioParams::guidance(0, false).into(),
        }
    }
    /// Paper 000's two classes with `params`.
    pub fn two(kind: PartitionKind, params: DirprioParams) -> Self {
        Self {
            kind,
            params: params.into(),
        }
    }
}

/// Builds the partitioner `cfg` names for a tier of `capacity` blocks.
pub fn new_partitioner(
    cfg: &PartitionConfig,
    capacity: u64,
) -> Result<Box<dyn Partitioner>, CoreError> {
    let params = cfg.params.clone();
    Ok(match cfg.kind {
        // Neither sizes pools: their parameters are not checked against the capacity.
        PartitionKind::None => Box::new(NoPartition {
            classes: params.classes,
        }),
        PartitionKind::Basic => Box::new(Basic {
            classes: params.classes,
        }),
        PartitionKind::Dirprio => Box::new(Dirprio::new(params, capacity)?),
        PartitionKind::Static => Box::new(Static {
            targets: Targets::new(params, capacity)?,
        }),
        PartitionKind::Mrc => Box::new(MrcPartitioner::new(params, capacity)?),
    })
}

/// Paper 000's release rule (§3.3.4) over any number of pools, for targets `targets` (`None`:
/// a pool no class uses):
/// 1. a pool above its target gives up a block (the one furthest above; ties: the higher
///    index);
/// 2. else, when a pool is below its target, the rest pool gives;
/// 3. else the incoming block's own pool.
///
/// Never an empty pool while another has blocks (then the largest other one). With two pools
/// this is 000's rule: shrink whichever side is above its share; at equality, evict from the
/// incoming block's own pool.
#[inline]
pub fn release_rule(targets: &[Option<u64>], incoming: PoolId, sizes: &PoolSizes) -> PoolId {
    let mut over: Option<(PoolId, u64)> = None;
    let mut under = false;
    for (i, t) in targets.iter().enumerate() {
        let (Some(t), Some(p)) = (*t, PoolId::new(i)) else {
            continue;
        };
        let size = sizes.of(p) as u64;
        if size > t && over.is_none_or(|(_, e)| size - t >= e) {
            over = Some((p, size - t));
        }
        under |= size < t && p != PoolId::NORMAL;
    }
    let chosen = match over {
        Some((p, _)) => p,
        None if under => PoolId::NORMAL,
        None => incoming,
    };
    non_empty(chosen, sizes)
}

/// `chosen`, unless it is empty, then the largest other pool (ties: the lowest index).
#[inline]
fn non_empty(chosen: PoolId, sizes: &PoolSizes) -> PoolId {
    if sizes.of(chosen) != 0 {
        return chosen;
    }
    let mut best = chosen;
    let mut best_size = None;
    for i in 0..MAX_CLASSES {
        if let Some(p) = PoolId::new(i).filter(|&p| p != chosen) {
            if best_size.is_none_or(|b| sizes.of(p) > b) {
                best = p;
                best_size = Some(sizes.of(p));
            }
        }
    }
    best
}

/// One shared pool: classes are counted but not separated.
#[derive(Debug, Clone)]
pub struct NoPartition {
    classes: ClassTable,
}

impl Default for NoPartition {
    fn default() -> Self {
        Self {
            classes: ClassTable::built_in(),
        }
    }
}

impl Partitioner for NoPartition {
    fn kind(&self) -> PartitionKind {
        PartitionKind::None
    }
    #[inline]
    fn pool_of(&self, _class: Class) -> PoolId {
        PoolId::NORMAL
    }
    #[inline]
    fn record(&mut self, _access: Access) -> bool {
        false
    }
    #[inline]
    fn victim_pool(&self, _incoming: PoolId, _sizes: &PoolSizes) -> PoolId {
        PoolId::NORMAL
    }
    fn set_params(&mut self, params: &ClassParams, capacity: u64) -> Result<(), CoreError> {
        self.classes = params.checked_table(capacity)?;
        Ok(())
    }
    fn classes(&self) -> &ClassTable {
        &self.classes
    }
}

/// Paper 000's baseline "basic" scheme: the classes' own pools only grow; the rest pool gives
/// while it has blocks.
#[derive(Debug, Clone)]
pub struct Basic {
    classes: ClassTable,
}

impl Partitioner for Basic {
    fn kind(&self) -> PartitionKind {
        PartitionKind::Basic
    }
    fn pool_of(&self, class: Class) -> PoolId {
        self.classes.pool_of(class)
    }
    fn record(&mut self, _access: Access) -> bool {
        false
    }
    fn victim_pool(&self, _incoming: PoolId, sizes: &PoolSizes) -> PoolId {
        non_empty(PoolId::NORMAL, sizes)
    }
    fn set_params(&mut self, params: &ClassParams, capacity: u64) -> Result<(), CoreError> {
        self.classes = params.checked_table(capacity)?;
        Ok(())
    }
    fn classes(&self) -> &ClassTable {
        &self.classes
    }
}

/// Fixed targets (each class's floor) with the release rule.
#[derive(Debug, Clone)]
pub struct Static {
    targets: Targets,
}

impl Partitioner for Static {
    fn kind(&self) -> PartitionKind {
        PartitionKind::Static
    }
    fn pool_of(&self, class: Class) -> PoolId {
        self.targets.params().classes.pool_of(class)
    }
    fn record(&mut self, _access: Access) -> bool {
        false
    }
    fn victim_pool(&self, incoming: PoolId, sizes: &PoolSizes) -> PoolId {
        self.targets.victim_pool(incoming, sizes)
    }
    fn target(&self, pool: PoolId) -> Option<u64> {
        self.targets.get(pool)
    }
    fn set_capacity(&mut self, blocks: u64) {
        self.targets.set_capacity(blocks);
    }
    fn set_params(&mut self, params: &ClassParams, capacity: u64) -> Result<(), CoreError> {
        let mut t = Targets::new(params.clone(), capacity)?;
        // Static targets are the floors: a reload moves them there.
        std::mem::swap(&mut self.targets, &mut t);
        Ok(())
    }
    fn classes(&self) -> &ClassTable {
        &self.targets.params().classes
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
