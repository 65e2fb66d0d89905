//! SIEVE (Zhang et al., "SIEVE is Simpler than LRU", NSDI'24): a FIFO queue with one visited bit
//! per block and a hand that moves from the tail (oldest) towards the head (newest). Hits only set
//! the bit; new blocks enter at the head. The hand skips visited blocks, clearing their bits, and
//! evicts the first unvisited one; unlike CLOCK, survivors stay where they are. Matches
//! libCacheSim's `Sieve`.

use super::list::{SlotLists, NIL};
use super::{EvictionPolicy, PolicyKind};
use crate::ids::{BlockKey, SlotId};

/// SIEVE over one intrusive list: head = newest, tail = oldest.
#[derive(Debug)]
pub struct Sieve {
    list: SlotLists<1>,
    visited: Vec<bool>,
    /// The slot the hand points at, or `NIL` for "start again from the tail". Invariant: `NIL` or
    /// a linked slot (removing the hand's slot moves the hand to its newer neighbour first).
    hand: u32,
}

impl Sieve {
    pub fn new(slots: usize) -> Self {
        Self {
            list: SlotLists::new(slots),
            visited: vec![false; slots],
            hand: NIL,
        }
    }
}

impl EvictionPolicy for Sieve {
    fn kind(&self) -> PolicyKind {
        PolicyKind::Sieve
    }
    fn len(&self) -> usize {
        self.list.len(0)
    }
    fn set_capacity(&mut self, _blocks: usize) {}
    #[inline]
    fn insert(&mut self, slot: SlotId, _key: BlockKey) {
        self.visited[slot.index()] = false;
        self.list.push_head(0, slot.0);
    }
    #[inline]
    fn touch(&mut self, slot: SlotId) {
        self.visited[slot.index()] = true;
    }
    /// Moves the hand towards the head (wrapping to the tail) past visited blocks, clearing
    /// their bits; the hand stays on the returned block. Each step clears a bit a `touch` set, so
    /// this is O(1) amortised and ends within one revolution.
    fn victim(&mut self, _incoming: Option<BlockKey>) -> Option<SlotId> {
        let tail = self.list.tail(0)?;
        let mut h = if self.hand == NIL { tail } else { self.hand };
        while self.visited[h as usize] {
            self.visited[h as usize] = false;
            h = self.list.newer(h).unwrap_or(tail);
        }
        self.hand = h;
        Some(SlotId(h))
    }
    #[inline]
    fn remove(&mut self, slot: SlotId, _key: BlockKey, _evicted: bool) {
        if self.hand == slot.0 {
            self.hand = self.list.newer(slot.0).unwrap_or(NIL);
        }
        self.visited[slot.index()] = false;
        self.list.unlink(slot.0);
    }
}
