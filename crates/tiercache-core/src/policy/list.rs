//! An intrusive doubly linked list over slot numbers, backed by two preallocated arrays.
//!
//! Every queue-based policy (LRU, FIFO, SIEVE, S3-FIFO, ARC) keeps its order here, so an access is
//! O(1) with no allocation. A slot is in at most one list of a given `SlotList` arena; `NIL` marks
//! "no neighbour" and "not linked".

/// Sentinel for "no slot".
pub const NIL: u32 = u32::MAX;

/// Links of one slot, kept together so one access touches one cache line.
#[derive(Debug, Clone, Copy)]
struct Node {
    prev: u32,
    next: u32,
    /// Which list the slot is on, or `u8::MAX` when unlinked.
    member: u8,
}

const UNLINKED: Node = Node {
    prev: NIL,
    next: NIL,
    member: u8::MAX,
};

/// Several lists sharing one node arena (a slot belongs to at most one of them).
#[derive(Debug, Clone)]
pub struct SlotLists<const N: usize> {
    nodes: Vec<Node>,
    head: [u32; N],
    tail: [u32; N],
    len: [usize; N],
}

impl<const N: usize> SlotLists<N> {
    /// Lists able to hold slots `0..capacity`.
    pub fn new(capacity: usize) -> Self {
        Self {
            nodes: vec![UNLINKED; capacity],
            head: [NIL; N],
            tail: [NIL; N],
            len: [0; N],
        }
    }

    #[inline]
    pub fn len(&self, list: usize) -> usize {
        self.len[list]
    }
    #[inline]
    pub fn is_empty(&self, list: usize) -> bool {
        self.len[list] == 0
    }
    /// Which list `slot` is on, if any.
    #[inline]
    pub fn list_of(&self, slot: u32) -> Option<usize> {
        let m = self.nodes[slot as usize].member;
        (m != u8::MAX).then_some(m as usize)
    }
    /// Most recently pushed end.
    #[inline]
    pub fn head(&self, list: usize) -> Option<u32> {
        let h = self.head[list];
        (h != NIL).then_some(h)
    }
    /// Oldest end.
    #[inline]
    pub fn tail(&self, list: usize) -> Option<u32> {
        let t = self.tail[list];
        (t != NIL).then_some(t)
    }
    /// The neighbour towards the head (newer), if any.
    #[inline]
    pub fn newer(&self, slot: u32) -> Option<u32> {
        let p = self.nodes[slot as usize].prev;
        (p != NIL).then_some(p)
    }

    /// Hint: start fetching `slot`'s links.
    #[inline]
    pub fn prefetch(&self, slot: u32) {
        if let Some(n) = self.nodes.get(slot as usize) {
            crate::keymap::prefetch_ptr((n as *const Node).cast());
        }
    }

    /// The three oldest slots of `list`, oldest first.
    #[inline]
    pub fn tail_hints(&self, list: usize) -> [Option<u32>; 3] {
        let a = self.tail(list);
        let b = a.and_then(|s| self.newer(s));
        let c = b.and_then(|s| self.newer(s));
        [a, b, c]
    }

    /// Link `slot` at the head of `list`. The slot must be unlinked.
    #[inline]
    pub fn push_head(&mut self, list: usize, slot: u32) {
        debug_assert_eq!(
            self.nodes[slot as usize].member,
            u8::MAX,
            "slot already linked"
        );
        let old = self.head[list];
        self.nodes[slot as usize] = Node {
            prev: NIL,
            next: old,
            member: list as u8,
        };
        if old != NIL {
            self.nodes[old as usize].prev = slot;
        } else {
            self.tail[list] = slot;
        }
        self.head[list] = slot;
        self.len[list] += 1;
    }

    /// Unlink `slot` from whatever list holds it; no-op when unlinked.
    #[inline]
    pub fn unlink(&mut self, slot: u32) {
        let node = self.nodes[slot as usize];
        if node.member == u8::MAX {
            return;
        }
        let list = node.member as usize;
        let (p, n) = (node.prev, node.next);
        if p != NIL {
            self.nodes[p as usize].next = n;
        } else {
            self.head[list] = n;
        }
        if n != NIL {
            self.nodes[n as usize].prev = p;
        } else {
            self.tail[list] = p;
        }
        self.nodes[slot as usize] = UNLINKED;
        self.len[list] -= 1;
    }

    /// Move `slot` to the head of `list` (from any list, or from nowhere).
    #[inline]
    pub fn move_to_head(&mut self, list: usize, slot: u32) {
        if self.head[list] == slot {
            return;
        }
        self.unlink(slot);
        self.push_head(list, slot);
    }

    /// Unlink and return the tail of `list`.
    #[inline]
    pub fn pop_tail(&mut self, list: usize) -> Option<u32> {
        let t = self.tail(list)?;
        self.unlink(t);
        Some(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_pop_order_and_lengths() {
        let mut l = SlotLists::<2>::new(8);
        for s in 0..4 {
            l.push_head(0, s);
        }
        l.push_head(1, 7);
        assert_eq!(l.len(0), 4);
        assert_eq!(l.tail(0), Some(0));
        l.move_to_head(0, 0);
        assert_eq!(l.tail(0), Some(1));
        l.move_to_head(1, 2); // moves across lists
        assert_eq!((l.len(0), l.len(1)), (3, 2));
        assert_eq!(l.list_of(2), Some(1));
        assert_eq!(l.pop_tail(0), Some(1));
        assert_eq!(l.pop_tail(0), Some(3));
        assert_eq!(l.pop_tail(0), Some(0));
        assert_eq!(l.pop_tail(0), None);
        assert_eq!(l.pop_tail(1), Some(7));
        assert_eq!(l.pop_tail(1), Some(2));
        assert!(l.is_empty(1));
    }
}
