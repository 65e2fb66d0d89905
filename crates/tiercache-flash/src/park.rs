//! Parked overwrites: how an overwrite in place of a block the device holds dirty waits for
//! its in-place bit (`crate::sums`, rule 3) without a device sync per block.
//!
//! A dirty store of a block the device may hold dirty (`disk_dirty`) whose in-place bit is not
//! in the set's newest record keeps its bytes in RAM ("parked"): the device keeps the older
//! bytes that its durable record and checksum describe, so a crash now brings those back —
//! the store was not acknowledged yet. Reads and `read_dirty` return the parked bytes, a spill
//! hands them over, a drop drops them, a newer store replaces them. The next `sync()` (and
//! `close()`) unparks them all in one round: the records it writes anyway (after a sync, then
//! synced) carry their sets' in-place bits, then the bytes are written in place with their
//! checksums, and one more sync makes them durable — so an `fsync` that overwrites blocks it
//! made durable before costs one more device sync, not two per block. More than
//! [`PARK_MAX_BYTES`] parked unpark at once (in the store path).
//!
//! Invariants: a parked block is valid; its bytes on the device and its checksum are those of
//! its durable record; only a store writes it in place (which drops the parked bytes), and
//! only once its in-place bit is durable or the device no longer holds it dirty.

use crate::tier::{FlashTier, State};
use tiercache_tier::TierError;

/// Parked bytes at most (1 MiB: 256 blocks of 4 KiB), then they are unparked at once. Not
/// part of `ram_bytes_per_block` (a bounded buffer of data, not index).
pub(crate) const PARK_MAX_BYTES: usize = 1 << 20;

impl FlashTier {
    /// Whether a dirty store of block `b` of set `id` must be parked: the device may hold the
    /// block dirty and its in-place bit is not durable in the set's newest record.
    pub(crate) fn must_park(st: &State, id: u32, b: usize) -> bool {
        st.idx.is_disk_dirty(id, b) && !st.sums.in_place.durable(id, b)
    }

    /// Parks `data` as block `b` of set `id` (already valid and dirty in the index).
    pub(crate) fn park(&self, st: &mut State, id: u32, b: usize, data: &[u8]) {
        st.idx.parked.insert((id, b as u32), data.into());
        st.fs.parked_blocks += 1;
        if st.idx.parked.len() * self.geo.block_size() > PARK_MAX_BYTES {
            // Counted and logged inside; what stays parked is retried at the next sync.
            if let Err(e) = self.unpark(st) {
                log::error!("flash tier {}: unparking overwrites: {e}", self.info.name);
            }
        }
    }

    /// The parked bytes of block `b` of set `id`, if any.
    pub(crate) fn parked(st: &State, id: u32, b: usize) -> Option<&[u8]> {
        if st.idx.parked.is_empty() {
            return None;
        }
        st.idx.parked.get(&(id, b as u32)).map(|d| &d[..])
    }

    /// The parked blocks of set `id` (every record of the set carries their bits:
    /// `crate::inplace`, invariant 2).
    pub(crate) fn parked_of(st: &State, id: u32) -> impl Iterator<Item = usize> + '_ {
        st.idx
            .parked
            .range((id, 0)..=(id, u32::MAX))
            .map(|(&(_, b), _)| b as usize)
    }

    /// Marks the sets of the parked blocks whose in-place bit is not durable yet as due for a
    /// record (the caller writes them with `persist`; every record of a set carries the bits
    /// of its parked blocks). Returns the sets.
    pub(crate) fn want_parked_bits(st: &mut State) -> Vec<u32> {
        let keys: Vec<(u32, u32)> = st.idx.parked.keys().copied().collect();
        let mut ids: Vec<u32> = Vec::new();
        for (id, b) in keys {
            if ids.last() != Some(&id) && Self::must_park(st, id, b as usize) {
                st.idx.note_meta(id);
                ids.push(id);
            }
        }
        st.fs.in_place_records += ids.len() as u64;
        ids
    }

    /// Once the parked blocks' in-place bits are durable (or the device no longer holds them
    /// dirty): writes them in place with their checksums, then their sets' tables (not
    /// synced). A block whose write fails stays parked (its bit stays in every record of its
    /// set: it may be torn now); the others still go. Returns the first error.
    pub(crate) fn write_parked(&self, st: &mut State) -> Result<(), TierError> {
        let keys: Vec<(u32, u32)> = st.idx.parked.keys().copied().collect();
        let mut ids: Vec<u32> = Vec::new();
        let mut first_err = None;
        for (id, b) in keys {
            let Some(data) = st.idx.parked.get(&(id, b)).cloned() else {
                continue;
            };
            let b = b as usize;
            if Self::must_park(st, id, b) {
                // Never in place before its bit is durable (not reached: every parked block's
                // set is in the round before this); it waits for the next round.
                continue;
            }
            let slot = match self.ready_sum(st, id, false) {
                Ok(slot) => slot,
                Err(e) => {
                    first_err.get_or_insert(e);
                    continue;
                }
            };
            st.unsynced = true;
            if let Err(e) = self.dev.write_at(&data, self.geo.block_off(id, b)) {
                self.trim_sums(st);
                first_err.get_or_insert(self.fail(st, e));
                continue;
            }
            self.note_sum_at(st, slot, id, b, &data);
            // Not "stored" (`crate::inplace`, invariant 2): the next record comes after a
            // sync that makes this write durable, so it need not keep the bit for it.
            st.idx.parked.remove(&(id, b as u32));
            if ids.last() != Some(&id) {
                ids.push(id);
            }
        }
        // Their checksums reach the device before any later sync (their sets are pending
        // anyway: their records carried bits, `crate::inplace` invariant 3).
        if let Err(e) = self.flush_sums(st, &ids) {
            first_err.get_or_insert(self.fail(st, e));
        }
        self.trim_in_place(st);
        first_err.map_or(Ok(()), Err)
    }

    /// Forgets the in-place bits of sets over the cap, keeping those of sets with parked
    /// blocks (`crate::inplace`, invariant 4).
    pub(crate) fn trim_in_place(&self, st: &mut State) {
        let State { sums, idx, .. } = st;
        sums.in_place
            .trim(|id| idx.parked.range((id, 0)..=(id, u32::MAX)).next().is_some());
    }

    /// Unparks every parked block now (more than [`PARK_MAX_BYTES`] parked): the records
    /// with their in-place bits (after a sync, synced), then the bytes in place (not synced:
    /// the next sync acknowledges them).
    pub(crate) fn unpark(&self, st: &mut State) -> Result<(), TierError> {
        let ids = Self::want_parked_bits(st);
        if !ids.is_empty() {
            self.persist(st, &ids)?;
        }
        self.write_parked(st)
    }
}
