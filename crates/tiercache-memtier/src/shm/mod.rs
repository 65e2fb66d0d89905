//! The zero-copy shared region (paper 003's On-Memory File): the memory tier's slots, their
//! headers and a lookup hint table in one sealed memfd that the daemon maps and hands to
//! clients, who then read cached blocks with no copy and no system call.
//!
//! - [`proto`]: the lock-free pin / claim protocol on a slot header (loom-checked);
//! - [`region`]: the region's layout, creation (daemon) and mapping (client).
//!
//! Byte-level format: `docs/design.md` §8.

pub mod proto;
#[cfg(not(loom))]
pub mod region;

pub use proto::{bucket, Pinned, SlotHeader, VALID};
#[cfg(not(loom))]
pub use region::{Layout, Region, Superblock, MAX_CLIENTS, STATE_CLOSED, STATE_SERVING};
