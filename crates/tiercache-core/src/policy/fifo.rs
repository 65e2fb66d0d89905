//! First in, first out: blocks leave in insertion order and hits change nothing. The baseline of
//! the FIFO-family papers (SIEVE, NSDI'24; S3-FIFO, SOSP'23).

use super::list::SlotLists;
use super::{EvictionPolicy, PolicyKind};
use crate::ids::{BlockKey, SlotId};

/// FIFO over one intrusive list: head = newest insertion, tail = victim.
#[derive(Debug)]
pub struct Fifo {
    list: SlotLists<1>,
}

impl Fifo {
    pub fn new(slots: usize) -> Self {
        Self {
            list: SlotLists::new(slots),
        }
    }
}

impl EvictionPolicy for Fifo {
    fn kind(&self) -> PolicyKind {
        PolicyKind::Fifo
    }
    fn len(&self) -> usize {
        self.list.len(0)
    }
    fn set_capacity(&mut self, _blocks: usize) {}
    #[inline]
    fn insert(&mut self, slot: SlotId, _key: BlockKey) {
        self.list.push_head(0, slot.0);
    }
    /// Hits do not reorder a FIFO.
    #[inline]
    fn touch(&mut self, _slot: SlotId) {}
    #[inline]
    fn victim(&mut self, _incoming: Option<BlockKey>) -> Option<SlotId> {
        self.list.tail(0).map(SlotId)
    }
    #[inline]
    fn remove(&mut self, slot: SlotId, _key: BlockKey, _evicted: bool) {
        self.list.unlink(slot.0);
    }
    #[inline]
    fn prefetch(&self, slot: SlotId) {
        self.list.prefetch(slot.0);
    }
    #[inline]
    fn victim_hints(&self) -> [Option<SlotId>; 3] {
        self.list.tail_hints(0).map(|s| s.map(SlotId))
    }
}
