//! The state of the blocks in transit to a lower tier: the job queue, the map of demotions and
//! spills by key, recycled buffers and the guards that keep a store from making stale bytes
//! visible. What moves them (queueing, the worker, the stores) is `lower_transit`; this file
//! knows nothing of the tiers, so the stack (`lower`) can own a `Transit` without a circle.

use crate::file_state::FileShared;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use tiercache_core::Class;
use tiercache_tier::TierKey;

/// Blocks waiting to be stored in lower tiers, at most.
pub(crate) const TRANSIT_MAX: usize = 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JobKind {
    /// Memory evicted it: into the exclusive tier right below memory.
    Demote,
    /// A copy for an inclusive (or pinned) tier.
    Fill,
    /// A lower tier evicted it while storing a job: into the exclusive tier right below that.
    Spill,
}

/// What makes a queued store current, asked as the tier makes the copy visible.
#[derive(Debug)]
pub(crate) enum Guard {
    /// The file's change counter when the bytes were read (demotions from memory, fills):
    /// current while it has not moved.
    Change { file: Arc<FileShared>, at: u64 },
    /// A spilled block: current while its transit entry stands. Whatever makes a lower copy
    /// stale (a write, truncation, a change behind our back, cleaning a block memory holds
    /// newer) removes it through `Lower::invalidate_from` / `invalidate_file`, which drop the
    /// copy in each tier and *then* the transit entries, top down. The spill happened under
    /// the evicting tier's lock, so either before that tier was invalidated (its entry is
    /// then removed after it, and the store into the next tier either asked the entry before
    /// — and that tier is invalidated next — or is turned down), or not at all. The version
    /// (a read with another one is a miss) covers a change behind our back too.
    Entry,
}

#[derive(Debug)]
pub(crate) struct Job {
    pub kind: JobKind,
    /// Planner tier index it goes to (≥ 1).
    pub tier: usize,
    pub key: TierKey,
    pub version: u64,
    pub class: Class,
    pub data: Box<[u8]>,
    pub seq: u64,
    pub guard: Guard,
}

/// A demotion or spill waiting: its bytes are in the queued job `seq`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Entry {
    pub version: u64,
    pub seq: u64,
    /// Planner tier it goes to.
    pub tier: usize,
}

#[derive(Debug, Default)]
pub(crate) struct Transit {
    pub queue: VecDeque<Job>,
    /// Demotions and spills waiting or being stored, by key.
    pub demoting: HashMap<TierKey, Entry>,
    pub free: Vec<Box<[u8]>>,
    /// A job popped and being stored right now (counts against the bound).
    pub busy: usize,
    pub next_seq: u64,
    pub stop: bool,
}

impl Transit {
    pub(crate) fn full(&self) -> bool {
        self.stop || self.queue.len() + self.busy >= TRANSIT_MAX
    }

    /// Takes a recycled block buffer or makes one, with a copy of `bytes`.
    pub(crate) fn buffer(&mut self, bytes: &[u8]) -> Box<[u8]> {
        let mut b = self
            .free
            .pop()
            .unwrap_or_else(|| vec![0u8; bytes.len()].into_boxed_slice());
        b.copy_from_slice(bytes);
        b
    }

    pub(crate) fn seq(&mut self) -> u64 {
        let s = self.next_seq;
        self.next_seq += 1;
        s
    }
}
