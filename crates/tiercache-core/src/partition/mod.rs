//! Partitioners: how a tier splits its blocks between the protected and the normal pool.
//!
//! A partitioner only decides: which pool holds a class ([`Partitioner::pool_of`]), which pool
//! gives up a block when a free one is needed ([`Partitioner::victim_pool`]), and — for
//! `dirprio` — how the protected pool's target size moves with the hit ratios it is told about
//! ([`Partitioner::record`]). The tier applies the decisions.

mod dirprio;
mod mrc;
mod target;

pub use dirprio::{Amount, Dirprio, DirprioParams, Resolved};
pub use mrc::MrcPartitioner;

use crate::class::{Class, PoolId};
use crate::error::{CoreError, ParseError};
use crate::ids::BlockKey;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

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
    /// Paper 000's controller: protected-pool target sized from windowed hit ratios.
    Dirprio,
    /// Fixed protected-pool target (`b_pmin` blocks), with 000's release rule.
    Static,
    /// Protected-pool target sized from each class's miss-ratio curve (SHARDS sampling).
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

/// Current pool sizes of a tier, in blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolSizes {
    pub protected: usize,
    pub normal: usize,
}

impl PoolSizes {
    pub const fn of(self, pool: PoolId) -> usize {
        match pool {
            PoolId::Protected => self.protected,
            PoolId::Normal => self.normal,
        }
    }
}

/// Decides pool membership, victims and (for `dirprio`) the protected target.
pub trait Partitioner: Send + fmt::Debug {
    fn kind(&self) -> PartitionKind;
    /// The pool holding blocks of `class`.
    fn pool_of(&self, class: Class) -> PoolId;
    /// One access finished (a hit or a miss, after any fill). `dirprio` and `mrc` recompute
    /// their target every ω calls. Returns true when the target moved.
    fn record(&mut self, access: Access) -> bool;
    /// Whether the hit-ratio target of `class` can be met (`mrc`: from its curve, with the
    /// memory stricter targets leave); `None` when the partitioner cannot tell.
    fn target_reachable(&self, class: Class) -> Option<bool> {
        let _ = class;
        None
    }
    /// The pool that gives up a block so one of `incoming` can come in. Never names an empty
    /// pool while the other has blocks.
    fn victim_pool(&self, incoming: PoolId, sizes: PoolSizes) -> PoolId;
    /// Target size of the protected pool, when the partitioner has one.
    fn s_target(&self) -> Option<u64>;
    /// The tier's capacity changed (live resize); targets are clamped to the new bounds.
    fn set_capacity(&mut self, blocks: u64);
    /// New parameters for a tier of `capacity` blocks (a reload): checked first, nothing
    /// changes on an error. Partitioners without parameters ignore them.
    fn set_params(&mut self, params: DirprioParams, capacity: u64) -> Result<(), CoreError> {
        params.resolved(capacity).map(|_| ())
    }
}

/// One access as a partitioner sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    pub key: BlockKey,
    pub class: Class,
    /// The pool the class's blocks are in.
    pub pool: PoolId,
    pub hit: bool,
}

/// Settings for building a partitioner; `capacity` is the tier's B.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PartitionConfig {
    pub kind: PartitionKind,
    pub params: DirprioParams,
}

impl PartitionConfig {
    pub fn none() -> Self {
        Self {
            kind: PartitionKind::None,
            params: DirprioParams::guidance(0, false),
        }
    }
}

/// Builds the partitioner `cfg` names for a tier of `capacity` blocks.
pub fn new_partitioner(
    cfg: &PartitionConfig,
    capacity: u64,
) -> Result<Box<dyn Partitioner>, CoreError> {
    Ok(match cfg.kind {
        PartitionKind::None => Box::new(NoPartition),
        PartitionKind::Basic => Box::new(Basic),
        PartitionKind::Dirprio => Box::new(Dirprio::new(cfg.params, capacity)?),
        PartitionKind::Static => {
            let p = cfg.params.resolved(capacity)?;
            Box::new(Static { target: p.b_pmin })
        }
        PartitionKind::Mrc => Box::new(MrcPartitioner::new(cfg.params, capacity)?),
    })
}

/// Release rule of paper 000 §3.3.4 for a target `s_target`: shrink whichever side is above its
/// share; at equality, evict from the incoming block's own pool; never from an empty pool.
pub fn release_rule(s_target: u64, incoming: PoolId, sizes: PoolSizes) -> PoolId {
    let s_cur = sizes.protected as u64;
    let chosen = match s_cur.cmp(&s_target) {
        std::cmp::Ordering::Less => PoolId::Normal,
        std::cmp::Ordering::Equal => incoming,
        std::cmp::Ordering::Greater => PoolId::Protected,
    };
    non_empty(chosen, sizes)
}

/// `chosen`, unless it is empty, then the other pool.
#[inline]
fn non_empty(chosen: PoolId, sizes: PoolSizes) -> PoolId {
    if sizes.of(chosen) == 0 {
        chosen.other()
    } else {
        chosen
    }
}

/// One shared pool: classes are counted but not separated.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoPartition;

impl Partitioner for NoPartition {
    fn kind(&self) -> PartitionKind {
        PartitionKind::None
    }
    #[inline]
    fn pool_of(&self, _class: Class) -> PoolId {
        PoolId::Normal
    }
    #[inline]
    fn record(&mut self, _access: Access) -> bool {
        false
    }
    #[inline]
    fn victim_pool(&self, _incoming: PoolId, _sizes: PoolSizes) -> PoolId {
        PoolId::Normal
    }
    fn s_target(&self) -> Option<u64> {
        None
    }
    fn set_capacity(&mut self, _blocks: u64) {}
}

/// Paper 000's baseline "basic" scheme: the protected pool only grows.
#[derive(Debug, Clone, Copy, Default)]
pub struct Basic;

impl Partitioner for Basic {
    fn kind(&self) -> PartitionKind {
        PartitionKind::Basic
    }
    fn pool_of(&self, class: Class) -> PoolId {
        protected_if_priority(class)
    }
    fn record(&mut self, _access: Access) -> bool {
        false
    }
    fn victim_pool(&self, _incoming: PoolId, sizes: PoolSizes) -> PoolId {
        non_empty(PoolId::Normal, sizes)
    }
    fn s_target(&self) -> Option<u64> {
        None
    }
    fn set_capacity(&mut self, _blocks: u64) {}
}

/// A fixed protected target with the release rule.
#[derive(Debug, Clone, Copy)]
pub struct Static {
    target: u64,
}

impl Partitioner for Static {
    fn kind(&self) -> PartitionKind {
        PartitionKind::Static
    }
    fn pool_of(&self, class: Class) -> PoolId {
        protected_if_priority(class)
    }
    fn record(&mut self, _access: Access) -> bool {
        false
    }
    fn victim_pool(&self, incoming: PoolId, sizes: PoolSizes) -> PoolId {
        release_rule(self.target, incoming, sizes)
    }
    fn s_target(&self) -> Option<u64> {
        Some(self.target)
    }
    fn set_capacity(&mut self, blocks: u64) {
        self.target = self.target.min(blocks);
    }
    fn set_params(&mut self, params: DirprioParams, capacity: u64) -> Result<(), CoreError> {
        self.target = params.resolved(capacity)?.b_pmin;
        Ok(())
    }
}

#[inline]
fn protected_if_priority(class: Class) -> PoolId {
    match class {
        Class::Priority => PoolId::Protected,
        _ => PoolId::Normal,
    }
}
