//! ARC (Megiddo & Modha, "ARC: A Self-Tuning, Low Overhead Replacement Cache", FAST'03).
//!
//! Resident blocks live in T1 (seen once recently) and T2 (seen at least twice); the keys of
//! blocks evicted from them are remembered in the ghost lists B1 and B2. A miss that hits B1 grows
//! the target size `p` of T1, a miss that hits B2 shrinks it, and REPLACE evicts from T1 while
//! `|T1| > p`. Invariants, with `c` the capacity: `|T1| + |B1| <= c` and
//! `|T1| + |T2| + |B1| + |B2| <= 2c` (the paper's case IV, enforced whenever a ghost is added).
//!
//! The trait splits the paper's miss handling in two: `victim(Some(x))` runs REPLACE (and, when
//! `x` is a ghost, the `p` adaptation of cases II/III); `insert(.., x)` places the block. When the
//! pool has free space `victim` is not called, so `insert` adapts `p` itself.

use super::list::SlotLists;
use super::s3fifo::GhostLists;
use super::{EvictionPolicy, PolicyKind};
use crate::ids::{BlockKey, SlotId};

const T1: usize = 0;
const T2: usize = 1;
const B1: usize = 0;
const B2: usize = 1;

/// ARC over two resident lists (T1, T2) and two ghost lists (B1, B2); heads are MRU.
#[derive(Debug)]
pub struct ArcPolicy {
    resident: SlotLists<2>,
    ghosts: GhostLists<2>,
    /// Capacity `c` in blocks.
    cap: usize,
    /// Target size of T1, `0..=cap`. Real-valued as in the paper (δ = |B2|/|B1| is a ratio, not
    /// an integer quotient); libCacheSim also uses a `double`.
    p: f64,
    /// The ghost-hit key whose `p` adaptation `victim` already did (so `insert` skips it).
    adapted: Option<BlockKey>,
    /// A victim chosen by case IV(A) with `|T1| = c`: the paper drops it without a ghost.
    no_ghost: Option<u32>,
}

impl ArcPolicy {
    pub fn new(slots: usize) -> Self {
        Self {
            resident: SlotLists::new(slots),
            // |B1| + |B2| <= 2c <= 2 * slots.
            ghosts: GhostLists::new(2 * slots),
            cap: slots,
            p: 0.0,
            adapted: None,
            no_ghost: None,
        }
    }
    /// The adaptive target size of T1.
    pub fn target_t1(&self) -> f64 {
        self.p
    }
    /// `(|T1|, |T2|, |B1|, |B2|)`.
    pub fn list_lens(&self) -> (usize, usize, usize, usize) {
        (
            self.resident.len(T1),
            self.resident.len(T2),
            self.ghosts.len(B1),
            self.ghosts.len(B2),
        )
    }

    /// Cases II/III: a miss on a key remembered in `ghost` moves `p` (sizes taken before the
    /// key leaves its ghost list).
    fn adapt(&mut self, ghost: usize) {
        let b1 = self.ghosts.len(B1).max(1) as f64;
        let b2 = self.ghosts.len(B2).max(1) as f64;
        if ghost == B1 {
            self.p = (self.p + (b2 / b1).max(1.0)).min(self.cap as f64);
        } else {
            self.p = (self.p - (b1 / b2).max(1.0)).max(0.0);
        }
    }

    /// The paper's REPLACE(x, p): T1's LRU if T1 is over its target (or at it and x is in B2),
    /// else T2's LRU. Falls back to the other list when the chosen one is empty.
    fn replace(&self, incoming_in_b2: bool) -> Option<u32> {
        let t1 = self.resident.len(T1);
        let t1f = t1 as f64;
        let from_t1 = t1 > 0 && (t1f > self.p || (t1f == self.p && incoming_in_b2));
        if from_t1 {
            self.resident.tail(T1)
        } else {
            self.resident.tail(T2).or_else(|| self.resident.tail(T1))
        }
    }

    /// Case IV bounds: `|T1| + |B1| <= c` and `|T1| + |T2| + |B1| + |B2| <= 2c`, by dropping the
    /// LRU ghosts (B1 for the first, B2 before B1 for the second).
    fn trim_ghosts(&mut self) {
        while self.resident.len(T1) + self.ghosts.len(B1) > self.cap && self.ghosts.pop_tail(B1) {}
        while self.resident.len(T1) + self.resident.len(T2) + self.ghosts.total() > 2 * self.cap
            && (self.ghosts.pop_tail(B2) || self.ghosts.pop_tail(B1))
        {}
    }
}

impl EvictionPolicy for ArcPolicy {
    fn kind(&self) -> PolicyKind {
        PolicyKind::Arc
    }
    fn len(&self) -> usize {
        self.resident.len(T1) + self.resident.len(T2)
    }
    fn set_capacity(&mut self, blocks: usize) {
        self.cap = blocks;
        self.p = self.p.min(blocks as f64);
        self.trim_ghosts();
    }
    fn insert(&mut self, slot: SlotId, key: BlockKey) {
        let adapted = self.adapted.take() == Some(key);
        match self.ghosts.list_of(key) {
            Some(ghost) => {
                // Cases II/III: a ghost hit goes to T2's MRU end.
                if !adapted {
                    self.adapt(ghost);
                }
                self.ghosts.remove(key);
                self.resident.push_head(T2, slot.0);
            }
            None => {
                // Case IV: a new key goes to T1's MRU end.
                self.resident.push_head(T1, slot.0);
                self.trim_ghosts();
            }
        }
    }
    #[inline]
    fn touch(&mut self, slot: SlotId) {
        // Case I: a hit in T1 or T2 moves the block to T2's MRU end.
        self.resident.move_to_head(T2, slot.0);
    }
    fn victim(&mut self, incoming: Option<BlockKey>) -> Option<SlotId> {
        if self.len() == 0 {
            return None;
        }
        self.no_ghost = None;
        let ghost_hit = incoming.and_then(|k| self.ghosts.list_of(k).map(|g| (k, g)));
        let chosen = match ghost_hit {
            Some((key, ghost)) => {
                // Cases II/III: adapt once per incoming key, then REPLACE.
                if self.adapted != Some(key) {
                    self.adapt(ghost);
                    self.adapted = Some(key);
                }
                self.replace(ghost == B2)
            }
            None => {
                self.adapted = None;
                let t1 = self.resident.len(T1);
                if t1 + self.ghosts.len(B1) >= self.cap {
                    // Case IV(A): L1 is full.
                    if t1 < self.cap || t1 == 0 {
                        self.ghosts.pop_tail(B1);
                        self.replace(false)
                    } else {
                        // B1 is empty: T1's LRU leaves without a ghost.
                        self.no_ghost = self.resident.tail(T1);
                        self.no_ghost
                    }
                } else {
                    // Case IV(B): drop B2's LRU when the directory is full.
                    if self.len() + self.ghosts.total() >= 2 * self.cap {
                        self.ghosts.pop_tail(B2);
                    }
                    self.replace(false)
                }
            }
        };
        chosen.map(SlotId)
    }
    fn remove(&mut self, slot: SlotId, key: BlockKey, evicted: bool) {
        let list = self.resident.list_of(slot.0);
        self.resident.unlink(slot.0);
        let skip_ghost = self.no_ghost == Some(slot.0);
        if skip_ghost {
            self.no_ghost = None;
        }
        if evicted && !skip_ghost {
            // Evicted from T1 → B1, from T2 → B2 (MRU end).
            let ghost = if list == Some(T2) { B2 } else { B1 };
            self.ghosts.push(ghost, key);
            self.trim_ghosts();
        }
    }
}
