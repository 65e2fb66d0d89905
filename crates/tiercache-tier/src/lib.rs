//! tiercache-tier: the contract between the cache manager (`tiercache-manager`) and the data tiers
//! below its memory tier. A flash, remote or test tier depends on this crate only — never on
//! the memory tier's internals.
//!
//! Parts:
//! - [`key`]: persistent block identity ([`FileKey`]: device, inode, birth time; [`TierKey`]:
//!   file + block index) and the content `version` every stored block carries;
//! - [`tier`]: the [`DataTier`] trait (lookups, reads, fills, demotions, promotions, clean
//!   blocks evicted by a store handed back to be demoted further, dirty write-back,
//!   invalidation, stats) and its outcome types;
//! - [`cleaning`]: the [`Cleaning`] trait a tier that can hold dirty blocks offers
//!   ([`DataTier::cleaning`]): its dirty blocks for someone else to clean, and its policy;
//! - [`persistence`]: the [`Persistence`] trait a persistent tier offers
//!   ([`DataTier::persistence`]): file meta kept with dirty blocks, files recovered at open;
//! - [`spill`]: the [`SpillSink`] hook a tier hands the clean blocks it evicts to, given once;
//! - `conformance` (feature `conformance`, tests only): the trait's contract as checks that
//!   every implementation's tests run;
//!
//! The implementations live in their own crates: `tiercache-memtier` (the memory tier, and the
//! test tier with injectable latency and faults), `tiercache-flash`, `tiercache-remote`.
//!
//! Tiers decide nothing about placement: [`tiercache_core::placement::Planner`] decides, the
//! manager does the I/O through this trait.

pub mod cleaning;
#[cfg(feature = "conformance")]
pub mod conformance;
pub mod key;
pub mod persistence;
pub mod spill;
pub mod tier;

pub use cleaning::{CleanAdvice, Cleaning, DirtyBlock};
pub use key::{FileKey, TierKey};
pub use persistence::{FileHandle, FileMeta, Persistence, RecoveredFile, MAX_HANDLE_BYTES};
pub use spill::{SpillLog, SpillSink, SpillSlot, SpilledBlock};
pub use tier::{
    Admit, DataTier, Lookup, Spilled, Store, StoreExt, StoreKind, TierError, TierInfo, TierKind,
    TierSnapshot,
};
