//! S3-FIFO (Yang et al., "FIFO queues are all you need for cache eviction", SOSP'23): a small FIFO
//! S (10% of the capacity) that filters one-hit wonders, a main FIFO M run as a 2-bit CLOCK, and
//! a ghost FIFO G of keys recently evicted from S (as many keys as M holds).
//!
//! - insert: to M's head if the key is in G (and leaves G), else to S's head; counter 0;
//! - hit: counter + 1, capped at 3;
//! - evict from S (when `|S| >= |S|target`, or M is empty): S's tail moves to M's head with its
//!   counter reset if it was accessed (counter >= the move-to-main threshold, by default
//!   [`S3Fifo::DEFAULT_MOVE_TO_MAIN`] = 2, i.e. freq > 1 as in the
//!   paper's Algorithm 1 and libCacheSim), else it is the victim and its key
//!   enters G once it is actually evicted; if S runs dry, evict from M;
//! - evict from M: a tail with counter > 0 is reinserted at the head with counter - 1, else it is
//!   the victim.
//!
//! `victim` does those moves itself and leaves the chosen block at its queue's tail, so a later
//! `remove(.., evicted = true)` knows from the block's queue whether it feeds the ghost.
//!
//! This module also holds [`GhostLists`], the fixed-size ghost-key lists ARC reuses.

use super::list::{SlotLists, NIL};
use super::{EvictionPolicy, PolicyKind};
use crate::ids::{BlockKey, SlotId};
use std::hash::BuildHasher;

const SMALL: usize = 0;
const MAIN: usize = 1;
/// Counter ceiling (2-bit counters).
const MAX_FREQ: u8 = 3;

/// S3-FIFO over two intrusive queues (heads = newest) and a ghost key FIFO.
#[derive(Debug)]
pub struct S3Fifo {
    queues: SlotLists<2>,
    /// Per-slot access counter, `0..=MAX_FREQ`.
    freq: Vec<u8>,
    /// Keys evicted from S, at most `ghost_cap` of them.
    ghost: GhostLists<1>,
    /// Target size of S: 10% of the capacity, at least 1.
    small_cap: usize,
    /// Ghost bound: M's share of the capacity (≤ the number of slots, the pool size).
    ghost_cap: usize,
    /// Counter a small-queue block needs to move to M, `1..=MAX_FREQ`.
    move_to_main: u8,
}

impl S3Fifo {
    /// Default move-to-main threshold: a small-queue block moves to M when its counter is at
    /// least this (1: accessed at all). libCacheSim's `S3FIFO` defaults to 2
    /// (`move-to-main-threshold=2`, the paper's `t.freq > 1`); with 2 this policy reproduces
    /// libCacheSim's miss ratios exactly (see `tests/libcachesim_crosscheck.rs`).
    pub const DEFAULT_MOVE_TO_MAIN: u8 = 2;

    pub fn new(slots: usize) -> Self {
        Self::with_move_to_main(slots, Self::DEFAULT_MOVE_TO_MAIN)
    }
    /// S3-FIFO whose small-queue blocks move to M once accessed `threshold` times (clamped to
    /// `1..=3`).
    pub fn with_move_to_main(slots: usize, threshold: u8) -> Self {
        let mut s = Self {
            queues: SlotLists::new(slots),
            freq: vec![0; slots],
            ghost: GhostLists::new(slots),
            small_cap: 0,
            ghost_cap: 0,
            move_to_main: threshold.clamp(1, MAX_FREQ),
        };
        s.set_capacity(slots);
        s
    }
    /// Blocks in the small queue S.
    pub fn small_len(&self) -> usize {
        self.queues.len(SMALL)
    }
    /// Blocks in the main queue M.
    pub fn main_len(&self) -> usize {
        self.queues.len(MAIN)
    }
    /// Keys in the ghost queue G.
    pub fn ghost_len(&self) -> usize {
        self.ghost.len(0)
    }
    /// Whether `slot` sits in the main queue.
    pub fn in_main(&self, slot: SlotId) -> bool {
        self.queues.list_of(slot.0) == Some(MAIN)
    }

    /// Walks S from its tail: accessed blocks move to M, the first unaccessed one is returned.
    /// Each move empties S by one block that an `insert` added, so this is O(1) amortised.
    fn victim_small(&mut self) -> Option<u32> {
        while let Some(t) = self.queues.tail(SMALL) {
            if self.freq[t as usize] >= self.move_to_main {
                self.freq[t as usize] = 0;
                self.queues.move_to_head(MAIN, t);
            } else {
                return Some(t);
            }
        }
        None
    }

    /// CLOCK over M: a tail with counter > 0 is reinserted with counter - 1. Each step undoes one
    /// counter increment made by a `touch`, so this is O(1) amortised.
    fn victim_main(&mut self) -> Option<u32> {
        while let Some(t) = self.queues.tail(MAIN) {
            let f = &mut self.freq[t as usize];
            if *f > 0 {
                *f -= 1;
                self.queues.move_to_head(MAIN, t);
            } else {
                return Some(t);
            }
        }
        None
    }
}

impl EvictionPolicy for S3Fifo {
    fn kind(&self) -> PolicyKind {
        PolicyKind::S3Fifo
    }
    fn len(&self) -> usize {
        self.queues.len(SMALL) + self.queues.len(MAIN)
    }
    fn set_capacity(&mut self, blocks: usize) {
        let blocks = blocks.min(self.freq.len());
        self.small_cap = (blocks / 10).max(1);
        self.ghost_cap = blocks.saturating_sub(self.small_cap);
        while self.ghost.len(0) > self.ghost_cap && self.ghost.pop_tail(0) {}
    }
    fn insert(&mut self, slot: SlotId, key: BlockKey) {
        self.freq[slot.index()] = 0;
        let queue = if self.ghost.remove(key).is_some() {
            MAIN
        } else {
            SMALL
        };
        self.queues.push_head(queue, slot.0);
    }
    #[inline]
    fn touch(&mut self, slot: SlotId) {
        let f = &mut self.freq[slot.index()];
        *f = (*f + 1).min(MAX_FREQ);
    }
    fn victim(&mut self, _incoming: Option<BlockKey>) -> Option<SlotId> {
        let from_small = self.queues.len(SMALL) >= self.small_cap || self.queues.is_empty(MAIN);
        let chosen = if from_small {
            self.victim_small().or_else(|| self.victim_main())
        } else {
            self.victim_main().or_else(|| self.victim_small())
        };
        chosen.map(SlotId)
    }
    fn remove(&mut self, slot: SlotId, key: BlockKey, evicted: bool) {
        let from_small = self.queues.list_of(slot.0) == Some(SMALL);
        self.queues.unlink(slot.0);
        self.freq[slot.index()] = 0;
        if evicted && from_small && self.ghost_cap > 0 {
            // G is a FIFO bounded by `ghost_cap`.
            if self.ghost.len(0) >= self.ghost_cap {
                self.ghost.pop_tail(0);
            }
            self.ghost.push(0, key);
        }
    }
}

/// `N` LRU/FIFO lists of evicted keys over a fixed pool of `nodes` nodes, with a key → node
/// index. Nothing allocates after construction: the index is an open-addressing table of node
/// numbers (linear probing, backward-shift deletion, so no tombstones and no rehash) with at
/// least twice as many buckets as nodes, so it is never more than half full.
#[derive(Debug)]
pub(crate) struct GhostLists<const N: usize> {
    order: SlotLists<N>,
    /// Key of each node in use.
    keys: Vec<BlockKey>,
    /// Unused node numbers (a stack of at most `nodes`).
    free: Vec<u32>,
    /// Buckets holding a node number or `NIL`; the length is a power of two.
    table: Vec<u32>,
    /// `64 - log2(table.len())`: the bucket of a key is the top bits of its mixed hash.
    shift: u32,
}

impl<const N: usize> GhostLists<N> {
    pub(crate) fn new(nodes: usize) -> Self {
        let buckets = (2 * nodes).max(2).next_power_of_two();
        Self {
            order: SlotLists::new(nodes),
            keys: vec![BlockKey::new(0, 0); nodes],
            free: (0..nodes as u32).rev().collect(),
            table: vec![NIL; buckets],
            shift: 64 - buckets.trailing_zeros(),
        }
    }
    #[inline]
    pub(crate) fn len(&self, list: usize) -> usize {
        self.order.len(list)
    }
    /// Keys remembered over all lists.
    #[inline]
    pub(crate) fn total(&self) -> usize {
        self.keys.len() - self.free.len()
    }
    /// Which list remembers `key`, if any.
    #[inline]
    pub(crate) fn list_of(&self, key: BlockKey) -> Option<usize> {
        let pos = self.find(key)?;
        self.order.list_of(self.table[pos])
    }
    /// Forget `key`; returns the list it was on.
    pub(crate) fn remove(&mut self, key: BlockKey) -> Option<usize> {
        let pos = self.find(key)?;
        let node = self.table[pos];
        let list = self.order.list_of(node);
        self.unindex(pos);
        self.order.unlink(node);
        self.free.push(node);
        list
    }
    /// Forget the oldest key of `list`; false when it is empty.
    pub(crate) fn pop_tail(&mut self, list: usize) -> bool {
        let Some(node) = self.order.tail(list) else {
            return false;
        };
        self.remove(self.keys[node as usize]);
        true
    }
    /// Remember `key` as the newest entry of `list`. With the pool exhausted the oldest key of
    /// the fullest list is forgotten first; a zero-node pool remembers nothing.
    pub(crate) fn push(&mut self, list: usize, key: BlockKey) {
        self.remove(key);
        if self.free.is_empty() {
            let fullest = (0..N).max_by_key(|&l| self.order.len(l)).unwrap_or(0);
            self.pop_tail(fullest);
        }
        let Some(node) = self.free.pop() else {
            return;
        };
        self.keys[node as usize] = key;
        self.order.push_head(list, node);
        let mut pos = self.home(key);
        while self.table[pos] != NIL {
            pos = (pos + 1) & self.mask();
        }
        self.table[pos] = node;
    }

    #[inline]
    fn mask(&self) -> usize {
        self.table.len() - 1
    }
    #[inline]
    fn home(&self, key: BlockKey) -> usize {
        let h = rustc_hash::FxBuildHasher.hash_one(key);
        (h.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize
    }
    /// The bucket holding `key`'s node. Terminates: the table always has an empty bucket.
    fn find(&self, key: BlockKey) -> Option<usize> {
        let mut pos = self.home(key);
        loop {
            let node = self.table[pos];
            if node == NIL {
                return None;
            }
            if self.keys[node as usize] == key {
                return Some(pos);
            }
            pos = (pos + 1) & self.mask();
        }
    }
    /// Empty bucket `pos`, shifting later members of its probe run back so lookups still find
    /// them (an entry may fill the hole when the hole lies between its home and its bucket).
    fn unindex(&mut self, pos: usize) {
        let mask = self.mask();
        let mut hole = pos;
        let mut j = (pos + 1) & mask;
        while self.table[j] != NIL {
            let home = self.home(self.keys[self.table[j] as usize]);
            if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(hole) & mask) {
                self.table[hole] = self.table[j];
                hole = j;
            }
            j = (j + 1) & mask;
        }
        self.table[hole] = NIL;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn ghost_index_matches_a_map_under_churn() {
        for nodes in [1, 3, 37] {
            let mut g = GhostLists::<2>::new(nodes);
            let mut model: HashMap<BlockKey, usize> = HashMap::new();
            let mut x = 0x2545_F491_4F6C_DD1Du64;
            for _ in 0..100_000 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let key = BlockKey::new(x % 3, (x >> 8) % (4 * nodes as u64));
                let list = ((x >> 20) % 2) as usize;
                if (x >> 30) % 3 == 1 {
                    assert_eq!(g.remove(key), model.remove(&key));
                } else if g.total() < nodes || model.contains_key(&key) {
                    g.push(list, key);
                    model.insert(key, list);
                }
                assert_eq!(g.total(), model.len());
                assert_eq!(g.list_of(key), model.get(&key).copied());
            }
            for (k, l) in &model {
                assert_eq!(g.list_of(*k), Some(*l));
            }
        }
    }

    #[test]
    fn ghost_lists_are_lru() {
        let mut g = GhostLists::<1>::new(2);
        let k = |b| BlockKey::new(1, b);
        g.push(0, k(1));
        g.push(0, k(2));
        g.push(0, k(3)); // pool full: forgets k(1)
        assert_eq!(g.list_of(k(1)), None);
        assert_eq!(g.list_of(k(2)), Some(0));
        assert!(g.pop_tail(0));
        assert_eq!(g.list_of(k(2)), None);
        assert_eq!(g.remove(k(3)), Some(0));
        assert_eq!(g.total(), 0);
        let mut empty = GhostLists::<1>::new(0);
        empty.push(0, k(1));
        assert_eq!(empty.total(), 0);
    }
}
