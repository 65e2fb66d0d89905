//! Where a tier hands the clean blocks it evicts: a [`SpillSink`] given to the tier once
//! ([`DataTier::set_spill_hook`]) instead of a callback on every store. A store asks for it
//! with [`Store::may_spill`]; the tier keeps the hook in a [`SpillSlot`]. [`SpillLog`] is an
//! in-memory sink that keeps what it was handed (tests, benches).
//!
//! [`DataTier::set_spill_hook`]: crate::DataTier::set_spill_hook
//! [`Store::may_spill`]: crate::Store::may_spill

use crate::key::TierKey;
use crate::tier::{Spilled, TierError};
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use tiercache_core::Class;

/// Takes the clean blocks a tier evicts to make room for a store that may spill (see
/// [`Spilled`]). Called under the lock of the tier that drops the block: it must not call into
/// that tier, and takes at most short locks of its own.
pub trait SpillSink: Send + Sync + fmt::Debug {
    fn spill(&self, s: Spilled<'_>);
}

/// A tier's spill hook, set at most once.
#[derive(Debug, Default)]
pub struct SpillSlot {
    hook: OnceLock<Arc<dyn SpillSink>>,
}

impl SpillSlot {
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the hook; a second set is an error (`tier` names the tier in it) and keeps the
    /// first.
    pub fn set(&self, tier: &str, hook: Arc<dyn SpillSink>) -> Result<(), TierError> {
        self.hook.set(hook).map_err(|_| TierError::SpillHookSet {
            tier: tier.to_owned(),
        })
    }

    /// The hook, if set.
    pub fn get(&self) -> Option<&dyn SpillSink> {
        self.hook.get().map(|h| &**h)
    }
}

/// One block a [`SpillLog`] was handed, with its bytes copied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpilledBlock {
    pub key: TierKey,
    pub version: u64,
    pub class: Class,
    pub data: Vec<u8>,
}

/// A [`SpillSink`] that keeps what it is handed, in order.
#[derive(Debug, Default)]
pub struct SpillLog {
    got: Mutex<Vec<SpilledBlock>>,
}

impl SpillLog {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// What was handed over since the last `take`, in order; empties the log.
    pub fn take(&self) -> Vec<SpilledBlock> {
        std::mem::take(&mut *self.got.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

impl SpillSink for SpillLog {
    fn spill(&self, s: Spilled<'_>) {
        let b = SpilledBlock {
            key: s.key,
            version: s.version,
            class: s.class,
            data: s.data.to_vec(),
        };
        self.got
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(b);
    }
}
