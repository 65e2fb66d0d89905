//! tiercache-remote: a cache tier in the memory of other machines — a pool of memcached
//! (≥ 1.6) servers — below the local tiers (paper 002, "memory of other machines as a disk
//! cache"), made safe for shared networks.
//!
//! It holds clean blocks only (BACKING or a local tier always has the truth), so losing a
//! server costs speed, never data. The index of which blocks are remote lives on the client:
//! a remote miss costs no round trip. Every value is encrypted and authenticated, and every
//! key carries the block's version, so a stale, forged or foreign value is never served.
//!
//! Parts:
//! - [`tier`]: [`RemoteTier`], the [`tiercache_tier::DataTier`] implementation, and
//!   [`RemoteStats`];
//! - [`config`]: [`RemoteConfig`] (defaults) and [`parse_url`] for `memcached://…`;
//! - [`keyfile`]: [`RemoteKey`], key file [`keyfile::generate`] / [`keyfile::load`] (no
//!   symlinks, a regular file owned by this user or root, mode 0600 enforced on the opened
//!   file);
//! - `crypt` (private): subkey derivation, key naming, XChaCha20-Poly1305 sealing;
//! - `index` (private): the client-side index (per-file B-trees, FIFO eviction);
//! - `pool` (private) and [`rendezvous_owner`]: rendezvous hashing, ejection, probing;
//! - `setup` (private): what connect asks every server at once (`stats settings`): the block
//!   must fit its `item_size_max` (else connect fails, naming the `-I` to use), and its
//!   `maxbytes` sizes the index, capped at what 1/16 of the host's memory can index;
//! - [`client`] and [`proto`]: a small blocking meta-protocol client (mg/ms/md/mn, quiet
//!   pipelined batches, deadlines, up to 16 idle connections per server) — see the
//!   repository's `docs/design.md` (§7) for why it is written here rather than taken from a
//!   crate;
//! - `local` (feature `test-util`): memcached processes on loopback, for tests and
//!   `tiercache bench remote`;
//! - `worker` (private): the background thread that lands stores (batches of at most 256 KiB
//!   of values: the request timeout covers one pipelined batch) and deletes, and probes
//!   ejected servers; it stops within about one timeout when the tier is dropped.

pub mod client;
pub mod config;
mod crypt;
pub mod error;
mod index;
pub mod keyfile;
#[cfg(feature = "test-util")]
pub mod local;
mod pool;
pub mod proto;
mod setup;
pub mod tier;
mod worker;

pub use client::{ServerClient, ServerSettings};
pub use config::{parse_url, RemoteConfig};
pub use error::RemoteError;
pub use keyfile::RemoteKey;
pub use pool::rendezvous_owner;
pub use tier::{RemoteStats, RemoteTier};

/// Bytes a stored value adds to a block (nonce, sequence number, authentication tag).
pub const VALUE_OVERHEAD: usize = crypt::OVERHEAD;
