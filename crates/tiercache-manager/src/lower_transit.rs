//! Blocks in transit to a lower tier, and the background thread that stores them: demotions
//! of memory's victims, fills of inclusive tiers, and the blocks a lower tier evicts while
//! storing one of those (*spills*), which go on into the exclusive tier below it — so
//! evictions cascade down the stack as in the simulator (`Hierarchy::demote`).
//!
//! Invariants:
//! - every demotion and spill waiting or being stored has an entry in `Transit::demoting`
//!   (key → version, job, target tier) until the worker has stored it; a read looks there
//!   first, so a block leaving memory is always in its slot, in transit or below. A tier
//!   spills under the lock that drops the block, so a block leaving tier i is in tier i, in
//!   transit or in tier i + 1 at every moment (a read that asks the map before the spill and
//!   tier i after it still misses it: the read asks the map again after the tiers, and
//!   otherwise goes to BACKING — clean bytes, never wrong ones);
//! - a tier's spills go where its spill hook ([`SpillInto`], given to the tier once when the
//!   stack is built) sends them: the exclusive tier the planner puts below it, fixed per tier.
//!   The hook holds only the transit state (never the stack: no `Arc` cycle tier → hook →
//!   stack → tier); a store lets its tier spill only while that tier below is attached, and
//!   the hook checks that again when called;
//! - at most `TRANSIT_MAX` jobs wait or are being stored (demotions, fills and spills
//!   together; spills only up to half of it); past that a block is dropped and counted
//!   (`demotions_dropped`, `spills_dropped`,
//!   `fills_dropped`): it is clean, BACKING has it;
//! - a store never makes stale bytes visible: demotions from memory and fills carry the
//!   file's change counter from when their bytes were read, spills their transit entry (see
//!   [`Guard`]); the tier asks the guard under its own lock as it makes the copy visible.
//!
//! Lock order: engine → transit; tier → transit (a tier's `current` check and spill hook).
//! The worker takes the engine or the transit lock alone and calls tiers with neither held.

use crate::file_state::FileShared;
use crate::locks::lock;
use crate::lower::Lower;
use crate::transit::{Entry, Guard, Job, JobKind, Transit, TRANSIT_MAX};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use tiercache_core::Class;
use tiercache_tier::{Admit, SpillSink, Spilled, Store, StoreKind, TierKey};

/// Queues `job` and wakes the worker.
fn enqueue(cv: &Condvar, t: &mut Transit, job: Job) {
    t.queue.push_back(job);
    // All: `drain` waits on the same condition variable.
    cv.notify_all();
}

/// The spill hook of one lower tier: what it evicts while the worker stores into it is queued
/// for planner tier `into` (the exclusive tier below it) and registered in the transit map.
/// Holds only the transit state the stack shares with it.
#[derive(Debug)]
pub(crate) struct SpillInto {
    /// Planner tier the spills go to.
    pub into: usize,
    pub bs: usize,
    pub transit: Arc<Mutex<Transit>>,
    pub cv: Arc<Condvar>,
    /// `LowerCounters::spills_dropped`.
    pub dropped: Arc<AtomicU64>,
    /// Whether tier `into` is detached: then nothing goes there.
    pub detached: Arc<AtomicBool>,
}

impl SpillSink for SpillInto {
    /// Called under the evicting tier's lock.
    fn spill(&self, s: Spilled<'_>) {
        if self.detached.load(SeqCst) {
            return;
        }
        let mut t = lock(&self.transit);
        // Half the bound at most: memory's victims (hotter than a lower tier's) keep room.
        if t.full() || t.queue.len() + t.busy >= TRANSIT_MAX / 2 || s.data.len() != self.bs {
            self.dropped.fetch_add(1, Relaxed);
            return;
        }
        let data = t.buffer(s.data);
        let seq = t.seq();
        let entry = Entry {
            version: s.version,
            seq,
            tier: self.into,
        };
        t.demoting.insert(s.key, entry);
        let job = Job {
            kind: JobKind::Spill,
            tier: self.into,
            key: s.key,
            version: s.version,
            class: s.class,
            data,
            seq,
            guard: Guard::Entry,
        };
        enqueue(&self.cv, &mut t, job);
    }
}

impl Lower {
    fn enqueue(&self, t: &mut Transit, job: Job) {
        enqueue(&self.cv, t, job);
    }

    /// Phase 1 of a demotion, under the engine lock: copies the victim's bytes into a transit
    /// buffer (its slot is about to be reused). False when the bound is reached (dropped).
    pub fn demote_victim(
        &self,
        key: TierKey,
        version: u64,
        class: Class,
        bytes: &[u8],
        file: &Arc<FileShared>,
    ) -> bool {
        let Some(tier) = self.planner.on_evict(0) else {
            return false;
        };
        let mut t = lock(&self.transit);
        if t.full() || bytes.len() != self.bs {
            self.counters.demotions_dropped.fetch_add(1, Relaxed);
            return false;
        }
        let data = t.buffer(bytes);
        let seq = t.seq();
        t.demoting.insert(key, Entry { version, seq, tier });
        let guard = Guard::Change {
            file: Arc::clone(file),
            at: file.change.load(SeqCst),
        };
        let job = Job {
            kind: JobKind::Demote,
            tier,
            key,
            version,
            class,
            data,
            seq,
            guard,
        };
        self.enqueue(&mut t, job);
        true
    }

    /// Queues a clean copy of `data` for planner tier `i` (dropped, and counted, past the
    /// bound: the block is clean, BACKING has it).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn queue_fill(
        &self,
        i: usize,
        key: TierKey,
        version: u64,
        class: Class,
        data: &[u8],
        file: &Arc<FileShared>,
        change: u64,
    ) {
        let mut t = lock(&self.transit);
        if t.full() || data.len() != self.bs {
            self.counters.fills_dropped.fetch_add(1, Relaxed);
            return;
        }
        let data = t.buffer(data);
        let seq = t.seq();
        let guard = Guard::Change {
            file: Arc::clone(file),
            at: change,
        };
        let job = Job {
            kind: JobKind::Fill,
            tier: i,
            key,
            version,
            class,
            data,
            seq,
            guard,
        };
        self.enqueue(&mut t, job);
    }

    /// A demotion or spill of `key` with `version` waiting in transit: copies it into `buf`
    /// and returns the planner tier it is going to. `take`: memory keeps the block, so the
    /// store below is cancelled.
    pub(crate) fn transit_read(
        &self,
        key: TierKey,
        version: u64,
        take: bool,
        buf: &mut [u8],
    ) -> Option<usize> {
        let mut t = lock(&self.transit);
        let e = *t.demoting.get(&key)?;
        if e.version != version {
            return None;
        }
        let job = t.queue.iter().find(|j| j.seq == e.seq)?;
        if job.data.len() != buf.len() {
            return None;
        }
        buf.copy_from_slice(&job.data);
        if take {
            t.demoting.remove(&key);
        }
        self.counters.transit_hits.fetch_add(1, Relaxed);
        self.counters.hits.fetch_add(1, Relaxed);
        Some(e.tier)
    }

    /// Whether `job`'s bytes may still be stored (see [`Guard`]).
    fn current(&self, job: &Job) -> bool {
        match &job.guard {
            Guard::Change { file, at } => {
                file.change.load(SeqCst) == *at && file.no_wait_writes.load(SeqCst) == 0
            }
            Guard::Entry => lock(&self.transit)
                .demoting
                .get(&job.key)
                .is_some_and(|e| e.seq == job.seq),
        }
    }

    /// The background mover: stores queued jobs until `stop`. `in_memory` tells whether the
    /// memory tier holds a block (takes the engine lock; called with no other lock held).
    pub fn worker_loop(&self, in_memory: &dyn Fn(&TierKey) -> bool) {
        while let Some(job) = self.next_job() {
            self.store(&job, in_memory);
            let mut t = lock(&self.transit);
            t.busy -= 1;
            if t.demoting.get(&job.key).is_some_and(|e| e.seq == job.seq) {
                t.demoting.remove(&job.key);
            }
            t.free.push(job.data);
            if t.queue.is_empty() && t.busy == 0 {
                self.cv.notify_all();
            }
        }
    }

    /// The next live job (marked busy), or `None` once stopped with nothing queued. A
    /// demotion or spill cancelled meanwhile (taken back, or invalidated) is skipped.
    fn next_job(&self) -> Option<Job> {
        let mut t = lock(&self.transit);
        loop {
            if let Some(job) = t.queue.pop_front() {
                let live = job.kind == JobKind::Fill
                    || t.demoting.get(&job.key).is_some_and(|e| e.seq == job.seq);
                if live {
                    t.busy += 1;
                    return Some(job);
                }
                t.free.push(job.data);
                if t.queue.is_empty() && t.busy == 0 {
                    self.cv.notify_all(); // `drain` waits for this
                }
                continue;
            }
            if t.stop {
                return None;
            }
            t = self.cv.wait(t).unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Stores one job; what the tier evicts for it goes on down when the tier below is
    /// exclusive.
    fn store(&self, job: &Job, in_memory: &dyn Fn(&TierKey) -> bool) {
        if self.is_detached(job.tier - 1) || !self.current(job) {
            return;
        }
        if job.kind == JobKind::Spill {
            // As in the simulator: a block a tier above the evicting one still holds is not
            // demoted, so an exclusive tier does not duplicate it.
            let from = job.tier - 1;
            let above =
                (1..from).any(|k| !self.is_detached(k - 1) && self.tier(k).tier.contains(&job.key));
            if above || in_memory(&job.key) {
                return;
            }
        }
        let tier = &self.tier(job.tier).tier;
        let current = || self.current(job);
        let below = self
            .planner
            .on_evict(job.tier)
            .filter(|&j| !self.is_detached(j - 1));
        let kind = match job.kind {
            JobKind::Fill => StoreKind::Fill,
            _ => StoreKind::Demote,
        };
        let req = Store {
            key: job.key,
            version: job.version,
            class: job.class,
            data: &job.data[..],
            kind,
            // Its spill hook (set in `Lower::new`) queues what it evicts for tier `below`.
            may_spill: below.is_some(),
        };
        let r = tier.store(&req, &current);
        let key = &job.key;
        // A store that raced a change is undone after the fact (the writer's own
        // invalidation may have come before it).
        if !current() {
            tier.invalidate(key);
        }
        match r {
            Ok(Admit::Stored | Admit::Rejected) => {}
            Err(e) => {
                self.counters.errors.fetch_add(1, Relaxed);
                log::warn!("{e}; block not stored there (it is clean: nothing is lost)");
            }
        }
    }

    /// Waits until nothing is queued or being stored (tests, shutdown).
    pub fn drain(&self) {
        let mut t = lock(&self.transit);
        while !(t.stop || t.queue.is_empty() && t.busy == 0) {
            t = self.cv.wait(t).unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Stops the worker once the queue is empty.
    pub fn stop(&self) {
        lock(&self.transit).stop = true;
        self.cv.notify_all();
    }
}
