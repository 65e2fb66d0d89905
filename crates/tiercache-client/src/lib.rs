//! tiercache-client: zero-copy access to a tiercache mount's memory tier (paper 003's On-Memory
//! File). A program on the same host connects to the mount's zero-copy service, maps the
//! memory tier's shared region, and reads cached blocks in place: a hit is a hash probe and
//! two atomic operations in shared memory, no copy and no system call; a miss is one request
//! to the daemon, which reads the blocks into the cache (lower tiers, BACKING) and pins them.
//! Unmodified programs on the FUSE mount see the same bytes (one arena, one engine).
//!
//! Parts:
//! - [`client`]: [`Client`] (connection + mapping), [`ZcFile`], [`BlockRef`] (a pinned block),
//!   [`BlockMut`] (a pinned block updated in place), [`ByteView`] (a byte range over pinned
//!   blocks);
//! - [`wire`]: the socket protocol (JSON frames, descriptors passed with `SCM_RIGHTS`).
//!
//! Trust: mapping the region exposes every cached block of the mount to this process; the
//! daemon admits only its own user (and root), or members of `--zero-copy-group`. See the
//! README's "Zero-copy clients" and `docs/design.md` §8.

pub mod client;
pub mod wire;

pub use client::{BlockMut, BlockRef, ByteView, Client, ClientStats, Error, Result, ZcFile};
