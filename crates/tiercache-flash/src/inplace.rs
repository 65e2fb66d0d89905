//! The records' in-place bits (format 3; `crate::sums` rule 3): which dirty blocks a set's
//! newest record lets a store overwrite in place, and which bits the set's next record
//! carries.
//!
//! Invariants (see the repository's `docs/design.md` §6, "Checksums"):
//! 1. **Durable only after a sync**: a set's bits count here (a store may overwrite those
//!    blocks in place) only once its record round succeeded, device sync included
//!    ([`InPlace::committed`]). After a failed round the device may show the older record or
//!    the new one, so only bits in both count ([`InPlace::failed`]); the set is then pending
//!    again (its next record rewrites what the device may hold).
//! 2. **What a record carries**: the bits of its parked blocks (`crate::park`: they go in
//!    place right after the round, or stay parked and keep needing it) and of the blocks that
//!    have a durable bit and were stored since the set's last record (rewritten between every
//!    sync: kept, so not parked again); everything within `dirty`. A record is only written
//!    right after a device sync, when every earlier write is durable, so dropping any other
//!    bit is safe.
//! 3. **No bit lingers**: a set whose record carried bits is pending again, so its next
//!    record (at the next sync) drops the bits of blocks not stored since — a bit left on the
//!    device would make a later crash take rot or a lost write in that block as an overwrite
//!    cut short. So every set whose newest record may carry bits is pending.
//! 4. **Bounded RAM**: at most `cap` sets keep their bits here between operations
//!    (`sets / 32`, at least 1; more only while they hold parked blocks). Forgetting a set's
//!    bits is always safe (3.: it is pending, and its next record carries only its parked
//!    bits): its next overwrite is parked again, which costs time, never correctness.

use crate::format::Geometry;
use std::collections::HashMap;

/// The durable in-place bits of the sets that have some; see the module docs.
#[derive(Debug)]
pub(crate) struct InPlace {
    words: usize,
    cap: usize,
    /// Per set: words `0..words` the bits durable in its newest record (invariant 1), words
    /// `words..2 * words` the blocks among them stored since that record.
    sets: HashMap<u32, Box<[u64]>>,
}

fn bit(v: &[u64], b: usize) -> bool {
    v[b / 64] >> (b % 64) & 1 == 1
}

impl InPlace {
    pub fn new(geo: &Geometry) -> Self {
        let cap = (geo.sets as usize / 32).max(1);
        Self {
            words: geo.bitmap_bytes() / 8,
            cap,
            sets: HashMap::with_capacity(cap + 1),
        }
    }

    /// Every byte held, by capacity (part of `ram_bytes_per_block`).
    pub fn ram_bytes(&self) -> usize {
        use std::mem::size_of;
        size_of::<Self>()
            + self.sets.capacity() * (size_of::<(u32, Box<[u64]>)>() + 1)
            + self.sets.len() * 2 * self.words * 8
    }

    /// Whether block `b` of `set` has its in-place bit durable (it may be overwritten in place).
    pub fn durable(&self, set: u32, b: usize) -> bool {
        self.sets.get(&set).is_some_and(|v| bit(v, b))
    }

    /// Block `b` of `set` was written to the device by a store.
    pub fn stored(&mut self, set: u32, b: usize) {
        let w = self.words;
        if let Some(v) = self.sets.get_mut(&set) {
            if bit(v, b) {
                v[w + b / 64] |= 1 << (b % 64);
            }
        }
    }

    /// The bits of `set`'s next record (invariant 2): its `parked` blocks, and the blocks with
    /// a durable bit stored since, within `dirty`.
    pub fn next(&self, set: u32, dirty: &[u64], parked: impl Iterator<Item = usize>) -> Vec<u64> {
        let w = self.words;
        let mut bits = match self.sets.get(&set) {
            Some(v) => (0..w).map(|i| v[i] & v[w + i]).collect(),
            None => vec![0; w],
        };
        for b in parked {
            bits[b / 64] |= 1 << (b % 64);
        }
        for (x, d) in bits.iter_mut().zip(dirty) {
            *x &= d;
        }
        bits
    }

    /// A record of `set` with `bits` is durable (its round's last sync succeeded). Returns
    /// whether it carries any bit: then the set must be pending again (invariant 3).
    pub fn committed(&mut self, set: u32, bits: &[u64]) -> bool {
        if bits.iter().all(|&x| x == 0) {
            self.sets.remove(&set);
            return false;
        }
        let w = self.words;
        let v = self
            .sets
            .entry(set)
            .or_insert_with(|| vec![0; 2 * w].into_boxed_slice());
        v[..w].copy_from_slice(bits);
        v[w..].fill(0);
        true
    }

    /// A record of `set` with `bits` was sent in a round that failed: the device may show it
    /// or the older one, so only bits in both stay durable (invariant 1; the caller makes the
    /// set pending again).
    pub fn failed(&mut self, set: u32, bits: &[u64]) {
        let Some(v) = self.sets.get_mut(&set) else {
            return;
        };
        for (x, n) in v.iter_mut().zip(bits) {
            *x &= n;
        }
        if v[..self.words].iter().all(|&x| x == 0) {
            self.sets.remove(&set);
        }
    }

    /// Forgets the bits of sets over the cap, except those `keep` names (sets with parked
    /// blocks); invariant 4.
    pub fn trim(&mut self, keep: impl Fn(u32) -> bool) {
        if self.sets.len() > self.cap {
            let mut over = self.sets.len() - self.cap;
            self.sets.retain(|&set, _| {
                if over == 0 || keep(set) {
                    return true;
                }
                over -= 1;
                false
            });
        }
        if self.sets.capacity() > 4 * (self.cap + 1) {
            // A round over many sets grew the map: give the memory back.
            self.sets.shrink_to(self.cap + 1);
        }
    }

    /// Forgets every set's bits (the close: nothing goes in place after its last round).
    pub fn forget_all(&mut self) {
        self.sets.clear();
        self.sets.shrink_to(self.cap + 1);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn geo(sets_mib: u64) -> Geometry {
        Geometry::compute(sets_mib * ((1 << 20) + 2048) + 8192, 512, 12, 8).unwrap()
    }

    #[test]
    fn bits_count_only_once_committed_and_a_failed_round_keeps_those_in_both_records() {
        let mut p = InPlace::new(&geo(16));
        let (a, b) = ([0b110u64, 0, 0, 0], [0b011u64, 0, 0, 0]);
        assert!(!p.durable(0, 1));
        assert!(p.committed(0, &a));
        assert!(p.durable(0, 1) && p.durable(0, 2));
        p.failed(0, &b);
        assert!(p.durable(0, 1), "in both records");
        assert!(
            !p.durable(0, 2),
            "the device may show the record without it"
        );
        assert!(!p.committed(0, &[0; 4]));
        assert!(!p.durable(0, 1));
    }

    #[test]
    fn a_record_carries_parked_bits_and_durable_bits_stored_since_within_dirty() {
        let mut p = InPlace::new(&geo(16));
        p.committed(3, &[0b1111, 0, 0, 0]);
        p.stored(3, 1);
        p.stored(3, 9); // no durable bit: not carried
        let dirty = [0b1011u64 | 1 << 9 | 1 << 20, 0, 0, 0];
        let n = p.next(3, &dirty, [20usize, 30].into_iter());
        assert_eq!(n[0], 0b10 | 1 << 20, "stored 1, parked 20; 30 is not dirty");
        assert_eq!(p.next(4, &dirty, std::iter::empty()), vec![0; 4]);
    }

    #[test]
    fn trim_keeps_at_most_cap_sets_or_those_asked_to_keep() {
        let mut p = InPlace::new(&geo(40)); // under 64 sets: cap 1
        assert_eq!(p.cap, 1);
        for s in 0..40 {
            p.committed(s, &[1, 0, 0, 0]);
        }
        let before = p.ram_bytes();
        p.trim(|s| s == 7 || s == 8);
        assert!(p.durable(7, 0) && p.durable(8, 0));
        assert_eq!(p.sets.len(), 2, "only those asked to keep");
        assert!(p.ram_bytes() < before, "memory given back");
        p.trim(|_| false);
        assert_eq!(p.sets.len(), 1);
    }
}
