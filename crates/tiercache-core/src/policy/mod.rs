//! Eviction policies: each *decides* which resident block a pool gives up; the tier does the
//! bookkeeping (key map, slots) and the live cache does the I/O.
//!
//! Contract for every [`EvictionPolicy`] (checked by `tests/policy_model.rs`):
//! - slots are `0..slots` as given to the constructor; a slot is inserted at most once until it is
//!   removed; `touch`/`remove` are only called for inserted slots;
//! - `victim` returns an inserted slot whenever `len() > 0` and does not remove it (the caller
//!   calls `remove(.., evicted = true)` next, or `touch` if it cannot evict that block now);
//! - every operation is O(1) amortised and allocates nothing after construction.

mod arc;
mod clock;
mod fifo;
mod list;
mod lru;
mod s3fifo;
mod sieve;

pub use arc::ArcPolicy;
pub use clock::Clock;
pub use fifo::Fifo;
pub use list::{SlotLists, NIL};
pub use lru::Lru;
pub use s3fifo::S3Fifo;
pub use sieve::Sieve;

use crate::error::ParseError;
use crate::ids::{BlockKey, SlotId};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Which eviction policy a pool runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum PolicyKind {
    #[default]
    Lru,
    Fifo,
    Clock,
    Sieve,
    S3Fifo,
    Arc,
}

impl PolicyKind {
    pub const ALL: [PolicyKind; 6] = [
        PolicyKind::Lru,
        PolicyKind::Fifo,
        PolicyKind::Clock,
        PolicyKind::Sieve,
        PolicyKind::S3Fifo,
        PolicyKind::Arc,
    ];
    pub const fn as_str(self) -> &'static str {
        match self {
            PolicyKind::Lru => "lru",
            PolicyKind::Fifo => "fifo",
            PolicyKind::Clock => "clock",
            PolicyKind::Sieve => "sieve",
            PolicyKind::S3Fifo => "s3fifo",
            PolicyKind::Arc => "arc",
        }
    }
}

impl fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for PolicyKind {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let norm = s.to_ascii_lowercase().replace(['-', '_'], "");
        PolicyKind::ALL
            .into_iter()
            .find(|k| k.as_str() == norm)
            .ok_or_else(|| ParseError::unknown("policy", s, "lru|fifo|clock|sieve|s3fifo|arc"))
    }
}

/// One pool's replacement order. Object safe: tiers hold `Box<dyn EvictionPolicy>`.
pub trait EvictionPolicy: Send + fmt::Debug {
    fn kind(&self) -> PolicyKind;
    /// Resident blocks tracked.
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The pool may now hold up to `blocks` blocks (≤ the constructor's `slots`). Adaptive
    /// policies size their queues and ghosts from it; it never forces an eviction by itself.
    fn set_capacity(&mut self, blocks: usize);
    /// `slot` now holds `key`, brought in after a miss.
    fn insert(&mut self, slot: SlotId, key: BlockKey);
    /// `slot` was accessed again (a hit).
    fn touch(&mut self, slot: SlotId);
    /// The block to give up next, given the block about to come in (ARC uses it).
    fn victim(&mut self, incoming: Option<BlockKey>) -> Option<SlotId>;
    /// `slot` leaves the pool: `evicted` is true for an eviction (ghost-keeping policies remember
    /// the key), false for a move elsewhere (promotion, reclassification, invalidation).
    fn remove(&mut self, slot: SlotId, key: BlockKey, evicted: bool);
    /// Hint: start fetching what [`EvictionPolicy::touch`] of `slot` reads first. No effect on
    /// the order; the default does nothing.
    #[inline]
    fn prefetch(&self, _slot: SlotId) {}
    /// Hint: the blocks likely to be chosen as the next three victims, next first, for the
    /// tier to prefetch. May be wrong or `None`; never changes the order. The default knows
    /// none.
    #[inline]
    fn victim_hints(&self) -> [Option<SlotId>; 3] {
        [None; 3]
    }
}

/// A policy of `kind` for slots `0..slots`.
pub fn new_policy(kind: PolicyKind, slots: usize) -> Box<dyn EvictionPolicy> {
    match kind {
        PolicyKind::Lru => Box::new(Lru::new(slots)),
        PolicyKind::Fifo => Box::new(Fifo::new(slots)),
        PolicyKind::Clock => Box::new(Clock::new(slots)),
        PolicyKind::Sieve => Box::new(Sieve::new(slots)),
        PolicyKind::S3Fifo => Box::new(S3Fifo::new(slots)),
        PolicyKind::Arc => Box::new(ArcPolicy::new(slots)),
    }
}
