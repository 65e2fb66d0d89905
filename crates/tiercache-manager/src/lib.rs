//! tiercache-manager: the cache manager of the live mount.
//!
//! The FUSE layer calls [`MemCache`] through a small adapter; this crate has no FUSE code and no
//! path-to-class logic. Callers identify a file by [`FileId`] (the backing inode number), hand
//! over its open backing [`std::fs::File`] and its [`Class`], and read and write bytes.
//!
//! The manager owns what does not depend on any tier: the file table and per-file locks,
//! staleness (a file changed behind the cache's back), forget, truncate, logical times,
//! write-back scheduling, BACKING I/O. The tiers are elsewhere: the memory tier's arena is
//! `tiercache-memtier`'s (the manager drives the top memory tier through the arena and the
//! engine's slot index under one lock, because FUSE requests touch parts of blocks in place);
//! the tiers below it are `dyn DataTier`s (`tiercache-tier`), whatever crate implements them.
//!
//! What it does:
//! - keeps the top tier's block data in a `tiercache_memtier::Arena` of fixed-size slots
//!   indexed by the engine's `SlotId` (per-slot header: state lock, dirty sequence);
//! - requests made without waiting ([`NoWait`]): hits and I/O-free writes served on the
//!   caller's thread, everything else handed back to be made where waiting is fine;
//! - reads: hits are copied out under a per-slot shared lock without holding the engine lock;
//!   misses are coalesced into one `pread` per contiguous run, with read-ahead for sequential
//!   streams; when no slot can be had the bytes are served uncached (bypass);
//! - writes: write-back into dirty slots (read-modify-write for partial blocks), write-through
//!   when no slot can be had, throttling above the dirty ratio;
//! - write-back: flusher threads, `fsync`, `flush_all`, errors kept and reported;
//! - logical times ([`LogicalTimes`]): the mtime of cached writes, and a ctime that the tier's
//!   own write-back does not move;
//! - backing [`BackingIo`]s: real, emulated HDD/SSD model, fault injection;
//! - statistics ([`MemStats`]) and an optional CSV access trace for the simulator.
//!
//! Below the memory tier, a stack of [`tiercache_tier::DataTier`]s ([`LowerTier`],
//! [`MemCache::with_tiers`]): misses ask them before BACKING, evictions are demoted into an
//! exclusive tier in the background (and a lower tier's own evictions on into an exclusive
//! tier below it), inclusive tiers are filled, write-back goes into the first
//! tier that takes dirty data and is cleaned from there to BACKING — placement decided by
//! `tiercache_core::placement::Planner`, the simulator's own code.
//!
//! Module map: `engine` (glue around `tiercache_core::tier::Tier`),
//! `files` (per-file state), `forget` (FORGET and inode reuse), `read`, `write`, `flusher`, `times` (logical mtime/ctime),
//! `lower` (the tier stack: lookups, fills, invalidation), `lower_transit` (blocks on their way
//! down: demotions, fills, cascading spills, the background mover), `lower_wb` (write-back into
//! and cleaning of a lower tier), `lower_bypass` (sequential runs skip a tier: paper 002), `nowait` (requests made without
//! waiting), `handle` (BACKING file
//! handles), `recover` (a persistent tier's dirty blocks from before a restart, written to
//! BACKING before serving), `beneath` (whether an inode opened by handle lies beneath
//! BACKING), `owner` (times set as a file's owner on root-squashed BACKING), `zerocopy` (pins
//! and fills for zero-copy clients of a shared arena, and their syncblock), `backing` (BACKING
//! I/O), `stats`, `trace`, `cache` (the public type), `config`,
//! `error`.

pub mod backing;
mod backing_write;
mod beneath;
mod cache;
mod config;
mod engine;
mod error;
mod file_state;
mod files;
mod flusher;
mod forget;
pub mod handle;
mod live_set;
mod locks;
mod lower;
mod lower_bypass;
mod lower_transit;
mod lower_wb;
mod nowait;
mod own_changes;
mod owner;
mod read;
mod recover;
mod stamp;
mod stats;
mod sync_batch;
mod sync_state;
mod times;
mod trace;
mod transit;
mod versions;
mod wake;
mod wb_types;
mod write;
mod writeback;
mod zerocopy;

pub use backing::{
    BackingCache, BackingIo, DeviceModel, EmulatedBacking, EmulationStats, FaultyBacking, IoMode,
    RealBacking, UncachedBacking, FOLIO_WINDOW,
};
pub use cache::MemCache;
pub use config::MemConfig;
pub use error::MemError;
pub use file_state::OpenOutcome;
pub use files::FileStamp;
pub use lower::{LowerStats, LowerTier, SeqBypassStats};
pub use lower_bypass::MeasuredCosts;
pub use nowait::NoWait;
pub use recover::{clean_recovered, FileError as RecoverFileError, RecoverError, RecoveryReport};
pub use stats::{BackingStats, ClassInfo, ClassStats, MemStats, PathStats, PoolStats, WindowStats};
pub use times::LogicalTimes;
pub use trace::TRACE_HEADER;

pub use tiercache_core::{Class, FileId};
