//! A set-associative [`TierIndex`]: paper 001's layout, the flash tier's index in `sim`.
//!
//! Geometry: a set is `set_blocks` = 2^M consecutive blocks of one file (default 256: 1 MiB of
//! 4 KiB blocks); the tier holds `sets` cache sets, its capacity rounded down to whole sets.
//! A backing set (file, block index >> M) maps to one cache set; a block lives at its offset
//! in that set, so slot = cache set × `set_blocks` + (block index mod `set_blocks`).
//!
//! Per cache set only a tag (file, backing set), a valid and a dirty bitmap (and, for the
//! simulator's per-class counts, a class bitmap) are kept. Replacement is set-level LRU with the
//! engine's own [`Lru`] policy over set numbers: a hit, or a block coming into a mapped set,
//! makes the set most recently used; a block of an unmapped backing set takes a free set, or
//! else the least recently used set without dirty blocks, dropping every block it held (a
//! *set eviction*). A set whose last block is removed goes back to the free list (the live
//! tier waits until no durable record of its own claims dirty blocks there — `sim` keeps no
//! records — so a set emptied of dirty blocks may stay mapped there until its next sync: the
//! one place the two can choose differently). The choice
//! of the set is [`crate::setchoice::choose_set`], the very code the live flash tier
//! (`tiercache-flash`) runs: at most 64 sets from the cold end are scanned for a clean one,
//! and a dirty set passed over keeps its place.
//!
//! A set eviction drops up to `set_blocks` blocks at once: [`Inserted::evicted`] names the
//! first, [`TierIndex::next_evicted`] hands out the rest (from a buffer sized at construction,
//! so nothing allocates per request). All of them were in the new block's cache set.
//!
//! RAM per block, counted as 001 counts it ([`SetIndex::ram_bytes_per_block`]): a valid and a
//! dirty bit per block plus one tag per set, `(2 · set_blocks / 8 + size_of::<BlockKey>()) /
//! set_blocks` bytes: 0.3125 B for 256-block sets. (The live tier's `ram_bytes_per_block`
//! counts every byte its index allocates, LRU links and hash table included.)
//!
//! [`Tier`]: crate::tier::Tier

use crate::class::{Class, PoolId};
use crate::error::{CoreError, InvariantViolation};
use crate::ids::{BlockKey, SlotId};
use crate::index::TierIndex;
use crate::keymap::KeyMap;
use crate::partition::{NoPartition, Partitioner};
use crate::policy::{EvictionPolicy, Lru, PolicyKind};
use crate::setchoice::{choose_set, SetChoice, DEFAULT_ALLOC_SCAN};
use crate::stats::TierStats;
use crate::tier::{Evicted, Inserted, SlotMeta};

/// Paper 001's set: 256 blocks (1 MiB of 4 KiB blocks).
pub const DEFAULT_SET_BLOCKS: usize = 256;
/// The largest set size accepted (2^16 blocks).
pub const MAX_SET_BLOCKS: usize = 1 << 16;

/// The geometry and set-level counters of a set-associative index (`sim`'s report).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SetStats {
    pub set_blocks: u64,
    pub sets: u64,
    /// Mapped sets reused for another backing set (each dropped all its blocks).
    pub set_evictions: u64,
    /// Valid + dirty bitmap + tag per set, per block of capacity (see the module docs).
    pub ram_bytes_per_block: f64,
}

/// See the module docs.
#[derive(Debug)]
pub struct SetIndex {
    name: String,
    /// log2 of `set_blocks`.
    shift: u32,
    set_blocks: usize,
    sets: usize,
    /// u64 words per set in each bitmap.
    words: usize,
    /// Per set: (file, backing set index) as a key; meaningful while the set is mapped.
    tags: Vec<BlockKey>,
    valid: Vec<u64>,
    dirty: Vec<u64>,
    /// Blocks of class `priority`.
    priority: Vec<u64>,
    /// Backing set → cache set.
    map: KeyMap,
    /// Mapped sets, least recently used first out.
    order: Lru,
    free: Vec<u32>,
    len: usize,
    set_evictions: u64,
    stats: TierStats,
    partitioner: NoPartition,
    /// The set evicted last: its tag, its valid and class bitmaps, and the next bit to hand out.
    spill_tag: BlockKey,
    spill_valid: Box<[u64]>,
    spill_priority: Box<[u64]>,
    spill_word: usize,
}

impl SetIndex {
    /// A set-mapped index over `capacity` blocks (rounded down to whole sets) of sets of
    /// `set_blocks` blocks (a power of two). Only `lru` replacement exists at set level.
    pub fn new(
        name: impl Into<String>,
        capacity: usize,
        set_blocks: usize,
        policy: PolicyKind,
    ) -> Result<Self, CoreError> {
        if policy != PolicyKind::Lru {
            return Err(CoreError::config(
                "policy",
                format!("a set-mapped tier replaces whole sets by LRU: policy must be lru, not {policy}"),
            ));
        }
        if !set_blocks.is_power_of_two() || set_blocks > MAX_SET_BLOCKS {
            return Err(CoreError::config(
                "set_blocks",
                format!("{set_blocks} is not a power of two in 1..={MAX_SET_BLOCKS}"),
            ));
        }
        let sets = capacity / set_blocks;
        if sets == 0 {
            return Err(CoreError::config(
                "capacity",
                format!("{capacity} blocks is less than one set of {set_blocks} blocks"),
            ));
        }
        if sets * set_blocks >= u32::MAX as usize {
            return Err(CoreError::config(
                "capacity",
                format!("{capacity} blocks is out of range"),
            ));
        }
        let words = set_blocks.div_ceil(64);
        let mut order = Lru::new(sets);
        order.set_capacity(sets);
        Ok(Self {
            name: name.into(),
            shift: set_blocks.trailing_zeros(),
            set_blocks,
            sets,
            words,
            tags: vec![BlockKey::new(0, 0); sets],
            valid: vec![0; sets * words],
            dirty: vec![0; sets * words],
            priority: vec![0; sets * words],
            map: KeyMap::new(sets),
            order,
            free: (0..sets as u32).rev().collect(),
            len: 0,
            set_evictions: 0,
            stats: TierStats::default(),
            partitioner: NoPartition::default(),
            spill_tag: BlockKey::new(0, 0),
            spill_valid: vec![0; words].into_boxed_slice(),
            spill_priority: vec![0; words].into_boxed_slice(),
            spill_word: words,
        })
    }

    pub fn set_blocks(&self) -> usize {
        self.set_blocks
    }
    pub fn sets(&self) -> usize {
        self.sets
    }
    pub fn free_sets(&self) -> usize {
        self.free.len()
    }
    pub fn set_evictions(&self) -> u64 {
        self.set_evictions
    }

    /// 001's count: a valid and a dirty bit per block, one tag per set.
    pub fn ram_bytes_per_block(&self) -> f64 {
        let per_set = 2.0 * self.set_blocks as f64 / 8.0 + std::mem::size_of::<BlockKey>() as f64;
        per_set / self.set_blocks as f64
    }

    /// The backing set's tag and the block's offset in it.
    #[inline]
    fn locate(&self, key: &BlockKey) -> (BlockKey, usize) {
        let tag = BlockKey {
            file: key.file,
            block: crate::ids::BlockIndex(key.block.0 >> self.shift),
        };
        (tag, (key.block.0 & (self.set_blocks as u64 - 1)) as usize)
    }

    #[inline]
    fn find_set(&self, tag: &BlockKey) -> Option<u32> {
        let tags = &self.tags;
        self.map.find(tag, KeyMap::fp(tag), |s| tags[s as usize])
    }

    /// Word index and mask of block `b` of set `set`.
    #[inline]
    fn bit(&self, set: u32, b: usize) -> (usize, u64) {
        (set as usize * self.words + b / 64, 1u64 << (b % 64))
    }

    #[inline]
    fn is_valid(&self, set: u32, b: usize) -> bool {
        let (i, m) = self.bit(set, b);
        self.valid[i] & m != 0
    }

    fn words_of(&self, set: u32) -> std::ops::Range<usize> {
        let s = set as usize * self.words;
        s..s + self.words
    }

    #[inline]
    fn slot(&self, set: u32, b: usize) -> SlotId {
        SlotId(((set as usize) << self.shift | b) as u32)
    }

    /// The resident block's set, if `key` is resident.
    #[inline]
    fn find(&self, key: &BlockKey) -> Option<(u32, usize)> {
        let (tag, b) = self.locate(key);
        self.find_set(&tag)
            .filter(|&s| self.is_valid(s, b))
            .map(|s| (s, b))
    }

    /// Sets block `b` of mapped set `set` valid, of `class`.
    #[inline]
    fn fill(&mut self, set: u32, b: usize, class: Class) -> SlotId {
        let (i, m) = self.bit(set, b);
        self.valid[i] |= m;
        if class == Class::PRIORITY {
            self.priority[i] |= m;
        } else {
            self.priority[i] &= !m;
        }
        self.len += 1;
        self.slot(set, b)
    }

    /// Maps free set `set` to `tag`, most recently used.
    fn map_set(&mut self, set: u32, tag: BlockKey) {
        self.tags[set as usize] = tag;
        self.map.insert(KeyMap::fp(&tag), set);
        self.order.insert(SlotId(set), tag);
    }

    /// Unmaps `set` (no block left in it, or all of them just dropped) to the free list.
    fn unmap_set(&mut self, set: u32, evicted: bool) {
        let tag = self.tags[set as usize];
        self.map.remove(KeyMap::fp(&tag), set);
        self.order.remove(SlotId(set), tag, evicted);
        self.free.push(set);
    }

    /// The least recently used set without dirty blocks, its blocks dropped into the spill
    /// buffer, unmapped and free again.
    fn evict_set(&mut self) -> Result<(), CoreError> {
        let choice = choose_set(
            false,
            self.order.coldest_first(),
            DEFAULT_ALLOC_SCAN,
            |set| self.dirty[self.words_of(set)].iter().any(|&w| w != 0),
        );
        if let SetChoice::Reuse(set) = choice {
            let r = self.words_of(set);
            let mut dropped = 0usize;
            for (k, i) in r.enumerate() {
                dropped += self.valid[i].count_ones() as usize;
                self.spill_valid[k] = std::mem::take(&mut self.valid[i]);
                self.spill_priority[k] = std::mem::take(&mut self.priority[i]);
            }
            self.spill_tag = self.tags[set as usize];
            self.spill_word = 0;
            self.len -= dropped;
            self.stats.evictions += dropped as u64;
            self.set_evictions += 1;
            self.unmap_set(set, true);
            return Ok(());
        }
        Err(CoreError::Retry {
            tier: self.name.clone(),
        })
    }

    /// Brings `key` in; `may_evict` false: only into a mapped or a free set.
    #[inline]
    fn place(
        &mut self,
        key: BlockKey,
        class: Class,
        may_evict: bool,
    ) -> Result<Inserted, CoreError> {
        let (tag, b) = self.locate(&key);
        if let Some(set) = self.find_set(&tag) {
            if self.is_valid(set, b) {
                return Ok(Inserted {
                    slot: self.slot(set, b),
                    evicted: None,
                });
            }
            self.order.touch(SlotId(set));
            return Ok(Inserted {
                slot: self.fill(set, b, class),
                evicted: None,
            });
        }
        let mut evicted = None;
        if self.free.is_empty() {
            if !may_evict {
                return Err(CoreError::Retry {
                    tier: self.name.clone(),
                });
            }
            self.evict_set()?;
            evicted = self.next_evicted();
        }
        let set = self.free.pop().ok_or_else(|| CoreError::Retry {
            tier: self.name.clone(),
        })?;
        self.map_set(set, tag);
        Ok(Inserted {
            slot: self.fill(set, b, class),
            evicted,
        })
    }
}

impl TierIndex for SetIndex {
    fn name(&self) -> &str {
        &self.name
    }
    fn capacity(&self) -> usize {
        self.sets * self.set_blocks
    }
    fn len(&self) -> usize {
        self.len
    }
    fn policy(&self) -> PolicyKind {
        PolicyKind::Lru
    }
    #[inline]
    fn lookup(&mut self, key: BlockKey, class: Class) -> Option<SlotId> {
        self.stats.requests += 1;
        let pool = PoolId::NORMAL.index();
        match self.find(&key) {
            Some((set, b)) => {
                self.order.touch(SlotId(set));
                self.stats.hits += 1;
                self.stats.pools[pool].hits += 1;
                self.stats.classes[class.index()].hits += 1;
                Some(self.slot(set, b))
            }
            None => {
                self.stats.pools[pool].misses += 1;
                self.stats.classes[class.index()].misses += 1;
                None
            }
        }
    }
    fn peek(&self, key: &BlockKey) -> Option<SlotId> {
        self.find(key).map(|(s, b)| self.slot(s, b))
    }
    #[inline]
    fn insert(&mut self, key: BlockKey, class: Class) -> Result<Inserted, CoreError> {
        let r = self.place(key, class, true)?;
        self.stats.insertions += 1;
        Ok(r)
    }
    fn demote_into(&mut self, key: BlockKey, class: Class) -> Result<Inserted, CoreError> {
        let r = self.place(key, class, true)?;
        self.stats.demotions += 1;
        Ok(r)
    }
    fn insert_if_free(&mut self, key: BlockKey, class: Class) -> Option<SlotId> {
        let resident = self.peek(&key);
        if resident.is_some() {
            return resident;
        }
        // Full and the backing set unmapped: no room (checked first, so no error is built).
        if self.free.is_empty() && self.find_set(&self.locate(&key).0).is_none() {
            return None;
        }
        let r = self.place(key, class, false).ok()?;
        self.stats.insertions += 1;
        Some(r.slot)
    }
    fn next_evicted(&mut self) -> Option<Evicted> {
        while self.spill_word < self.words {
            let k = self.spill_word;
            let w = self.spill_valid[k];
            if w == 0 {
                self.spill_word += 1;
                continue;
            }
            let bit = w.trailing_zeros() as usize;
            let m = 1u64 << bit;
            self.spill_valid[k] &= !m;
            let b = (k * 64 + bit) as u64;
            let class = if self.spill_priority[k] & m != 0 {
                Class::PRIORITY
            } else {
                Class::NORMAL
            };
            return Some(Evicted {
                key: BlockKey::new(
                    self.spill_tag.file.0,
                    self.spill_tag.block.0 << self.shift | b,
                ),
                class,
            });
        }
        None
    }
    fn evicts_sets(&self) -> bool {
        true
    }
    fn set_stats(&self) -> Option<SetStats> {
        Some(SetStats {
            set_blocks: self.set_blocks as u64,
            sets: self.sets as u64,
            set_evictions: self.set_evictions,
            ram_bytes_per_block: self.ram_bytes_per_block(),
        })
    }
    fn remove(&mut self, key: &BlockKey) -> Option<(SlotId, SlotMeta)> {
        let (set, b) = self.find(key)?;
        let meta = self.meta(self.slot(set, b));
        let (i, m) = self.bit(set, b);
        self.valid[i] &= !m;
        self.dirty[i] &= !m;
        self.priority[i] &= !m;
        self.len -= 1;
        if self.valid[self.words_of(set)].iter().all(|&w| w == 0) {
            self.unmap_set(set, false);
        }
        Some((self.slot(set, b), meta))
    }
    fn meta(&self, slot: SlotId) -> SlotMeta {
        let set = (slot.index() >> self.shift) as u32;
        let (i, m) = self.bit(set, slot.index() & (self.set_blocks - 1));
        SlotMeta {
            class: if self.priority[i] & m != 0 {
                Class::PRIORITY
            } else {
                Class::NORMAL
            },
            pool: PoolId::NORMAL,
            dirty: self.dirty[i] & m != 0,
            pins: 0,
            used: self.valid[i] & m != 0,
        }
    }
    fn set_dirty(&mut self, slot: SlotId, dirty: bool) {
        let set = (slot.index() >> self.shift) as u32;
        let (i, m) = self.bit(set, slot.index() & (self.set_blocks - 1));
        if dirty && self.valid[i] & m != 0 {
            self.dirty[i] |= m;
        } else {
            self.dirty[i] &= !m;
        }
    }
    fn key_at(&self, slot: SlotId) -> Option<BlockKey> {
        let set = slot.index() >> self.shift;
        let b = slot.index() & (self.set_blocks - 1);
        (set < self.sets && self.is_valid(set as u32, b)).then(|| {
            let tag = self.tags[set];
            BlockKey::new(tag.file.0, tag.block.0 << self.shift | b as u64)
        })
    }
    fn resident(&self) -> Box<dyn Iterator<Item = (BlockKey, SlotId)> + '_> {
        Box::new(
            (0..self.capacity() as u32)
                .filter_map(move |s| self.key_at(SlotId(s)).map(|k| (k, SlotId(s)))),
        )
    }
    fn stats(&self) -> &TierStats {
        &self.stats
    }
    fn stats_mut(&mut self) -> &mut TierStats {
        &mut self.stats
    }
    fn check_invariants(&self) -> Result<(), InvariantViolation> {
        let mapped = self.sets - self.free.len();
        if self.map.len() != mapped || self.order.len() != mapped {
            return Err(InvariantViolation::from(format!(
                "{mapped} sets mapped, map holds {}, LRU {}",
                self.map.len(),
                self.order.len()
            )));
        }
        let mut is_free = vec![false; self.sets];
        for &s in &self.free {
            if std::mem::replace(&mut is_free[s as usize], true) {
                return Err(InvariantViolation::from(format!("set {s} is free twice")));
            }
        }
        let mut blocks = 0usize;
        for set in 0..self.sets as u32 {
            let r = self.words_of(set);
            let n: usize = self.valid[r.clone()]
                .iter()
                .map(|w| w.count_ones() as usize)
                .sum();
            blocks += n;
            if r.clone().any(|i| self.dirty[i] & !self.valid[i] != 0) {
                return Err(InvariantViolation::from(format!(
                    "set {set}: a dirty bit without its valid bit"
                )));
            }
            match (is_free[set as usize], n) {
                (true, 0) => {}
                (true, _) => {
                    return Err(InvariantViolation::from(format!(
                        "free set {set} holds {n} blocks"
                    )))
                }
                (false, 0) => {
                    return Err(InvariantViolation::from(format!(
                        "mapped set {set} holds no block"
                    )))
                }
                (false, _) => {
                    if self.find_set(&self.tags[set as usize]) != Some(set) {
                        return Err(InvariantViolation::from(format!(
                            "set {set}: its tag does not find it"
                        )));
                    }
                }
            }
        }
        if blocks != self.len {
            return Err(InvariantViolation::from(format!(
                "{blocks} valid bits, len {}",
                self.len
            )));
        }
        Ok(())
    }
    fn partitioner(&self) -> &dyn Partitioner {
        &self.partitioner
    }
    fn s_cur(&self) -> u64 {
        0
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::tier::{Tier, TierConfig};

    fn k(file: u64, block: u64) -> BlockKey {
        BlockKey::new(file, block)
    }

    /// Looks each key up and inserts it on a miss; returns the hits.
    fn run(t: &mut dyn TierIndex, keys: &[BlockKey]) -> u64 {
        let mut hits = 0;
        for &key in keys {
            if t.lookup(key, Class::NORMAL).is_some() {
                hits += 1;
            } else {
                t.insert(key, Class::NORMAL).unwrap();
            }
            t.check_invariants().unwrap();
        }
        hits
    }

    #[test]
    fn two_files_thrash_one_set_that_a_fully_associative_tier_of_its_size_holds() {
        // Blocks 0 and 1 of files 1 and 2: four blocks, one set of four. Both files' backing
        // set 0 maps to a cache set, and there is only one.
        let round = [k(1, 0), k(1, 1), k(2, 0), k(2, 1)];
        let trace: Vec<_> = round.iter().cycle().take(12).copied().collect();
        let mut full = Tier::new(&TierConfig::new("full", 4, PolicyKind::Lru)).unwrap();
        assert_eq!(
            run(&mut full, &trace),
            8,
            "fully associative: only cold misses"
        );
        let mut set = SetIndex::new("flash", 4, 4, PolicyKind::Lru).unwrap();
        assert_eq!(
            run(&mut set, &trace),
            0,
            "one set: every file switch evicts it"
        );
        // Six mappings, the first into the free set.
        assert_eq!(set.set_evictions(), 5);
        assert_eq!(set.stats().evictions, 10);
        // Two sets: each file keeps its own.
        let mut two = SetIndex::new("flash", 8, 4, PolicyKind::Lru).unwrap();
        assert_eq!(run(&mut two, &trace), 8);
        assert_eq!(two.set_evictions(), 0);
    }

    #[test]
    fn a_sequential_scan_fills_whole_sets_and_reuses_the_least_recently_used() {
        let mut t = SetIndex::new("flash", 8, 4, PolicyKind::Lru).unwrap();
        for b in 0..8 {
            let ins = t.insert(k(0, b), Class::NORMAL).unwrap();
            assert_eq!(ins.evicted, None);
        }
        assert_eq!((t.len(), t.free_sets()), (8, 0));
        // Block 8 starts backing set 2: cache set of blocks 0..4 is reused, all four go.
        let ins = t.insert(k(0, 8), Class::PRIORITY).unwrap();
        assert_eq!(ins.evicted.map(|e| e.key), Some(k(0, 0)));
        let rest: Vec<_> = std::iter::from_fn(|| t.next_evicted())
            .map(|e| e.key)
            .collect();
        assert_eq!(rest, [k(0, 1), k(0, 2), k(0, 3)]);
        assert_eq!(
            ins.slot,
            SlotId(0),
            "block 8 is at offset 0 of the reused set 0"
        );
        assert_eq!(t.meta(ins.slot).class, Class::PRIORITY);
        for b in 9..12 {
            t.insert(k(0, b), Class::NORMAL).unwrap();
        }
        let mut resident: Vec<_> = t.resident().map(|(key, _)| key.block.0).collect();
        resident.sort_unstable();
        assert_eq!(resident, (4..12).collect::<Vec<_>>());
        assert_eq!((t.set_evictions(), t.stats().evictions), (1, 4));
        assert_eq!(t.key_at(SlotId(3)), Some(k(0, 11)));
        t.check_invariants().unwrap();
    }

    #[test]
    fn a_hit_keeps_its_set_and_the_other_set_goes() {
        let mut t = SetIndex::new("flash", 8, 4, PolicyKind::Lru).unwrap();
        t.insert(k(0, 0), Class::NORMAL).unwrap();
        t.insert(k(1, 0), Class::NORMAL).unwrap();
        assert!(t.lookup(k(0, 0), Class::NORMAL).is_some());
        let ins = t.insert(k(2, 0), Class::NORMAL).unwrap();
        assert_eq!(ins.evicted.map(|e| e.key), Some(k(1, 0)));
        assert!(t.contains(&k(0, 0)));
    }

    #[test]
    fn geometry_is_whole_sets_of_a_power_of_two() {
        let t = SetIndex::new("flash", 1000, 256, PolicyKind::Lru).unwrap();
        assert_eq!((t.capacity(), t.sets()), (768, 3));
        assert_eq!(t.ram_bytes_per_block(), (64.0 + 16.0) / 256.0);
        assert!(SetIndex::new("flash", 255, 256, PolicyKind::Lru).is_err());
        assert!(SetIndex::new("flash", 1000, 100, PolicyKind::Lru).is_err());
        assert!(SetIndex::new("flash", 1 << 20, 1 << 17, PolicyKind::Lru).is_err());
        let e = SetIndex::new("flash", 1000, 256, PolicyKind::Arc).unwrap_err();
        assert!(e.to_string().contains("policy must be lru"), "{e}");
    }

    #[test]
    fn removing_the_last_block_frees_its_set_and_insert_if_free_never_evicts() {
        let mut t = SetIndex::new("flash", 4, 2, PolicyKind::Lru).unwrap();
        t.insert(k(0, 0), Class::NORMAL).unwrap();
        t.insert(k(0, 1), Class::NORMAL).unwrap();
        t.insert(k(1, 0), Class::NORMAL).unwrap();
        assert_eq!(t.free_sets(), 0);
        assert!(t.insert_if_free(k(2, 0), Class::NORMAL).is_none());
        assert!(
            t.insert_if_free(k(1, 1), Class::NORMAL).is_some(),
            "its set is mapped"
        );
        t.remove(&k(1, 0)).unwrap();
        assert_eq!(t.free_sets(), 0, "the set still holds block 1");
        t.remove(&k(1, 1)).unwrap();
        assert_eq!(t.free_sets(), 1);
        assert!(t.insert_if_free(k(2, 0), Class::NORMAL).is_some());
        assert_eq!(t.set_evictions(), 0);
        t.check_invariants().unwrap();
    }

    #[test]
    fn a_set_with_a_dirty_block_is_not_reused() {
        let mut t = SetIndex::new("flash", 4, 2, PolicyKind::Lru).unwrap();
        let s = t.insert(k(0, 0), Class::NORMAL).unwrap().slot;
        t.insert(k(1, 0), Class::NORMAL).unwrap();
        t.set_dirty(s, true);
        // Set of file 0 is the LRU one but dirty: file 1's goes.
        let ins = t.insert(k(2, 0), Class::NORMAL).unwrap();
        assert_eq!(ins.evicted.map(|e| e.key), Some(k(1, 0)));
        let s2 = t.peek(&k(2, 0)).unwrap();
        t.set_dirty(s2, true);
        assert!(matches!(
            t.insert(k(3, 0), Class::NORMAL),
            Err(CoreError::Retry { .. })
        ));
        t.check_invariants().unwrap();
    }

    #[test]
    fn random_accesses_match_a_list_of_sets_model() {
        // Model: mapped sets most recently used first, each (file, backing set, offsets).
        let (sets, sb) = (5usize, 4u64);
        let mut t =
            SetIndex::new("flash", sets * sb as usize, sb as usize, PolicyKind::Lru).unwrap();
        let mut model: Vec<(u64, u64, Vec<u64>)> = Vec::new();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for i in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let key = k(x % 3, (x >> 8) % 40);
            let (f, si, off) = (key.file.0, key.block.0 / sb, key.block.0 % sb);
            let pos = model.iter().position(|m| m.0 == f && m.1 == si);
            let held = pos.is_some_and(|p| model[p].2.contains(&off));
            if i % 7 == 0 {
                assert_eq!(t.remove(&key).is_some(), held);
                if let (Some(p), true) = (pos, held) {
                    model[p].2.retain(|&o| o != off);
                    if model[p].2.is_empty() {
                        model.remove(p);
                    }
                }
            } else {
                assert_eq!(t.lookup(key, Class::NORMAL).is_some(), held, "access {i}");
                match (pos, held) {
                    (Some(p), true) => {
                        let m = model.remove(p);
                        model.insert(0, m);
                    }
                    _ => {
                        t.insert(key, Class::NORMAL).unwrap();
                        let mut m = match pos {
                            Some(p) => model.remove(p),
                            None => {
                                if model.len() == sets {
                                    model.pop();
                                }
                                (f, si, Vec::new())
                            }
                        };
                        m.2.push(off);
                        model.insert(0, m);
                    }
                }
            }
            assert_eq!(t.len(), model.iter().map(|m| m.2.len()).sum::<usize>());
        }
        t.check_invariants().unwrap();
    }
}
