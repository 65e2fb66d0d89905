//! Least recently used: the papers' baseline.

use super::list::SlotLists;
use super::{EvictionPolicy, PolicyKind};
use crate::ids::{BlockKey, SlotId};

/// LRU over one intrusive list: head = most recent, tail = victim.
#[derive(Debug)]
pub struct Lru {
    list: SlotLists<1>,
}

impl Lru {
    pub fn new(slots: usize) -> Self {
        Self {
            list: SlotLists::new(slots),
        }
    }

    /// The slots from the least recently used on, reordering nothing.
    pub fn coldest_first(&self) -> impl Iterator<Item = u32> + '_ {
        let mut cur = self.list.tail(0);
        std::iter::from_fn(move || {
            let s = cur?;
            cur = self.list.newer(s);
            Some(s)
        })
    }
}

impl EvictionPolicy for Lru {
    fn kind(&self) -> PolicyKind {
        PolicyKind::Lru
    }
    fn len(&self) -> usize {
        self.list.len(0)
    }
    fn set_capacity(&mut self, _blocks: usize) {}
    #[inline]
    fn insert(&mut self, slot: SlotId, _key: BlockKey) {
        self.list.push_head(0, slot.0);
    }
    #[inline]
    fn touch(&mut self, slot: SlotId) {
        self.list.move_to_head(0, slot.0);
    }
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
