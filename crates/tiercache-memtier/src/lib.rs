//! tiercache-memtier: the memory tier.
//!
//! Parts:
//! - [`arena`]: one allocation of fixed-size block slots, each with a header (a lock over the
//!   slot's state and bytes, a dirty sequence). The live manager's top tier keeps its blocks
//!   here, and so does [`MemoryTier`];
//! - [`memory`]: [`MemoryTier`], the memory tier as a [`tiercache_tier::DataTier`]: arena +
//!   the engine's slot index (`tiercache_core::tier::Tier`, pools and policies) behind one lock;
//! - [`test_tier`]: [`TestTier`], a `MemoryTier` with a latency MODEL and injectable faults;
//! - [`shm`]: the zero-copy shared region (slot headers, hint table, slot bytes in one memfd)
//!   and its lock-free pin protocol.
//!
//! The manager (`tiercache-manager`) drives the *top* memory tier through the arena and the
//! index directly, under its own engine lock, rather than through `DataTier`'s block copies: a
//! FUSE read or write touches part of a block in place, and its hit path pins slots with one
//! lock for the file table and the index together (see `docs/design.md` §3).

// Under `--cfg loom` only the lock-free protocol is built (loom's atomics are not the shared
// mapping's): `tests/loom_pin_protocol.rs` model-checks it.
#[cfg(not(loom))]
pub mod arena;
#[cfg(not(loom))]
pub mod memory;
pub mod shm;
#[cfg(not(loom))]
pub mod test_tier;

#[cfg(not(loom))]
pub use arena::{Arena, ArenaError, ReadSlot, SlotState, WriteSlot};
#[cfg(not(loom))]
pub use memory::{MemoryTier, MemoryTierConfig};
#[cfg(not(loom))]
pub use test_tier::{TestTier, TestTierConfig};
