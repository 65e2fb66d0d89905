//! The request path of [`FlashTier`]: reads (checked against their checksums) and stores
//! (clean fills and demotions, dirty write-backs), and the set allocation they need. Every
//! step runs under the tier's one mutex; the crash rules are in `crate::tier` and
//! `crate::sums`.

use crate::index::Index;
use crate::sums::Checked;
use crate::tier::{check_len, seq_of, FlashTier, State};
use tiercache_core::setchoice::{choose_set, SetChoice};
use tiercache_tier::{Admit, Lookup, SpillSink, TierError, TierKey};

/// What a store is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Store {
    Fill,
    Demote,
    Dirty,
}

impl FlashTier {
    /// A free set, or the least recently used set without dirty blocks (its clean blocks go,
    /// to `spill` when given): the choice is core's [`choose_set`], which `sim` replays.
    pub(crate) fn allocate(&self, st: &mut State, spill: Option<&dyn SpillSink>) -> Option<u32> {
        let choice = choose_set(
            !st.idx.free.is_empty(),
            st.idx.lru_from_cold(),
            self.cfg.alloc_scan,
            |id| st.idx.set_dirty_any(id),
        );
        let victim = match choice {
            SetChoice::Free => return st.idx.free.pop(),
            SetChoice::Reuse(id) => id,
            SetChoice::Full => return None,
        };
        if let Some(spill) = spill {
            self.spill_set(st, victim, spill);
        }
        st.idx.drop_clean(victim);
        if st.idx.disk_dirty_any(victim) && self.persist_drop(st, &[victim]).is_err() {
            return None;
        }
        st.idx.unmap(victim);
        st.idx.free.pop()
    }

    /// Starts a new cleaning epoch if the set was written in this one; returns the seq.
    pub(crate) fn epoch_seq(st: &mut State, id: u32) -> u64 {
        let r = st.idx.range(id);
        if Index::any(&st.idx.written, r.clone()) {
            st.idx.written[r].fill(0);
            let m = &mut st.idx.sets[id as usize];
            m.epoch = m.epoch.wrapping_add(1);
        }
        seq_of(id, st.idx.sets[id as usize].epoch)
    }

    /// Reads block `b` of set `id` into `buf` (one block): its parked copy while its write is
    /// pending, else the device's bytes, checked against their sum. A corrupt block leaves
    /// zeros in `buf` (the bad bytes go nowhere); a device error counts against the device.
    pub(crate) fn read_block(
        &self,
        st: &mut State,
        id: u32,
        b: usize,
        buf: &mut [u8],
    ) -> Result<Checked, TierError> {
        if let Some(data) = Self::parked(st, id, b) {
            buf.copy_from_slice(data);
            return Ok(Checked::Good);
        }
        if let Err(e) = self.dev.read_at(buf, self.geo.block_off(id, b)) {
            return Err(self.fail(st, e));
        }
        let checked = self.check_sum(st, id, b, buf)?;
        if checked == Checked::Corrupt {
            buf.fill(0);
        }
        Ok(checked)
    }

    /// `read`, and `take` (which also lets go of a clean block it served, as it moves up).
    pub(crate) fn lookup_read(
        &self,
        key: &TierKey,
        version: u64,
        buf: &mut [u8],
        take: bool,
    ) -> Result<Lookup, TierError> {
        let bs = self.geo.block_size();
        check_len(&self.info.name, buf.len() >= bs, buf.len(), bs)?;
        let (si, b) = self.locate(key);
        let mut st = self.st();
        let found = st
            .idx
            .find(&key.file, si)
            .filter(|&id| st.idx.is_valid(id, b));
        if let (Some(id), Some(why)) = (found, self.unavailable(&st)) {
            if st.idx.is_dirty(id, b) && st.idx.sets[id as usize].version == version {
                // Held dirty: BACKING is stale, a miss would send the reader there.
                return Err(TierError::Unavailable {
                    tier: self.info.name.clone(),
                    why: format!("{why}; the block is held dirty here"),
                });
            }
        }
        let Some(id) = found.filter(|_| self.unavailable(&st).is_none()) else {
            st.snap.misses += 1;
            return Ok(Lookup::Miss);
        };
        if st.idx.sets[id as usize].version != version {
            // Another version is never served; a clean copy of it goes.
            if !st.idx.is_dirty(id, b) {
                self.drop_block(&mut st, id, b);
            }
            st.snap.misses += 1;
            return Ok(Lookup::Miss);
        }
        let dirty = st.idx.is_dirty(id, b);
        if self.read_block(&mut st, id, b, &mut buf[..bs])? == Checked::Corrupt {
            if dirty {
                return Err(self.corrupt_err(id, b));
            }
            // BACKING (or a tier above) has the bytes: a miss.
            self.drop_block(&mut st, id, b);
            st.snap.misses += 1;
            return Ok(Lookup::Miss);
        }
        st.idx.touch(id);
        st.snap.hits += 1;
        if take && !dirty {
            self.drop_block(&mut st, id, b);
            st.snap.promotions_out += 1;
        }
        Ok(Lookup::Hit { dirty })
    }

    /// Stores `data`; the clean blocks of a set reused for it go to `spill` when given (those
    /// of an older version dropped for a version change do not: they are stale).
    pub(crate) fn store_block(
        &self,
        key: &TierKey,
        version: u64,
        data: &[u8],
        how: Store,
        current: &dyn Fn() -> bool,
        spill: Option<&dyn SpillSink>,
    ) -> Result<Admit, TierError> {
        let bs = self.geo.block_size();
        check_len(&self.info.name, data.len() == bs, data.len(), bs)?;
        let (si, b) = self.locate(key);
        let mut st = self.st();
        if let Some(why) = self.unavailable(&st) {
            let held_dirty = st
                .idx
                .find(&key.file, si)
                .is_some_and(|id| st.idx.is_dirty(id, b));
            if how == Store::Dirty && held_dirty {
                // Never `Rejected` (contract): the caller must not write around a dirty copy.
                return Err(TierError::Unavailable {
                    tier: self.info.name.clone(),
                    why: format!("{why}; the block is held dirty here"),
                });
            }
        }
        if self.unavailable(&st).is_some() || !current() {
            st.snap.rejected += 1;
            return Ok(Admit::Rejected);
        }
        let mut mapped_now = false;
        let id = match st.idx.find(&key.file, si) {
            Some(id) => {
                if st.idx.sets[id as usize].version != version {
                    if st.idx.set_dirty_any(id) {
                        // One version per set; the manager cleans before a version change.
                        st.fs.version_conflicts += 1;
                        st.snap.rejected += 1;
                        return Ok(Admit::Rejected);
                    }
                    st.idx.drop_clean(id);
                    if st.idx.disk_dirty_any(id) {
                        self.persist_drop(&mut st, &[id])?;
                    }
                    st.idx.sets[id as usize].version = version;
                    st.idx.note_meta(id);
                }
                if how != Store::Dirty && st.idx.is_dirty(id, b) {
                    // A clean copy never overwrites a dirty one.
                    st.snap.rejected += 1;
                    return Ok(Admit::Rejected);
                }
                id
            }
            None => {
                let Some(id) = self.allocate(&mut st, spill) else {
                    st.snap.rejected += 1;
                    return Ok(Admit::Rejected);
                };
                st.idx.map(id, key.file, si, version);
                mapped_now = true;
                id
            }
        };
        self.put(&mut st, id, b, data, how, mapped_now)
    }

    /// The end of a store: block `b` of set `id` (mapped, `mapped_now` if just now) takes
    /// `data` — on the device, or parked (`crate::park`) when it is an overwrite of a block
    /// the device holds dirty without its in-place bit.
    fn put(
        &self,
        st: &mut State,
        id: u32,
        b: usize,
        data: &[u8],
        how: Store,
        mapped_now: bool,
    ) -> Result<Admit, TierError> {
        if how == Store::Dirty && Self::must_park(st, id, b) {
            st.idx.set_block(id, b, true);
            st.idx.touch(id);
            st.snap.writebacks_in += 1;
            self.park(st, id, b, data);
            return Ok(Admit::Stored);
        }
        if how != Store::Dirty {
            // Rule 3: the device must not still claim this block dirty with older bytes.
            self.persist_if_disk_dirty(st, id, b)?;
        }
        let slot = self.ready_sum(st, id, mapped_now)?;
        st.unsynced = true;
        if let Err(e) = self.dev.write_at(data, self.geo.block_off(id, b)) {
            // The block's bytes on the device are now unknown: it goes, dirty or not (the
            // caller keeps the newer bytes and falls back to BACKING).
            self.trim_sums(st);
            self.drop_block(st, id, b);
            return Err(self.fail(st, e));
        }
        st.idx.parked.remove(&(id, b as u32)); // the device has the newest bytes now
        self.note_sum_at(st, slot, id, b, data);
        st.sums.in_place.stored(id, b);
        st.idx.set_block(id, b, how == Store::Dirty);
        st.idx.touch(id);
        match how {
            Store::Fill => st.snap.fills += 1,
            Store::Demote => st.snap.demotions_in += 1,
            Store::Dirty => st.snap.writebacks_in += 1,
        }
        Ok(Admit::Stored)
    }
}
