//! tiercache-core: the cache engine shared by the simulator and the live mount. No I/O.
//!
//! Parts:
//! - [`ids`]: newtype ids (`FileId`, `BlockIndex`, `BlockKey`, `SlotId`, `BlockSize`);
//! - [`class`]: block classes (`priority`, `normal`) and pools (`protected`, `normal`);
//! - [`policy`]: eviction policies behind [`policy::EvictionPolicy`] (LRU, FIFO, CLOCK, SIEVE,
//!   S3-FIFO, ARC), each O(1) per access and allocation-free in steady state;
//! - [`partition`]: partitioners deciding pool sizes and which pool gives up a block
//!   (`none`, `basic`, `dirprio` = paper 000's controller, `static`);
//! - [`tier`]: one cache level = key map + slots + pools + partitioner;
//! - [`index`]: the [`index::TierIndex`] trait a tier's index implements (`Tier`, `SetIndex`);
//! - [`setchoice`]: the set choice (free set, or coldest clean set) of the SSD tier and `sim`;
//! - [`setindex`]: a set-associative index (paper 001's layout), the flash tier's in `sim`;
//! - [`placement`]: the planner deciding where a block goes on an access and an eviction
//!   (inclusive, exclusive, pinned), shared by the simulator and the live cache;
//! - [`mrc`]: miss-ratio curves of LRU, exact (Mattson) and estimated online in fixed memory
//!   (SHARDS), for sizing classes from their curves;
//! - [`seqrun`]: sequential-run bypass of a tier (paper 002's threshold `n`, fixed or `auto`);
//! - [`hierarchy`]: an ordered list of tiers applying the planner's decisions to metadata;
//! - [`stats`]: counters per tier, pool and class.
//!
//! Policies and partitioners only *decide*; a tier applies the decision to metadata and reports
//! what happened ([`tier::Inserted`]) so the caller (simulator or live cache) can do the I/O.

pub mod class;
pub mod error;
pub mod hierarchy;
pub mod ids;
pub mod index;
mod keymap;
pub mod mrc;
pub mod partition;
pub mod placement;
pub mod policy;
pub mod seqrun;
pub mod setchoice;
pub mod setindex;
pub mod stats;
pub mod tier;

pub use class::{Class, PoolId};
pub use error::{CoreError, InvariantViolation, ParseError};
pub use ids::{BlockIndex, BlockKey, BlockSize, FileId, SlotId};

/// One block access as the engine sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    pub key: BlockKey,
    pub class: Class,
    pub write: bool,
}

impl Access {
    pub const fn read(key: BlockKey, class: Class) -> Self {
        Self {
            key,
            class,
            write: false,
        }
    }
}
