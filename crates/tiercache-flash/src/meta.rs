//! Durable per-file meta (format 2): a file's logical size, mtime and BACKING handle kept on
//! the device with its dirty blocks, so that after a crash the manager can reopen the file and
//! write them back up to the right size with the right mtime.
//!
//! Where it lives: in RAM one [`FileEntry`](crate::index::FileEntry) per file that has
//! dirty blocks in the tier, or that a record on the device may still claim dirty blocks of
//! (`disk_dirty`: a lazily cleaned block comes back dirty after a crash and needs the meta
//! too), or whose meta was set since the last sync. On the device every record written for a
//! mapped set whose file has meta in RAM carries it, with a tier-wide `meta_gen` (+1 per
//! record carrying meta, continued from the highest found at `open`). At `open` a file's
//! meta is the one of its records with the highest `meta_gen`: records are only ever written
//! with the meta current then, so a later record never carries an older meta.
//!
//! Rules (see the repository's `docs/design.md` §6, "File meta"):
//! 1. `sync()` makes the newest meta durable: a file whose meta has no durable carrier
//!    record (`changed`) gets one of its sets in D written in that sync.
//! 2. A carrier is never overwritten without a newer one durable first: when a set of a file
//!    with meta is unmapped (its next record names another file or none), the file is marked
//!    `changed` and the next sync writes the carriers and syncs *before* writing the other
//!    records (two phases; only then, so most syncs cost the usual two device syncs). The
//!    first phase writes only sets whose newest record on the device names their current
//!    backing set (not `F_RETAGGED`): a set unmapped, or freed by `open`, since its last
//!    durable record may hold the lost carrier even once another file has taken it, so it is
//!    written in the second phase (as the carrier of a file with no other set in D: such a
//!    file has no durable record claiming dirty blocks yet).
//! 3. An entry goes once no set of the file is in D and its meta is not fresh (a meta set
//!    just before the file's first dirty store survives one sync without any set).

use crate::index::{Index, F_IN_D, F_RETAGGED};
use crate::tier::{FlashTier, State};
use std::collections::{HashMap, HashSet};
use tiercache_tier::{FileHandle, FileKey, FileMeta, RecoveredFile, TierError, MAX_HANDLE_BYTES};

impl FlashTier {
    /// `Persistence::set_file_meta`: newest call wins; durable at the next `sync()`.
    pub(crate) fn set_meta(&self, file: &FileKey, meta: &FileMeta) {
        let mut meta = meta.clone();
        if meta.handle.bytes.len() > MAX_HANDLE_BYTES {
            log::error!(
                "flash tier {}: file handle of {} bytes (at most {MAX_HANDLE_BYTES}) not kept",
                self.info.name,
                meta.handle.bytes.len()
            );
            meta.handle = FileHandle::default();
        }
        let mut st = self.st();
        if st.closed {
            return;
        }
        let e = st.idx.files.entry(*file).or_default();
        e.fresh = true;
        if e.meta.as_ref() != Some(&meta) {
            e.meta = Some(meta);
            e.changed = true;
        }
    }

    /// The sets to write so that each file whose meta is `changed` has a carrier: per file a
    /// mapped set in D, its hint if that fits, else found by one scan for all the rest (rare).
    /// `first_round` (rule 2): never a set with `F_RETAGGED` — its new record would replace
    /// one that may be another file's lost carrier; a file with only such sets (its first
    /// sets, reused) has no durable record claiming dirty blocks yet, and gets its carrier in
    /// the second round.
    fn carriers(idx: &Index, first_round: bool) -> Vec<u32> {
        let ok = |id: u32, file: &FileKey| {
            let m = &idx.sets[id as usize];
            idx.is_mapped(id)
                && m.flags & F_IN_D != 0
                && m.file == *file
                && !(first_round && m.flags & F_RETAGGED != 0)
        };
        let mut out = Vec::new();
        let mut rest: HashSet<FileKey> = HashSet::new();
        for (f, e) in &idx.files {
            if !e.changed || e.meta.is_none() || e.sets == 0 {
                continue;
            }
            let hint_in_d = (e.hint as usize) < idx.sets.len() && {
                let m = &idx.sets[e.hint as usize];
                idx.is_mapped(e.hint) && m.flags & F_IN_D != 0 && m.file == *f
            };
            if hint_in_d && ok(e.hint, f) {
                out.push(e.hint);
            } else if !(hint_in_d && e.sets == 1) {
                // (The hint is the file's only set in D: no other to look for.)
                rest.insert(*f);
            }
        }
        for id in 0..idx.sets.len() as u32 {
            if rest.is_empty() {
                break;
            }
            let f = idx.sets[id as usize].file;
            if rest.contains(&f) && ok(id, &f) {
                out.push(id);
                rest.remove(&f);
            }
        }
        out.sort_unstable();
        out
    }

    /// `sync()` under the lock (also `close` and `open`): rule 1 and 2 of the module docs,
    /// then every pending record (with the in-place bits of parked overwrites, which then go
    /// in place and are synced: `crate::park`), then entries without sets or fresh meta go
    /// (rule 3).
    pub(crate) fn sync_locked(&self, st: &mut State) -> Result<(), TierError> {
        // Parked overwrites: this sync's records carry their in-place bits (`crate::park`).
        let parked = !st.idx.parked.is_empty();
        if parked {
            Self::want_parked_bits(st);
        }
        if st.idx.carrier_lost {
            // Rule 2: new carriers durable before a record that may replace a lost one.
            let first = Self::carriers(&st.idx, true);
            if !first.is_empty() {
                self.persist(st, &first)?;
            }
        }
        // The pending records, and carriers of the files still without one.
        let mut ids: Vec<u32> = st.idx.pending.clone();
        for id in Self::carriers(&st.idx, false) {
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        if !ids.is_empty() || st.unsynced {
            self.persist(st, &ids)?;
        }
        if parked {
            // The bits are durable: the parked bytes go in place, and are synced.
            self.write_parked(st)?;
            self.dev_sync(st).map_err(|e| self.fail(st, e))?;
        }
        st.idx.carrier_lost = false;
        st.idx.files.retain(|_, e| e.sets > 0 || e.fresh);
        for e in st.idx.files.values_mut() {
            e.fresh = false;
        }
        Ok(())
    }

    /// Files with meta in RAM (`stats`).
    pub(crate) fn files_with_meta(st: &State) -> u64 {
        st.idx.files.values().filter(|e| e.meta.is_some()).count() as u64
    }
}

/// At `open`: the newest meta per file among the records read (highest `meta_gen`).
#[derive(Debug, Default)]
pub(crate) struct NewestMeta {
    by_file: HashMap<FileKey, (u64, FileMeta)>,
    /// The highest `meta_gen` seen.
    pub max_gen: u64,
}

impl NewestMeta {
    pub fn see(&mut self, file: FileKey, meta: &Option<(FileMeta, u64)>) {
        let Some((m, gen)) = meta else { return };
        self.max_gen = self.max_gen.max(*gen);
        let e = self.by_file.entry(file).or_insert((0, FileMeta::default()));
        if *gen >= e.0 {
            *e = (*gen, m.clone());
        }
    }

    pub fn get(&self, file: &FileKey) -> Option<&FileMeta> {
        self.by_file.get(file).map(|(_, m)| m)
    }

    /// Puts the metas of the files with sets in D back into RAM, each marked `changed` (its
    /// carrier may be a set this open frees, so the first sync writes a carrier first), and
    /// lists the files holding dirty blocks, one entry per (file, content version).
    pub fn restore(&self, idx: &mut Index, set_blocks: usize) -> Vec<RecoveredFile> {
        idx.meta_gen = idx.meta_gen.max(self.max_gen);
        let mut lost = false;
        for (file, e) in idx.files.iter_mut() {
            if let Some(m) = self.get(file) {
                e.meta = Some(m.clone());
                e.changed = true;
                lost = true;
            }
        }
        idx.carrier_lost |= lost;
        let mut out: Vec<RecoveredFile> = Vec::new();
        let mut at: HashMap<(FileKey, u64), usize> = HashMap::new();
        for id in 0..idx.sets.len() as u32 {
            if !idx.is_mapped(id) || !idx.set_dirty_any(id) {
                continue;
            }
            let m = idx.sets[id as usize];
            let n = (0..set_blocks).filter(|&b| idx.is_dirty(id, b)).count() as u64;
            let i = *at.entry((m.file, m.version)).or_insert_with(|| {
                out.push(RecoveredFile {
                    file: m.file,
                    version: m.version,
                    meta: self.get(&m.file).cloned(),
                    dirty_blocks: 0,
                });
                out.len() - 1
            });
            out[i].dirty_blocks += n;
        }
        out.sort_by_key(|r| (r.file, r.version));
        out
    }
}
