//! The [`DataTier`] trait: one cache tier below the memory tier.
//!
//! Contract (every implementation):
//! - a tier stores whole blocks of [`TierInfo::block_size`] bytes by [`TierKey`], each with the
//!   content `version` it was stored with; a read with another version is a miss and drops the
//!   old copy if it is clean (a dirty one stays until cleaned), so a tier never returns bytes
//!   of another version;
//! - a clean store ([`DataTier::store`] of kind `Fill` or `Demote`) is made visible only if its
//!   `current` check, asked under the same lock that makes it visible, still holds — so a
//!   write that makes the bytes stale either comes first (the store is turned down) or
//!   invalidates after it;
//! - reads either fill the whole buffer with the stored bytes or report a miss or an error —
//!   never partial or unverified bytes (a tier that cannot verify its medium reports a miss);
//! - clean blocks may be dropped at any time (BACKING or a tier above has them); dirty blocks
//!   (only in tiers that offer [`DataTier::cleaning`]) are kept until [`Cleaning::mark_clean`];
//! - a clean store that [`Store::may_spill`] (in a tier that [`DataTier::can_spill`]) hands each
//!   block it evicts to make room (always clean: dirty blocks are never evicted) to the tier's
//!   spill hook, given once ([`DataTier::set_spill_hook`], a [`SpillSink`]; [`Spilled`]: key,
//!   version, class and the whole stored bytes), under the lock that drops it and before its
//!   bytes are overwritten, so the caller can demote it further down; a victim whose bytes
//!   cannot be read back is dropped unspilled, never handed over with other bytes. The hook
//!   must not call into this tier. A store that may not spill, or a tier without a hook, drops
//!   its victims. A tier that evicts out of sight (memcached) spills nothing (`can_spill`
//!   false);
//! - `current` is a precondition of each store, not a hook: what makes a copy current depends
//!   on the job being stored (its bytes' change counter, its transit entry), so the caller
//!   passes it with every clean store and the tier asks it under its own lock, like a
//!   compare-and-swap;
//! - all methods take `&self` and are safe to call from several threads; none blocks on
//!   another tier or on the manager's locks (its `current` check and spill hook take only the
//!   manager's short transit lock);
//! - `Admit::Rejected` (full of dirty blocks, or declined) is an outcome, not an error: the
//!   caller goes on without this tier.
//!
//! What only some tiers do is behind its own small trait, which such a tier offers and the
//! others do not: [`Cleaning`] (dirty blocks for someone else to clean, and the cleaning
//! policy) through [`DataTier::cleaning`], [`Persistence`] (file meta kept with dirty blocks,
//! files found dirty at open) through [`DataTier::persistence`].

use crate::cleaning::Cleaning;
use crate::key::{FileKey, TierKey};
use crate::persistence::Persistence;
use crate::spill::SpillSink;
use serde::Serialize;
use std::fmt;
use std::io;
use std::sync::Arc;
use tiercache_core::Class;

/// What kind of medium a tier is (`stats` shows it as `kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum TierKind {
    Memory,
    /// In-memory test tier (volatile; injectable latency and faults).
    Test,
    /// Memory of other machines (a memcached pool; clean data only, volatile).
    Remote,
    /// A set-mapped write-back cache on an SSD (a file or a block device; persistent).
    Flash,
}

impl fmt::Display for TierKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TierKind::Memory => "memory",
            TierKind::Test => "test",
            TierKind::Remote => "remote",
            TierKind::Flash => "flash",
        })
    }
}

/// What a tier is: fixed for its lifetime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TierInfo {
    pub name: String,
    pub kind: TierKind,
    pub capacity_blocks: u64,
    pub block_size: usize,
    /// Takes dirty blocks (write-back target) and lets someone else clean them: it offers
    /// [`DataTier::cleaning`].
    pub accepts_dirty: bool,
    /// Keeps its contents across a restart: it offers [`DataTier::persistence`].
    pub persistent: bool,
}

/// Result of a read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// The buffer holds the block; `dirty`: the tier's copy is newer than BACKING.
    Hit {
        dirty: bool,
    },
    Miss,
}

/// Result of a store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    Stored,
    /// Not stored (no room that may be taken, or the tier declines): go on without it.
    Rejected,
}

/// A tier's failure. A failed read is served from the next source; a failed store is dropped
/// (clean data) or falls back to BACKING (dirty data).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TierError {
    #[error("tier {tier}: {source}")]
    Io {
        tier: String,
        #[source]
        source: io::Error,
    },
    /// The tier is detached or not reachable now; try later.
    #[error("tier {tier} unavailable: {why}")]
    Unavailable { tier: String, why: String },
    /// [`DataTier::set_spill_hook`] called a second time (the first hook stays).
    #[error("tier {tier}: spill hook already set")]
    SpillHookSet { tier: String },
}

/// For a caller that answers `io::Result` (the manager's write-back and sync paths): the tier
/// error itself travels inside (`get_ref` / `into_inner` give it back, `source` its cause),
/// never flattened into text; kind `Other`, as a tier's failure is not the caller's errno.
impl From<TierError> for io::Error {
    fn from(e: TierError) -> Self {
        io::Error::other(e)
    }
}

/// Counters and occupancy, for `stats --json` `tiers[]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TierSnapshot {
    pub name: String,
    pub kind: String,
    pub capacity_blocks: u64,
    pub used_blocks: u64,
    pub dirty_blocks: u64,
    pub hits: u64,
    pub misses: u64,
    /// Blocks stored here because a tier above evicted them.
    pub demotions_in: u64,
    /// Blocks handed up to a tier above on a hit (and removed here).
    pub promotions_out: u64,
    /// Clean blocks stored on a miss (inclusive placement).
    pub fills: u64,
    /// Dirty blocks stored by write-back from above.
    pub writebacks_in: u64,
    /// Dirty blocks made clean by the cleaner.
    pub cleaned: u64,
    /// Stores turned down (`Admit::Rejected`).
    pub rejected: u64,
    /// Reads or stores that failed.
    pub errors: u64,
}

/// A clean block a tier evicted to make room for a clean store that may spill, handed to the
/// tier's [`SpillSink`] so it can go one tier further down. `data` is the whole block as stored, with the `version` it was stored with.
#[derive(Debug, Clone, Copy)]
pub struct Spilled<'a> {
    pub key: TierKey,
    pub version: u64,
    /// The class it was stored with (a tier that keeps none says [`Class::NORMAL`]).
    pub class: Class,
    pub data: &'a [u8],
}

/// What a [`DataTier::store`] is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    /// A clean copy read from below on a miss (inclusive placement).
    Fill,
    /// A clean block evicted from the tier above (exclusive placement).
    Demote,
    /// Dirty data written back from above (tiers with [`TierInfo::accepts_dirty`]).
    WriteDirty,
}

impl StoreKind {
    /// Whether the store is of clean data (asks `current`, may spill when asked to).
    pub fn is_clean(self) -> bool {
        !matches!(self, StoreKind::WriteDirty)
    }
}

/// One store request: the whole block `data` of `key`, with the content `version` and the
/// `class` it is stored with.
#[derive(Debug, Clone, Copy)]
pub struct Store<'a> {
    pub key: TierKey,
    pub version: u64,
    pub class: Class,
    pub data: &'a [u8],
    pub kind: StoreKind,
    /// A clean store hands what it evicts to the tier's spill hook (if set); otherwise its
    /// victims are dropped. Ignored by a dirty store. [`Store::new`]: false.
    pub may_spill: bool,
}

impl<'a> Store<'a> {
    pub fn new(key: &TierKey, version: u64, class: Class, data: &'a [u8], kind: StoreKind) -> Self {
        Self {
            key: *key,
            version,
            class,
            data,
            kind,
            may_spill: false,
        }
    }

    /// The same request, handing what it evicts to the tier's spill hook.
    #[must_use]
    pub fn spilling(mut self) -> Self {
        self.may_spill = true;
        self
    }
}

/// Shorthands for [`DataTier::store`], one per kind (callers and tests; implementations
/// implement `store` only).
pub trait StoreExt: DataTier {
    /// A clean [`StoreKind::Fill`], nothing spilled.
    fn fill(
        &self,
        key: &TierKey,
        version: u64,
        class: Class,
        data: &[u8],
        current: &dyn Fn() -> bool,
    ) -> Result<Admit, TierError> {
        self.store(
            &Store::new(key, version, class, data, StoreKind::Fill),
            current,
        )
    }
    /// A clean [`StoreKind::Demote`], nothing spilled.
    fn demote(
        &self,
        key: &TierKey,
        version: u64,
        class: Class,
        data: &[u8],
        current: &dyn Fn() -> bool,
    ) -> Result<Admit, TierError> {
        self.store(
            &Store::new(key, version, class, data, StoreKind::Demote),
            current,
        )
    }
    /// `fill`, handing evicted clean blocks to the tier's spill hook.
    fn fill_spilling(
        &self,
        key: &TierKey,
        version: u64,
        class: Class,
        data: &[u8],
        current: &dyn Fn() -> bool,
    ) -> Result<Admit, TierError> {
        self.store(
            &Store::new(key, version, class, data, StoreKind::Fill).spilling(),
            current,
        )
    }
    /// `demote`, handing evicted clean blocks to the tier's spill hook.
    fn demote_spilling(
        &self,
        key: &TierKey,
        version: u64,
        class: Class,
        data: &[u8],
        current: &dyn Fn() -> bool,
    ) -> Result<Admit, TierError> {
        self.store(
            &Store::new(key, version, class, data, StoreKind::Demote).spilling(),
            current,
        )
    }
    /// A [`StoreKind::WriteDirty`].
    fn write_dirty(
        &self,
        key: &TierKey,
        version: u64,
        class: Class,
        data: &[u8],
    ) -> Result<Admit, TierError> {
        self.store(
            &Store::new(key, version, class, data, StoreKind::WriteDirty),
            &|| true,
        )
    }
}

impl<T: DataTier + ?Sized> StoreExt for T {}

/// One cache tier below the memory tier. Object safe: the manager holds `Arc<dyn DataTier>`.
pub trait DataTier: Send + Sync + fmt::Debug {
    fn info(&self) -> &TierInfo;
    /// Whether some version of the block is held. No I/O, no counting: a cheap pre-check.
    fn contains(&self, key: &TierKey) -> bool;
    /// Copies the block into `buf` (one block long) when held with `version`.
    fn read(&self, key: &TierKey, version: u64, buf: &mut [u8]) -> Result<Lookup, TierError>;
    /// Like `read`, then removes a clean copy (exclusive promotion). A dirty copy stays: the
    /// tier remains responsible for it until cleaned.
    fn take(&self, key: &TierKey, version: u64, buf: &mut [u8]) -> Result<Lookup, TierError>;
    /// Stores a block: a clean copy read from below on a miss ([`StoreKind::Fill`], inclusive
    /// placement), a clean block evicted from the tier above ([`StoreKind::Demote`],
    /// exclusive placement), or dirty data written back from above
    /// ([`StoreKind::WriteDirty`], only when `accepts_dirty`).
    ///
    /// `current` is a precondition of this one store, not a hook: a clean store asks it
    /// atomically with making the copy visible (under the tier's own lock): `false` means the
    /// bytes went stale since they were read, and the store is `Rejected`. With
    /// [`Store::may_spill`] (and [`DataTier::can_spill`]), each clean block evicted to make room
    /// for a clean store is handed to the spill hook (see the module docs); without, or with no
    /// hook set, it is dropped.
    ///
    /// A dirty store ignores `current` and `may_spill`. A block the tier already holds dirty
    /// *with this `version`* is never turned down (it is overwritten in place); when the tier
    /// cannot take it (degraded, closed) that is an `Err`, never `Rejected`, so the caller does
    /// not write around a dirty copy. One exception: a tier that keeps one version per group
    /// of blocks (the flash tier's sets) answers `Rejected` to a store of another `version`
    /// while the group holds dirty blocks of the old one (a version conflict): the manager
    /// cleans (or discards) the old version's dirty blocks before a version change reaches
    /// the tier.
    ///
    /// [`StoreExt`] has the per-kind shorthands (`fill`, `demote`, `write_dirty`, ...).
    fn store(&self, req: &Store<'_>, current: &dyn Fn() -> bool) -> Result<Admit, TierError>;
    /// Whether a clean `store` that may spill hands down what the tier evicts (so an exclusive
    /// tier below it receives blocks). Default: no (a memcached pool evicts on its own).
    fn can_spill(&self) -> bool {
        false
    }
    /// Gives the tier, once, the hook its spilling stores hand their victims to (the manager
    /// sets it when it builds its stack: where a tier's victims go is fixed per tier). A second
    /// call is an error ([`TierError::SpillHookSet`]) and keeps the first hook. Default (a tier
    /// that never spills): the hook is dropped, `Ok`.
    fn set_spill_hook(&self, hook: Arc<dyn SpillSink>) -> Result<(), TierError> {
        drop(hook);
        Ok(())
    }
    /// Drops a clean copy (a write above made it stale). A dirty copy stays: it may hold data
    /// acknowledged by `fsync`, and the newer bytes above reach this tier by write-back.
    fn invalidate(&self, key: &TierKey);
    /// [`DataTier::invalidate`] if it needs no I/O and no wait for a lock that is held across
    /// I/O, for a write served on the request thread: `true` when done (no clean copy of
    /// `key` is left), `false` when that cannot be done at once (then the caller uses
    /// `invalidate` from a thread that may wait; nothing need have changed). Default: `false`.
    fn try_invalidate(&self, key: &TierKey) -> bool {
        let _ = key;
        false
    }
    /// Drops the block even if it is dirty: newer bytes of it reached BACKING another way.
    fn discard(&self, key: &TierKey);
    /// Drops every block of `file` from `from_block` on, dirty ones too (truncation, or a file
    /// changed behind the cache's back).
    fn invalidate_file(&self, file: &FileKey, from_block: u64);
    /// Makes dirty data stored so far durable in the tier (a volatile tier: nothing to do).
    fn sync(&self) -> Result<(), TierError>;
    fn stats(&self) -> TierSnapshot;
    /// Its dirty blocks, for someone else to clean, and its cleaning policy: offered by every
    /// tier that can hold dirty blocks — one with [`TierInfo::accepts_dirty`], or one opened
    /// after a restart holding dirty blocks of an earlier run. `None` (the default): the tier
    /// never holds a dirty block, so there is nothing to clean.
    fn cleaning(&self) -> Option<&dyn Cleaning> {
        None
    }
    /// What it keeps across a restart besides blocks (the meta of files with dirty blocks, and
    /// the files found with dirty blocks at open): offered exactly by the tiers with
    /// [`TierInfo::persistent`]. `None` (the default): a volatile tier, which loses dirty data
    /// at a restart anyway.
    fn persistence(&self) -> Option<&dyn Persistence> {
        None
    }
    /// The tier counted too many device errors: the manager cleans what it can read and stops
    /// using it. Default: never.
    fn detaching(&self) -> bool {
        false
    }
}
