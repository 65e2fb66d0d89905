//! The client-side index: which blocks are in the pool, at which version, under which store
//! sequence number and on which server. A block absent here is a miss without a round trip.
//!
//! Layout: `HashMap<FileKey, BTreeMap<block, Entry>>` so dropping a file's blocks from some
//! index on is a range walk; a FIFO of `(key, seq)` in store order picks eviction victims when
//! the index is full (a FIFO record whose entry is gone or was stored again is skipped).
//!
//! Invariants: `len` is the number of entries; every entry has a FIFO record with its `seq`;
//! `seq`s are unique for the tier's lifetime, so a `seq` names one store.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::mem::size_of;
use tiercache_tier::{FileKey, TierKey};

/// One block held remotely (or being stored).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub version: u64,
    /// The store that made it; also sealed inside the value.
    pub seq: u64,
    /// Index of the server in the pool.
    pub server: u8,
    /// The value is known to have landed: reads may go to the server.
    pub ready: bool,
}

/// The index; callers hold it behind one mutex.
#[derive(Debug)]
pub struct Index {
    files: HashMap<FileKey, BTreeMap<u64, Entry>>,
    fifo: VecDeque<(TierKey, u64)>,
    len: u64,
    capacity: u64,
}

impl Index {
    pub fn new(capacity: u64) -> Self {
        Self {
            files: HashMap::new(),
            fifo: VecDeque::new(),
            len: 0,
            capacity: capacity.max(1),
        }
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn get(&self, key: &TierKey) -> Option<Entry> {
        self.files.get(&key.file)?.get(&key.block.0).copied()
    }

    /// Removes the entry for `key` (any seq).
    pub fn remove(&mut self, key: &TierKey) -> Option<Entry> {
        let blocks = self.files.get_mut(&key.file)?;
        let e = blocks.remove(&key.block.0)?;
        if blocks.is_empty() {
            self.files.remove(&key.file);
        }
        self.len -= 1;
        Some(e)
    }

    /// Removes the entry for `key` only if it is the store `seq`.
    pub fn remove_if_seq(&mut self, key: &TierKey, seq: u64) -> Option<Entry> {
        match self.get(key) {
            Some(e) if e.seq == seq => self.remove(key),
            _ => None,
        }
    }

    /// Marks the store `seq` of `key` ready; `false` if the entry is gone or newer.
    pub fn mark_ready(&mut self, key: &TierKey, seq: u64) -> bool {
        match self
            .files
            .get_mut(&key.file)
            .and_then(|b| b.get_mut(&key.block.0))
        {
            Some(e) if e.seq == seq => {
                e.ready = true;
                true
            }
            _ => false,
        }
    }

    /// Inserts or replaces the entry of `key`; returns the replaced entry and the entries
    /// evicted (oldest stores first) to stay within capacity.
    pub fn insert(&mut self, key: TierKey, entry: Entry) -> (Option<Entry>, Vec<(TierKey, Entry)>) {
        let old = self.remove(&key);
        let mut evicted = Vec::new();
        while self.len >= self.capacity {
            match self.pop_oldest() {
                Some(v) => evicted.push(v),
                None => break,
            }
        }
        self.files
            .entry(key.file)
            .or_default()
            .insert(key.block.0, entry);
        self.len += 1;
        self.fifo.push_back((key, entry.seq));
        self.compact_fifo();
        (old, evicted)
    }

    /// Removes and returns the oldest live entry.
    fn pop_oldest(&mut self) -> Option<(TierKey, Entry)> {
        while let Some((key, seq)) = self.fifo.pop_front() {
            if let Some(e) = self.remove_if_seq(&key, seq) {
                return Some((key, e));
            }
        }
        None
    }

    /// Drops FIFO records of removed or replaced entries once they outnumber the live ones,
    /// so the FIFO stays within twice the index (amortised O(1) per insert).
    fn compact_fifo(&mut self) {
        if self.fifo.len() as u64 > 2 * self.len + 64 {
            let files = &self.files;
            self.fifo.retain(|(k, seq)| {
                files
                    .get(&k.file)
                    .and_then(|b| b.get(&k.block.0))
                    .is_some_and(|e| e.seq == *seq)
            });
        }
    }

    /// Removes every block of `file` from `from_block` on; returns them.
    pub fn remove_file_from(&mut self, file: &FileKey, from_block: u64) -> Vec<(TierKey, Entry)> {
        let Some(blocks) = self.files.get_mut(file) else {
            return Vec::new();
        };
        let tail = blocks.split_off(&from_block);
        if blocks.is_empty() {
            self.files.remove(file);
        }
        self.len -= tail.len() as u64;
        tail.into_iter()
            .map(|(b, e)| (TierKey::new(*file, b), e))
            .collect()
    }

    /// Estimated heap bytes per indexed block, from the structures' sizes: the file map's
    /// buckets, B-tree leaf nodes (11 slots, assumed 3/4 full on average), FIFO records.
    /// Allocator overhead is not counted.
    pub fn ram_bytes_per_block(&self) -> f64 {
        if self.len == 0 {
            return Self::nominal_bytes_per_block();
        }
        let map_bucket = size_of::<(FileKey, BTreeMap<u64, Entry>)>() + 1;
        let map = self.files.capacity() * map_bucket;
        let tree = (self.len as f64) * Self::tree_bytes_per_entry();
        let fifo = self.fifo.capacity() * size_of::<(TierKey, u64)>();
        (map as f64 + tree + fifo as f64) / self.len as f64
    }

    /// B-tree bytes per entry: a leaf holds up to 11 keys and values plus a small header.
    fn tree_bytes_per_entry() -> f64 {
        let leaf = 11 * (size_of::<u64>() + size_of::<Entry>()) + 16;
        leaf as f64 / (11.0 * 0.75)
    }

    /// Per block when every file has many blocks and the FIFO is as long as the index.
    pub fn nominal_bytes_per_block() -> f64 {
        Self::tree_bytes_per_entry() + size_of::<(TierKey, u64)>() as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(ino: u64, b: u64) -> TierKey {
        TierKey::new(
            FileKey {
                dev: 1,
                ino,
                birth: 0,
            },
            b,
        )
    }
    fn e(seq: u64) -> Entry {
        Entry {
            version: 1,
            seq,
            server: 0,
            ready: true,
        }
    }

    #[test]
    fn fifo_eviction_skips_stale_records() {
        let mut ix = Index::new(3);
        for b in 0..3 {
            ix.insert(k(1, b), e(b + 1));
        }
        // Store block 0 again: its old FIFO record is stale.
        ix.insert(k(1, 0), e(10));
        assert_eq!(ix.len(), 3);
        let (_, ev) = ix.insert(k(2, 0), e(11));
        assert_eq!(ev.len(), 1);
        assert_eq!(ev[0].0, k(1, 1), "oldest live store goes first");
        assert_eq!(ix.get(&k(1, 0)).map(|e| e.seq), Some(10));
    }

    #[test]
    fn file_range_removal_and_seq_checks() {
        let mut ix = Index::new(100);
        for b in 0..10 {
            ix.insert(k(1, b), e(b + 1));
        }
        ix.insert(k(2, 0), e(50));
        let gone = ix.remove_file_from(&k(1, 0).file, 4);
        assert_eq!(gone.len(), 6);
        assert_eq!(ix.len(), 5);
        assert!(ix.get(&k(1, 3)).is_some() && ix.get(&k(1, 4)).is_none());
        assert!(ix.remove_if_seq(&k(1, 0), 99).is_none());
        assert!(!ix.mark_ready(&k(1, 0), 99));
        assert!(ix.remove_if_seq(&k(1, 0), 1).is_some());
        assert_eq!(ix.remove_file_from(&k(1, 0).file, 0).len(), 3);
        assert_eq!(ix.len(), 1);
        assert!(ix.ram_bytes_per_block() > 0.0);
    }

    #[test]
    fn fifo_stays_bounded_under_churn() {
        let mut ix = Index::new(1000);
        for i in 0..100_000u64 {
            ix.insert(k(1, i % 10), e(i + 1));
        }
        assert_eq!(ix.len(), 10);
        assert!(ix.fifo.len() <= 2 * 10 + 65);
    }
}
