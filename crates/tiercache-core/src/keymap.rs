//! A tier's key index: `BlockKey` → slot, open addressing with linear probing.
//!
//! Each bucket is 8 bytes: a 32-bit fingerprint of the key's hash and the slot number; the key
//! itself lives in the tier's slot array, so a probe compares fingerprints and reads a key only
//! on a fingerprint match. The table has at least twice as many buckets as the tier has slots
//! (load ≤ 0.5: a hit probes 1.5 buckets on average, a miss 2.5, nearly always within one
//! cache line), is sized once at construction and never grows. Deletion shifts the rest of the
//! cluster back (no tombstones), so probe lengths do not degrade under churn.
//!
//! Why not a `HashMap`: this layout needs one cache line per lookup instead of two (SwissTable
//! control bytes + bucket), removes an evicted block by slot number without reading its key
//! again, and lets the simulator prefetch the bucket of a request it will serve soon
//! ([`KeyMap::prefetch`]).

use crate::ids::BlockKey;

/// `slot` value of an empty bucket.
const EMPTY: u32 = u32::MAX;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    /// Low 32 bits of the key's hash; the home bucket is `fp & mask`.
    fp: u32,
    slot: u32,
}

const VACANT: Bucket = Bucket { fp: 0, slot: EMPTY };

/// The hash of a key, as the map uses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fp(u32);

#[derive(Debug, Clone)]
pub(crate) struct KeyMap {
    buckets: Box<[Bucket]>,
    mask: usize,
    len: usize,
}

impl KeyMap {
    /// A map for up to `capacity` keys.
    pub(crate) fn new(capacity: usize) -> Self {
        let n = capacity.saturating_mul(2).next_power_of_two().max(16);
        Self {
            buckets: vec![VACANT; n].into_boxed_slice(),
            mask: n - 1,
            len: 0,
        }
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// One multiply (Fibonacci hashing) over both words of the key, folded so that the low 32
    /// bits depend on every input bit: the product's high half mixes all of the low input bits,
    /// and its low half keeps strided keys (multiples of a power of two) apart from each other.
    #[inline]
    pub(crate) fn fp(key: &BlockKey) -> Fp {
        let x = key.block.0
            ^ key
                .file
                .0
                .rotate_left(32)
                .wrapping_mul(0xC4CE_B9FE_1A85_EC53);
        let h = (x as u128).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        Fp(((h >> 64) as u64 ^ h as u64) as u32 ^ ((h >> 32) as u32))
    }

    #[inline]
    fn home(&self, fp: u32) -> usize {
        fp as usize & self.mask
    }

    /// The slot holding `key`; `key_of(slot)` gives the key a slot holds.
    #[inline]
    pub(crate) fn find(
        &self,
        key: &BlockKey,
        fp: Fp,
        key_of: impl Fn(u32) -> BlockKey,
    ) -> Option<u32> {
        let mut i = self.home(fp.0);
        loop {
            let b = self.buckets[i];
            if b.slot == EMPTY {
                return None;
            }
            if b.fp == fp.0 && key_of(b.slot) == *key {
                return Some(b.slot);
            }
            i = (i + 1) & self.mask;
        }
    }

    /// The slot of the first entry whose fingerprint is `fp`, without reading its key: the
    /// likely (not certain) slot of the key, for prefetching.
    #[inline]
    pub(crate) fn candidate(&self, fp: Fp) -> Option<u32> {
        let mut i = self.home(fp.0);
        loop {
            let b = self.buckets[i];
            if b.slot == EMPTY {
                return None;
            }
            if b.fp == fp.0 {
                return Some(b.slot);
            }
            i = (i + 1) & self.mask;
        }
    }

    /// Adds a key known to be absent.
    #[inline]
    pub(crate) fn insert(&mut self, fp: Fp, slot: u32) {
        debug_assert!(self.len < self.buckets.len() / 2 + 1);
        let mut i = self.home(fp.0);
        while self.buckets[i].slot != EMPTY {
            i = (i + 1) & self.mask;
        }
        self.buckets[i] = Bucket { fp: fp.0, slot };
        self.len += 1;
    }

    /// Removes the entry of `slot`, whose key hashes to `fp`; false if there is none. Always
    /// inlined: it is on every eviction's path, and left to itself the compiler stopped
    /// inlining it once the eviction path grew (5 % of an LRU replay as a call).
    #[inline(always)]
    pub(crate) fn remove(&mut self, fp: Fp, slot: u32) -> bool {
        let mut i = self.home(fp.0);
        loop {
            let b = self.buckets[i];
            if b.slot == EMPTY {
                return false;
            }
            if b.slot == slot {
                break;
            }
            i = (i + 1) & self.mask;
        }
        self.len -= 1;
        // Backward shift: pull later members of the cluster into the hole when their home
        // allows it, so every entry stays reachable from its home without tombstones.
        let mut j = i;
        loop {
            self.buckets[i] = VACANT;
            loop {
                j = (j + 1) & self.mask;
                let b = self.buckets[j];
                if b.slot == EMPTY {
                    return true;
                }
                let k = self.home(b.fp);
                // Stays if its home lies cyclically in (i, j].
                let stays = if i <= j {
                    i < k && k <= j
                } else {
                    i < k || k <= j
                };
                if !stays {
                    self.buckets[i] = b;
                    i = j;
                    break;
                }
            }
        }
    }

    /// Whether `slot` has an entry under `fp`.
    #[cfg(test)]
    fn contains_slot(&self, fp: Fp, slot: u32) -> bool {
        let mut i = self.home(fp.0);
        loop {
            let b = self.buckets[i];
            if b.slot == EMPTY {
                return false;
            }
            if b.slot == slot {
                return true;
            }
            i = (i + 1) & self.mask;
        }
    }

    /// Asks the CPU to fetch the bucket `key` would be found in (a hint only: no effect on the
    /// map's contents, and a no-op off x86-64).
    #[inline]
    pub(crate) fn prefetch(&self, fp: Fp) {
        let b: *const Bucket = &self.buckets[self.home(fp.0)];
        prefetch_ptr(b.cast());
    }
}

/// Hints the CPU to bring the cache line at `p` in; never faults, whatever `p` is.
#[inline(always)]
pub(crate) fn prefetch_ptr(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 is a hint: it has no architectural effect and never faults, for any
    // address; SSE is part of the x86-64 baseline.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Random inserts and removes against a `HashMap`, in a table small enough that clusters
    /// wrap around its end.
    #[test]
    fn agrees_with_hashmap_under_churn() {
        for cap in [1, 8, 40] {
            churn(cap);
        }
    }

    /// Sequential, strided and multi-file keys all spread: short probe runs at full load.
    #[test]
    fn probe_runs_stay_short_for_regular_keys() {
        let n = 50_000u64;
        type KeyOf = fn(u64) -> BlockKey;
        let sets: [(&str, KeyOf); 4] = [
            ("sequential", |i| BlockKey::new(0, i)),
            ("stride 4096", |i| BlockKey::new(0, i << 12)),
            ("stride 2^32", |i| BlockKey::new(0, i << 32)),
            ("files", |i| BlockKey::new(i, 7)),
        ];
        for (name, key) in sets {
            let mut m = KeyMap::new(n as usize);
            let mut total = 0usize;
            for i in 0..n {
                let fp = KeyMap::fp(&key(i));
                let mut pos = m.home(fp.0);
                while m.buckets[pos].slot != EMPTY {
                    pos = (pos + 1) & m.mask;
                    total += 1;
                }
                m.insert(fp, i as u32);
            }
            let mean = total as f64 / n as f64;
            assert!(mean < 1.5, "{name}: {mean:.2} extra probes per insert");
        }
    }

    fn churn(cap: usize) {
        let mut m = KeyMap::new(cap);
        let mut keys: Vec<BlockKey> = vec![BlockKey::new(0, 0); cap];
        let mut model: HashMap<BlockKey, u32> = HashMap::new();
        let mut free: Vec<u32> = (0..cap as u32).collect();
        let mut x: u64 = 1;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let key = BlockKey::new(x % 3, (x >> 8) % 97);
            let fp = KeyMap::fp(&key);
            let found = m.find(&key, fp, |s| keys[s as usize]);
            assert_eq!(found, model.get(&key).copied());
            match found {
                Some(slot) => {
                    assert!(m.remove(fp, slot));
                    model.remove(&key);
                    free.push(slot);
                }
                None => {
                    if let Some(slot) = free.pop() {
                        keys[slot as usize] = key;
                        m.insert(fp, slot);
                        model.insert(key, slot);
                    }
                }
            }
            assert_eq!(m.len(), model.len());
        }
        for (k, &s) in &model {
            assert!(m.contains_slot(KeyMap::fp(k), s));
        }
    }
}
