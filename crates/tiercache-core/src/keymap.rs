//! A tier's key map: open addressing with linear probing over a power-of-two bucket array kept
//! at most half full, backward-shift deletion (no tombstones), sized once for the tier's
//! capacity so it never reallocates.
//!
//! Why not `HashMap`: a probe here touches one 24-byte bucket (key and value inline, no separate
//! control bytes), and [`KeyMap::prefetch`] lets a replay loop start the memory load of a lookup
//! several requests ahead — metadata replay is bound by memory latency, not instructions.
//!
//! Invariants: `len ≤ buckets / 2`; every stored key sits in the run of occupied buckets that
//! starts at its home bucket (no empty bucket between home and it); an empty bucket has
//! `val.slot == EMPTY`.

use crate::class::PoolId;
use crate::ids::{BlockKey, SlotId};

/// Where a resident block is: its slot and pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub slot: SlotId,
    pub pool: PoolId,
}

const EMPTY: u32 = u32::MAX;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    key: BlockKey,
    val: Entry,
}

const VACANT: Bucket = Bucket {
    key: BlockKey::new(0, 0),
    val: Entry {
        slot: SlotId(EMPTY),
        pool: PoolId::Normal,
    },
};

/// Fixed-capacity map from block keys to entries.
#[derive(Debug, Clone)]
pub struct KeyMap {
    buckets: Vec<Bucket>,
    mask: usize,
    shift: u32,
    len: usize,
}

impl KeyMap {
    /// A map for up to `capacity` keys.
    pub fn with_capacity(capacity: usize) -> Self {
        let n = (capacity.max(8) * 2).next_power_of_two();
        Self {
            buckets: vec![VACANT; n],
            mask: n - 1,
            shift: 64 - n.trailing_zeros(),
            len: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Home bucket: a multiplicative (Fibonacci) hash of both halves of the key, top bits.
    #[inline]
    fn home(&self, key: &BlockKey) -> usize {
        let x = key.block.0
            ^ key
                .file
                .0
                .rotate_left(29)
                .wrapping_mul(0xbf58_476d_1ce4_e5b9);
        (x.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> self.shift) as usize
    }

    #[inline]
    fn find(&self, key: &BlockKey) -> Option<usize> {
        let mut i = self.home(key);
        loop {
            let b = &self.buckets[i];
            if b.val.slot.0 == EMPTY {
                return None;
            }
            if b.key == *key {
                return Some(i);
            }
            i = (i + 1) & self.mask;
        }
    }

    #[inline]
    pub fn get(&self, key: &BlockKey) -> Option<Entry> {
        self.find(key).map(|i| self.buckets[i].val)
    }

    #[inline]
    pub fn get_mut(&mut self, key: &BlockKey) -> Option<&mut Entry> {
        self.find(key).map(|i| &mut self.buckets[i].val)
    }

    pub fn contains_key(&self, key: &BlockKey) -> bool {
        self.find(key).is_some()
    }

    /// Inserts or replaces. The tier never holds more keys than its capacity, so the map stays
    /// at most half full; beyond that this still works, only slower.
    #[inline]
    pub fn insert(&mut self, key: BlockKey, val: Entry) {
        debug_assert_ne!(val.slot.0, EMPTY);
        let mut i = self.home(&key);
        loop {
            let b = &mut self.buckets[i];
            if b.val.slot.0 == EMPTY {
                *b = Bucket { key, val };
                self.len += 1;
                debug_assert!(self.len <= self.mask, "key map full");
                return;
            }
            if b.key == key {
                b.val = val;
                return;
            }
            i = (i + 1) & self.mask;
        }
    }

    /// Removes `key`, shifting later members of its run back so no probe sequence breaks.
    #[inline]
    pub fn remove(&mut self, key: &BlockKey) -> Option<Entry> {
        let mut hole = self.find(key)?;
        let removed = self.buckets[hole].val;
        let mut j = hole;
        loop {
            j = (j + 1) & self.mask;
            let b = self.buckets[j];
            if b.val.slot.0 == EMPTY {
                break;
            }
            let home = self.home(&b.key);
            // Move b into the hole unless its home lies cyclically in (hole, j].
            let stays = if hole <= j {
                hole < home && home <= j
            } else {
                hole < home || home <= j
            };
            if !stays {
                self.buckets[hole] = b;
                hole = j;
            }
        }
        self.buckets[hole] = VACANT;
        self.len -= 1;
        Some(removed)
    }

    /// Starts loading the bucket `key` would be found in (a hint; no effect on results).
    #[inline]
    pub fn prefetch(&self, key: &BlockKey) {
        let p = self.buckets.as_ptr().wrapping_add(self.home(key));
        prefetch_read(p.cast());
    }

    /// Every stored key and entry, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (BlockKey, Entry)> + '_ {
        self.buckets
            .iter()
            .filter(|b| b.val.slot.0 != EMPTY)
            .map(|b| (b.key, b.val))
    }
}

/// A read prefetch hint for the cache line at `p`.
#[inline]
pub fn prefetch_read(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 is a hint that never faults, whatever the address; SSE is part of the
    // x86_64 baseline.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn e(slot: u32) -> Entry {
        Entry {
            slot: SlotId(slot),
            pool: PoolId::Normal,
        }
    }

    #[test]
    fn agrees_with_hashmap_under_churn() {
        let mut m = KeyMap::with_capacity(500);
        let mut model = HashMap::new();
        let mut x: u64 = 1;
        for i in 0..200_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Few files and clustered blocks: long probe runs and wrap-around get exercised.
            let key = BlockKey::new(x % 3, (x >> 8) % 700);
            if model.len() < 500 && !x.is_multiple_of(3) {
                m.insert(key, e(i));
                model.insert(key, e(i));
            } else {
                assert_eq!(m.remove(&key), model.remove(&key));
            }
            assert_eq!(m.len(), model.len());
            if i.is_multiple_of(1000) {
                for (k, v) in &model {
                    assert_eq!(m.get(k), Some(*v));
                }
                assert_eq!(m.iter().count(), model.len());
            }
        }
    }
}
