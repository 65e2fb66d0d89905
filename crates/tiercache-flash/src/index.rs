//! The in-RAM index: per cache set a tag, bitmaps and LRU links; a compact hash table from
//! backing set to cache set; the free list. No I/O here.
//!
//! Invariants:
//! - a set is mapped (has a tag) iff it is in `table` and on the LRU list, else on `free`;
//! - `dirty ⊆ valid` per set; a free set has no valid bit;
//! - `disk_dirty` ⊇ the dirty bits of the newest record that may be on the device for the
//!   set (under the set's current tag: a tag changes only once `disk_dirty` is empty);
//! - `F_IN_D` is set iff the set is mapped and holds a `dirty` or `disk_dirty` bit, and
//!   `files[f].sets` counts the sets of file `f` with `F_IN_D` (see `crate::meta`);
//! - `F_RETAGGED` is set when the newest record on the device for the set may name another
//!   backing set than RAM does (unmapped, or freed by `open`, since its last durable record).

use std::collections::{BTreeMap, HashMap};
use tiercache_tier::{FileKey, FileMeta};

pub const NIL: u32 = u32::MAX;

/// A cache set's number on the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct SetId(pub u32);

pub const F_MAPPED: u8 = 1;
/// RAM differs from the newest record written (a record is due at the next sync).
pub const F_META_DIRTY: u8 = 2;
/// Mapped, with a dirty or `disk_dirty` bit: a record on the device may claim dirty blocks of
/// the set's file, so the file's meta must stay durable (see `crate::meta`).
pub const F_IN_D: u8 = 4;
/// The newest record on the device for the set may name another backing set (and carry that
/// file's meta): set at unmap (and by `open` for the sets it frees), cleared once a record of
/// the set is durable. Such a set never carries meta in the first round of a sync
/// (`crate::meta`, rule 2).
pub const F_RETAGGED: u8 = 8;

/// RAM per file that has dirty blocks in the tier (or may have them after a crash), or whose
/// meta was set since the last sync. Per file, not per block.
#[derive(Debug, Default)]
pub struct FileEntry {
    /// The newest meta given by `set_file_meta`.
    pub meta: Option<FileMeta>,
    /// No durable record is known to carry `meta` (a sync must write one).
    pub changed: bool,
    /// `set_file_meta` was called since the last sync (kept then even with no set yet).
    pub fresh: bool,
    /// The file's sets with `F_IN_D`.
    pub sets: u32,
    /// One of them, probably (checked before use).
    pub hint: u32,
}

/// Per-set fixed part (64 bytes).
#[derive(Debug, Clone, Copy)]
pub struct SetMeta {
    pub file: FileKey,
    pub set_index: u64,
    pub version: u64,
    /// Sequence number of the newest record written for this set.
    pub rec_seq: u64,
    /// Cleaning epoch (see `FlashTier::mark_clean`).
    pub epoch: u32,
    pub prev: u32,
    pub next: u32,
    pub flags: u8,
}

impl SetMeta {
    const FREE: SetMeta = SetMeta {
        file: FileKey {
            dev: 0,
            ino: 0,
            birth: 0,
        },
        set_index: 0,
        version: 0,
        rec_seq: 0,
        epoch: 0,
        prev: NIL,
        next: NIL,
        flags: 0,
    };
}

/// See the module docs.
#[derive(Debug)]
pub struct Index {
    pub words: usize,
    pub sets: Vec<SetMeta>,
    pub valid: Vec<u64>,
    pub dirty: Vec<u64>,
    pub disk_dirty: Vec<u64>,
    /// Blocks written dirty in the current cleaning epoch.
    pub written: Vec<u64>,
    /// Open addressing, linear probing; `NIL` = empty.
    table: Vec<u32>,
    pub free: Vec<u32>,
    /// Sets with `F_META_DIRTY` (each once).
    pub pending: Vec<u32>,
    /// Most recently used end.
    pub head: u32,
    /// Least recently used end.
    pub tail: u32,
    pub valid_blocks: u64,
    pub dirty_blocks: u64,
    /// Mapped sets with at least one dirty block.
    pub dirty_sets: u32,
    /// Files with sets in `F_IN_D`, or with a fresh meta (not counted in `ram_bytes`: per
    /// dirty file, not per block).
    pub files: HashMap<FileKey, FileEntry>,
    /// A set that may have carried a file's meta was unmapped: the next sync writes the
    /// carriers of changed files durably before the other records.
    pub carrier_lost: bool,
    /// The newest `meta_gen` written (+1 per record carrying meta).
    pub meta_gen: u64,
    /// Parked overwrites (`crate::park`): (set, block) → the block's newest bytes, not yet
    /// on the device. Each is valid; a drop of the block drops its parked bytes. Ordered, so
    /// that a set's parked blocks are a range.
    pub parked: BTreeMap<(u32, u32), Box<[u8]>>,
}

fn mix(file: &FileKey, si: u64) -> u64 {
    let mut h =
        file.dev ^ file.ino.rotate_left(21) ^ file.birth.rotate_left(42) ^ si.rotate_left(7);
    // splitmix64 finaliser
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

impl Index {
    pub fn new(sets: u32, set_blocks: usize) -> Self {
        let words = set_blocks.div_ceil(64);
        let n = sets as usize;
        let cap = (n * 2).next_power_of_two().max(2);
        Self {
            words,
            sets: vec![SetMeta::FREE; n],
            valid: vec![0; n * words],
            dirty: vec![0; n * words],
            disk_dirty: vec![0; n * words],
            written: vec![0; n * words],
            table: vec![NIL; cap],
            free: (0..sets).rev().collect(),
            pending: Vec::with_capacity(n),
            head: NIL,
            tail: NIL,
            valid_blocks: 0,
            dirty_blocks: 0,
            dirty_sets: 0,
            files: HashMap::new(),
            carrier_lost: false,
            meta_gen: 0,
            parked: BTreeMap::new(),
        }
    }

    /// Keeps `F_IN_D` and the per-file set counts right after the set's bits or mapping
    /// changed; drops a file's entry once it has no set in D and no fresh meta.
    pub fn refresh(&mut self, id: u32) {
        let m = self.sets[id as usize];
        let in_d = m.flags & F_MAPPED != 0 && (self.set_dirty_any(id) || self.disk_dirty_any(id));
        if in_d == (m.flags & F_IN_D != 0) {
            return;
        }
        if in_d {
            self.sets[id as usize].flags |= F_IN_D;
            let e = self.files.entry(m.file).or_default();
            e.sets += 1;
            e.hint = id;
        } else {
            self.sets[id as usize].flags &= !F_IN_D;
            if let Some(e) = self.files.get_mut(&m.file) {
                e.sets = e.sets.saturating_sub(1);
                if e.sets == 0 && !e.fresh {
                    self.files.remove(&m.file);
                }
            }
        }
    }

    /// `disk_dirty |= dirty` (a record with the current bits may now be on the device).
    pub fn disk_dirty_or_dirty(&mut self, id: u32) {
        for i in self.range(id) {
            self.disk_dirty[i] |= self.dirty[i];
        }
        self.refresh(id);
    }

    /// `disk_dirty = dirty` (the record with the current bits is durable).
    pub fn disk_dirty_is_dirty(&mut self, id: u32) {
        for i in self.range(id) {
            self.disk_dirty[i] = self.dirty[i];
        }
        self.refresh(id);
    }

    /// Every byte this index holds, by capacity (what `ram_bytes_per_block` reports).
    pub fn ram_bytes(&self) -> usize {
        use std::mem::size_of;
        size_of::<Self>()
            + self.sets.capacity() * size_of::<SetMeta>()
            + (self.valid.capacity()
                + self.dirty.capacity()
                + self.disk_dirty.capacity()
                + self.written.capacity())
                * 8
            + (self.table.capacity() + self.free.capacity() + self.pending.capacity()) * 4
    }

    pub fn range(&self, id: u32) -> std::ops::Range<usize> {
        let s = id as usize * self.words;
        s..s + self.words
    }

    pub fn bit(v: &[u64], id: u32, words: usize, b: usize) -> bool {
        v[id as usize * words + b / 64] >> (b % 64) & 1 == 1
    }

    pub fn is_valid(&self, id: u32, b: usize) -> bool {
        Self::bit(&self.valid, id, self.words, b)
    }
    pub fn is_dirty(&self, id: u32, b: usize) -> bool {
        Self::bit(&self.dirty, id, self.words, b)
    }
    pub fn is_disk_dirty(&self, id: u32, b: usize) -> bool {
        Self::bit(&self.disk_dirty, id, self.words, b)
    }
    pub fn any(v: &[u64], r: std::ops::Range<usize>) -> bool {
        v[r].iter().any(|&w| w != 0)
    }
    pub fn set_dirty_any(&self, id: u32) -> bool {
        Self::any(&self.dirty, self.range(id))
    }
    pub fn disk_dirty_any(&self, id: u32) -> bool {
        Self::any(&self.disk_dirty, self.range(id))
    }
    pub fn valid_any(&self, id: u32) -> bool {
        Self::any(&self.valid, self.range(id))
    }

    pub fn note_meta(&mut self, id: u32) {
        let m = &mut self.sets[id as usize];
        if m.flags & F_META_DIRTY == 0 {
            m.flags |= F_META_DIRTY;
            self.pending.push(id);
        }
    }

    /// Sets valid (and dirty) for block `b`, keeping the counters.
    pub fn set_block(&mut self, id: u32, b: usize, dirty: bool) {
        let i = id as usize * self.words + b / 64;
        let m = 1u64 << (b % 64);
        if self.valid[i] & m == 0 {
            self.valid[i] |= m;
            self.valid_blocks += 1;
        }
        if dirty {
            if self.dirty[i] & m == 0 {
                if !self.set_dirty_any(id) {
                    self.dirty_sets += 1;
                }
                self.dirty[i] |= m;
                self.dirty_blocks += 1;
            }
            self.written[i] |= m;
        }
        self.note_meta(id);
        self.refresh(id);
    }

    /// Clears the dirty bit of block `b` (the block stays valid).
    pub fn clear_dirty(&mut self, id: u32, b: usize) {
        let i = id as usize * self.words + b / 64;
        let m = 1u64 << (b % 64);
        if self.dirty[i] & m != 0 {
            self.dirty[i] &= !m;
            self.dirty_blocks -= 1;
            if !self.set_dirty_any(id) {
                self.dirty_sets -= 1;
            }
            self.note_meta(id);
            self.refresh(id);
        }
    }

    /// Drops block `b` (valid and dirty; parked bytes too).
    pub fn drop_block(&mut self, id: u32, b: usize) {
        if !self.parked.is_empty() {
            self.parked.remove(&(id, b as u32));
        }
        self.clear_dirty(id, b);
        let i = id as usize * self.words + b / 64;
        let m = 1u64 << (b % 64);
        if self.valid[i] & m != 0 {
            self.valid[i] &= !m;
            self.valid_blocks -= 1;
            self.note_meta(id);
        }
    }

    /// Drops every clean block of the set.
    pub fn drop_clean(&mut self, id: u32) {
        for b in 0..self.words * 64 {
            if self.is_valid(id, b) && !self.is_dirty(id, b) {
                self.drop_block(id, b);
            }
        }
    }

    fn home(&self, id: u32) -> usize {
        let m = &self.sets[id as usize];
        mix(&m.file, m.set_index) as usize & (self.table.len() - 1)
    }

    pub fn find(&self, file: &FileKey, si: u64) -> Option<u32> {
        let mask = self.table.len() - 1;
        let mut i = mix(file, si) as usize & mask;
        loop {
            let e = self.table[i];
            if e == NIL {
                return None;
            }
            let m = &self.sets[e as usize];
            if m.file == *file && m.set_index == si {
                return Some(e);
            }
            i = (i + 1) & mask;
        }
    }

    fn table_insert(&mut self, id: u32) {
        let mask = self.table.len() - 1;
        let mut i = self.home(id);
        while self.table[i] != NIL {
            i = (i + 1) & mask;
        }
        self.table[i] = id;
    }

    /// Backward-shift deletion keeps every probe chain unbroken.
    fn table_remove(&mut self, id: u32) {
        let mask = self.table.len() - 1;
        let mut p = self.home(id);
        while self.table[p] != id {
            if self.table[p] == NIL {
                return;
            }
            p = (p + 1) & mask;
        }
        self.table[p] = NIL;
        let mut j = p;
        loop {
            j = (j + 1) & mask;
            let e = self.table[j];
            if e == NIL {
                return;
            }
            let k = self.home(e);
            // Move e back to p unless its home lies cyclically in (p, j].
            let stays = if p <= j {
                p < k && k <= j
            } else {
                p < k || k <= j
            };
            if !stays {
                self.table[p] = e;
                self.table[j] = NIL;
                p = j;
            }
        }
    }

    fn lru_unlink(&mut self, id: u32) {
        let (prev, next) = {
            let m = &self.sets[id as usize];
            (m.prev, m.next)
        };
        if prev != NIL {
            self.sets[prev as usize].next = next;
        } else {
            self.head = next;
        }
        if next != NIL {
            self.sets[next as usize].prev = prev;
        } else {
            self.tail = prev;
        }
        let m = &mut self.sets[id as usize];
        m.prev = NIL;
        m.next = NIL;
    }

    fn lru_push_head(&mut self, id: u32) {
        let old = self.head;
        {
            let m = &mut self.sets[id as usize];
            m.prev = NIL;
            m.next = old;
        }
        if old != NIL {
            self.sets[old as usize].prev = id;
        } else {
            self.tail = id;
        }
        self.head = id;
    }

    /// Marks the set most recently used.
    pub fn touch(&mut self, id: u32) {
        if self.head != id {
            self.lru_unlink(id);
            self.lru_push_head(id);
        }
    }

    /// Maps a set that has no valid block to a backing set (hot end of the LRU).
    pub fn map(&mut self, id: u32, file: FileKey, si: u64, version: u64) {
        let m = &mut self.sets[id as usize];
        m.file = file;
        m.set_index = si;
        m.version = version;
        m.flags |= F_MAPPED;
        self.table_insert(id);
        self.lru_push_head(id);
        self.note_meta(id);
        self.refresh(id);
    }

    /// Unmaps a set with no dirty block (its clean blocks go) and returns it to the free list.
    pub fn unmap(&mut self, id: u32) {
        self.drop_clean(id);
        self.table_remove(id);
        self.lru_unlink(id);
        let m = &mut self.sets[id as usize];
        m.flags &= !F_MAPPED;
        m.flags |= F_RETAGGED;
        let file = m.file;
        self.free.push(id);
        self.note_meta(id);
        self.refresh(id);
        // The set's newest record may have carried the file's meta: the next sync writes
        // another carrier durably before this set's new record.
        if let Some(e) = self.files.get_mut(&file) {
            if e.meta.is_some() {
                e.changed = true;
                self.carrier_lost = true;
            }
        }
    }

    pub fn is_mapped(&self, id: u32) -> bool {
        self.sets[id as usize].flags & F_MAPPED != 0
    }

    /// Mapped sets from the least recently used end.
    pub fn lru_from_cold(&self) -> impl Iterator<Item = u32> + '_ {
        let mut cur = self.tail;
        std::iter::from_fn(move || {
            if cur == NIL {
                return None;
            }
            let id = cur;
            cur = self.sets[id as usize].prev;
            Some(id)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};
    use std::collections::HashMap;

    fn fk(i: u64) -> FileKey {
        FileKey {
            dev: 1,
            ino: i % 5,
            birth: 0,
        }
    }

    #[test]
    fn the_hash_table_and_lru_agree_with_a_map_under_random_map_and_unmap() {
        let n = 37u32;
        let mut idx = Index::new(n, 256);
        let mut model: HashMap<(FileKey, u64), u32> = HashMap::new();
        let mut rng = SmallRng::seed_from_u64(7);
        for _ in 0..20_000 {
            let (f, si) = (fk(rng.gen_range(0..5)), rng.gen_range(0..20u64));
            match idx.find(&f, si) {
                Some(id) => {
                    assert_eq!(model.get(&(f, si)), Some(&id));
                    if rng.gen_bool(0.5) {
                        idx.unmap(id);
                        model.remove(&(f, si));
                    } else {
                        idx.touch(id);
                    }
                }
                None => {
                    assert!(!model.contains_key(&(f, si)));
                    if let Some(id) = idx.free.pop() {
                        idx.map(id, f, si, 1);
                        model.insert((f, si), id);
                    }
                }
            }
            assert_eq!(idx.free.len() + model.len(), n as usize);
        }
        for (&(f, si), &id) in &model {
            assert_eq!(idx.find(&f, si), Some(id));
        }
        assert_eq!(idx.lru_from_cold().count(), model.len());
    }

    #[test]
    fn block_counters_follow_valid_and_dirty_bits() {
        let mut idx = Index::new(2, 256);
        idx.map(0, fk(1), 0, 1);
        idx.set_block(0, 3, true);
        idx.set_block(0, 200, false);
        assert_eq!(
            (idx.valid_blocks, idx.dirty_blocks, idx.dirty_sets),
            (2, 1, 1)
        );
        idx.clear_dirty(0, 3);
        assert_eq!(
            (idx.valid_blocks, idx.dirty_blocks, idx.dirty_sets),
            (2, 0, 0)
        );
        idx.drop_clean(0);
        assert_eq!(idx.valid_blocks, 0);
        assert!(!idx.valid_any(0));
    }
}
