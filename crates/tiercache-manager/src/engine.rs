//! Engine glue: the state behind the tier's one `Mutex` — the core [`Tier`] (key map, slots,
//! pools, partitioner), the per-file states and the dirty accounting — and the block-level
//! operations every path uses (pin, fresh insert, commit of a write, mark clean, drop).
//!
//! Invariants (all under the engine lock):
//! - a block is in `files[f].blocks` iff the tier holds it; in `files[f].dirty` iff the tier's
//!   slot meta says dirty. Only this module changes the core tier's blocks, and each change
//!   goes with the matching block transition of the [`FileTable`] (which keeps its dirty
//!   count); other modules read the tier (`tier()`) and change a file's other state;
//! - the engine lock is never held across device I/O, and never while *blocking* on a slot lock
//!   (only `try_write`/`try_state` on slots nobody has pinned);
//! - a key with a write-through in flight (`wt_inflight`) is never inserted, so no fill can read
//!   BACKING under a write-through of the same block and cache the old bytes;
//! - a slot is removed from the tier only when unpinned (`Tier::remove` does not check pins).

use crate::file_state::{FileState, FileTable};
use crate::lower::Lower;
use crate::stats::Windows;
use crate::times::CtimeTable;
use crate::trace::{TraceRecord, TraceSink};
use crate::versions::KeptVersions;
use std::collections::HashMap;
use std::fs::File;
use std::sync::Arc;
use std::time::Instant;
use tiercache_core::partition::ClassParams;
use tiercache_core::stats::TierStats;
use tiercache_core::tier::{Evicted, Tier};
use tiercache_core::{BlockKey, Class, CoreError, FileId, InvariantViolation, SlotId};
use tiercache_memtier::arena::{Arena, SlotState, ORD};
use tiercache_memtier::shm::Region;
use tiercache_tier::TierKey;

/// The state guarded by the engine lock.
#[derive(Debug)]
pub(crate) struct Engine {
    tier: Tier,
    files: FileTable,
    /// Blocks being written straight to BACKING, with the number of writers doing so.
    wt_inflight: HashMap<BlockKey, u32>,
    trace: Option<TraceSink>,
    /// Change times hidden from readers (see `times`); outlives per-file states.
    ctimes: CtimeTable,
    /// Content versions of files whose state went (see `versions`).
    kept: KeptVersions,
    windows: Windows,
    start: Instant,
    /// The tiers below memory (evictions are demoted into them); set once, at construction.
    lower: Option<Arc<Lower>>,
    /// The zero-copy region when the arena is shared: eviction asks it before taking a slot,
    /// removal retires the slot's header there.
    zc: Option<Arc<Region>>,
    /// Slots removed while a zero-copy client pinned them: not reused until unpinned.
    held: Vec<SlotId>,
    /// Where the next bounded look at `held` starts (round robin, see `release_some_held`).
    held_cursor: usize,
}

/// Held slots one insertion looks at: bounded work under the engine lock, whatever a client
/// keeps pinned; every held slot is looked at again within ⌈held / HELD_SCAN⌉ insertions.
pub(crate) const HELD_SCAN: usize = 16;

/// Result of trying to drop one cached block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dropped {
    Yes,
    NotCached,
    Pinned,
    Dirty,
}

impl Engine {
    /// Dirty blocks in memory (Σ |files[f].dirty|).
    pub fn dirty_blocks(&self) -> usize {
        self.files.dirty_blocks()
    }

    /// A write straight to BACKING of `key` starts: no fill of it until it ends.
    pub fn begin_write_through(&mut self, key: BlockKey) {
        *self.wt_inflight.entry(key).or_insert(0) += 1;
    }

    /// A write straight to BACKING of `key` ended.
    pub fn end_write_through(&mut self, key: BlockKey) {
        if let Some(n) = self.wt_inflight.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                self.wt_inflight.remove(&key);
            }
        }
    }

    /// Whether a write straight to BACKING of `key` is under way.
    pub fn writing_through(&self, key: &BlockKey) -> bool {
        self.wt_inflight.contains_key(key)
    }

    /// The zero-copy region, when the arena is shared (set once, at construction).
    pub fn set_zero_copy(&mut self, region: Option<Arc<Region>>) {
        self.zc = region;
    }

    /// Slots removed while a client pinned them, not yet reusable.
    pub fn held_slots(&self) -> usize {
        self.held.len()
    }

    /// Puts `sink` in place of the trace sink in force (`None`: stop tracing); returns the old
    /// one, for the caller to drop outside the engine lock.
    pub fn replace_trace(&mut self, sink: Option<TraceSink>) -> Option<TraceSink> {
        std::mem::replace(&mut self.trace, sink)
    }

    /// The core tier (key map, slots, pools, partitioner), to read. Its blocks change only
    /// through the engine's operations, which keep the file table in step.
    pub fn tier(&self) -> &Tier {
        &self.tier
    }

    /// The per-file states.
    pub fn files(&self) -> &FileTable {
        &self.files
    }

    /// The per-file states, to change (the table keeps its own invariants).
    pub fn files_mut(&mut self) -> &mut FileTable {
        &mut self.files
    }

    /// Change times hidden from readers (see `times`).
    pub fn ctimes(&self) -> &CtimeTable {
        &self.ctimes
    }

    pub fn ctimes_mut(&mut self) -> &mut CtimeTable {
        &mut self.ctimes
    }

    /// Content versions of files whose state went (see `versions`).
    pub fn kept(&self) -> &KeptVersions {
        &self.kept
    }

    pub fn kept_mut(&mut self) -> &mut KeptVersions {
        &mut self.kept
    }

    /// Rolls the statistics windows to `now` with the tier's counters; returns the windows
    /// (to read or sample) and those counters.
    pub fn windows_at(&mut self, now: Instant) -> (&mut Windows, TierStats) {
        let current = *self.tier.stats();
        self.windows.roll(now, &current);
        (&mut self.windows, current)
    }

    /// Records an access to `key` of `class` with the partitioner; the slot when resident.
    pub fn lookup(&mut self, key: BlockKey, class: Class) -> Option<SlotId> {
        self.tier.lookup(key, class)
    }

    /// Moves the cached blocks of `file` to the pool of `class` (after its state's class
    /// changed).
    pub fn reclassify_blocks(&mut self, file: FileId, class: Class) {
        let Some(f) = self.files.get(&file) else {
            return;
        };
        let blocks: Vec<u64> = f.blocks().iter().copied().collect();
        for b in blocks {
            let key = BlockKey {
                file,
                block: tiercache_core::BlockIndex(b),
            };
            if let Some(slot) = self.tier.peek(&key) {
                self.tier.set_class(slot, class);
            }
        }
    }

    /// Applies new partition parameters (a reload).
    pub fn set_partition_params(&mut self, params: &ClassParams) -> Result<(), CoreError> {
        self.tier.set_partition_params(params)
    }

    /// Applies a class table whose indices differ from the one in force: `remap[i]` is the new
    /// class of old class `i` (classes past its end keep their index). Every file state, every
    /// resident block and the hit counters (since start and the window snapshots) move along,
    /// so no block or count is left under an index that now names another class. Nothing
    /// changes on an error.
    pub fn set_classes(&mut self, params: &ClassParams, remap: &[Class]) -> Result<(), CoreError> {
        self.tier.set_partition_params(params)?;
        let new = |c: Class| remap.get(c.index()).copied().unwrap_or(c);
        let ids: Vec<FileId> = self.files.iter().map(|(id, _)| *id).collect();
        for id in ids {
            if let Some(f) = self.files.get_mut(&id) {
                f.set_class(new(f.class()));
            }
        }
        // After the table changed: `set_class` places each block by the new table.
        let slots: Vec<_> = self.tier.resident().map(|(_, s)| s).collect();
        for slot in slots {
            let c = self.tier.meta(slot).class;
            self.tier.set_class(slot, new(c));
        }
        crate::stats::remap_classes(self.tier.stats_mut(), &new);
        self.windows.remap_classes(&new);
        Ok(())
    }

    pub fn new(tier: Tier, windows: Windows, start: Instant, lower: Option<Arc<Lower>>) -> Self {
        Self {
            tier,
            files: FileTable::default(),
            wt_inflight: HashMap::new(),
            trace: None,
            ctimes: CtimeTable::default(),
            kept: KeptVersions::default(),
            windows,
            start,
            lower,
            zc: None,
            held: Vec::new(),
            held_cursor: 0,
        }
    }

    #[inline]
    pub fn pin(&mut self, slot: SlotId) {
        self.tier.pin(slot);
    }

    #[inline]
    pub fn unpin(&mut self, slot: SlotId) {
        self.tier.unpin(slot);
    }

    /// Records one block access in the trace, if one is on.
    #[inline]
    pub fn trace(&self, key: BlockKey, write: bool, class: Class) {
        if let Some(t) = &self.trace {
            t.record(TraceRecord {
                secs: self.start.elapsed().as_secs(),
                key,
                write,
                class,
            });
        }
    }

    /// Gives `key` (not resident) a slot: evicts by policy if needed, marks the slot "being
    /// filled" (not valid), adds it to the file's index and pins it. `None` when no slot can be
    /// had (`Retry`: everything pinned or dirty) or a write-through of `key` is in flight; the
    /// caller then bypasses the cache for this block.
    pub fn insert_fresh(&mut self, arena: &Arena, key: BlockKey, class: Class) -> Option<SlotId> {
        if self.wt_inflight.contains_key(&key) {
            return None;
        }
        if !self.held.is_empty() {
            self.release_some_held(HELD_SCAN);
        }
        let inserted = match &self.zc {
            // A victim a client has pinned is skipped; one it has not is made unpinnable.
            Some(r) => self.tier.insert_checked(key, class, &mut |s| r.claim(s.0)),
            None => self.tier.insert(key, class),
        };
        let ins = match inserted {
            Ok(ins) => ins,
            Err(CoreError::Retry { .. }) => return None,
            Err(e) => {
                log::error!("memory tier: unexpected engine error on insert: {e}");
                return None;
            }
        };
        // The slot was free or an unpinned victim: nobody holds its lock.
        let guard = arena.try_write(ins.slot);
        if let Some(ev) = ins.evicted {
            // Two-phase eviction: the victim's bytes leave for the tier below before its slot
            // is reused (they are still in the slot: the new block is not filled yet).
            if let (Some(lower), Some(g)) = (&self.lower, &guard) {
                if lower.demotes() && g.state().holds(ev.key) {
                    if let Some(f) = self.files.get(&ev.key.file) {
                        if let Some(fk) = f.fkey() {
                            let tk = TierKey::new(fk, ev.key.block.0);
                            lower.demote_victim(tk, f.version(), ev.class, g.data(), f.shared());
                        }
                    }
                }
            }
            self.on_evicted(ev);
        }
        match guard {
            Some(mut g) => g.set_state(SlotState {
                key: Some(key),
                valid: false,
            }),
            None => {
                log::error!(
                    "memory tier: fresh slot {} is locked; bypassing",
                    ins.slot.0
                );
                self.remove_slot(key, ins.slot);
                return None;
            }
        }
        self.files.cached(key);
        self.pin(ins.slot);
        Some(ins.slot)
    }

    /// Whether memory holds (or is filling) `key` of a lower tier: its file is found by the
    /// inode number, which is the `FileId` ([`crate::MemCache::open`]).
    pub fn holds_tier_key(&self, key: &TierKey) -> bool {
        self.files
            .get(&FileId(key.file.ino))
            .is_some_and(|f| f.fkey() == Some(key.file) && f.blocks().contains(&key.block.0))
    }

    /// Takes `key` (in `slot`) out of the tier. In a shared arena the slot's header is retired
    /// first; a slot a client still pins is held (not reused) until the client lets go.
    fn remove_slot(&mut self, key: BlockKey, slot: SlotId) {
        if let Some(r) = &self.zc {
            r.clear_hint(key.file.0, key.block.0, slot.0);
            if r.retire(slot.0) {
                self.tier.remove_held(&key);
                self.held.push(slot);
                return;
            }
        }
        self.tier.remove(&key);
    }

    /// Frees every held slot no client pins any more (a client went: O(held), once).
    pub fn release_held(&mut self) {
        let Some(r) = self.zc.clone() else {
            return;
        };
        let tier = &mut self.tier;
        self.held.retain(|&s| {
            let pinned = r.pinned(s.0);
            if !pinned {
                tier.release_held(s);
            }
            pinned
        });
        self.held_cursor = 0;
    }

    /// Looks at (at most) `budget` held slots, round robin from where the last look stopped,
    /// and frees those no client pins any more: the bounded share of an insertion.
    pub fn release_some_held(&mut self, budget: usize) {
        let Some(r) = self.zc.clone() else {
            return;
        };
        let mut i = self.held_cursor;
        for _ in 0..budget.min(self.held.len()) {
            if i >= self.held.len() {
                i = 0;
            }
            let s = self.held[i];
            if r.pinned(s.0) {
                i += 1;
            } else {
                // The last entry moves to `i`: looked at next.
                self.held.swap_remove(i);
                self.tier.release_held(s);
                if self.held.is_empty() {
                    break;
                }
            }
        }
        self.held_cursor = i;
    }

    /// Bookkeeping for a block the tier pushed out (it was clean and unpinned).
    fn on_evicted(&mut self, ev: Evicted) {
        self.files.gone(ev.key);
        self.gc_file(ev.key.file);
    }

    /// A write to `slot` (holding `key`) was copied in: mark it dirty (not evictable) and bump
    /// its dirty sequence so that a write-back that copied it earlier does not mark it clean.
    pub fn commit_write(&mut self, arena: &Arena, key: BlockKey, slot: SlotId, now: Instant) {
        arena.seq(slot).fetch_add(1, ORD);
        if self.tier.peek(&key) != Some(slot) {
            return;
        }
        if !self.tier.meta(slot).dirty {
            self.tier.set_dirty(slot, true);
        }
        self.files.dirtied(key, now);
    }

    /// Write-back of `slot` finished with the bytes of dirty sequence `seq`: clean it unless it
    /// was written again since. Returns whether it is clean now.
    pub fn mark_clean(&mut self, arena: &Arena, key: BlockKey, slot: SlotId, seq: u64) -> bool {
        if self.tier.peek(&key) != Some(slot) || arena.seq(slot).load(ORD) != seq {
            return false;
        }
        self.clear_dirty(key, slot);
        true
    }

    fn clear_dirty(&mut self, key: BlockKey, slot: SlotId) {
        if self.tier.meta(slot).dirty {
            self.tier.set_dirty(slot, false);
        }
        self.files.cleaned(key);
    }

    /// Removes `key` from the cache if nobody has it pinned (and, unless `allow_dirty`, if it is
    /// clean). Dropping dirty data is only right when the data is meaningless (beyond EOF).
    pub fn drop_block(&mut self, key: BlockKey, allow_dirty: bool) -> Dropped {
        let Some(slot) = self.tier.peek(&key) else {
            return Dropped::NotCached;
        };
        let meta = self.tier.meta(slot);
        if meta.pins > 0 {
            return Dropped::Pinned;
        }
        if meta.dirty {
            if !allow_dirty {
                return Dropped::Dirty;
            }
            self.clear_dirty(key, slot);
        }
        self.remove_slot(key, slot);
        self.files.gone(key);
        Dropped::Yes
    }

    /// Drops the unpinned cached blocks of `file` (dirty ones too with `allow_dirty`). Returns
    /// the clean and the dirty blocks dropped.
    pub fn drop_file_blocks(&mut self, file: FileId, allow_dirty: bool) -> (usize, usize) {
        let Some(f) = self.files.get(&file) else {
            return (0, 0);
        };
        let blocks: Vec<(u64, bool)> = f
            .blocks()
            .iter()
            .map(|&b| (b, f.dirty().contains(&b)))
            .collect();
        let (mut clean, mut dirty) = (0, 0);
        for (b, was_dirty) in blocks {
            let key = BlockKey {
                file,
                block: tiercache_core::BlockIndex(b),
            };
            if self.drop_block(key, allow_dirty) == Dropped::Yes {
                if was_dirty {
                    dirty += 1;
                } else {
                    clean += 1;
                }
            }
        }
        (clean, dirty)
    }

    /// After a request unpinned `slot`: if it is still not valid (its fill failed, or was never
    /// done) and nobody else holds it, give it back so it does not sit in the cache empty.
    pub fn reap(&mut self, arena: &Arena, key: BlockKey, slot: SlotId) {
        if self.tier.peek(&key) != Some(slot) {
            return;
        }
        let meta = self.tier.meta(slot);
        if meta.pins > 0 || meta.dirty {
            return;
        }
        if let Some(state) = arena.try_state(slot) {
            if !state.holds(key) {
                self.remove_slot(key, slot);
                self.files.gone(key);
                self.gc_file(key.file);
            }
        }
    }

    /// Lets go of what a closed file no longer needs: its backing handle once it is clean and
    /// synced, its whole state once it also has no cached blocks. Returns the handle to drop
    /// (outside the lock when the caller can, as closing may take time).
    ///
    /// A forgotten file (see `files`) keeps its handle, which pins its inode, as long as
    /// anything of it is cached, and its whole state goes (logical ctime included) once
    /// nothing is.
    pub fn gc_file(&mut self, id: FileId) -> Option<Arc<File>> {
        let f = self.files.get_mut(&id)?;
        if f.handles() > 0 || !f.dirty().is_empty() || !f.lower_dirty().is_empty() {
            return None;
        }
        if f.forgotten() {
            if !f.blocks().is_empty() {
                // Clean blocks kept across a FORGET need no descriptor: the next open brings
                // its own, and reuses them only for the same stamp and birth time. (Dirty ones
                // keep it, above: it pins the inode for their retries.) Holding it would cost
                // one descriptor per file the kernel ever forgot.
                return f.take_backing();
            }
            self.ctimes.remove(id);
            let mut f = self.files.remove(&id)?;
            if f.born().is_some() {
                // told apart from a reused inode number by its birth time, as at `open`
                self.keep_version(id, &f);
            }
            return f.take_backing();
        }
        if f.needs_sync() {
            return None;
        }
        let fd = f.take_backing();
        // A write-back error not reported yet keeps the state (for the next fsync or close).
        if f.blocks().is_empty() && f.error().is_none() {
            if let Some(f) = self.files.remove(&id) {
                self.keep_version(id, &f);
            }
        }
        fd
    }

    /// The state of `id` went: its version stays for the blocks below memory (see `versions`).
    fn keep_version(&mut self, id: FileId, f: &FileState) {
        if f.fkey().is_some() {
            self.kept.keep(id, f.stamp(), f.born(), f.version());
        }
    }

    /// Checks the engine's own invariants on top of the tier's.
    pub fn check(&self) -> Result<(), InvariantViolation> {
        self.tier.check_invariants()?;
        let mut dirty = 0usize;
        let mut blocks = 0usize;
        for (id, f) in self.files.iter() {
            for &b in f.blocks() {
                let key = BlockKey {
                    file: *id,
                    block: tiercache_core::BlockIndex(b),
                };
                let Some(slot) = self.tier.peek(&key) else {
                    return Err(InvariantViolation::from(format!(
                        "file {} block {b} indexed but not cached",
                        id.0
                    )));
                };
                let m = self.tier.meta(slot);
                if m.dirty != f.dirty().contains(&b) {
                    return Err(InvariantViolation::from(format!(
                        "file {} block {b}: dirty flags disagree",
                        id.0
                    )));
                }
                if m.pins != 0 {
                    return Err(InvariantViolation::from(format!(
                        "file {} block {b}: {} pins left",
                        id.0, m.pins
                    )));
                }
            }
            if !f.dirty().is_subset(f.blocks()) {
                return Err(InvariantViolation::from(format!(
                    "file {}: dirty blocks not cached",
                    id.0
                )));
            }
            dirty += f.dirty().len();
            blocks += f.blocks().len();
        }
        if dirty != self.files.dirty_blocks() {
            return Err(InvariantViolation::from(format!(
                "dirty count {} != {dirty}",
                self.files.dirty_blocks()
            )));
        }
        if blocks != self.tier.len() {
            return Err(InvariantViolation::from(format!(
                "indexed {blocks} != resident {}",
                self.tier.len()
            )));
        }
        if !self.wt_inflight.is_empty() {
            return Err(InvariantViolation::from("write-throughs left in flight"));
        }
        Ok(())
    }
}
