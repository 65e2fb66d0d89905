//! The tier index behind a trait: which blocks a tier holds, in which slot, and which block
//! leaves when room is needed. Metadata only; whoever holds the index does the I/O.
//!
//! [`Tier`] (fully associative: any block in any slot, with pools, per-pool policies and a
//! partitioner) is one implementation; [`crate::setindex::SetIndex`] (set-associative: a
//! backing set (file, block index >> M) maps to one cache set, paper 001) is the flash tier's
//! in the simulator. The simulator's [`crate::hierarchy::Hierarchy`] and the in-memory test tier hold
//! `Box<dyn TierIndex>`, so a new index plugs into both without other changes.
//!
//! Contract (as [`Tier`]'s module docs state for it): a resident block has exactly one slot;
//! `len() ≤ capacity()`; a slot with pins or dirty data is never chosen as a victim; `insert`
//! of a resident key returns its slot; `Err(CoreError::Retry)` when no slot may be taken.
//! An index whose eviction may drop several blocks at once ([`TierIndex::evicts_sets`]) names
//! the first in [`Inserted::evicted`] and the rest through [`TierIndex::next_evicted`].

use crate::class::Class;
use crate::error::{CoreError, InvariantViolation};
use crate::ids::{BlockKey, SlotId};
use crate::partition::Partitioner;
use crate::policy::PolicyKind;
use crate::setindex::SetStats;
use crate::stats::TierStats;
use crate::tier::{Evicted, Inserted, SlotMeta, Tier};
use std::fmt;

/// One tier's index. Object safe.
pub trait TierIndex: Send + fmt::Debug {
    fn name(&self) -> &str;
    fn capacity(&self) -> usize;
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The replacement policy, as `sim` reports it.
    fn policy(&self) -> PolicyKind;
    /// One request: counted, and a hit refreshes the block's position.
    fn lookup(&mut self, key: BlockKey, class: Class) -> Option<SlotId>;
    /// Where `key` is, without counting or reordering.
    fn peek(&self, key: &BlockKey) -> Option<SlotId>;
    fn contains(&self, key: &BlockKey) -> bool {
        self.peek(key).is_some()
    }
    /// Brings `key` in after a miss, evicting if needed.
    fn insert(&mut self, key: BlockKey, class: Class) -> Result<Inserted, CoreError>;
    /// Like `insert`, counted as a demotion from the tier above.
    fn demote_into(&mut self, key: BlockKey, class: Class) -> Result<Inserted, CoreError>;
    /// Inserts only into a free slot.
    fn insert_if_free(&mut self, key: BlockKey, class: Class) -> Option<SlotId>;
    /// Removes `key` without counting an eviction.
    fn remove(&mut self, key: &BlockKey) -> Option<(SlotId, SlotMeta)>;
    fn meta(&self, slot: SlotId) -> SlotMeta;
    /// Dirty slots are never evicted.
    fn set_dirty(&mut self, slot: SlotId, dirty: bool);
    /// The key held in `slot`, if any (sampling).
    fn key_at(&self, slot: SlotId) -> Option<BlockKey>;
    /// Every resident block and its slot, in no particular order (tests, checks).
    fn resident(&self) -> Box<dyn Iterator<Item = (BlockKey, SlotId)> + '_>;
    fn stats(&self) -> &TierStats;
    fn stats_mut(&mut self) -> &mut TierStats;
    fn check_invariants(&self) -> Result<(), InvariantViolation>;
    /// The partitioner splitting the index into pools (`none` for an index without pools).
    fn partitioner(&self) -> &dyn Partitioner;
    /// The partitioner's protected-pool target, if any.
    fn s_target(&self) -> Option<u64> {
        self.partitioner().s_target()
    }
    /// Blocks in the protected pool.
    fn s_cur(&self) -> u64;
    /// Resident blocks of `class` (by default counted over every resident block).
    fn class_blocks(&self, class: Class) -> usize {
        self.resident()
            .filter(|&(_, s)| self.meta(s).class == class)
            .count()
    }
    /// Whether replay should send [`TierIndex::prefetch`] hints (an index too small to gain
    /// from them says no).
    fn wants_prefetch(&self) -> bool {
        false
    }
    /// Hint: `key` will be looked up soon.
    fn prefetch(&self, _key: &BlockKey) {}
    /// Hint: `key`, if resident, will be touched soon.
    fn prefetch_resident(&self, _key: &BlockKey) {}
    /// Whether one eviction may drop more than one block (a set-associative index drops a
    /// whole set); only then are [`TierIndex::next_evicted`] calls needed.
    fn evicts_sets(&self) -> bool {
        false
    }
    /// The blocks the last eviction dropped besides the one [`Inserted::evicted`] named, one
    /// per call, then `None`. What is not taken before the next eviction is forgotten.
    fn next_evicted(&mut self) -> Option<Evicted> {
        None
    }
    /// Geometry and set counters of a set-associative index (`None` for others).
    fn set_stats(&self) -> Option<SetStats> {
        None
    }
}

impl TierIndex for Tier {
    fn name(&self) -> &str {
        Tier::name(self)
    }
    fn capacity(&self) -> usize {
        Tier::capacity(self)
    }
    fn len(&self) -> usize {
        Tier::len(self)
    }
    fn policy(&self) -> PolicyKind {
        Tier::policy(self)
    }
    #[inline]
    fn lookup(&mut self, key: BlockKey, class: Class) -> Option<SlotId> {
        Tier::lookup(self, key, class)
    }
    fn peek(&self, key: &BlockKey) -> Option<SlotId> {
        Tier::peek(self, key)
    }
    fn contains(&self, key: &BlockKey) -> bool {
        Tier::contains(self, key)
    }
    #[inline]
    fn insert(&mut self, key: BlockKey, class: Class) -> Result<Inserted, CoreError> {
        Tier::insert(self, key, class)
    }
    fn demote_into(&mut self, key: BlockKey, class: Class) -> Result<Inserted, CoreError> {
        Tier::demote_into(self, key, class)
    }
    fn insert_if_free(&mut self, key: BlockKey, class: Class) -> Option<SlotId> {
        Tier::insert_if_free(self, key, class)
    }
    fn remove(&mut self, key: &BlockKey) -> Option<(SlotId, SlotMeta)> {
        Tier::remove(self, key)
    }
    fn meta(&self, slot: SlotId) -> SlotMeta {
        Tier::meta(self, slot)
    }
    fn set_dirty(&mut self, slot: SlotId, dirty: bool) {
        Tier::set_dirty(self, slot, dirty)
    }
    fn key_at(&self, slot: SlotId) -> Option<BlockKey> {
        Tier::key_at(self, slot)
    }
    fn resident(&self) -> Box<dyn Iterator<Item = (BlockKey, SlotId)> + '_> {
        Box::new(Tier::resident(self))
    }
    fn stats(&self) -> &TierStats {
        Tier::stats(self)
    }
    fn stats_mut(&mut self) -> &mut TierStats {
        Tier::stats_mut(self)
    }
    fn check_invariants(&self) -> Result<(), InvariantViolation> {
        Tier::check_invariants(self)
    }
    fn partitioner(&self) -> &dyn Partitioner {
        Tier::partitioner(self)
    }
    fn s_target(&self) -> Option<u64> {
        Tier::s_target(self)
    }
    fn s_cur(&self) -> u64 {
        Tier::s_cur(self)
    }
    fn class_blocks(&self, class: Class) -> usize {
        Tier::class_blocks(self, class)
    }
    fn wants_prefetch(&self) -> bool {
        Tier::wants_prefetch(self)
    }
    #[inline]
    fn prefetch(&self, key: &BlockKey) {
        Tier::prefetch(self, key)
    }
    #[inline]
    fn prefetch_resident(&self, key: &BlockKey) {
        Tier::prefetch_resident(self, key)
    }
}
