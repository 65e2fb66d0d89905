//! tiercache-flash: the SSD tier — a set-mapped write-back block cache on a file or a block
//! device, below the memory tier (paper 001, "an SSD as a cache for an HDD"), made crash
//! consistent.
//!
//! A backing set (a file's blocks `k·2^M … (k+1)·2^M − 1`) maps to one cache set of 2^M
//! blocks; RAM holds per set only a tag, the content version, valid/dirty bitmaps and LRU
//! links (under 1 byte per cached 4 KiB block, measured by
//! [`FlashTier::ram_bytes_per_block`]). Metadata lives on the device as a superblock (two
//! copies) and two checksummed, sequence-numbered record slots per set, written in an order
//! that survives a power cut at any point (see [`tier`] and the repository's `docs/design.md` §6).
//!
//! Records also carry their file's meta (logical size, mtime, BACKING file handle; format 2)
//! so that after a crash [`FlashTier`]'s `recovered_files()` tells the manager which files to
//! reopen (by handle) and write back, up to which size, with which mtime. Data blocks carry
//! checksums (format 3): a table per set on the device, checked on every read, so a block
//! that reads back other bytes than were written is never served.
//!
//! Parts:
//! - [`device`]: the [`FlashDevice`] trait, [`FileDevice`] (file or block device) and
//!   [`MemDevice`]; `pagecache` the file device's I/O modes ([`IoMode`]: what it leaves in
//!   the kernel's page cache) and the probe that picks one;
//! - [`faulty`]: [`FaultyDevice`], failing, dropping, tearing, power-cut, bit-flip and
//!   misdirected-write injection;
//! - [`format`](mod@format): geometry and the byte layout of superblocks and records;
//! - `index` (private): the RAM index (bitmaps, compact hash table, LRU, free list, per-file
//!   entries);
//! - [`tier`]: [`FlashTier`] (the [`tiercache_tier::DataTier`]), [`FlashConfig`]; `access`
//!   its request path (reads, stores); `sums` the block checksums (table cache, rules in its
//!   docs); `inplace` the records' in-place bits (rules in its docs); `recovery` adds
//!   `create`/`open`/`open_or_create`/`close`; `check` the offline check ([`CheckReport`]);
//!   [`LegacyTier`] reads a format-2 cache to upgrade it; `meta` keeps each dirty file's
//!   meta durable (rules in its docs); `spill` hands the clean blocks of a
//!   set reused for a clean store to the caller (to go further down); `advice` turns the
//!   cleaner's decisions into `on_request`/`on_tick` advice; [`stats`]: [`FlashStats`];
//! - [`cleaner`]: the idle-time cleaning policy (001's normal → wait → writeback, or eager)
//!   as a pure state machine, and [`cleaner::plan_runs`] (file/offset order, merged).
//!
//! The manager uses it through `DataTier` calls, plus
//! [`FlashTier::open_or_create`] and [`FlashTier::flash_stats`]).

mod access;
mod advice;
mod check;
pub mod cleaner;
pub mod device;
pub mod error;
pub mod faulty;
pub mod format;
mod index;
mod inplace;
mod legacy;
mod meta;
mod pagecache;
mod park;
mod recovery;
mod spill;
pub mod stats;
mod sums;
pub mod tier;

pub use check::CheckReport;
pub use cleaner::{Cleaner, CleanerConfig, CleanerMode, CleanerState, Decision};
pub use device::{FileDevice, FlashDevice, MemDevice};
pub use error::FlashError;
pub use faulty::FaultyDevice;
pub use format::Geometry;
pub use index::SetId;
pub use legacy::LegacyTier;
pub use pagecache::{
    resident_pages, IoChoice, IoMode, AUTO_ORDER, DROP_EVERY, HEAD_LINGER, READ_AHEAD_SPARE,
};
pub use recovery::is_formatted;
pub use tier::{FlashConfig, FlashStats, FlashTier};
