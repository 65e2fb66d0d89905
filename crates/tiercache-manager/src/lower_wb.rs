//! Write-back into the lower tier that takes dirty data, cleaning it to BACKING (on the
//! manager's schedule, or as the tier's own policy advises), write-through copies, and
//! dropping older copies below once newer bytes are durable on BACKING.
//!
//! The manager writes back "to the next tier that can take dirty data, else BACKING": the
//! flusher (background, throttled writers, `forget`) stores a file's dirty blocks into the
//! first lower tier with `accepts_dirty` (`store_dirty_below`); what it turns down goes to
//! BACKING as before. `fsync` goes there too only when that tier is persistent (it then syncs
//! it); into a volatile tier `fsync` would not make data durable, so it cleans the file's
//! lower-dirty blocks and writes memory's dirty blocks to BACKING.
//!
//! Cleaning (`clean_lower_locked`, under the file's `io` lock like a write-back): the file's
//! lower-dirty blocks are read back from the tier with their dirty sequences (`read_dirty`),
//! written to BACKING by the run writer (`backing_write`, as memory's write-back is) in offset
//! order with adjacent blocks merged, the block holding EOF clipped at the logical size,
//! BACKING's mtime put back to the time of the writes and the ctime moved by our own writes
//! hidden (as in `writeback`), then marked clean in the tier unless written again since. Truncation, a change found at open, `flush_all` and the flusher's rounds clean.
//!
//! Invariants: `FileState::lower_dirty` lists exactly the blocks whose newest bytes are in the
//! dirty tier only (memory may hold a clean copy of them, or a newer dirty one); such a file's
//! state and backing handle stay until they are cleaned; a read or read-modify-write of such a
//! block that the tier cannot serve fails with EIO instead of returning BACKING's older bytes;
//! newer bytes of a lower-dirty block written to BACKING directly make the tier `discard` its
//! copy, under the `io` lock, so a later cleaning cannot write the older bytes over them.

use crate::backing_write::RunSource;
use crate::cache::Inner;
use crate::stamp::FileStamp;
use crate::wb_types::{CleanedBlock, DirtySlot, Ident, RunsWritten, StoredBelow};
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io;
use std::sync::Arc;
use std::time::SystemTime;
use tiercache_core::{FileId, SlotId};
use tiercache_tier::{
    Admit, CleanAdvice, DataTier, DirtyBlock, FileHandle, FileKey, StoreExt, TierKey,
};

/// For each block of `list` (ascending), whether it is part of a contiguous run of at least
/// `cutoff` blocks (a sequential stream: it goes straight to BACKING).
fn long_runs(list: &[DirtySlot], cutoff: Option<u64>) -> Vec<bool> {
    let mut long = vec![false; list.len()];
    let Some(n) = cutoff else { return long };
    let mut start = 0;
    for i in 1..=list.len() {
        if i == list.len() || list[i].block != list[i - 1].block + 1 {
            if (i - start) as u64 >= n {
                long[start..i].iter_mut().for_each(|l| *l = true);
            }
            start = i;
        }
    }
    long
}

/// What cleaning a file's lower-dirty blocks takes from the file table
/// ([`Inner::clean_snapshot`]).
struct CleanSnap {
    fd: Arc<File>,
    /// `fd`'s access mode (a read-only one is reopened read-write to write).
    mode: i32,
    size: u64,
    fkey: FileKey,
    version: u64,
    /// The lower-dirty blocks to clean, ascending.
    blocks: Vec<u64>,
    /// The time of the writes while some are pending (`None`: BACKING's own).
    mtime: Option<SystemTime>,
    shared: Arc<crate::file_state::FileShared>,
}

/// What committing a cleaning found ([`Inner::clean_commit`]).
struct CleanCommitted {
    /// Blocks clean below now (no longer lower-dirty here).
    cleaned: usize,
    /// Blocks whose copy below, clean now, must go: memory holds them (maybe newer).
    drop_below: Vec<u64>,
    /// Everything of the file below must go: forgotten without a birth time, and all of
    /// its data on BACKING now.
    drop_all_below: bool,
}

/// The run writer's source for a cleaning: each block's bytes and dirty sequence are read
/// back from the dirty tier (before anything else is done with the block); a block the tier
/// lost counts as written (nothing can be), a read error stops the cleaning.
struct FromTier<'a> {
    file: FileId,
    tier: &'a dyn DataTier,
    fkey: FileKey,
    version: u64,
    /// The bytes of the block last read, and its dirty sequence below.
    buf: Vec<u8>,
    seq: u64,
}

impl RunSource for FromTier<'_> {
    type Item = u64;
    type Done = CleanedBlock;

    fn block(item: &u64) -> u64 {
        *item
    }

    fn fetch(&mut self, &block: &u64) -> io::Result<Option<CleanedBlock>> {
        let key = TierKey::new(self.fkey, block);
        let read = self.tier.cleaning().map_or(Ok(None), |c| {
            c.read_dirty(&key, self.version, &mut self.buf)
        });
        match read {
            Ok(Some(seq)) => {
                self.seq = seq;
                Ok(None)
            }
            Ok(None) => {
                // The contract says a tier keeps dirty blocks until cleaned: this tier
                // lost one. Nothing can be written; say so loudly.
                log::error!(
                    "file {}: tier {} lost dirty block {block}; its last write-back is lost",
                    self.file.0,
                    self.tier.info().name
                );
                Ok(Some(CleanedBlock { block, seq: None }))
            }
            Err(e) => Err(io::Error::from(e)),
        }
    }

    fn past_eof(&self, &block: &u64) -> CleanedBlock {
        // Meaningless past EOF: cleaned by dropping.
        CleanedBlock {
            block,
            seq: Some(self.seq),
        }
    }

    fn append(&mut self, &block: &u64, len: usize, buf: &mut Vec<u8>) -> Option<CleanedBlock> {
        buf.extend_from_slice(&self.buf[..len]);
        Some(CleanedBlock {
            block,
            seq: Some(self.seq),
        })
    }
}

impl Inner {
    /// The tier write-back of a file goes to for this kind of write-back (`sync`: an `fsync`
    /// or `flush_all`), if any.
    pub(crate) fn dirty_tier_for(&self, sync: bool) -> Option<Arc<dyn DataTier>> {
        let t = self.lower()?.dirty_tier()?;
        (!sync || t.info().persistent).then(|| Arc::clone(t))
    }

    /// The file's BACKING handle for a persistent tier: `known`, or computed now and kept.
    /// `None` when it has none that would reopen it after a crash (BACKING without handles,
    /// or a file on another mount than BACKING's root): its write-back then goes to BACKING.
    pub(crate) fn handle_of(
        &self,
        file: FileId,
        fd: &File,
        known: Option<FileHandle>,
    ) -> Option<FileHandle> {
        if let Some(h) = known {
            return (!h.bytes.is_empty()).then_some(h);
        }
        let h = match crate::handle::file_handle_and_mount(fd) {
            Ok((h, mount)) if self.backing_mount().is_none_or(|m| m == mount) => h,
            Ok(_) => {
                log::info!(
                    "file {}: on another mount than BACKING's root: written back to BACKING",
                    file.0
                );
                FileHandle::default()
            }
            Err(e) => {
                log::warn!(
                    "file {}: name_to_handle_at: {e}; written back to BACKING",
                    file.0
                );
                FileHandle::default()
            }
        };
        if let Some(f) = self.lock().files_mut().get_mut(&file) {
            f.set_handle(h.clone());
        }
        (!h.bytes.is_empty()).then_some(h)
    }

    /// Stores the snapshot's dirty blocks into `tier`. Returns those stored (to be marked clean
    /// in memory and noted as lower-dirty) and the rest, for BACKING. `held`: blocks whose
    /// older bytes the tier holds dirty — they always go there (it never turns them down), so
    /// no older copy can be cleaned over newer bytes on BACKING. The others go to BACKING when
    /// the tier's cleaning policy says `Bypass` (no room without cleaning) or when they are
    /// part of a contiguous run of at least the tier's sequential cutoff.
    pub(crate) fn store_dirty_below(
        &self,
        tier: &dyn DataTier,
        id: Ident,
        list: &[DirtySlot],
        held: &HashSet<u64>,
    ) -> StoredBelow {
        let Ident {
            file,
            fkey,
            version,
            class,
        } = id;
        let mut stored = Vec::with_capacity(list.len());
        let mut rest = Vec::new();
        let mut buf = vec![0u8; self.bs()];
        let policy = tier.cleaning().is_some_and(|c| c.has_policy());
        let batch: HashSet<u64> = list.iter().map(|s| s.block).collect();
        // The tier's policy hears of every block stored (each is a request to the device, as
        // in 001): `eager` cleans a set in the request path while free sets are below the
        // floor; `idle` says to bypass once no set is free of dirty blocks.
        let advise = |bypass: &mut bool| match tier
            .cleaning()
            .map_or(CleanAdvice::Idle, |c| c.on_request())
        {
            CleanAdvice::Idle => false,
            CleanAdvice::Bypass => {
                *bypass = true;
                false
            }
            CleanAdvice::Clean(blocks) => {
                let blocks: Vec<DirtyBlock> = blocks
                    .into_iter()
                    .filter(|b| !(b.key.file == fkey && batch.contains(&b.key.block.0)))
                    .collect();
                self.clean_advised(blocks, Some(file)) > 0
            }
        };
        let cutoff = self.lower().and_then(|l| l.dirty_seq_cutoff());
        let long = long_runs(list, cutoff);
        let mut bypassed = 0u64;
        for (i, &d) in list.iter().enumerate() {
            let DirtySlot { block, slot, .. } = d;
            let mut bypass = false;
            if policy {
                advise(&mut bypass);
            }
            if !held.contains(&block) && (bypass || long[i]) {
                bypassed += u64::from(bypass);
                rest.push(d);
                continue;
            }
            let key = Self::key(file, block);
            {
                let g = self.arena().read(slot);
                if !g.state().holds(key) {
                    rest.push(d);
                    continue;
                }
                buf.copy_from_slice(g.data());
            }
            let tkey = TierKey::new(fkey, block);
            let mut r = tier.write_dirty(&tkey, version, class, &buf);
            if matches!(r, Ok(Admit::Rejected)) && policy && advise(&mut bypass) {
                // No room, and the policy cleaned a set for it (eager): once more.
                r = tier.write_dirty(&tkey, version, class, &buf);
            }
            match r {
                Ok(Admit::Stored) => stored.push(d),
                Ok(Admit::Rejected) => {
                    bypassed += u64::from(bypass);
                    rest.push(d);
                }
                Err(e) => {
                    log::warn!("{e}; file {} block {block} goes to BACKING", file.0);
                    rest.push(d);
                }
            }
        }
        if let (true, Some(l)) = (bypassed > 0, self.lower()) {
            l.count_dirty_bypass(bypassed as usize);
        }
        StoredBelow { stored, rest }
    }

    /// Writes `file`'s lower-dirty blocks to BACKING and marks them clean in the tier. The
    /// caller holds the file's `io` lock. Returns the blocks cleaned.
    pub(crate) fn clean_lower_locked(&self, file: FileId) -> io::Result<usize> {
        self.clean_lower_some(file, None)
    }

    /// [`Inner::clean_lower_locked`] for the blocks in `only` (all when `None`).
    pub(crate) fn clean_lower_some(
        &self,
        file: FileId,
        only: Option<&HashSet<u64>>,
    ) -> io::Result<usize> {
        let Some(lower) = self.lower() else {
            return Ok(0);
        };
        // Detached or not: a detached tier is still asked (`read_dirty` tries the device) for
        // what it could not return before; if it still cannot, the cleaning fails, loudly.
        let Some(tier) = lower.dirty_tier_any().cloned() else {
            return Ok(0);
        };
        let Some(snap) = self.clean_snapshot(file, only)? else {
            return Ok(0);
        };
        let CleanSnap {
            fd,
            mode,
            size,
            fkey,
            version,
            blocks,
            mtime,
            shared,
        } = snap;
        // No write-through patches these blocks below while they are cleaned.
        let _below = crate::cache::lock(&shared.below);
        let wfd = self.writable_backing(file, &fd, mode)?;
        let before = wfd.metadata()?;
        // Hide the ctime our writes will cause (see `times`), as the flusher does.
        self.hide_backing_ctime(file, &before);
        let mut src = FromTier {
            file,
            tier: &*tier,
            fkey,
            version,
            buf: vec![0u8; self.bs()],
            seq: 0,
        };
        let result = self.write_runs(file, &wfd, size, &blocks, &mut src);
        // Our pwrites moved BACKING's mtime: put back the time of the writes — the logical one
        // while writes are pending, else what BACKING showed before.
        if let Some(t) = mtime.or_else(|| before.modified().ok()) {
            self.restore_backing_mtime(file, &wfd, t, "cleaning");
        }
        let RunsWritten {
            mut done,
            wrote_end,
            mut err,
        } = result;
        // A persistent tier's copies are let go (marked clean, or dropped) only once BACKING
        // has the bytes durably: else a power cut could lose what `fsync` acknowledged.
        if tier.info().persistent && !done.is_empty() {
            // A full fsync: the mtime put back above is what the tier's meta held.
            if let Err(e) = self.dev_sync(file, &wfd, false) {
                // This sync may have consumed the EIO of an earlier write-back of the file
                // (reported once per open file): the next fsync must still fail.
                if let Some(f) = self.lock().files_mut().get_mut(&file) {
                    f.durable_write_failed(&e);
                }
                done.clear();
                err.get_or_insert(e);
            }
        }
        let end_ctime = self.refresh_stamp(file, &wfd, Some(&FileStamp::from_metadata(&before)));
        let committed = self.clean_commit(file, &*tier, fkey, &done, end_ctime, wrote_end);
        for block in committed.drop_below {
            // With what the tier may have spilled of it since it became clean.
            lower.invalidate_from_dirty_tier(TierKey::new(fkey, block));
        }
        if let (true, Some(lower)) = (committed.drop_all_below, self.lower()) {
            lower.invalidate_file(fkey, 0);
        }
        match err {
            Some(e) => {
                log::error!(
                    "file {}: cleaning the lower tier to BACKING failed: {e}",
                    file.0
                );
                Err(e)
            }
            None => Ok(committed.cleaned),
        }
    }

    /// What cleaning takes from the file table: `None` when `file` has no lower-dirty block
    /// (in `only`, if given); an error for lower-dirty blocks without a BACKING handle.
    fn clean_snapshot(
        &self,
        file: FileId,
        only: Option<&HashSet<u64>>,
    ) -> io::Result<Option<CleanSnap>> {
        let eng = self.lock();
        let Some(f) = eng.files().get(&file) else {
            return Ok(None);
        };
        if f.lower_dirty().is_empty() {
            return Ok(None);
        }
        let (Some(fd), Some(fkey)) = (f.backing().cloned(), f.fkey()) else {
            return Err(io::Error::other(
                "lower-dirty blocks without a backing handle",
            ));
        };
        let blocks: Vec<u64> = f
            .lower_dirty()
            .iter()
            .filter(|b| only.is_none_or(|o| o.contains(b)))
            .copied()
            .collect();
        if blocks.is_empty() {
            return Ok(None);
        }
        Ok(Some(CleanSnap {
            fd,
            mode: f.backing_mode(),
            size: f.size(),
            fkey,
            version: f.version(),
            blocks,
            mtime: f.mtime(),
            shared: Arc::clone(f.shared()),
        }))
    }

    /// Commits a cleaning to the file table: the blocks written (`done`) are clean below
    /// unless written there again meanwhile, and no longer lower-dirty here; BACKING's ctime,
    /// size and sync need follow (`end_ctime`: its ctime after our writes; `wrote_end`: the
    /// end of the last run).
    fn clean_commit(
        &self,
        file: FileId,
        tier: &dyn DataTier,
        fkey: FileKey,
        done: &[CleanedBlock],
        end_ctime: Option<SystemTime>,
        wrote_end: u64,
    ) -> CleanCommitted {
        let mut eng = self.lock();
        eng.end_backing_write(file, end_ctime, wrote_end);
        let mut cleaned = 0;
        let mut drop_below = Vec::new();
        let mut drop_all_below = false;
        if let Some(f) = eng.files_mut().get_mut(&file) {
            for &CleanedBlock { block, seq } in done {
                let clean = match seq {
                    Some(seq) => tier
                        .cleaning()
                        .is_some_and(|c| c.mark_clean(&TierKey::new(fkey, block), seq)),
                    None => true,
                };
                if clean {
                    f.remove_lower_dirty(block);
                    cleaned += 1;
                    if f.blocks().contains(&block) {
                        // Memory holds it (maybe newer and dirty): the copy below, clean now,
                        // must not outlive it as the block's bytes. Dropped after the engine
                        // lock: memory's copy cannot go meanwhile without being clean and
                        // equal to it (a dirty block is never evicted).
                        drop_below.push(block);
                    }
                }
            }
            if f.lower_dirty().is_empty() && f.forgotten() && !f.keeps_clean_when_forgotten() {
                // Forgotten without a birth time: its identity may name another file later,
                // so nothing of it stays below once its data is on BACKING.
                drop_all_below = true;
            }
        }
        CleanCommitted {
            cleaned,
            drop_below,
            drop_all_below,
        }
    }

    /// Write-through tiers below get a clean copy of the blocks just written to BACKING (those
    /// whose slot still holds the bytes written: a block written again meanwhile is skipped).
    pub(crate) fn fill_written(&self, ident: Ident, copied: &[DirtySlot]) {
        let Ident {
            file,
            fkey,
            version,
            class,
        } = ident;
        let Some(lower) = self.lower().filter(|l| l.fills_on_write()) else {
            return;
        };
        let Some(shared) = self.lock().files().shared(&file) else {
            return;
        };
        for &DirtySlot { block, slot, seq } in copied {
            // The change counter before the bytes: a write after it makes the store void.
            let change = shared.change.load(std::sync::atomic::Ordering::SeqCst);
            let g = self.arena().read(slot);
            if !g.state().holds(Self::key(file, block))
                || self.arena().seq(slot).load(tiercache_memtier::arena::ORD) != seq
            {
                continue;
            }
            lower.after_write(
                TierKey::new(fkey, block),
                version,
                class,
                g.data(),
                &shared,
                change,
            );
        }
    }

    /// Newer bytes of blocks the dirty tier holds dirty went to BACKING: they are made
    /// durable there first, then the tier's older copies are discarded (durably), then the
    /// slots pinned for the window are let go. A crash before the discard brings the older,
    /// acknowledged copies back — never older bytes than the last acknowledged ones. If
    /// BACKING cannot sync, the newer bytes are stored over the older copies in the tier
    /// instead (it never turns down a block it holds dirty), and stay lower-dirty.
    pub(crate) fn discard_below(
        &self,
        file: FileId,
        fd: &File,
        discards: &[(TierKey, SlotId)],
        ident: Option<Ident>,
    ) {
        let Some(t) = self
            .lower()
            .as_ref()
            .and_then(|l| l.dirty_tier_any())
            .cloned()
        else {
            return;
        };
        let synced = self.dev_sync(file, fd, true);
        if let Err(e) = &synced {
            // The EIO of an earlier write-back may have been consumed here: the next fsync
            // must still fail.
            if let Some(f) = self.lock().files_mut().get_mut(&file) {
                f.durable_write_failed(e);
            }
        }
        for &(key, slot) in discards {
            let kept = match (&synced, ident) {
                (Err(_), Some(Ident { version, class, .. })) => {
                    let g = self.arena().read(slot);
                    let ok = g.state().holds(Self::key(file, key.block.0))
                        && matches!(
                            t.write_dirty(&key, version, class, g.data()),
                            Ok(tiercache_tier::Admit::Stored)
                        );
                    drop(g);
                    ok
                }
                _ => false,
            };
            if kept {
                if let Some(f) = self.lock().files_mut().get_mut(&file) {
                    f.add_lower_dirty([key.block.0]);
                }
            } else {
                if let Err(e) = &synced {
                    log::error!(
                        "file {}: BACKING could not sync block {} and the tier could not take \
                         it back ({e}); its older copy below is dropped",
                        file.0,
                        key.block.0
                    );
                }
                t.discard(&key);
            }
        }
        if synced.is_err() {
            if let Err(e) = t.sync() {
                log::error!("{e}");
            }
        }
        let mut eng = self.lock();
        for &(_, slot) in discards {
            eng.unpin(slot);
        }
    }

    /// Reads block `block` of `file` from the lower tiers for a read or read-modify-write of a
    /// block that was lower-dirty when the request was planned. `Ok(false)`: it is not any
    /// more — cleaned, or newer bytes written back — so BACKING has its bytes: read those.
    /// EIO when it still is and no tier can serve it (BACKING's bytes are older).
    pub(crate) fn read_lower_dirty(
        &self,
        file: FileId,
        fkey: FileKey,
        version: u64,
        block: u64,
        buf: &mut [u8],
    ) -> io::Result<bool> {
        let eio = || io::Error::from_raw_os_error(libc::EIO);
        let lower = self.lower().ok_or_else(eio)?;
        // A cleaning may take it from the tier between our plan and this read; then the
        // block has left `lower_dirty` first... after reaching BACKING. Look twice.
        for _ in 0..2 {
            if lower
                .read(TierKey::new(fkey, block), version, false, 0, buf)
                .is_some()
            {
                return Ok(true);
            }
            let still = self
                .lock()
                .files()
                .get(&file)
                .is_some_and(|f| f.lower_dirty().contains(&block));
            if !still {
                return Ok(false);
            }
        }
        // A tier that is degrading (or detached) no longer serves reads, but may still return
        // its dirty copy to the cleaner's path: that is the block's newest bytes.
        if let Some(t) = lower.dirty_tier_any() {
            let key = TierKey::new(fkey, block);
            if let Some(Ok(Some(_))) = t.cleaning().map(|c| c.read_dirty(&key, version, buf)) {
                return Ok(true);
            }
        }
        log::error!(
            "file {}: block {block} is only in the lower tier, which cannot serve it",
            file.0
        );
        Err(eio())
    }

    /// Cleans the dirty blocks a tier's cleaning policy named: grouped by file, each under its
    /// `io` lock — taken only if free (`own`: the caller holds it already), so a busy file
    /// waits for the next advice. Returns the blocks cleaned.
    pub(crate) fn clean_advised(&self, blocks: Vec<DirtyBlock>, own: Option<FileId>) -> usize {
        if blocks.is_empty() {
            return 0;
        }
        let mut by_key: HashMap<FileKey, HashSet<u64>> = HashMap::new();
        for b in blocks {
            by_key.entry(b.key.file).or_default().insert(b.key.block.0);
        }
        let files: Vec<(FileId, Arc<crate::file_state::FileShared>, HashSet<u64>)> = {
            let eng = self.lock();
            eng.files()
                .iter()
                .filter(|(_, f)| !f.lower_dirty().is_empty())
                .filter_map(|(id, f)| {
                    let set = by_key.remove(&f.fkey()?)?;
                    Some((*id, Arc::clone(f.shared()), set))
                })
                .collect()
        };
        if !by_key.is_empty() {
            log::debug!(
                "cleaning advice named blocks of {} files the cache does not know",
                by_key.len()
            );
        }
        let mut cleaned = 0;
        for (file, shared, set) in files {
            let r = if own == Some(file) {
                self.clean_lower_some(file, Some(&set))
            } else {
                let Ok(_io) = shared.io.try_lock() else {
                    continue;
                };
                let same = self.lock().files().is_same(&file, &shared);
                if !same {
                    continue; // replaced meanwhile: its own lock guards it
                }
                let r = self.clean_lower_some(file, Some(&set));
                let fd = self.lock().gc_file(file);
                drop(fd);
                r
            };
            // Errors are logged; the blocks stay dirty in the tier and are advised again.
            cleaned += r.unwrap_or(0);
        }
        if cleaned > 0 {
            if let Some(t) = self.lower().and_then(|l| l.dirty_tier()) {
                // `mark_clean` is lazy: make the cleaning durable (frees sets for good).
                if let Err(e) = t.sync() {
                    log::error!("{e}");
                }
            }
        }
        cleaned
    }

    /// The cleaning thread of a dirty tier with its own cleaning policy: ticks it and cleans
    /// what it (and reads) advise, until the cache stops.
    pub(crate) fn cleaner_loop(&self, period: std::time::Duration) {
        let Some(lower) = self.lower().cloned() else {
            return;
        };
        let Some(tier) = lower.dirty_tier().cloned() else {
            return;
        };
        loop {
            if !self.wake().wait_once(period) {
                return;
            }
            if lower.dirty_tier_detaching() {
                self.detach_dirty_tier(&lower);
                return;
            }
            let mut blocks = lower.take_advised();
            if let Some(CleanAdvice::Clean(b)) = tier.cleaning().map(|c| c.on_tick()) {
                blocks.extend(b);
            }
            self.clean_advised(blocks, None);
        }
    }

    /// The dirty tier asks to be detached (device errors): every file's dirty blocks there
    /// are written to BACKING where they can still be read, then the tier is no longer used.
    /// Blocks that could not be read stay listed: reading them fails with EIO rather than
    /// returning BACKING's older bytes.
    fn detach_dirty_tier(&self, lower: &crate::lower::Lower) {
        let files: Vec<(FileId, Arc<crate::file_state::FileShared>)> = self.files_below();
        let mut failed = 0usize;
        for (file, shared) in files {
            let _io = crate::cache::lock(&shared.io);
            if let Err(e) = self.clean_lower_locked(file) {
                failed += 1;
                log::error!("file {}: cleaning before detaching the tier: {e}", file.0);
            }
        }
        // Best effort: the cleanings' `mark_clean`s durable, so a restart does not bring back
        // (and write again) what is on BACKING now.
        if let Some(t) = lower.dirty_tier() {
            if let Err(e) = t.sync() {
                log::warn!("{e}");
            }
        }
        lower.detach_dirty_tier();
        if failed > 0 {
            log::error!("{failed} files kept dirty blocks the detached tier could not return");
        }
    }

    /// The files with blocks whose newest bytes are only below, with their per-file locks.
    pub(crate) fn files_below(&self) -> Vec<(FileId, Arc<crate::file_state::FileShared>)> {
        self.lock()
            .files()
            .iter()
            .filter(|(_, f)| !f.lower_dirty().is_empty())
            .map(|(id, f)| (*id, Arc::clone(f.shared())))
            .collect()
    }

    /// One cleaning round of the flusher: files with lower-dirty blocks, cleaned to BACKING
    /// (a file being written back by someone else is skipped this round). A dirty tier with a
    /// cleaning policy of its own is cleaned by `cleaner_loop` instead.
    pub(crate) fn clean_lower_round(&self) {
        if self
            .lower()
            .as_ref()
            .and_then(|l| l.dirty_tier())
            .and_then(|t| t.cleaning())
            .is_some_and(|c| c.has_policy())
        {
            return;
        }
        let files: Vec<(FileId, Arc<crate::file_state::FileShared>)> = self.files_below();
        for (file, shared) in files {
            let Ok(_io) = shared.io.try_lock() else {
                continue;
            };
            // Errors are logged; the blocks stay dirty in the tier and are retried.
            let _ = self.clean_lower_locked(file);
            let fd = self.lock().gc_file(file);
            drop(fd);
        }
    }
}
