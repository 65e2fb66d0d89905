//! [`MemoryTier`]: the memory tier as a [`DataTier`].
//!
//! Its bytes live in an [`Arena`] (the arena the live manager's top tier uses), its index is the
//! engine's fully associative [`Tier`] (policy per [`MemoryTierConfig`]), so it evicts by the
//! same policies and never evicts a dirty block. One `Mutex` guards the index and the per-slot
//! metadata; bytes are copied under it (through the slot's guard, which nobody else takes), so
//! a store and the reads after it are totally ordered. It is volatile: dirty data in it is lost
//! with the process. Its stores that may spill hand the block the index evicts (clean) to the
//! spill hook it was given once.
//!
//! Invariants (under the lock): a slot is in `files[f].1` iff the index holds it; its
//! `SlotInfo::seq != 0` iff it is dirty iff it is in `dirty` under that sequence and the
//! index's slot meta says dirty (so the index never evicts it).

use crate::arena::{Arena, SlotState};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tiercache_core::index::TierIndex;
use tiercache_core::policy::PolicyKind;
use tiercache_core::tier::{Tier, TierConfig};
use tiercache_core::{BlockIndex, BlockKey, Class, CoreError, FileId, InvariantViolation, SlotId};
use tiercache_tier::{
    Admit, Cleaning, DataTier, DirtyBlock, FileKey, Lookup, SpillSink, SpillSlot, Spilled,
    StoreKind, TierError, TierInfo, TierKey, TierKind, TierSnapshot,
};

/// How a [`MemoryTier`] is built.
#[derive(Debug, Clone)]
pub struct MemoryTierConfig {
    pub name: String,
    pub capacity_blocks: usize,
    pub block_size: usize,
    pub policy: PolicyKind,
    pub accepts_dirty: bool,
}

impl MemoryTierConfig {
    pub fn new(name: impl Into<String>, capacity_blocks: usize, block_size: usize) -> Self {
        Self {
            name: name.into(),
            capacity_blocks,
            block_size,
            policy: PolicyKind::Lru,
            accepts_dirty: false,
        }
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct SlotInfo {
    version: u64,
    /// Dirty sequence (0: clean).
    seq: u64,
}

#[derive(Debug)]
struct State {
    /// Any index implementation; the engine's fully associative `Tier` by default.
    index: Box<dyn TierIndex>,
    slots: Vec<SlotInfo>,
    /// FileKey → interned id and the blocks held.
    files: HashMap<FileKey, (FileId, BTreeSet<u64>)>,
    ids: HashMap<FileId, FileKey>,
    next_id: u64,
    /// Dirty blocks by sequence (oldest first).
    dirty: BTreeMap<u64, TierKey>,
    next_seq: u64,
    snap: TierSnapshot,
}

/// The memory tier; see the module docs.
#[derive(Debug)]
pub struct MemoryTier {
    info: TierInfo,
    arena: Arena,
    state: Mutex<State>,
    /// Where stores that may spill hand their victims (set once).
    spill_hook: SpillSlot,
}

impl MemoryTier {
    pub fn new(cfg: &MemoryTierConfig) -> Result<Self, CoreError> {
        Self::with_kind(cfg, TierKind::Memory)
    }

    /// As `new`, reporting `kind` (the test tier is this tier under another name).
    pub(crate) fn with_kind(cfg: &MemoryTierConfig, kind: TierKind) -> Result<Self, CoreError> {
        let bad =
            |why: String| CoreError::config("tier", format!("{kind} tier {}: {why}", cfg.name));
        if cfg.block_size == 0 || cfg.capacity_blocks == 0 {
            return Err(bad("capacity and block size must be positive".into()));
        }
        let index: Box<dyn TierIndex> = Box::new(
            Tier::new(&TierConfig::new(
                cfg.name.clone(),
                cfg.capacity_blocks,
                cfg.policy,
            ))
            .map_err(|e| bad(e.to_string()))?,
        );
        let arena =
            Arena::new(cfg.capacity_blocks, cfg.block_size).map_err(|e| bad(e.to_string()))?;
        let info = TierInfo {
            name: cfg.name.clone(),
            kind,
            capacity_blocks: cfg.capacity_blocks as u64,
            block_size: cfg.block_size,
            accepts_dirty: cfg.accepts_dirty,
            persistent: false,
        };
        let snap = TierSnapshot {
            name: cfg.name.clone(),
            kind: kind.to_string(),
            capacity_blocks: cfg.capacity_blocks as u64,
            ..TierSnapshot::default()
        };
        Ok(Self {
            info,
            arena,
            spill_hook: SpillSlot::new(),
            state: Mutex::new(State {
                index,
                slots: vec![SlotInfo::default(); cfg.capacity_blocks],
                files: HashMap::new(),
                ids: HashMap::new(),
                next_id: 1,
                dirty: BTreeMap::new(),
                next_seq: 1,
                snap,
            }),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A read's buffer must hold a whole block: a shorter one is the caller's error, never
    /// a panic (the contract: whole or a miss or an error).
    fn check_buf(&self, buf: &[u8]) -> Result<(), TierError> {
        let bs = self.info.block_size;
        if buf.len() >= bs {
            return Ok(());
        }
        Err(TierError::Io {
            tier: self.info.name.clone(),
            source: io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("buffer of {} bytes, block size {bs}", buf.len()),
            ),
        })
    }

    /// Counts a failed operation (a wrapper's injected fault).
    pub(crate) fn count_error(&self) {
        self.state().snap.errors += 1;
    }

    fn lookup_read(
        &self,
        key: &TierKey,
        version: u64,
        buf: &mut [u8],
        take: bool,
    ) -> Result<Lookup, TierError> {
        self.check_buf(buf)?;
        let mut st = self.state();
        let r = match st.find(key) {
            Some((bkey, slot)) if st.slots[slot.index()].version == version => {
                let class = st.index.meta(slot).class;
                let _ = st.index.lookup(bkey, class);
                buf[..self.info.block_size].copy_from_slice(self.arena.read(slot).data());
                let dirty = st.slots[slot.index()].seq != 0;
                st.snap.hits += 1;
                if take && !dirty {
                    st.remove(bkey, slot);
                    st.snap.promotions_out += 1;
                }
                Lookup::Hit { dirty }
            }
            Some((bkey, slot)) => {
                // Another version: never served; a clean stale copy goes.
                if st.slots[slot.index()].seq == 0 {
                    st.remove(bkey, slot);
                }
                st.snap.misses += 1;
                Lookup::Miss
            }
            None => {
                st.snap.misses += 1;
                Lookup::Miss
            }
        };
        Ok(r)
    }

    /// Stores `data`; a clean block the index evicts for it goes to `spill` (when given) with
    /// the bytes still in the slot the new block takes, under the state lock.
    #[allow(clippy::too_many_arguments)]
    fn put(
        &self,
        key: &TierKey,
        version: u64,
        class: Class,
        data: &[u8],
        how: Store,
        current: &dyn Fn() -> bool,
        spill: Option<&dyn SpillSink>,
    ) -> Result<Admit, TierError> {
        let bs = self.info.block_size;
        if data.len() != bs {
            return Err(TierError::Io {
                tier: self.info.name.clone(),
                source: io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("store of {} bytes, block size {bs}", data.len()),
                ),
            });
        }
        let mut st = self.state();
        if !current() {
            st.snap.rejected += 1;
            return Ok(Admit::Rejected);
        }
        let slot = match st.find(key) {
            Some((_, slot)) => {
                if how != Store::Dirty && st.slots[slot.index()].seq != 0 {
                    // A clean copy never overwrites a dirty one of this tier.
                    st.snap.rejected += 1;
                    return Ok(Admit::Rejected);
                }
                slot
            }
            None => {
                let bkey = st.intern(key);
                let ins = match st.index.insert(bkey, class) {
                    Ok(ins) => ins,
                    Err(_) => {
                        st.snap.rejected += 1;
                        st.unintern_if_empty(&key.file);
                        return Ok(Admit::Rejected);
                    }
                };
                // Note the new block first: forgetting the victim may drop the file's entry
                // when it was that file's last block, and the new block's id is that entry's.
                st.note(key, true);
                if let Some(ev) = ins.evicted {
                    // Clean (the index never evicts a dirty block); its bytes and version are
                    // still those of `ins.slot`, which the new block takes below.
                    if let (Some(spill), Some(&file)) = (spill, st.ids.get(&ev.key.file)) {
                        let g = self.arena.read(ins.slot);
                        spill.spill(Spilled {
                            key: TierKey {
                                file,
                                block: ev.key.block,
                            },
                            version: st.slots[ins.slot.index()].version,
                            class: ev.class,
                            data: g.data(),
                        });
                    }
                    st.forget_key(ev.key);
                }
                ins.slot
            }
        };
        {
            // Only this tier takes its slots' locks, always under `state`: never contended.
            let mut g = self.arena.write(slot);
            g.data_mut().copy_from_slice(data);
            g.set_state(SlotState {
                key: st.index.key_at(slot),
                valid: true,
            });
        }
        let old_seq = st.slots[slot.index()].seq;
        st.slots[slot.index()].version = version;
        match how {
            Store::Fill => st.snap.fills += 1,
            Store::Demote => st.snap.demotions_in += 1,
            Store::Dirty => {
                st.snap.writebacks_in += 1;
                if old_seq != 0 {
                    st.dirty.remove(&old_seq);
                } else {
                    st.index.set_dirty(slot, true);
                }
                let seq = st.next_seq;
                st.next_seq += 1;
                st.slots[slot.index()].seq = seq;
                st.dirty.insert(seq, *key);
            }
        }
        Ok(Admit::Stored)
    }

    /// Checks the tier's own invariants (tests).
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        let st = self.state();
        st.index.check_invariants()?;
        let held: usize = st.files.values().map(|(_, b)| b.len()).sum();
        if held != st.index.len() {
            return Err(InvariantViolation::from(format!(
                "{held} blocks indexed by file, {} held",
                st.index.len()
            )));
        }
        let dirty = (0..st.slots.len())
            .filter(|&i| st.slots[i].seq != 0)
            .count();
        if dirty != st.dirty.len() {
            return Err(InvariantViolation::from(format!(
                "{dirty} dirty slots, {} in the dirty list",
                st.dirty.len()
            )));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Store {
    Fill,
    Demote,
    Dirty,
}

impl State {
    fn find(&self, key: &TierKey) -> Option<(BlockKey, SlotId)> {
        let (id, _) = self.files.get(&key.file)?;
        let bkey = BlockKey {
            file: *id,
            block: key.block,
        };
        self.index.peek(&bkey).map(|s| (bkey, s))
    }

    fn intern(&mut self, key: &TierKey) -> BlockKey {
        let next = &mut self.next_id;
        let (id, _) = self.files.entry(key.file).or_insert_with(|| {
            let id = FileId(*next);
            *next += 1;
            (id, BTreeSet::new())
        });
        let id = *id;
        self.ids.insert(id, key.file);
        BlockKey {
            file: id,
            block: key.block,
        }
    }

    /// Forgets an interned file holding no block (a store of it was turned down).
    fn unintern_if_empty(&mut self, file: &FileKey) {
        if self.files.get(file).is_some_and(|(_, b)| b.is_empty()) {
            if let Some((id, _)) = self.files.remove(file) {
                self.ids.remove(&id);
            }
        }
    }

    fn note(&mut self, key: &TierKey, held: bool) {
        if let Some((_, blocks)) = self.files.get_mut(&key.file) {
            if held {
                blocks.insert(key.block.0);
            } else {
                blocks.remove(&key.block.0);
                if blocks.is_empty() {
                    if let Some((id, _)) = self.files.remove(&key.file) {
                        self.ids.remove(&id);
                    }
                }
            }
        }
    }

    /// Bookkeeping for a block the index evicted (clean, by the index's guarantee).
    fn forget_key(&mut self, bkey: BlockKey) {
        if let Some(fk) = self.ids.get(&bkey.file).copied() {
            self.note(
                &TierKey {
                    file: fk,
                    block: bkey.block,
                },
                false,
            );
        }
    }

    fn remove(&mut self, bkey: BlockKey, slot: SlotId) {
        let seq = self.slots[slot.index()].seq;
        if seq != 0 {
            self.dirty.remove(&seq);
            self.index.set_dirty(slot, false);
        }
        self.slots[slot.index()] = SlotInfo::default();
        self.index.remove(&bkey);
        self.forget_key(bkey);
    }
}

impl DataTier for MemoryTier {
    fn info(&self) -> &TierInfo {
        &self.info
    }

    fn contains(&self, key: &TierKey) -> bool {
        self.state().find(key).is_some()
    }

    fn read(&self, key: &TierKey, version: u64, buf: &mut [u8]) -> Result<Lookup, TierError> {
        self.lookup_read(key, version, buf, false)
    }

    fn take(&self, key: &TierKey, version: u64, buf: &mut [u8]) -> Result<Lookup, TierError> {
        self.lookup_read(key, version, buf, true)
    }

    fn store(
        &self,
        req: &tiercache_tier::Store<'_>,
        current: &dyn Fn() -> bool,
    ) -> Result<Admit, TierError> {
        let how = match req.kind {
            StoreKind::Fill => Store::Fill,
            StoreKind::Demote => Store::Demote,
            StoreKind::WriteDirty if !self.info.accepts_dirty => {
                self.state().snap.rejected += 1;
                return Ok(Admit::Rejected);
            }
            StoreKind::WriteDirty => {
                return self.put(
                    &req.key,
                    req.version,
                    req.class,
                    req.data,
                    Store::Dirty,
                    &|| true,
                    None,
                )
            }
        };
        self.put(
            &req.key,
            req.version,
            req.class,
            req.data,
            how,
            current,
            self.spill_hook.get().filter(|_| req.may_spill),
        )
    }

    fn can_spill(&self) -> bool {
        true
    }

    fn set_spill_hook(&self, hook: Arc<dyn SpillSink>) -> Result<(), TierError> {
        self.spill_hook.set(&self.info.name, hook)
    }

    fn invalidate(&self, key: &TierKey) {
        let mut st = self.state();
        if let Some((bkey, slot)) = st.find(key) {
            if st.slots[slot.index()].seq == 0 {
                st.remove(bkey, slot);
            }
        }
    }

    /// RAM only: the state lock is never held across I/O.
    fn try_invalidate(&self, key: &TierKey) -> bool {
        self.invalidate(key);
        true
    }

    fn discard(&self, key: &TierKey) {
        let mut st = self.state();
        if let Some((bkey, slot)) = st.find(key) {
            st.remove(bkey, slot);
        }
    }

    fn invalidate_file(&self, file: &FileKey, from_block: u64) {
        let mut st = self.state();
        let Some((id, blocks)) = st.files.get(file) else {
            return;
        };
        let id = *id;
        let doomed: Vec<u64> = blocks.range(from_block..).copied().collect();
        for b in doomed {
            let bkey = BlockKey {
                file: id,
                block: BlockIndex(b),
            };
            if let Some(slot) = st.index.peek(&bkey) {
                st.remove(bkey, slot);
            }
        }
    }

    fn sync(&self) -> Result<(), TierError> {
        Ok(())
    }

    fn stats(&self) -> TierSnapshot {
        let st = self.state();
        let mut s = st.snap.clone();
        s.used_blocks = st.index.len() as u64;
        s.dirty_blocks = st.dirty.len() as u64;
        s
    }

    /// Only when it takes dirty blocks: otherwise it never holds one.
    fn cleaning(&self) -> Option<&dyn Cleaning> {
        self.info.accepts_dirty.then_some(self as &dyn Cleaning)
    }
}

impl Cleaning for MemoryTier {
    fn read_dirty(
        &self,
        key: &TierKey,
        version: u64,
        buf: &mut [u8],
    ) -> Result<Option<u64>, TierError> {
        self.check_buf(buf)?;
        let st = self.state();
        let Some((_, slot)) = st.find(key) else {
            return Ok(None);
        };
        let info = st.slots[slot.index()];
        if info.seq == 0 || info.version != version {
            return Ok(None);
        }
        buf[..self.info.block_size].copy_from_slice(self.arena.read(slot).data());
        Ok(Some(info.seq))
    }

    fn dirty_blocks(&self, max: usize) -> Vec<DirtyBlock> {
        let st = self.state();
        st.dirty
            .iter()
            .take(max)
            .filter_map(|(&seq, key)| {
                let (_, slot) = st.find(key)?;
                Some(DirtyBlock {
                    key: *key,
                    version: st.slots[slot.index()].version,
                    seq,
                })
            })
            .collect()
    }

    fn mark_clean(&self, key: &TierKey, seq: u64) -> bool {
        let mut st = self.state();
        let Some((_, slot)) = st.find(key) else {
            return false;
        };
        if st.slots[slot.index()].seq != seq {
            return false;
        }
        st.dirty.remove(&seq);
        st.slots[slot.index()].seq = 0;
        st.index.set_dirty(slot, false);
        st.snap.cleaned += 1;
        true
    }
}
