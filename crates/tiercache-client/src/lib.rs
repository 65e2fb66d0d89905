//! tiercache-client: zero-copy access to a tiercache mount's memory tier (paper 003's On-Memory
//! File). A program on the same host connects to the mount's zero-copy service, maps the
//! memory tier's shared region (read-only), and reads cached blocks in place: a hit is a hash
//! probe and two atomic operations in shared memory, no copy and no system call; a miss is one
//! request to the daemon, which reads the blocks into the cache (lower tiers, BACKING) and
//! pins them. Unmodified programs on the FUSE mount see the same bytes (one arena, one engine).
//! An update is made in a private copy of a block and committed as a write of the changed
//! bytes (one request), so a client changes only files it opened for writing.
//!
//! Parts:
//! - [`client`]: [`Client`] (connection, mappings, pins);
//! - [`file`](mod@file): [`ZcFile`] (readblock, readbyte, updates, syncblock);
//! - [`block`]: [`BlockRef`] (a pinned block, read in place through atomic loads or an
//!   `unsafe` slice), [`ByteView`] (a byte range over pinned blocks), [`BlockMut`] (an update);
//! - [`wire`]: the socket protocol (JSON frames, descriptors passed with `SCM_RIGHTS`), from
//!   the `tiercache-wire` crate the daemon uses too.
//!
//! Trust: mapping the region exposes every cached block of the mount to this process (to
//! read); the daemon admits only its own user (and root), or members of `--zero-copy-group`.
//! See the README's "Zero-copy clients" and `docs/design.md` §8.

pub mod block;
pub mod client;
pub mod file;
mod pins;
pub use tiercache_wire as wire;

pub use block::{BlockMut, BlockRef, ByteView};
pub use client::{Client, ClientStats, Error, Result, MAX_BLOCKS};
pub use file::ZcFile;
