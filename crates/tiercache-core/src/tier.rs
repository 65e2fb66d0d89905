//! One cache level: the key map, the slots, the pools and the partitioner that splits them.
//!
//! Invariants (checked by `tests/engine_model.rs`):
//! - `map`, `keys` and the pools agree: a resident block has exactly one slot, is in exactly one
//!   pool's policy, and `len() ≤ capacity`;
//! - a slot with pins or dirty data is never chosen as a victim (the live cache relies on this);
//! - nothing allocates after construction: the map and every policy are sized for `capacity`.

use crate::class::{Class, PoolId, MAX_CLASSES};
use crate::error::{CoreError, InvariantViolation};
use crate::ids::{BlockKey, SlotId};
use crate::keymap::{prefetch_ptr, Fp, KeyMap};
use crate::partition::{
    new_partitioner, Access, ClassParams, PartitionConfig, PartitionKind, Partitioner, PoolSizes,
};
use crate::policy::{new_policy, EvictionPolicy, PolicyKind};
use crate::stats::TierStats;

/// How a tier is built.
#[derive(Debug, Clone)]
pub struct TierConfig {
    pub name: String,
    /// Capacity B in blocks.
    pub capacity: usize,
    /// Policy inside each pool.
    pub policy: PolicyKind,
    pub partition: PartitionConfig,
}

impl TierConfig {
    pub fn new(name: impl Into<String>, capacity: usize, policy: PolicyKind) -> Self {
        Self {
            name: name.into(),
            capacity,
            policy,
            partition: PartitionConfig::none(),
        }
    }
}

/// Per-slot state beside the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotMeta {
    pub class: Class,
    pub pool: PoolId,
    /// Holds data newer than the layer below (live cache only).
    pub dirty: bool,
    /// Readers or writers currently using the slot's data (live cache only).
    pub pins: u32,
    /// The slot holds a block.
    pub used: bool,
}

impl SlotMeta {
    const EMPTY: SlotMeta = SlotMeta {
        class: Class::NORMAL,
        pool: PoolId::NORMAL,
        dirty: false,
        pins: 0,
        used: false,
    };
    #[inline]
    fn evictable(&self) -> bool {
        !self.dirty && self.pins == 0
    }
}

/// One slot's key and state.
#[derive(Debug, Clone, Copy)]
struct SlotEntry {
    key: BlockKey,
    meta: SlotMeta,
}

/// A block pushed out to make room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Evicted {
    pub key: BlockKey,
    pub class: Class,
}

/// Where an inserted block went and what left for it. The evicted block's slot is the new
/// block's slot: the caller must be done with its data before reusing it (it was unpinned and
/// clean, so there is nothing to write).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inserted {
    pub slot: SlotId,
    pub evicted: Option<Evicted>,
}

/// Below this many blocks a tier's metadata (about 60 bytes a block) fits in a core's L2
/// cache, where prefetch hints cost more instructions than the misses they save.
const PREFETCH_MIN_BLOCKS: usize = 32_768;

/// How many unevictable candidates a victim search requeues before giving up with `Retry`.
const MAX_SKIPS: usize = 64;

/// One cache level. See the module docs for its invariants.
#[derive(Debug)]
pub struct Tier {
    name: String,
    capacity: usize,
    policy: PolicyKind,
    /// Key → slot (open addressing over fingerprints; the keys are in `slots`).
    map: KeyMap,
    /// Per slot: the key and its state, side by side so a hit or an eviction reads one line.
    slots: Vec<SlotEntry>,
    free: Vec<u32>,
    /// Slots removed but not free yet (`remove_held`).
    held: usize,
    /// One policy per pool, indexed by `PoolId::index` (at least the protected and the rest
    /// pool; one more per class of the table).
    pools: Vec<Box<dyn EvictionPolicy>>,
    partitioner: Box<dyn Partitioner>,
    /// Resident blocks per class (`Class::index`).
    class_blocks: [usize; MAX_CLASSES],
    /// Per pool: its class's `max` in blocks, for a class's own pool (kept by `size_pools`).
    caps: [Option<usize>; MAX_CLASSES],
    stats: TierStats,
    /// Whether prefetch hints are worth their instructions (see [`PREFETCH_MIN_BLOCKS`]).
    prefetching: bool,
    /// The partitioner is `none`: one pool, no decisions to ask it for.
    shared: bool,
    /// The partitioner wants each access's pool size (`Partitioner::measures_pools`).
    measured: bool,
    /// The key of the last lookup that missed, and its hash, until the next block comes in:
    /// a fill right after the miss skips probing the index again.
    absent: Option<(BlockKey, Fp)>,
}

impl Tier {
    pub fn new(cfg: &TierConfig) -> Result<Self, CoreError> {
        if cfg.capacity == 0 || cfg.capacity >= u32::MAX as usize {
            return Err(CoreError::config(
                "capacity",
                format!("{} blocks is out of range", cfg.capacity),
            ));
        }
        let c = cfg.capacity;
        let partitioner = new_partitioner(&cfg.partition, c as u64)?;
        let measured = partitioner.measures_pools();
        let count = cfg.partition.params.classes.len().max(2);
        let pools = (0..count).map(|_| Self::new_pool(cfg.policy, c)).collect();
        let map = KeyMap::new(c);
        let mut tier = Self {
            name: cfg.name.clone(),
            capacity: c,
            policy: cfg.policy,
            map,
            slots: vec![
                SlotEntry {
                    key: BlockKey::new(0, 0),
                    meta: SlotMeta::EMPTY
                };
                c
            ],
            free: (0..c as u32).rev().collect(),
            held: 0,
            pools,
            partitioner,
            class_blocks: [0; MAX_CLASSES],
            caps: [None; MAX_CLASSES],
            stats: TierStats::default(),
            prefetching: c >= PREFETCH_MIN_BLOCKS,
            shared: cfg.partition.kind == PartitionKind::None,
            measured,
            absent: None,
        };
        tier.size_pools();
        Ok(tier)
    }

    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn capacity(&self) -> usize {
        self.capacity
    }
    pub fn policy(&self) -> PolicyKind {
        self.policy
    }
    pub fn len(&self) -> usize {
        self.capacity - self.free.len() - self.held
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn is_full(&self) -> bool {
        self.free.is_empty()
    }
    pub fn stats(&self) -> &TierStats {
        &self.stats
    }
    pub fn stats_mut(&mut self) -> &mut TierStats {
        &mut self.stats
    }
    pub fn partitioner(&self) -> &dyn Partitioner {
        self.partitioner.as_ref()
    }
    /// New partitioner parameters (a reload); nothing changes on an error. Blocks whose class
    /// now maps to another pool move there, keeping their class.
    pub fn set_partition_params(&mut self, params: &ClassParams) -> Result<(), CoreError> {
        self.partitioner
            .set_params(params, self.capacity() as u64)?;
        while self.pools.len() < params.classes.len() {
            self.pools.push(Self::new_pool(self.policy, self.capacity));
        }
        if !self.shared {
            let moves: Vec<(SlotId, Class)> = self
                .resident()
                .map(|(_, s)| (s, self.slots[s.index()].meta.class))
                .filter(|&(s, c)| self.partitioner.pool_of(c) != self.slots[s.index()].meta.pool)
                .collect();
            for (slot, class) in moves {
                self.set_class(slot, class);
            }
        }
        self.size_pools();
        Ok(())
    }
    /// The class table in force.
    pub fn classes(&self) -> &crate::partition::ClassTable {
        self.partitioner.classes()
    }
    pub fn s_target(&self) -> Option<u64> {
        self.partitioner.s_target()
    }
    /// The target size of `pool`, when the partitioner has one.
    pub fn target(&self, pool: PoolId) -> Option<u64> {
        self.partitioner.target(pool)
    }
    #[inline]
    pub fn pool_sizes(&self) -> PoolSizes {
        PoolSizes::from_fn(|i| self.pools.get(i).map_or(0, |p| p.len()))
    }
    /// Resident blocks of `class`.
    pub fn class_blocks(&self, class: Class) -> usize {
        self.class_blocks[class.index()]
    }
    /// S_cur: blocks in the protected pool.
    pub fn s_cur(&self) -> u64 {
        self.pools[PoolId::PROTECTED.index()].len() as u64
    }
    /// The pool `class`'s blocks are in.
    pub fn pool_of_class(&self, class: Class) -> PoolId {
        self.pool_of(class)
    }

    fn new_pool(policy: PolicyKind, capacity: usize) -> Box<dyn EvictionPolicy> {
        let mut p = new_policy(policy, capacity);
        p.set_capacity(capacity);
        p
    }

    /// Tells adaptive policies how large each pool may grow: its target (at least one block),
    /// or the whole tier without one.
    fn size_pools(&mut self) {
        let cap = self.capacity as u64;
        let shared = self.shared;
        let classes = self.partitioner.classes();
        self.caps = std::array::from_fn(|i| {
            let pool = PoolId::new(i)?;
            if shared || pool == PoolId::NORMAL || classes.pool_of(pool.class()) != pool {
                return None;
            }
            let max = classes.get(pool.class())?.max?;
            Some(max.of(cap).min(cap) as usize)
        });
        for (i, pool) in self.pools.iter_mut().enumerate() {
            let target = PoolId::new(i).and_then(|p| self.partitioner.target(p));
            let size = match target {
                Some(t) => (t as usize).min(self.capacity).max(1),
                None => self.capacity,
            };
            pool.set_capacity(size);
        }
    }

    /// Looks `key` up as one request: counts it, and on a hit refreshes the block's position.
    #[inline]
    pub fn lookup(&mut self, key: BlockKey, class: Class) -> Option<SlotId> {
        self.stats.requests += 1;
        let fp = KeyMap::fp(&key);
        match self.find_fp(&key, fp) {
            Some(slot) => {
                let pool = self.slots[slot.index()].meta.pool;
                self.pools[pool.index()].touch(slot);
                self.stats.hits += 1;
                self.stats.pools[pool.index()].hits += 1;
                self.stats.classes[class.index()].hits += 1;
                if !self.shared
                    && self.partitioner.record(Access {
                        key,
                        class,
                        pool,
                        hit: true,
                        pool_blocks: self.pool_blocks(pool),
                    })
                {
                    self.size_pools();
                }
                Some(slot)
            }
            None => {
                self.absent = Some((key, fp));
                let pool = self.pool_of(class);
                self.stats.pools[pool.index()].misses += 1;
                self.stats.classes[class.index()].misses += 1;
                if !self.shared
                    && self.partitioner.record(Access {
                        key,
                        class,
                        pool,
                        hit: false,
                        pool_blocks: self.pool_blocks(pool),
                    })
                {
                    self.size_pools();
                }
                None
            }
        }
    }

    /// `pool`'s size for [`Access::pool_blocks`], when the partitioner measures pools.
    #[inline]
    fn pool_blocks(&self, pool: PoolId) -> u64 {
        if self.measured {
            self.pools[pool.index()].len() as u64
        } else {
            0
        }
    }

    #[inline]
    fn find(&self, key: &BlockKey) -> Option<SlotId> {
        self.find_fp(key, KeyMap::fp(key))
    }

    #[inline]
    fn find_fp(&self, key: &BlockKey, fp: Fp) -> Option<SlotId> {
        let slots = &self.slots;
        self.map
            .find(key, fp, |s| slots[s as usize].key)
            .map(SlotId)
    }

    /// The pool blocks of `class` belong in.
    #[inline]
    fn pool_of(&self, class: Class) -> PoolId {
        if self.shared {
            PoolId::NORMAL
        } else {
            self.partitioner.pool_of(class)
        }
    }

    /// Whether [`Tier::prefetch`] does anything: only for tiers whose metadata outgrows a core's
    /// L2 cache (below that, the hints cost more than the misses they save).
    #[inline]
    pub fn wants_prefetch(&self) -> bool {
        self.prefetching
    }

    /// Asks the CPU to start fetching what a lookup of `key` reads first: its bucket in the key
    /// index. A hint for replay loops that know their next requests; no effect on the tier.
    /// Call it some requests ahead, then [`Tier::prefetch_resident`] for the same key later.
    #[inline]
    pub fn prefetch(&self, key: &BlockKey) {
        if !self.prefetching {
            return;
        }
        self.map.prefetch(KeyMap::fp(key));
    }

    /// The second step of [`Tier::prefetch`], once the bucket is likely in cache: if `key`
    /// seems resident, starts fetching its slot entry and the policy's links for it.
    #[inline]
    pub fn prefetch_resident(&self, key: &BlockKey) {
        if !self.prefetching {
            return;
        }
        if let Some(s) = self.map.candidate(KeyMap::fp(key)) {
            self.prefetch_slot(SlotId(s));
        }
    }

    #[inline]
    fn prefetch_slot(&self, slot: SlotId) {
        if let Some(e) = self.slots.get(slot.index()) {
            prefetch_ptr((e as *const SlotEntry).cast());
        }
        for p in &self.pools {
            if !p.is_empty() {
                p.prefetch(slot);
            }
        }
    }

    /// Where `key` is, without counting a request or changing order.
    #[inline]
    pub fn peek(&self, key: &BlockKey) -> Option<SlotId> {
        self.find(key)
    }
    pub fn contains(&self, key: &BlockKey) -> bool {
        self.find(key).is_some()
    }
    pub fn key_of(&self, slot: SlotId) -> BlockKey {
        self.slots[slot.index()].key
    }
    pub fn meta(&self, slot: SlotId) -> SlotMeta {
        self.slots[slot.index()].meta
    }

    /// Brings `key` in after a miss (a fill), evicting by the partitioner's and the pool
    /// policy's decision when the tier is full. An already resident key returns its slot.
    #[inline]
    pub fn insert(&mut self, key: BlockKey, class: Class) -> Result<Inserted, CoreError> {
        let r = self.place(key, class)?;
        self.stats.insertions += 1;
        Ok(r)
    }

    /// Like [`Tier::insert`] but counted as a demotion from the tier above.
    #[inline]
    pub fn demote_into(&mut self, key: BlockKey, class: Class) -> Result<Inserted, CoreError> {
        let r = self.place(key, class)?;
        self.stats.demotions += 1;
        Ok(r)
    }

    /// Like [`Tier::insert`], but a victim is taken only if `may_take(slot)` agrees (the
    /// zero-copy arena refuses slots a client has pinned, and then makes them unpinnable);
    /// otherwise the next candidate is tried, as for a pinned one.
    #[inline]
    pub fn insert_checked(
        &mut self,
        key: BlockKey,
        class: Class,
        may_take: &mut dyn FnMut(SlotId) -> bool,
    ) -> Result<Inserted, CoreError> {
        let r = self.place_with(key, class, may_take)?;
        self.stats.insertions += 1;
        Ok(r)
    }

    /// Inserts only into a free slot; `None` when full (pinned regions never evict).
    pub fn insert_if_free(&mut self, key: BlockKey, class: Class) -> Option<SlotId> {
        let fp = KeyMap::fp(&key);
        if let Some(slot) = self.find_fp(&key, fp) {
            return Some(slot);
        }
        let slot = SlotId(self.free.pop()?);
        self.occupy(slot, key, fp, class);
        self.stats.insertions += 1;
        Some(slot)
    }

    #[inline]
    fn place(&mut self, key: BlockKey, class: Class) -> Result<Inserted, CoreError> {
        self.place_with(key, class, |_| true)
    }

    #[inline]
    fn place_with(
        &mut self,
        key: BlockKey,
        class: Class,
        mut may_take: impl FnMut(SlotId) -> bool,
    ) -> Result<Inserted, CoreError> {
        let fp = match self.absent {
            // Missed since the last block came in: still absent.
            Some((k, fp)) if k == key => fp,
            _ => {
                let fp = KeyMap::fp(&key);
                if let Some(slot) = self.find_fp(&key, fp) {
                    return Ok(Inserted {
                        slot,
                        evicted: None,
                    });
                }
                fp
            }
        };
        let incoming = self.pool_of(class);
        // A class at its cap replaces one of its own blocks, even while slots are free (a scan
        // never owns the cache); when none of them can go (pinned or dirty, or a cap of 0),
        // the block is not cached (`Retry`: callers bypass the tier).
        let capped = self.at_cap(incoming);
        let free = if capped { None } else { self.free.pop() };
        let (slot, evicted) = match free {
            None if capped => match self.evict_from(incoming.index(), key, &mut may_take) {
                Some((slot, ev)) => (slot, Some(ev)),
                None => {
                    return Err(CoreError::Retry {
                        tier: self.name.clone(),
                    })
                }
            },
            Some(s) => (SlotId(s), None),
            None => {
                let (slot, ev) = self.evict_for(key, incoming, may_take)?;
                (slot, Some(ev))
            }
        };
        self.occupy(slot, key, fp, class);
        Ok(Inserted { slot, evicted })
    }

    /// Whether `pool` is a class's own pool holding at least that class's `max` blocks.
    #[inline]
    fn at_cap(&self, pool: PoolId) -> bool {
        self.caps[pool.index()].is_some_and(|m| self.pools[pool.index()].len() >= m)
    }

    #[inline]
    fn occupy(&mut self, slot: SlotId, key: BlockKey, fp: Fp, class: Class) {
        self.absent = None;
        let pool = self.pool_of(class);
        self.slots[slot.index()].key = key;
        self.slots[slot.index()].meta = SlotMeta {
            class,
            pool,
            dirty: false,
            pins: 0,
            used: true,
        };
        self.map.insert(fp, slot.0);
        self.pools[pool.index()].insert(slot, key);
        self.class_blocks[class.index()] += 1;
    }

    /// Picks and removes a victim for a block headed to `incoming`, skipping (requeueing) pinned
    /// or dirty blocks. Tries the partitioner's pool first, then the other one.
    fn evict_for(
        &mut self,
        key: BlockKey,
        incoming: PoolId,
        mut may_take: impl FnMut(SlotId) -> bool,
    ) -> Result<(SlotId, Evicted), CoreError> {
        let first = if self.shared {
            PoolId::NORMAL
        } else {
            self.partitioner.victim_pool(incoming, &self.pool_sizes())
        }
        .index();
        if let Some(v) = self.evict_from(first, key, &mut may_take) {
            return Ok(v);
        }
        // Then the others, largest first.
        let n = self.pools.len();
        let mut order: [usize; MAX_CLASSES] = std::array::from_fn(|i| i);
        order[..n].sort_by_key(|&i| (std::cmp::Reverse(self.pools[i].len()), i));
        for &p in order[..n].iter().filter(|&&p| p != first) {
            if let Some(v) = self.evict_from(p, key, &mut may_take) {
                return Ok(v);
            }
        }
        Err(CoreError::Retry {
            tier: self.name.clone(),
        })
    }

    /// Removes pool `p`'s victim, skipping (requeueing) up to [`MAX_SKIPS`] pinned, dirty or
    /// refused ones. Inlined: it is the eviction path of every fill (measured: 9 % of a
    /// `dirprio` replay as a call).
    #[inline(always)]
    fn evict_from(
        &mut self,
        p: usize,
        key: BlockKey,
        may_take: &mut impl FnMut(SlotId) -> bool,
    ) -> Option<(SlotId, Evicted)> {
        let tries = MAX_SKIPS.min(self.pools[p].len());
        for _ in 0..tries {
            let slot = self.pools[p].victim(Some(key))?;
            let m = self.slots[slot.index()].meta;
            if m.evictable() && may_take(slot) {
                let vkey = self.slots[slot.index()].key;
                self.pools[p].remove(slot, vkey, true);
                self.map.remove(KeyMap::fp(&vkey), slot.0);
                self.class_blocks[m.class.index()] -= 1;
                self.stats.evictions += 1;
                if self.prefetching {
                    self.prefetch_victims(p);
                }
                return Some((
                    slot,
                    Evicted {
                        key: vkey,
                        class: m.class,
                    },
                ));
            }
            self.pools[p].touch(slot);
        }
        None
    }

    /// Starts fetching what the pool's next evictions will read, a pipeline over the victims
    /// to come: the next one's index bucket (its slot entry was fetched two evictions ago), and
    /// the third one's slot entry and links.
    #[inline]
    fn prefetch_victims(&self, p: usize) {
        let [next, _, third] = self.pools[p].victim_hints();
        if let Some(s) = next {
            self.map.prefetch(KeyMap::fp(&self.slots[s.index()].key));
        }
        if let Some(s) = third {
            if let Some(e) = self.slots.get(s.index()) {
                prefetch_ptr((e as *const SlotEntry).cast());
            }
            self.pools[p].prefetch(s);
        }
    }

    /// Removes `key` without counting an eviction (promotion, invalidation). Returns its slot and
    /// state; the slot is free afterwards.
    /// The caller must not remove a pinned block (its data is in use); debug builds check.
    pub fn remove(&mut self, key: &BlockKey) -> Option<(SlotId, SlotMeta)> {
        let slot = self.find(key)?;
        self.map.remove(KeyMap::fp(key), slot.0);
        let m = self.slots[slot.index()].meta;
        debug_assert_eq!(m.pins, 0, "removing pinned block {key:?}");
        self.pools[m.pool.index()].remove(slot, *key, false);
        self.class_blocks[m.class.index()] -= 1;
        self.slots[slot.index()].meta = SlotMeta::EMPTY;
        self.free.push(slot.0);
        Some((slot, m))
    }

    /// Like [`Tier::remove`], but the slot is *held*: not free, not counted in `len`, until
    /// [`Tier::release_held`] (a zero-copy client still maps its bytes).
    pub fn remove_held(&mut self, key: &BlockKey) -> Option<(SlotId, SlotMeta)> {
        let slot = self.find(key)?;
        self.map.remove(KeyMap::fp(key), slot.0);
        let m = self.slots[slot.index()].meta;
        self.pools[m.pool.index()].remove(slot, *key, false);
        self.class_blocks[m.class.index()] -= 1;
        self.slots[slot.index()].meta = SlotMeta::EMPTY;
        self.held += 1;
        Some((slot, m))
    }

    /// Frees a slot taken by [`Tier::remove_held`].
    pub fn release_held(&mut self, slot: SlotId) {
        debug_assert!(self.held > 0 && !self.slots[slot.index()].meta.used);
        self.held = self.held.saturating_sub(1);
        self.free.push(slot.0);
    }

    /// Changes a resident block's class, moving it between pools when the partitioner says so.
    pub fn set_class(&mut self, slot: SlotId, class: Class) {
        let key = self.slots[slot.index()].key;
        let pool = self.partitioner.pool_of(class);
        if self.find(&key) != Some(slot) {
            return;
        }
        let m = &mut self.slots[slot.index()].meta;
        self.class_blocks[m.class.index()] -= 1;
        self.class_blocks[class.index()] += 1;
        m.class = class;
        if pool != m.pool {
            let old = m.pool;
            m.pool = pool;
            self.pools[old.index()].remove(slot, key, false);
            self.pools[pool.index()].insert(slot, key);
        }
    }

    /// Marks a slot's data dirty (not evictable until cleaned) or clean.
    pub fn set_dirty(&mut self, slot: SlotId, dirty: bool) {
        self.slots[slot.index()].meta.dirty = dirty;
    }
    /// Holds a slot against eviction while its data is in use. A u32 count cannot saturate in
    /// practice (one pin per in-flight request).
    pub fn pin(&mut self, slot: SlotId) {
        let m = &mut self.slots[slot.index()].meta;
        m.pins = m.pins.saturating_add(1);
    }
    /// Releases one pin; unpinning an unpinned slot is a caller bug (caught in debug builds).
    pub fn unpin(&mut self, slot: SlotId) {
        let m = &mut self.slots[slot.index()].meta;
        debug_assert!(m.pins > 0, "unpin of an unpinned slot {}", slot.0);
        m.pins = m.pins.saturating_sub(1);
    }

    /// Every resident block and its slot, in no particular order.
    pub fn resident(&self) -> impl Iterator<Item = (BlockKey, SlotId)> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, e)| e.meta.used)
            .map(|(i, e)| (e.key, SlotId(i as u32)))
    }

    /// The key in `slot`, if the slot holds a block (sampling without a map lookup).
    #[inline]
    pub fn key_at(&self, slot: SlotId) -> Option<BlockKey> {
        let i = slot.index();
        (i < self.capacity && self.slots[i].meta.used).then(|| self.slots[i].key)
    }

    /// Checks the structural invariants; used by tests and debug assertions.
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        let sizes = self.pool_sizes();
        if self.map.len() != self.len()
            || sizes.total() != self.len()
            || self.class_blocks.iter().sum::<usize>() != self.len()
        {
            return Err(InvariantViolation::from(format!(
                "map {} / slots {} / pools {sizes:?} / classes {:?} disagree",
                self.map.len(),
                self.len(),
                self.class_blocks
            )));
        }
        if self.len() > self.capacity {
            return Err(InvariantViolation::from("over capacity"));
        }
        if self.resident().count() != self.len() {
            return Err(InvariantViolation::from(format!(
                "{} slots in use, {} blocks resident",
                self.resident().count(),
                self.len()
            )));
        }
        for (k, s) in self.resident() {
            if self.find(&k) != Some(s) {
                return Err(InvariantViolation::from(format!(
                    "slot {} holds {k:?}, map says {:?}",
                    s.0,
                    self.find(&k)
                )));
            }
            let m = self.slots[s.index()].meta;
            if self.pools[m.pool.index()].is_empty() {
                return Err(InvariantViolation::from(format!(
                    "{k:?}: in pool {:?}, which is empty",
                    m.pool
                )));
            }
            if m.pool != self.partitioner.pool_of(m.class) {
                return Err(InvariantViolation::from(format!(
                    "{k:?} is in pool {:?} but its class maps elsewhere",
                    m.pool
                )));
            }
        }
        Ok(())
    }
}
