//! [`FlashError`]: what can go wrong creating, opening or checking a flash tier.

use std::io;
use tiercache_tier::TierError;

/// Errors of the flash tier's setup, recovery and device I/O.
///
/// On the request path a device error is counted (and past `max_errors` the tier degrades);
/// it reaches the manager as [`TierError`] through the `From` below.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FlashError {
    /// The device could not be read, written or synced.
    #[error("flash device: {0}")]
    Io(#[from] io::Error),
    /// The configuration or the device size cannot give a usable layout.
    #[error("flash geometry: {0}")]
    Geometry(String),
    /// No valid superblock: not a flash tier, or both copies are damaged.
    #[error("not a tiercache flash device (no valid superblock): {0}")]
    NotFormatted(String),
    /// No valid superblock, and the formatting marker in slot 0: a format of the device was
    /// interrupted (a crash while formatting). It holds no cache: `open_or_create` formats it
    /// again.
    #[error(
        "the format of this flash cache was interrupted (a crash while it was being made): it \
         holds no cache yet; the next mount formats it again"
    )]
    FormatInterrupted,
    /// A superblock of another format version or geometry than asked for.
    #[error("flash format mismatch: {0}")]
    Mismatch(String),
    /// A cache made by another tiercache version: format 2 is upgraded by a mount (its dirty
    /// blocks written back, then reformatted: [`crate::LegacyTier`]); others are refused.
    #[error("{}", format_version_msg(*found))]
    FormatVersion { found: u32 },
    /// The tier is degraded (too many device errors) or closed.
    #[error("flash tier {tier} unavailable: {why}")]
    Unavailable { tier: String, why: String },
}

fn format_version_msg(found: u32) -> String {
    let expected = crate::format::FORMAT_VERSION;
    if found == crate::format::UPGRADABLE_VERSION {
        return format!(
            "flash cache made by an older tiercache (format version {found}, this one reads \
             {expected}); mount it over the BACKING it was used with to upgrade it (its dirty \
             blocks are written back to BACKING first, then it is reformatted)"
        );
    }
    let by = if found < expected {
        "an older"
    } else {
        "a newer"
    };
    format!(
        "flash cache made by {by} tiercache (format version {found}, this one reads {expected}); \
         it cannot be migrated: remove the file (or wipe the device) to recreate it"
    )
}

impl FlashError {
    /// Into the trait's error, naming the tier.
    pub fn into_tier(self, tier: &str) -> TierError {
        match self {
            FlashError::Io(source) => TierError::Io {
                tier: tier.to_string(),
                source,
            },
            FlashError::Unavailable { tier, why } => TierError::Unavailable { tier, why },
            other => TierError::Unavailable {
                tier: tier.to_string(),
                why: other.to_string(),
            },
        }
    }
}

impl From<FlashError> for TierError {
    fn from(e: FlashError) -> Self {
        e.into_tier("flash")
    }
}
