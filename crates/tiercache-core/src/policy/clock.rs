//! CLOCK (second chance; Corbató, "A paging experiment with the Multics system", 1968): one
//! reference bit per block and a hand sweeping the blocks in insertion order. A block under the
//! hand with its bit set loses the bit and is passed over; the first block with bit 0 is the
//! victim. New blocks start with bit 0, as in libCacheSim's `Clock` (1-bit counter).
//!
//! The circle is kept as one intrusive list: the tail is the block under the hand, and passing a
//! block over moves it to the head, i.e. just behind the hand, which is also where new blocks
//! enter the circle. This is exactly "FIFO with reinsertion", the form libCacheSim implements.

use super::list::SlotLists;
use super::{EvictionPolicy, PolicyKind};
use crate::ids::{BlockKey, SlotId};

/// CLOCK over one intrusive list; `referenced[s]` is slot s's reference bit.
#[derive(Debug)]
pub struct Clock {
    /// Tail = under the hand; head = just behind it.
    list: SlotLists<1>,
    referenced: Vec<bool>,
}

impl Clock {
    pub fn new(slots: usize) -> Self {
        Self {
            list: SlotLists::new(slots),
            referenced: vec![false; slots],
        }
    }
}

impl EvictionPolicy for Clock {
    fn kind(&self) -> PolicyKind {
        PolicyKind::Clock
    }
    fn len(&self) -> usize {
        self.list.len(0)
    }
    fn set_capacity(&mut self, _blocks: usize) {}
    #[inline]
    fn insert(&mut self, slot: SlotId, _key: BlockKey) {
        self.referenced[slot.index()] = false;
        self.list.push_head(0, slot.0);
    }
    #[inline]
    fn touch(&mut self, slot: SlotId) {
        self.referenced[slot.index()] = true;
    }
    /// Advances the hand past referenced blocks (clearing their bits) and stops on the first
    /// unreferenced one, which stays under the hand. Each step clears a bit that a `touch` set,
    /// so the sweep is O(1) amortised and ends within one revolution.
    fn victim(&mut self, _incoming: Option<BlockKey>) -> Option<SlotId> {
        loop {
            let t = self.list.tail(0)?;
            if !self.referenced[t as usize] {
                return Some(SlotId(t));
            }
            self.referenced[t as usize] = false;
            self.list.move_to_head(0, t);
        }
    }
    #[inline]
    fn remove(&mut self, slot: SlotId, _key: BlockKey, _evicted: bool) {
        self.referenced[slot.index()] = false;
        self.list.unlink(slot.0);
    }
}
