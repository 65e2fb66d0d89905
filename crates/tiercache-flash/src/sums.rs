//! Block checksums (format 3): per cache set a table on the device with one CRC32C per block
//! ([`block_sum`]: the block's identity, then its bytes; at [`Geometry::sums_at`]), a bounded
//! write-back cache of tables in RAM, and the records' in-place bits, which keep a crash in the
//! middle of an overwrite from looking like corruption.
//!
//! Rules (see the repository's `docs/design.md` §6, "Checksums"):
//! 1. **A stored block's checksum** (of the bytes handed to the device) is in the cached table
//!    at once and on the device before the next record of its set: `persist` writes the
//!    tables of the sets it records before its first device sync. A table may also be written
//!    at any other time (evicted from the cache: an unsynced write). So a durable record that
//!    claims a block dirty always has the block's checksum durable with it.
//! 2. **Every read of a block from the device is checked** (reads, `take`, `read_dirty`,
//!    spills, `check`). A mismatch is counted (`checksum_errors`, and as a device error): a
//!    clean block is dropped (a miss: the caller reads BACKING), a dirty one is an I/O error —
//!    never the bytes, never a miss.
//! 3. **In-place overwrite**: a block the device may hold dirty (`disk_dirty`) is overwritten
//!    in place only once its in-place bit is durable in the set's record; until then the new
//!    bytes are parked in RAM and the next `sync()` makes the bits of all parked blocks
//!    durable in one round before writing them (`crate::park`). Which bits a record carries,
//!    when they count as durable, and how a bit is dropped again: `crate::inplace`.
//! 4. **Open**: after a clean close every checksum matches (the close writes every changed
//!    table before its last sync). After a crash, a dirty block without its in-place bit was
//!    not written since its durable record, so it must match; one with the bit may hold old
//!    or new bytes sector by sector (rule 6 of `docs/design.md` §6, Ordering): when it does
//!    not match, its checksum is recomputed from what is there (`unverified_blocks`). Either
//!    way the set's next record drops the bit.
//!
//! RAM: between operations the cache holds at most `sets / 32` tables (4 B per block of a
//! cached table, so ≤ 0.125 B per block of the tier; none below 32 sets), plus any whose
//! write failed (each a device error); in-place bits of at most `sets / 32` sets (at least
//! 1; `crate::inplace`).

use crate::device::FlashDevice;
use crate::format::{block_sum, Geometry, SUM_BYTES};
use crate::inplace::InPlace;
use crate::tier::{FlashTier, State};
use std::collections::HashMap;
use std::io;
use tiercache_tier::TierError;

/// One set's checksum table in the cache.
#[derive(Debug)]
struct Table {
    set: u32,
    sums: Vec<u32>,
    /// Changed since it was read or last written.
    dirty: bool,
    /// Used since the clock hand last passed.
    used: bool,
    /// Its write failed in the trim under way (skipped by the clock until it ends).
    stuck: bool,
}

/// The cache of checksum tables and the in-place bits; see the module docs.
#[derive(Debug)]
pub(crate) struct Sums {
    cap: usize,
    tables: Vec<Table>,
    by_set: HashMap<u32, usize>,
    hand: usize,
    /// The records' in-place bits (rule 3).
    pub in_place: InPlace,
}

impl Sums {
    pub fn new(geo: &Geometry) -> Self {
        // ≤ 4 B per block of one set in 32 (0.125 B per block); a tier of fewer than 32 sets
        // caches none between operations (each reads and writes its table through).
        let cap = geo.sets as usize / 32;
        Self {
            cap,
            tables: Vec::with_capacity(cap + 1),
            by_set: HashMap::with_capacity(cap),
            hand: 0,
            in_place: InPlace::new(geo),
        }
    }

    /// Every byte held, by capacity (part of `ram_bytes_per_block`).
    pub fn ram_bytes(&self) -> usize {
        use std::mem::size_of;
        let tables: usize = self
            .tables
            .iter()
            .map(|t| size_of::<Table>() + t.sums.capacity() * SUM_BYTES)
            .sum();
        size_of::<Self>() - size_of::<InPlace>()
            + tables
            + (self.tables.capacity() - self.tables.len()) * size_of::<Table>()
            + self.by_set.capacity() * (size_of::<(u32, usize)>() + 1)
            + self.in_place.ram_bytes()
    }

    /// The cache slot of set `set`'s table, read from the device when missing (the cache
    /// may then hold one table over its cap until [`Sums::trim`]). `fresh`: the set was just
    /// mapped (no block of it is valid, so no entry means anything): a zero table is made
    /// without reading.
    fn slot(
        &mut self,
        dev: &dyn FlashDevice,
        geo: &Geometry,
        set: u32,
        fresh: bool,
    ) -> io::Result<usize> {
        if let Some(&i) = self.by_set.get(&set) {
            self.tables[i].used = true;
            return Ok(i);
        }
        let sums: Vec<u32> = if fresh {
            vec![0; geo.set_blocks()]
        } else {
            let mut raw = vec![0u8; geo.sums_size as usize];
            dev.read_at(&mut raw, geo.sums_at(set))?;
            raw.chunks_exact(SUM_BYTES)
                .take(geo.set_blocks())
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        };
        self.tables.push(Table {
            set,
            sums,
            dirty: fresh,
            used: true,
            stuck: false,
        });
        self.by_set.insert(set, self.tables.len() - 1);
        Ok(self.tables.len() - 1)
    }

    /// Evicts tables (the clock: first one not used since the hand passed) down to the cap,
    /// writing a changed one first (`wrote` is set: an unsynced write). A table whose write
    /// fails stays, still changed (its entries are the only record of what its blocks hold),
    /// and is skipped: the others still go, so the cache holds at most the cap plus the tables
    /// whose write failed (each a device error: `max_errors` of them degrade the tier, which
    /// then stores nothing). Returns the first error.
    fn trim(&mut self, dev: &dyn FlashDevice, geo: &Geometry, wrote: &mut bool) -> io::Result<()> {
        let mut first_err = None;
        let mut stuck = 0;
        while self.tables.len() > self.cap + stuck {
            let n = self.tables.len();
            self.hand %= n;
            // Ends: more tables than are stuck, so one is neither stuck nor, by the second
            // pass, used.
            while self.tables[self.hand].used || self.tables[self.hand].stuck {
                self.tables[self.hand].used = false;
                self.hand = (self.hand + 1) % n;
            }
            let i = self.hand;
            if self.tables[i].dirty {
                if let Err(e) = write_table(dev, geo, &self.tables[i]) {
                    self.tables[i].stuck = true;
                    stuck += 1;
                    first_err.get_or_insert(e);
                    continue;
                }
                *wrote = true;
            }
            let gone = self.tables.swap_remove(i);
            self.by_set.remove(&gone.set);
            if let Some(moved) = self.tables.get(i) {
                self.by_set.insert(moved.set, i);
            }
        }
        for t in &mut self.tables {
            t.stuck = false;
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Writes every changed table in the cache (unsynced; `wrote` is set), then trims: the
    /// close, before its last sync, so that every checksum matches after a clean close.
    fn flush_all(
        &mut self,
        dev: &dyn FlashDevice,
        geo: &Geometry,
        wrote: &mut bool,
    ) -> io::Result<()> {
        let sets: Vec<u32> = self.tables.iter().map(|t| t.set).collect();
        self.flush(dev, geo, &sets, wrote)
    }

    /// Writes the changed tables of `sets` (unsynced; `wrote` is set), then trims.
    fn flush(
        &mut self,
        dev: &dyn FlashDevice,
        geo: &Geometry,
        sets: &[u32],
        wrote: &mut bool,
    ) -> io::Result<()> {
        for set in sets {
            if let Some(&i) = self.by_set.get(set) {
                if self.tables[i].dirty {
                    write_table(dev, geo, &self.tables[i])?;
                    *wrote = true;
                    self.tables[i].dirty = false;
                }
            }
        }
        self.trim(dev, geo, wrote)
    }

    fn bit(v: &[u64], b: usize) -> bool {
        v[b / 64] >> (b % 64) & 1 == 1
    }
}

fn write_table(dev: &dyn FlashDevice, geo: &Geometry, t: &Table) -> io::Result<()> {
    let mut raw = vec![0u8; geo.sums_size as usize];
    for (c, s) in raw.chunks_exact_mut(SUM_BYTES).zip(&t.sums) {
        c.copy_from_slice(&s.to_le_bytes());
    }
    dev.write_at(&raw, geo.sums_at(t.set))
}

/// What checking a block read from the device found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Checked {
    Good,
    /// Other bytes than were written: counted and logged already.
    Corrupt,
}

impl FlashTier {
    /// Set `id`'s table in the cache (errors counted as device errors); `fresh` as in
    /// `Sums::slot`. The caller trims the cache when done with it ([`FlashTier::trim_sums`]).
    fn table(&self, st: &mut State, id: u32, fresh: bool) -> Result<usize, TierError> {
        st.sums
            .slot(self.dev.as_ref(), &self.geo, id, fresh)
            .map_err(|e| self.fail(st, e))
    }

    /// Evicts cached tables down to the cap (a failed write is counted as a device error;
    /// that table stays, changed, and is written later).
    pub(crate) fn trim_sums(&self, st: &mut State) {
        let State { sums, unsynced, .. } = st;
        if let Err(e) = sums.trim(self.dev.as_ref(), &self.geo, unsynced) {
            let e = self.fail(st, e);
            log::error!(
                "flash tier {}: writing a checksum table: {e}",
                self.info.name
            );
        }
    }

    /// Block `b` of set `id`'s checksum of `data` under the set's current tag and version.
    fn sum_of(&self, st: &State, id: u32, b: usize, data: &[u8]) -> u32 {
        let m = &st.idx.sets[id as usize];
        block_sum(
            st.sb.instance,
            id,
            b,
            (m.file, m.set_index),
            m.version,
            data,
        )
    }

    /// Rule 1, before the data write: the set's table is in the cache (so recording the
    /// checksum afterwards, [`FlashTier::note_sum_at`], cannot fail). `mapped_now`: the set
    /// was just mapped for this store. Returns the table's slot.
    pub(crate) fn ready_sum(
        &self,
        st: &mut State,
        id: u32,
        mapped_now: bool,
    ) -> Result<usize, TierError> {
        self.table(st, id, mapped_now)
    }

    /// Rule 1, after the data write: block `b` of set `id` now holds `data`; `slot` is what
    /// [`FlashTier::ready_sum`] returned, with nothing else done on the tier since.
    pub(crate) fn note_sum_at(&self, st: &mut State, slot: usize, id: u32, b: usize, data: &[u8]) {
        let sum = self.sum_of(st, id, b, data);
        let t = &mut st.sums.tables[slot];
        debug_assert_eq!(t.set, id);
        t.sums[b] = sum;
        t.dirty = true;
        self.trim_sums(st);
    }

    /// Rule 2: whether `data`, read from block `b` of set `id`, is what was written there.
    /// A mismatch is counted (`checksum_errors`, and as a device error) and logged.
    pub(crate) fn check_sum(
        &self,
        st: &mut State,
        id: u32,
        b: usize,
        data: &[u8],
    ) -> Result<Checked, TierError> {
        let i = self.table(st, id, false)?;
        let good = st.sums.tables[i].sums[b] == self.sum_of(st, id, b, data);
        self.trim_sums(st);
        if good {
            return Ok(Checked::Good);
        }
        st.fs.checksum_errors += 1;
        let what = if st.idx.is_dirty(id, b) {
            "dirty"
        } else {
            "clean"
        };
        let e = io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "set {id} block {b} ({what}): checksum mismatch: the device returned other \
                 bytes than were written there"
            ),
        );
        log::error!("flash tier {}: {e}", self.info.name);
        let _ = self.fail(st, e);
        Ok(Checked::Corrupt)
    }

    /// The error a dirty block whose bytes failed their checksum reads as (EIO for the
    /// manager: never the bytes, never a miss).
    pub(crate) fn corrupt_err(&self, id: u32, b: usize) -> TierError {
        TierError::Io {
            tier: self.info.name.clone(),
            source: io::Error::new(
                io::ErrorKind::InvalidData,
                format!("set {id} block {b}: dirty block failed its checksum"),
            ),
        }
    }

    /// Rule 4, at open: the newest records' in-place bits (`(set, bits)`, sets mapped when
    /// read). Each such set is pending: its next record (at the first sync) drops the bits
    /// (none is durable in RAM: an overwrite of those blocks is parked first). After a crash
    /// each such dirty block that fails its checksum is taken as it is: its checksum is
    /// recomputed from the device's bytes (`unverified_blocks`); one that matches was not cut
    /// and is checked as any other.
    pub(crate) fn restore_in_place(&self, sets: Vec<(u32, Vec<u64>)>, clean: bool) {
        let mut st = self.st();
        for (id, bits) in sets {
            if !st.idx.is_mapped(id) {
                continue; // a duplicate freed by the open
            }
            st.idx.note_meta(id);
            if clean {
                continue; // every checksum was written before the clean close
            }
            for b in (0..self.geo.set_blocks()).filter(|&b| Sums::bit(&bits, b)) {
                if st.idx.is_dirty(id, b) {
                    if let Err(e) = self.accept_in_place(&mut st, id, b) {
                        log::error!("flash set {id} block {b}: reading it at open: {e}");
                    }
                }
            }
        }
    }

    /// Block `b` of set `id` (dirty, with its in-place bit, after a crash) is taken as it is
    /// unless it matches its checksum.
    fn accept_in_place(&self, st: &mut State, id: u32, b: usize) -> Result<(), TierError> {
        let mut buf = vec![0u8; self.geo.block_size()];
        let slot = self.ready_sum(st, id, false)?;
        if let Err(e) = self.dev.read_at(&mut buf, self.geo.block_off(id, b)) {
            self.trim_sums(st);
            return Err(self.fail(st, e));
        }
        if st.sums.tables[slot].sums[b] == self.sum_of(st, id, b, &buf) {
            self.trim_sums(st);
            return Ok(());
        }
        self.note_sum_at(st, slot, id, b, &buf);
        st.fs.unverified_blocks += 1;
        Ok(())
    }

    /// The close, before its last sync: every changed table is written (rule 4: after a clean
    /// close every checksum matches, whichever set's record went last).
    pub(crate) fn flush_all_sums(&self, st: &mut State) -> io::Result<()> {
        let State { sums, unsynced, .. } = st;
        sums.flush_all(self.dev.as_ref(), &self.geo, unsynced)
    }

    /// Rule 1 in `persist`: the tables of `ids` are written before its first device sync.
    pub(crate) fn flush_sums(&self, st: &mut State, ids: &[u32]) -> io::Result<()> {
        let State { sums, unsynced, .. } = st;
        sums.flush(self.dev.as_ref(), &self.geo, ids, unsynced)
    }
}
