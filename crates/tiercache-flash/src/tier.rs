//! [`FlashTier`]: the [`DataTier`] on a [`FlashDevice`], and its ordering rules.
//!
//! Every device write and every index change happens under the tier's one mutex (so a
//! `current` check, the data write and the valid bit are atomic). Crash rules (see
//! `docs/design.md` §6, Ordering):
//! 1. data before metadata: a record is written only right after a device `sync`, so every
//!    dirty bit in any record on the device names data already durable, with its checksum
//!    (`crate::sums`: the set's checksum table is written before that sync);
//! 2. `sync()` = device sync, every pending record, device sync: a dirty block stored before
//!    it survives any later crash, and so does its file's newest meta (`crate::meta`: a
//!    record of a mapped set carries its file's meta; a sync after a set that may have carried
//!    one was unmapped writes the new carriers and syncs before the other records);
//! 3. a record that *drops* a block the device may still hold dirty (`disk_dirty`) is made
//!    durable at once (`discard`, `invalidate_file`, `invalidate` after a lazy `mark_clean`,
//!    reuse of the block or set) — before the space can be reused or newer bytes can reach
//!    BACKING by another way;
//! 4. after a crash only dirty blocks are trusted (clean ones may have been invalidated in RAM
//!    only); after a clean close every record matches RAM and clean blocks are served again.
//!
//! **Tainted** (sticky, degraded too): after any failed device sync (Linux may drop the
//! unwritten pages on an `fdatasync` EIO, so a retried sync would wrongly report them durable),
//! or a drop whose record could not be made durable (rule 3 broken). From then on every
//! `sync()` and `close()` fails, the clean-shutdown flag is never written again, and stores
//! are refused; the manager learns of it at its next `sync`. Residual risk: a device that
//! cannot persist a drop may, after a crash, bring back the dropped block dirty with its old
//! bytes (the manager must not trust a tier whose `sync` failed; `open` cannot tell).
//!
//! **Detaching** ([`DataTier::detaching`]): degraded (by `max_errors` device errors) or
//! tainted. Clean stores are turned down and requests told to `Bypass`; `dirty_blocks`,
//! `read_dirty` (which still tries the device) and `mark_clean` keep working so the manager
//! writes back what is readable, and ticks ask for it (`crate::advice`).

use crate::access::Store;
use crate::cleaner::{Cleaner, CleanerConfig, CleanerMode};
use crate::device::FlashDevice;
use crate::error::FlashError;
use crate::format::{Geometry, Record, Superblock};
use crate::index::{Index, SetId, F_META_DIRTY, F_RETAGGED};
pub use crate::stats::FlashStats;
use crate::sums::{Checked, Sums};
use std::io;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError};
use std::time::Instant;
use tiercache_tier::{
    Admit, CleanAdvice, Cleaning, DataTier, DirtyBlock, FileKey, FileMeta, Lookup, Persistence,
    RecoveredFile, SpillSink, SpillSlot, StoreKind, TierError, TierInfo, TierKey, TierSnapshot,
};

/// How a flash tier is built (geometry applies to `create`; `open` takes it from the device).
#[derive(Debug, Clone)]
pub struct FlashConfig {
    pub name: String,
    /// log2 of the block size in bytes (default 12 = 4 KiB).
    pub block_shift: u8,
    /// log2 of the blocks per set (default 8 = 256 blocks = 1 MiB).
    pub set_shift: u8,
    /// Device errors after which the tier is degraded (default 16).
    pub max_errors: u64,
    /// Sets looked at from the LRU end for a clean one to reuse (default 64, as `sim`:
    /// `tiercache_core::setchoice::DEFAULT_ALLOC_SCAN`).
    pub alloc_scan: usize,
    /// The cleaning policy behind `on_request`/`on_tick` (default: idle mode, `free_floor`
    /// 0 = a tenth of the sets, at least 1; wait 1 s; 4 sets at once; `dirty_max` 0.8).
    pub cleaner: CleanerConfig,
    /// Takes no dirty data (`writethrough`/`writearound` on the mount): `accepts_dirty` is
    /// false, `write_dirty` is turned down and there is no cleaning policy (default false).
    pub clean_only: bool,
}

impl FlashConfig {
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            block_shift: 12,
            set_shift: 8,
            max_errors: 16,
            alloc_scan: tiercache_core::setchoice::DEFAULT_ALLOC_SCAN,
            cleaner: CleanerConfig::new(CleanerMode::Idle, 0),
            clean_only: false,
        }
    }
}

#[derive(Debug)]
pub(crate) struct State {
    pub idx: Index,
    pub snap: TierSnapshot,
    pub fs: FlashStats,
    pub sb: Superblock,
    pub closed: bool,
    /// Data or records written since the last device sync.
    pub unsynced: bool,
    pub cleaner: Cleaner,
    /// Advice that said `Bypass`.
    pub bypassed: u64,
    /// Files with dirty blocks found by `open`.
    pub recovered: Vec<RecoveredFile>,
    /// Block checksums: the cached tables and the in-place bits (`crate::sums`).
    pub sums: Sums,
}

/// The flash tier; see the module docs.
#[derive(Debug)]
pub struct FlashTier {
    pub(crate) info: TierInfo,
    pub(crate) cfg: FlashConfig,
    pub(crate) geo: Geometry,
    pub(crate) dev: Arc<dyn FlashDevice>,
    pub(crate) state: Mutex<State>,
    /// Origin of the cleaner's monotonic clock.
    pub(crate) origin: Instant,
    /// Where stores that may spill hand the clean blocks of a reused set (set once).
    pub(crate) spill_hook: SpillSlot,
}

/// A `DirtyBlock::seq`: the set's cleaning epoch and the set itself, so a seq handed out for
/// one set never matches another set the key moved to. Never 0 (`id < u32::MAX`).
pub(crate) fn seq_of(id: u32, epoch: u32) -> u64 {
    ((u64::from(epoch) << 32) | u64::from(id)) + 1
}

impl FlashTier {
    pub(crate) fn st(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn geometry(&self) -> Geometry {
        self.geo
    }

    pub(crate) fn locate(&self, key: &TierKey) -> (u64, usize) {
        let b = key.block.0;
        (
            b >> self.geo.set_shift,
            (b & ((1u64 << self.geo.set_shift) - 1)) as usize,
        )
    }

    /// Degrades the tier for good: `sync()`/`close()` fail from now on (see the module docs).
    pub(crate) fn taint(&self, st: &mut State, why: &str) {
        if !st.fs.tainted {
            log::error!(
                "flash tier {}: {why}; tainted (degraded, every later sync fails)",
                self.info.name
            );
        }
        st.fs.tainted = true;
        st.fs.degraded = true;
    }

    fn tainted_err(&self) -> TierError {
        TierError::Unavailable {
            tier: self.info.name.clone(),
            why: "tainted: an earlier device sync or drop record failed".into(),
        }
    }

    /// Counts a device error (degrading past `max_errors`) and wraps it.
    pub(crate) fn fail(&self, st: &mut State, e: io::Error) -> TierError {
        st.fs.errors += 1;
        st.snap.errors += 1;
        if !st.fs.degraded && st.fs.errors >= self.cfg.max_errors {
            st.fs.degraded = true;
            log::error!(
                "flash tier {}: {} device errors, degraded (reads miss, stores are turned down)",
                self.info.name,
                st.fs.errors
            );
        }
        TierError::Io {
            tier: self.info.name.clone(),
            source: e,
        }
    }

    pub(crate) fn unavailable(&self, st: &State) -> Option<&'static str> {
        if st.closed {
            Some("closed")
        } else if st.fs.degraded {
            Some("degraded")
        } else {
            None
        }
    }

    /// A device sync; a failure taints the tier (rule: a failed sync is never retried).
    pub(crate) fn dev_sync(&self, st: &mut State) -> io::Result<()> {
        st.fs.device_syncs += 1;
        if let Err(e) = self.dev.sync() {
            self.taint(st, &format!("device sync failed: {e}"));
            return Err(e);
        }
        st.unsynced = false;
        Ok(())
    }

    /// Writes the set's record, with in-place bits `in_place`, into the other slot (not
    /// durable until the next sync). A mapped set whose file has meta in RAM carries it, with
    /// a new `meta_gen`; returns it.
    fn write_record(
        &self,
        st: &mut State,
        id: u32,
        in_place: Vec<u64>,
    ) -> io::Result<Option<(FileKey, FileMeta)>> {
        let r = st.idx.range(id);
        let m = st.idx.sets[id as usize];
        let mapped = st.idx.is_mapped(id);
        let meta = mapped
            .then(|| st.idx.files.get(&m.file).and_then(|e| e.meta.clone()))
            .flatten();
        let gen = st.idx.meta_gen + 1;
        let rec = Record {
            set: id,
            seq: m.rec_seq + 1,
            tag: mapped.then_some((m.file, m.set_index)),
            version: m.version,
            valid: st.idx.valid[r.clone()].to_vec(),
            dirty: st.idx.dirty[r].to_vec(),
            in_place,
            meta: meta.map(|x| (x, gen)),
        };
        let bytes = rec.encode(&self.geo, st.sb.instance);
        self.dev
            .write_at(&bytes, self.geo.rec_off(id, rec.seq & 1))?;
        st.fs.record_writes += 1;
        st.unsynced = true;
        let s = &mut st.idx.sets[id as usize];
        s.rec_seq = rec.seq;
        s.flags &= !F_META_DIRTY;
        Ok(rec.meta.map(|(meta, g)| {
            st.idx.meta_gen = g;
            (m.file, meta)
        }))
    }

    /// Rules 1 and 2: sync, write the sets' records, sync; `disk_dirty` follows when durable.
    pub(crate) fn persist(&self, st: &mut State, ids: &[u32]) -> Result<(), TierError> {
        let mut again = Vec::new();
        let r = self.persist_io(st, ids, &mut again);
        st.idx
            .pending
            .retain(|&id| st.idx.sets[id as usize].flags & F_META_DIRTY != 0);
        // Only now: pending lists each set once (one record per set per round).
        for id in again {
            st.idx.note_meta(id);
        }
        r.map_err(|e| self.fail(st, e))
    }

    /// `persist` but the errors; `again`: sets due for another record (at the next sync).
    fn persist_io(&self, st: &mut State, ids: &[u32], again: &mut Vec<u32>) -> io::Result<()> {
        // The blocks' checksums are durable with the records that name them.
        self.flush_sums(st, ids)?;
        if st.unsynced {
            self.dev_sync(st)?;
        }
        let mut carried = Vec::new();
        // The records sent, with their in-place bits (`crate::inplace`).
        let mut sent: Vec<(u32, Vec<u64>)> = Vec::with_capacity(ids.len());
        let mut res = Ok(());
        for &id in ids {
            // What the device may now hold: the old record or this one.
            st.idx.disk_dirty_or_dirty(id);
            let dirty = &st.idx.dirty[st.idx.range(id)];
            let bits = st.sums.in_place.next(id, dirty, Self::parked_of(st, id));
            sent.push((id, bits.clone()));
            match self.write_record(st, id, bits) {
                Ok(c) => carried.extend(c),
                Err(e) => {
                    res = Err(e);
                    break;
                }
            }
        }
        if res.is_ok() {
            res = self.dev_sync(st);
        }
        if let Err(e) = res {
            // The device may show the old records or these: the sets are pending again (their
            // next records rewrite what it may hold), and only bits in both count as durable.
            for (id, bits) in sent {
                st.sums.in_place.failed(id, &bits);
                again.push(id);
            }
            return Err(e);
        }
        for (id, bits) in sent {
            st.idx.disk_dirty_is_dirty(id);
            // The device's newest record of the set is the one just written.
            st.idx.sets[id as usize].flags &= !F_RETAGGED;
            if st.sums.in_place.committed(id, &bits) {
                // A later record drops the bits of blocks not stored since (none lingers).
                again.push(id);
            }
        }
        self.trim_in_place(st);
        // A durable record now carries these metas: no other carrier is needed for them.
        for (file, meta) in carried {
            if let Some(e) = st.idx.files.get_mut(&file) {
                if e.meta.as_ref() == Some(&meta) {
                    e.changed = false;
                }
            }
        }
        Ok(())
    }

    /// `persist` for a drop (rule 3): a failure taints the tier.
    pub(crate) fn persist_drop(&self, st: &mut State, ids: &[u32]) -> Result<(), TierError> {
        let r = self.persist(st, ids);
        if let Err(e) = &r {
            self.taint(st, &format!("could not make a drop durable: {e}"));
        }
        r
    }

    /// Rule 3 for one block about to be dropped or reused.
    pub(crate) fn persist_if_disk_dirty(
        &self,
        st: &mut State,
        id: u32,
        b: usize,
    ) -> Result<(), TierError> {
        if st.idx.is_disk_dirty(id, b) && !st.idx.is_dirty(id, b) {
            self.persist(st, &[id])?;
        }
        Ok(())
    }

    /// Drops a block and makes the drop durable when the device may hold it dirty (a failure
    /// taints the tier).
    pub(crate) fn drop_block(&self, st: &mut State, id: u32, b: usize) {
        st.idx.drop_block(id, b);
        if st.idx.is_disk_dirty(id, b) {
            // Logged and tainted inside; the caller goes on (the drop stands in RAM).
            let _ = self.persist_drop(st, &[id]);
        }
        self.maybe_free(st, id);
    }

    /// An emptied set goes back to the free list once no record can claim dirty blocks in it.
    pub(crate) fn maybe_free(&self, st: &mut State, id: u32) {
        if st.idx.is_mapped(id) && !st.idx.valid_any(id) && !st.idx.disk_dirty_any(id) {
            st.idx.unmap(id);
        }
    }

    /// Up to `max` sets holding dirty blocks, least recently used first (cleaning candidates).
    pub fn lru_dirty_sets(&self, max: usize) -> Vec<SetId> {
        let st = self.st();
        st.idx
            .lru_from_cold()
            .filter(|&id| st.idx.set_dirty_any(id))
            .take(max)
            .map(SetId)
            .collect()
    }

    /// The dirty blocks of one set in block order, with their seqs for `mark_clean`.
    pub fn set_dirty_blocks(&self, set: SetId) -> Vec<DirtyBlock> {
        let mut st = self.st();
        if set.0 >= self.geo.sets || !st.idx.is_mapped(set.0) {
            return Vec::new();
        }
        Self::dirty_of(&mut st, set.0, self.geo.set_shift)
    }

    pub(crate) fn dirty_of(st: &mut State, id: u32, set_shift: u8) -> Vec<DirtyBlock> {
        let seq = Self::epoch_seq(st, id);
        let m = st.idx.sets[id as usize];
        (0..1usize << set_shift)
            .filter(|&b| st.idx.is_dirty(id, b))
            .map(|b| DirtyBlock {
                key: TierKey::new(m.file, (m.set_index << set_shift) | b as u64),
                version: m.version,
                seq,
            })
            .collect()
    }
}

pub(crate) fn check_len(tier: &str, ok: bool, got: usize, bs: usize) -> Result<(), TierError> {
    if ok {
        return Ok(());
    }
    Err(TierError::Io {
        tier: tier.to_string(),
        source: io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("buffer of {got} bytes, block size {bs}"),
        ),
    })
}

impl DataTier for FlashTier {
    fn info(&self) -> &TierInfo {
        &self.info
    }

    fn contains(&self, key: &TierKey) -> bool {
        let (si, b) = self.locate(key);
        let st = self.st();
        st.idx
            .find(&key.file, si)
            .is_some_and(|id| st.idx.is_valid(id, b))
    }

    fn read(&self, key: &TierKey, version: u64, buf: &mut [u8]) -> Result<Lookup, TierError> {
        self.lookup_read(key, version, buf, false)
    }

    fn take(&self, key: &TierKey, version: u64, buf: &mut [u8]) -> Result<Lookup, TierError> {
        self.lookup_read(key, version, buf, true)
    }

    fn store(
        &self,
        req: &tiercache_tier::Store<'_>,
        current: &dyn Fn() -> bool,
    ) -> Result<Admit, TierError> {
        let (key, version, data) = (&req.key, req.version, req.data);
        let spill = self.spill_hook.get().filter(|_| req.may_spill);
        match req.kind {
            StoreKind::Fill => self.store_block(key, version, data, Store::Fill, current, spill),
            StoreKind::Demote => {
                self.store_block(key, version, data, Store::Demote, current, spill)
            }
            StoreKind::WriteDirty if self.cfg.clean_only => Ok(Admit::Rejected),
            StoreKind::WriteDirty => {
                self.store_block(key, version, data, Store::Dirty, &|| true, None)
            }
        }
    }

    fn can_spill(&self) -> bool {
        true
    }

    fn set_spill_hook(&self, hook: Arc<dyn SpillSink>) -> Result<(), TierError> {
        self.spill_hook.set(&self.info.name, hook)
    }

    fn invalidate(&self, key: &TierKey) {
        let (si, b) = self.locate(key);
        let mut st = self.st();
        if let Some(id) = st.idx.find(&key.file, si) {
            if st.idx.is_valid(id, b) && !st.idx.is_dirty(id, b) {
                self.drop_block(&mut st, id, b);
            }
        }
    }

    /// Only with the state lock free (it is held across device I/O), and not for a block
    /// whose drop would have to be persisted (a record on the device still says dirty).
    fn try_invalidate(&self, key: &TierKey) -> bool {
        let (si, b) = self.locate(key);
        let mut st = match self.state.try_lock() {
            Ok(st) => st,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return false,
        };
        if let Some(id) = st.idx.find(&key.file, si) {
            if st.idx.is_valid(id, b) && !st.idx.is_dirty(id, b) {
                if st.idx.is_disk_dirty(id, b) {
                    return false;
                }
                self.drop_block(&mut st, id, b);
            }
        }
        true
    }

    fn discard(&self, key: &TierKey) {
        let (si, b) = self.locate(key);
        let mut st = self.st();
        if let Some(id) = st.idx.find(&key.file, si) {
            if st.idx.is_valid(id, b) {
                self.drop_block(&mut st, id, b);
            }
        }
    }

    fn invalidate_file(&self, file: &FileKey, from_block: u64) {
        let mut st = self.st();
        let shift = self.geo.set_shift;
        let ids: Vec<u32> = (0..self.geo.sets)
            .filter(|&id| {
                let m = &st.idx.sets[id as usize];
                st.idx.is_mapped(id) && m.file == *file && ((m.set_index + 1) << shift) > from_block
            })
            .collect();
        let mut to_persist = Vec::new();
        for &id in &ids {
            let base = st.idx.sets[id as usize].set_index << shift;
            let mut need = false;
            for b in 0..1usize << shift {
                if base + b as u64 >= from_block && st.idx.is_valid(id, b) {
                    st.idx.drop_block(id, b);
                    need |= st.idx.is_disk_dirty(id, b);
                }
            }
            if need {
                to_persist.push(id);
            }
        }
        if !to_persist.is_empty() {
            // Logged and tainted inside; the drop stands in RAM.
            let _ = self.persist_drop(&mut st, &to_persist);
        }
        for id in ids {
            self.maybe_free(&mut st, id);
        }
    }

    /// Makes every store so far durable, every mark_clean, and every file's newest meta.
    fn sync(&self) -> Result<(), TierError> {
        let mut st = self.st();
        if st.closed {
            return Err(TierError::Unavailable {
                tier: self.info.name.clone(),
                why: "closed".into(),
            });
        }
        if st.fs.tainted {
            return Err(self.tainted_err());
        }
        self.sync_locked(&mut st)
    }

    fn stats(&self) -> TierSnapshot {
        let st = self.st();
        let mut s = st.snap.clone();
        s.used_blocks = st.idx.valid_blocks;
        s.dirty_blocks = st.idx.dirty_blocks;
        s
    }

    /// Degraded by `max_errors` device errors, or tainted.
    fn detaching(&self) -> bool {
        let st = self.st();
        st.fs.degraded || st.fs.tainted
    }

    /// Always, also when `clean_only`: a tier opened after a crash may hold dirty blocks of a
    /// write-back run, which the manager cleans (with no cleaning policy then).
    fn cleaning(&self) -> Option<&dyn Cleaning> {
        Some(self)
    }

    fn persistence(&self) -> Option<&dyn Persistence> {
        Some(self)
    }
}

impl Persistence for FlashTier {
    fn set_file_meta(&self, file: &FileKey, meta: &FileMeta) {
        self.set_meta(file, meta);
    }

    /// One entry per (file, content version) holding dirty blocks at `open`, with the meta
    /// of the file's record with the highest `meta_gen`.
    fn recovered_files(&self) -> Vec<RecoveredFile> {
        self.st().recovered.clone()
    }
}

impl Cleaning for FlashTier {
    fn read_dirty(
        &self,
        key: &TierKey,
        version: u64,
        buf: &mut [u8],
    ) -> Result<Option<u64>, TierError> {
        let bs = self.geo.block_size();
        check_len(&self.info.name, buf.len() >= bs, buf.len(), bs)?;
        let (si, b) = self.locate(key);
        let mut st = self.st();
        // Works while degraded: the manager writes dirty blocks back from here.
        let Some(id) = st.idx.find(&key.file, si) else {
            return Ok(None);
        };
        if st.closed || !st.idx.is_dirty(id, b) || st.idx.sets[id as usize].version != version {
            return Ok(None);
        }
        if self.read_block(&mut st, id, b, &mut buf[..bs])? == Checked::Corrupt {
            return Err(self.corrupt_err(id, b));
        }
        Ok(Some(Self::epoch_seq(&mut st, id)))
    }

    /// Dirty blocks of the least recently used dirty sets first, in block order per set.
    fn dirty_blocks(&self, max: usize) -> Vec<DirtyBlock> {
        let mut st = self.st();
        let ids: Vec<u32> = st
            .idx
            .lru_from_cold()
            .filter(|&id| st.idx.set_dirty_any(id))
            .collect();
        let mut out = Vec::new();
        for id in ids {
            if out.len() >= max {
                break;
            }
            out.extend(Self::dirty_of(&mut st, id, self.geo.set_shift));
        }
        out.truncate(max);
        out
    }

    /// Clean unless written since `seq` was handed out. The clean state is written lazily
    /// (at the next `sync`, or at once when the block is dropped or reused — rule 3); after a
    /// crash before that the block comes back dirty and is cleaned again (same bytes).
    fn mark_clean(&self, key: &TierKey, seq: u64) -> bool {
        let (si, b) = self.locate(key);
        let mut st = self.st();
        let Some(id) = st.idx.find(&key.file, si) else {
            return false;
        };
        // The seq names the set and its epoch: a seq of another set (the key moved) or of an
        // earlier epoch never matches.
        let current = seq_of(id, st.idx.sets[id as usize].epoch);
        let written = Index::bit(&st.idx.written, id, st.idx.words, b);
        if !st.idx.is_dirty(id, b) || seq != current || written {
            return false;
        }
        st.idx.clear_dirty(id, b);
        st.snap.cleaned += 1;
        st.fs.bytes_cleaned += self.geo.block_size() as u64;
        true
    }

    fn on_request(&self) -> CleanAdvice {
        if self.cfg.clean_only {
            return CleanAdvice::Idle;
        }
        self.on_request_at(self.now())
    }

    fn on_tick(&self) -> CleanAdvice {
        if self.cfg.clean_only {
            return CleanAdvice::Idle;
        }
        self.on_tick_at(self.now())
    }

    /// The cleaning policy (idle/eager, `cleaner`) decides when dirty blocks are cleaned.
    fn has_policy(&self) -> bool {
        !self.cfg.clean_only
    }
}

impl Drop for FlashTier {
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            log::error!("flash tier {}: close at drop failed: {e}", self.info.name);
        }
    }
}

/// For error messages naming the tier.
pub(crate) fn unavailable(tier: &str, why: &str) -> FlashError {
    FlashError::Unavailable {
        tier: tier.to_string(),
        why: why.to_string(),
    }
}
