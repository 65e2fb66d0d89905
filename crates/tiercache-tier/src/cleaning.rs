//! The [`Cleaning`] trait: the dirty blocks of a tier, for someone else (the manager) to write
//! to BACKING, and the tier's own policy of when to do it. Offered by a tier through
//! [`DataTier::cleaning`](crate::DataTier::cleaning) only when it can hold dirty blocks, so the
//! storage contract of `DataTier` stays the same for clean-only tiers.
//!
//! Contract: a dirty block stays until [`Cleaning::mark_clean`] with the `seq` that
//! [`Cleaning::read_dirty`] or [`Cleaning::dirty_blocks`] handed out, and only if it was not
//! written again since (a write changes its `seq`); the policy only advises (the manager does
//! the I/O). All methods take `&self` and are safe to call from several threads.

use crate::key::TierKey;
use crate::tier::TierError;

/// A dirty block for the cleaner: write it to BACKING, then [`Cleaning::mark_clean`] with `seq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirtyBlock {
    pub key: TierKey,
    pub version: u64,
    /// Changes whenever the block is written again.
    pub seq: u64,
}

/// The tier's cleaning policy's advice (the policy decides; the manager does the I/O).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CleanAdvice {
    /// Nothing to clean now.
    Idle,
    /// Write these dirty blocks to BACKING (in file/offset order, merged), then `mark_clean`.
    Clean(Vec<DirtyBlock>),
    /// Do not store into the tier now (no room without cleaning): go to BACKING directly.
    Bypass,
}

/// The dirty blocks of a tier and its cleaning policy. Object safe: handed out as
/// `&dyn Cleaning` by [`DataTier::cleaning`](crate::DataTier::cleaning).
pub trait Cleaning: Send + Sync {
    /// Copies a *dirty* copy of the block with `version` into `buf` and returns its dirty
    /// sequence (for [`Cleaning::mark_clean`]); `None` when the tier holds no dirty copy of
    /// that version.
    fn read_dirty(
        &self,
        key: &TierKey,
        version: u64,
        buf: &mut [u8],
    ) -> Result<Option<u64>, TierError>;
    /// Up to `max` dirty blocks, oldest first, for someone else to clean.
    fn dirty_blocks(&self, max: usize) -> Vec<DirtyBlock>;
    /// After the cleaner wrote `key` to BACKING: clean unless written again since `seq`.
    fn mark_clean(&self, key: &TierKey, seq: u64) -> bool;
    /// Whether the tier's own policy decides when its dirty blocks are cleaned
    /// ([`Cleaning::on_tick`], [`Cleaning::on_request`]); otherwise the manager cleans them on
    /// its own schedule. Default: no.
    fn has_policy(&self) -> bool {
        false
    }
    /// A request reached the tier (a memory miss or a write-back): the cleaning policy may ask
    /// for cleaning in the request path (`eager`) or to bypass the tier. Default: `Idle`.
    fn on_request(&self) -> CleanAdvice {
        CleanAdvice::Idle
    }
    /// Periodic tick from the manager's background thread: idle-time cleaning. Default: `Idle`.
    fn on_tick(&self) -> CleanAdvice {
        CleanAdvice::Idle
    }
}
