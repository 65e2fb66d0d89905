//! The zero-copy shared memory (paper 003's On-Memory File): the memory tier's slots, their
//! headers and a lookup hint table in one memfd that the daemon maps and hands to clients,
//! read-only, so they read cached blocks with no copy and no system call; and one pin area per
//! client, the only memory a client can store into.
//!
//! - [`proto`]: the lock-free pin / claim protocol between a slot header and the clients' pin
//!   bits (loom-checked);
//! - [`layout`]: the byte layout both sides agree on, and what both read;
//! - [`region`]: the daemon's side (creates and seals the region, gives each client a pin
//!   area, claims and retires slots);
//! - [`view`]: a client's side (maps what it was given, pins and unpins).
//!
//! Byte-level format: `docs/design.md` §8.

#[cfg(not(loom))]
pub mod layout;
pub mod proto;
#[cfg(not(loom))]
pub mod region;
#[cfg(not(loom))]
pub mod view;

#[cfg(not(loom))]
pub use layout::{ClientId, Layout, PinArea, MAX_CLIENTS, STATE_CLOSED, STATE_SERVING};
pub use proto::{bucket, pin_mask, unpin, Pinned, SlotHeader, VALID};
#[cfg(not(loom))]
pub use region::Region;
#[cfg(not(loom))]
pub use view::RegionView;
