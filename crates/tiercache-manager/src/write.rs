//! The write path (write-back caching, write-through when no slot can be had) and `truncate`.
//!
//! Steps of one write: throttle first (help flush while dirty blocks exceed the dirty ratio,
//! holding no lock); then (1) under the engine lock count each block (`Tier::lookup`), pin hits,
//! give misses fresh slots, or — `Retry`, everything pinned or dirty — register the block as a
//! write-through in flight; bump the file generation; (2) without the engine lock, block by
//! block in offset order: for a cached block make it whole first if it is not valid
//! (read-modify-write for a partial write inside BACKING's size — BACKING is read with no slot
//! lock held, then the slot's write lock taken; zeros otherwise), copy the bytes in; for a write-through block `pwrite` it to BACKING; (3) under
//! the engine lock commit: mark written slots dirty (bumping their dirty sequence), unpin,
//! extend the logical size, end the write-throughs.
//!
//! Invariants: data is never lost — a block either lands in a slot that is dirty (never
//! evicted) until written back, or is written to BACKING before `write` returns; the write
//! stops at the first failing block and reports the bytes before it (or the error).

use crate::cache::{lock, read_lock, try_read_lock, write_lock, Inner};
use crate::engine::Dropped;
use crate::error::unknown_file;
use crate::file_state::{same_state, FileShared};
use crate::stamp::FileStamp;
use crate::stats::Counters;
use crate::NoWait;
use std::fs::File;
use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Instant, SystemTime};
use tiercache_core::Class;
use tiercache_core::{BlockKey, FileId, SlotId};
use tiercache_memtier::arena::SlotState;
use tiercache_tier::{Admit, FileKey, StoreExt, TierKey};

#[derive(Debug, Clone, Copy)]
enum WPlan {
    /// A pinned slot (resident, or fresh and not valid yet).
    Cached(SlotId),
    /// No slot: write straight to BACKING (registered in `wt_inflight`).
    Through,
}

#[derive(Debug)]
struct WritePlan {
    fd: Arc<File>,
    /// Access mode of `fd`.
    mode: i32,
    size: u64,
    backing_size: u64,
    steps: Vec<(u64, WPlan)>,
    shared: Arc<FileShared>,
    fkey: Option<FileKey>,
    version: u64,
    /// The blocks of the range whose newest bytes are only in the tier below (see `lower_wb`).
    lower_dirty: Vec<u64>,
    /// A no-wait write that invalidated the tiers below at its plan, counted in
    /// `FileShared::no_wait_writes` until its finish (see [`Inner::try_write`]).
    invalidated_below: bool,
}

/// What step (2) achieved.
#[derive(Debug, Default)]
struct Done {
    /// Bytes written, a prefix of the request.
    bytes: usize,
    /// Cached blocks whose bytes were copied in.
    cached: Vec<(BlockKey, SlotId)>,
    /// End offset of the last write-through that succeeded (0 = none).
    through_end: u64,
    through_blocks: u64,
}

impl Inner {
    pub(crate) fn write(&self, file: FileId, offset: u64, data: &[u8]) -> io::Result<usize> {
        if data.is_empty() {
            return Ok(0);
        }
        let end = offset
            .checked_add(data.len() as u64)
            .filter(|&e| e <= i64::MAX as u64)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EFBIG))?;
        self.throttle();
        let shared = self.shared(file)?;
        let _op = read_lock(&shared.op);
        let plan = match self.plan_write(file, &shared, offset, end, false)? {
            Ok(plan) => plan,
            // Only a no-wait plan hands a write back; kept as an error rather than a panic.
            Err(_) => {
                return Err(io::Error::other(
                    "memory tier: a waiting write was handed back",
                ))
            }
        };
        self.write_planned(file, &plan, offset, end, data)
    }

    /// Steps (2) and (3) of a planned write.
    fn write_planned(
        &self,
        file: FileId,
        plan: &WritePlan,
        offset: u64,
        end: u64,
        data: &[u8],
    ) -> io::Result<usize> {
        // BACKING's stamp before a write-through (see `versions`).
        let before = plan
            .steps
            .iter()
            .any(|(_, s)| matches!(s, WPlan::Through))
            .then(|| FileStamp::of_file(&plan.fd).ok())
            .flatten();
        let (done, err) = self.run_write(file, plan, offset, end, data);
        self.finish_write(file, plan, offset, &done);
        if done.through_blocks > 0 {
            self.refresh_stamp(file, &plan.fd, before.as_ref());
        }
        match err {
            Some(e) if done.bytes == 0 => Err(e),
            _ => Ok(done.bytes),
        }
    }

    /// [`Inner::write`] if it needs no I/O and no wait: below the dirty limit (no throttling),
    /// every block resident and valid or written whole (or past BACKING's end and not only in
    /// a lower tier, so no read-modify-write), a slot for each, and the clean copies
    /// below dropped at once (`DataTier::try_invalidate`: not while a tier's lock is held
    /// across its I/O). Otherwise nothing is written and the answer is to wait, in the file's
    /// class.
    ///
    /// Below-memory copies are dropped once, at the plan, not again at the finish as a
    /// waiting write does: from before the plan's change bump until after the finish's,
    /// `FileShared::no_wait_writes` makes every lower-tier store of the file void, so none
    /// can bring old bytes back meanwhile (a store made before the bump is dropped by the
    /// invalidation, which takes each tier's lock after it).
    pub(crate) fn try_write(&self, file: FileId, offset: u64, data: &[u8]) -> NoWait<usize> {
        if data.is_empty() {
            return NoWait::Done(Ok(0));
        }
        let Some(end) = offset
            .checked_add(data.len() as u64)
            .filter(|&e| e <= i64::MAX as u64)
        else {
            return NoWait::Done(Err(io::Error::from_raw_os_error(libc::EFBIG)));
        };
        let class = || self.class_of(file).unwrap_or(Class::NORMAL);
        let shared = match self.shared(file) {
            Ok(s) => s,
            Err(e) => return NoWait::Done(Err(e)),
        };
        let Some(_op) = try_read_lock(&shared.op) else {
            return NoWait::Wait(class());
        };
        match self.plan_write(file, &shared, offset, end, true) {
            Ok(Ok(plan)) => NoWait::Done(self.write_planned(file, &plan, offset, end, data)),
            Ok(Err(class)) => NoWait::Wait(class),
            Err(e) => NoWait::Done(Err(e)),
        }
    }

    /// Whether a no-wait write of `offset..end` can be planned (see [`Inner::try_write`]),
    /// checked under the engine lock before anything is counted.
    fn writes_without_io(
        &self,
        eng: &crate::engine::Engine,
        f: &crate::file_state::FileState,
        file: FileId,
        offset: u64,
        end: u64,
    ) -> bool {
        let (b0, b1) = (offset >> self.shift(), (end - 1) >> self.shift());
        if eng.dirty_blocks() > self.dirty_limit() {
            return false;
        }
        let bs = self.bs() as u64;
        (b0..=b1).all(|block| {
            let key = Self::key(file, block);
            let bstart = block << self.shift();
            let partial = offset > bstart || end < bstart + bs;
            // A block whose newest bytes are only below is read from there unless written whole
            // (then memory takes it dirty, as a waiting write does; the copy below stays until
            // write-back reaches it).
            let needs_old =
                partial && (bstart < f.backing_size() || f.lower_dirty().contains(&block));
            match eng.tier().peek(&key) {
                Some(slot) => {
                    !needs_old || self.arena().try_state(slot).is_some_and(|st| st.holds(key))
                }
                None => !needs_old && !eng.writing_through(&key),
            }
        })
    }

    /// Step (1). With `no_wait`, `Ok(Err(class))` when the write would need I/O or a wait (see
    /// [`Inner::try_write`]); then nothing was planned.
    fn plan_write(
        &self,
        file: FileId,
        shared: &Arc<FileShared>,
        offset: u64,
        end: u64,
        no_wait: bool,
    ) -> io::Result<Result<WritePlan, Class>> {
        let (b0, b1) = (offset >> self.shift(), (end - 1) >> self.shift());
        // Allocated before the engine lock.
        let mut steps = Vec::with_capacity((b1 - b0 + 1) as usize);
        let mut eng = self.lock();
        let f = eng.files().get(&file).ok_or_else(|| unknown_file(file))?;
        same_state(f, shared, file)?;
        if no_wait && !self.writes_without_io(&eng, f, file, offset, end) {
            return Ok(Err(f.class()));
        }
        let fd = f.backing().cloned().ok_or_else(|| unknown_file(file))?;
        let f = eng
            .files_mut()
            .get_mut(&file)
            .ok_or_else(|| unknown_file(file))?;
        f.begin_write();
        // Counted before the change bump (see `try_write`).
        let invalidated_below = no_wait && self.lower().is_some() && f.fkey().is_some();
        if invalidated_below {
            f.shared().no_wait_writes.fetch_add(1, Ordering::SeqCst);
        }
        f.shared().change.fetch_add(1, Ordering::SeqCst);
        let (mode, size, backing_size, class, fkey, version) = (
            f.backing_mode(),
            f.size(),
            f.backing_size(),
            f.class(),
            f.fkey(),
            f.version(),
        );
        let lower_dirty: Vec<u64> = if f.lower_dirty().is_empty() {
            Vec::new()
        } else {
            f.lower_dirty().range(b0..=b1).copied().collect()
        };
        for block in b0..=b1 {
            let key = Self::key(file, block);
            eng.trace(key, true, class);
            let plan = match eng.lookup(key, class) {
                Some(slot) => {
                    eng.pin(slot);
                    WPlan::Cached(slot)
                }
                None => match eng.insert_fresh(self.arena(), key, class) {
                    Some(slot) => WPlan::Cached(slot),
                    None if no_wait => {
                        // Every slot pinned or dirty.
                        self.give_back(&mut eng, file, &steps, shared, invalidated_below);
                        return Ok(Err(class));
                    }
                    None => {
                        eng.begin_write_through(key);
                        WPlan::Through
                    }
                },
            };
            steps.push((block, plan));
        }
        if invalidated_below && !self.invalidate_below_now(fkey, b0..=b1) {
            self.give_back(&mut eng, file, &steps, shared, true);
            return Ok(Err(class));
        }
        Ok(Ok(WritePlan {
            fd,
            mode,
            size,
            backing_size,
            steps,
            shared: Arc::clone(shared),
            fkey,
            version,
            lower_dirty,
            invalidated_below,
        }))
    }

    /// A no-wait plan that cannot go on gives back its slots (the blocks looked up are counted
    /// again by the waiting write). The change bump stays: it only voids stores below.
    fn give_back(
        &self,
        eng: &mut crate::engine::Engine,
        file: FileId,
        steps: &[(u64, WPlan)],
        shared: &FileShared,
        invalidated_below: bool,
    ) {
        for &(block, step) in steps {
            if let WPlan::Cached(slot) = step {
                eng.unpin(slot);
                eng.reap(self.arena(), Self::key(file, block), slot);
            }
        }
        if invalidated_below {
            shared.no_wait_writes.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Drops the clean copies below memory of `blocks` of `fkey` without waiting; `false` if
    /// some tier could not at once (some copies may be gone: harmless, they were stale).
    fn invalidate_below_now(
        &self,
        fkey: Option<FileKey>,
        blocks: std::ops::RangeInclusive<u64>,
    ) -> bool {
        match (self.lower(), fkey) {
            (Some(lower), Some(fk)) => blocks
                .into_iter()
                .all(|block| lower.try_invalidate(TierKey::new(fk, block))),
            _ => true,
        }
    }

    /// Step (2). Returns what was done and the error that stopped it, if any.
    fn run_write(
        &self,
        file: FileId,
        plan: &WritePlan,
        offset: u64,
        end: u64,
        data: &[u8],
    ) -> (Done, Option<io::Error>) {
        let bs = self.bs() as u64;
        let mut done = Done::default();
        // For write-throughs: the backing handle, or a read-write reopen of a read-only one.
        let mut through_fd: Option<Arc<File>> = None;
        for &(block, step) in &plan.steps {
            let bstart = block << self.shift();
            let (lo, hi) = (bstart.max(offset), (bstart + bs).min(end));
            let chunk = &data[(lo - offset) as usize..(hi - offset) as usize];
            let result = match step {
                WPlan::Cached(slot) => {
                    let key = Self::key(file, block);
                    self.write_slot(file, plan, key, slot, (lo - bstart) as usize, chunk)
                        .map(|()| done.cached.push((key, slot)))
                }
                WPlan::Through if plan.lower_dirty.contains(&block) => self
                    .write_through_below(file, plan, block, (lo - bstart) as usize, chunk)
                    .map(|on_backing| {
                        if on_backing {
                            done.through_end = hi;
                        }
                        done.through_blocks += 1;
                    }),
                WPlan::Through => {
                    let fd = match through_fd.take() {
                        Some(fd) => Ok(fd),
                        None => self.writable_backing(file, &plan.fd, plan.mode),
                    };
                    fd.and_then(|fd| {
                        let r = self.dev_write(file, &fd, chunk, lo);
                        through_fd = Some(fd);
                        r
                    })
                    .map(|()| {
                        done.through_end = hi;
                        done.through_blocks += 1;
                    })
                }
            };
            match result {
                Ok(()) => done.bytes += chunk.len(),
                Err(e) => {
                    log::warn!("file {}: write at {lo} failed: {e}", file.0);
                    return (done, Some(e));
                }
            }
        }
        (done, None)
    }

    /// Forgets the lower-dirty blocks of `file` from `first` on (past a new EOF: meaningless).
    fn drop_lower_dirty_from(&self, file: FileId, first: u64) {
        let mut eng = self.lock();
        let Some(f) = eng.files_mut().get_mut(&file) else {
            return;
        };
        // Detached or not: its older copies must not come back after a crash.
        let (Some(fk), Some(tier)) = (f.fkey(), self.lower().and_then(|l| l.dirty_tier_any()))
        else {
            return;
        };
        let gone = f.lower_dirty_gone_from(first);
        if gone.is_empty() {
            return;
        }
        let tier = Arc::clone(tier);
        drop(eng);
        // Outside the engine lock: the caller holds the file's `io` and `op` locks. One call
        // for the whole tail (one durable record per set, not per block).
        tier.invalidate_file(&fk, first);
    }

    /// A write-through (no memory slot) of a block whose newest bytes are in the tier below:
    /// patched there, where it stays dirty (a tier never turns down a block it holds dirty),
    /// so a later cleaning cannot write older bytes over it on BACKING. Returns whether it
    /// went to BACKING after all (cleaned meanwhile, or the tier could not take it).
    fn write_through_below(
        &self,
        file: FileId,
        plan: &WritePlan,
        block: u64,
        at: usize,
        chunk: &[u8],
    ) -> io::Result<bool> {
        let eio = || io::Error::from_raw_os_error(libc::EIO);
        let fk = plan.fkey.ok_or_else(eio)?;
        // Detached or not: a detached tier's `write_dirty` fails and the block goes to BACKING.
        let tier = self
            .lower()
            .as_ref()
            .and_then(|l| l.dirty_tier_any())
            .ok_or_else(eio)?;
        // One patch at a time, and none while the file is being cleaned: the block stays
        // lower-dirty from the read below to the store (no lost update, nothing untracked).
        let _below = lock(&plan.shared.below);
        let mut buf = vec![0u8; self.bs()];
        if !self.read_lower_dirty(file, fk, plan.version, block, &mut buf)? {
            // Cleaned meanwhile: an ordinary write-through to BACKING.
            let fd = self.writable_backing(file, &plan.fd, plan.mode)?;
            self.dev_write(file, &fd, chunk, (block << self.shift()) + at as u64)?;
            return Ok(true);
        }
        buf[at..at + chunk.len()].copy_from_slice(chunk);
        let end = (block << self.shift()) + (at + chunk.len()) as u64;
        let (class, size, handle) = {
            let eng = self.lock();
            let f = eng.files().get(&file);
            (
                f.map_or(Class::NORMAL, |f| f.class()),
                f.map_or(end, |f| f.size().max(end)),
                f.and_then(|f| f.handle().cloned()),
            )
        };
        let now = SystemTime::now();
        if tier.info().persistent {
            // The size this write may make the file is kept with the block (an append).
            // (The file has a handle: it has blocks there.)
            if let Some(h) = self.handle_of(file, &plan.fd, handle) {
                let meta = crate::wb_types::file_meta(size, now, h);
                if let Some(p) = tier.persistence() {
                    p.set_file_meta(&fk, &meta);
                }
            }
        }
        let key = TierKey::new(fk, block);
        match tier.write_dirty(&key, plan.version, class, &buf) {
            Ok(Admit::Stored) => {
                if let Some(f) = self.lock().files_mut().get_mut(&file) {
                    f.add_lower_dirty([block]);
                    // The write's time, for `stat` and for the cleaning that restores it.
                    f.set_mtime(Some(now));
                }
                Ok(false)
            }
            r => {
                // The tier cannot take its own dirty block (device error, detaching): the
                // whole merged block goes to BACKING, durably, and the tier's older copy is
                // dropped — never left to be cleaned over it, nor served later.
                match r {
                    Err(e) => log::error!("file {}: {e}; block {block} goes to BACKING", file.0),
                    _ => log::error!(
                        "file {}: tier turned down its own dirty block {block}; it goes to BACKING",
                        file.0
                    ),
                }
                let fd = self.writable_backing(file, &plan.fd, plan.mode)?;
                let start = block << self.shift();
                let n = usize::try_from(size.saturating_sub(start))
                    .unwrap_or(self.bs())
                    .min(self.bs());
                self.dev_write(file, &fd, &buf[..n], start)?;
                self.dev_sync(file, &fd, true)?;
                if let Some(f) = self.lock().files_mut().get_mut(&file) {
                    f.remove_lower_dirty(block);
                }
                tier.discard(&key);
                Ok(true)
            }
        }
    }

    /// Copies `chunk` into `slot` at `at`, making the block whole first if it is not valid.
    fn write_slot(
        &self,
        file: FileId,
        plan: &WritePlan,
        key: BlockKey,
        slot: SlotId,
        at: usize,
        chunk: &[u8],
    ) -> io::Result<()> {
        let bs = self.bs();
        let bstart = key.block.0 << self.shift();
        let partial = at > 0 || at + chunk.len() < bs;
        // A block only below may lie past what BACKING holds: its bytes are still the old ones.
        let needs_old =
            partial && (bstart < plan.backing_size || plan.lower_dirty.contains(&key.block.0));
        // Read-modify-write: the rest of the block comes from BACKING, read with no slot lock
        // held (a reader of the slot never waits for BACKING), and unused if someone made the
        // block whole meanwhile.
        let mut old: Option<Vec<u8>> = None;
        let mut g = loop {
            let g = self.arena().write(slot);
            let st = g.state();
            if st.key != Some(key) {
                // Cannot happen: the slot is pinned, so it still belongs to `key`.
                return Err(io::Error::other("memory tier: pinned slot changed owner"));
            }
            if st.holds(key) || !needs_old || old.is_some() {
                break g;
            }
            drop(g);
            let mut buf = vec![0u8; bs];
            let below = match (plan.fkey, plan.lower_dirty.contains(&key.block.0)) {
                (Some(fk), true) => {
                    self.read_lower_dirty(file, fk, plan.version, key.block.0, &mut buf)?
                }
                _ => false,
            };
            match below {
                true => crate::read::zero_past_eof(&mut buf, bstart, plan.size),
                false => self.read_backing(file, &plan.fd, &mut buf, bstart, plan.size)?,
            }
            old = Some(buf);
        };
        if !g.state().holds(key) {
            match &old {
                Some(buf) => g.data_mut().copy_from_slice(buf),
                None => g.data_mut().fill(0),
            }
            g.set_state(SlotState {
                key: Some(key),
                valid: true,
            });
        }
        g.data_mut()[at..at + chunk.len()].copy_from_slice(chunk);
        Ok(())
    }

    /// Step (3).
    fn finish_write(&self, file: FileId, plan: &WritePlan, offset: u64, done: &Done) {
        let now = Instant::now();
        let wall = SystemTime::now();
        if plan.invalidated_below {
            // Dropped at the plan; stores below are void until this bump (see `try_write`).
            plan.shared.change.fetch_add(1, Ordering::SeqCst);
            plan.shared.no_wait_writes.fetch_sub(1, Ordering::SeqCst);
        } else if let (Some(lower), Some(fk)) = (self.lower(), plan.fkey) {
            // Copies below memory of the blocks written are stale (dirty ones there stay until
            // the newer bytes reach them by write-back).
            plan.shared.change.fetch_add(1, Ordering::SeqCst);
            for &(block, _) in &plan.steps {
                lower.invalidate(TierKey::new(fk, block));
            }
        }
        let kick = {
            let mut eng = self.lock();
            for &(key, slot) in &done.cached {
                eng.commit_write(self.arena(), key, slot, now);
            }
            for &(block, step) in &plan.steps {
                let key = Self::key(file, block);
                match step {
                    WPlan::Cached(slot) => {
                        eng.unpin(slot);
                        eng.reap(self.arena(), key, slot);
                    }
                    WPlan::Through => {
                        eng.end_write_through(key);
                    }
                }
            }
            if let Some(f) = eng.files_mut().get_mut(&file) {
                let new_end = offset + done.bytes as u64;
                if done.bytes > 0 {
                    f.extend_size(new_end);
                }
                if done.through_blocks > 0 {
                    f.wrote_through(done.through_end);
                }
                // The write's modification time, until write-back puts it on BACKING (a
                // write-through alone already moved BACKING's own).
                if done.bytes > 0 && !f.dirty().is_empty() {
                    f.set_mtime(Some(wall));
                }
            }
            eng.dirty_blocks() > self.dirty_bg_limit()
        };
        Counters::add(&self.counters().write_through_blocks, done.through_blocks);
        if kick {
            self.kick_flusher();
        }
    }

    /// Sets the size of `file` to `new_size`, BACKING first: through `given` (a writable
    /// descriptor of the file) when there is one, else through the file's backing handle (a
    /// read-write reopen of it if it is read-only). With `given`, a file the tier does not know
    /// (any more) is simply truncated on BACKING. With `grow_only`, a file already at least
    /// `new_size` long (checked under the file's locks) is left alone.
    pub(crate) fn truncate(
        &self,
        file: FileId,
        given: Option<&File>,
        new_size: u64,
        grow_only: bool,
    ) -> io::Result<()> {
        // A state that goes away (closed and evicted, or forgotten) while we wait for its locks
        // sends us round again.
        let mut tries = 0;
        loop {
            tries += 1;
            let shared = match (self.shared(file), given) {
                (Ok(shared), _) => shared,
                (Err(_), Some(fd)) => return self.device().set_len(file, fd, new_size),
                (Err(e), None) => return Err(e),
            };
            let _io = lock(&shared.io);
            let _op = write_lock(&shared.op);
            let stored = {
                let eng = self.lock();
                let f = match eng.files().get(&file) {
                    Some(f) => f,
                    None if given.is_some() => continue,
                    None => return Err(unknown_file(file)),
                };
                if !Arc::ptr_eq(f.shared(), &shared) {
                    if given.is_some() && tries < 8 {
                        continue;
                    }
                    same_state(f, &shared, file)?;
                }
                if grow_only && f.size() >= new_size {
                    return Ok(());
                }
                f.backing().cloned().map(|fd| (fd, f.backing_mode()))
            };
            // Held until the state is updated: the stored handle may be a fresh reopen.
            let owned;
            let fd: &File = match (given, stored) {
                (Some(fd), _) => fd,
                (None, Some((fd, mode))) => {
                    owned = self.writable_backing(file, &fd, mode)?;
                    &owned
                }
                (None, None) => return Err(unknown_file(file)),
            };
            return self.truncate_locked(file, fd, new_size);
        }
    }

    /// [`Inner::truncate`] for a caller that holds the file's `io` and `op` locks; `fd` is a
    /// writable descriptor of the file.
    fn truncate_locked(&self, file: FileId, fd: &File, new_size: u64) -> io::Result<()> {
        // The rest of what is only below goes to BACKING first (the tail block's bytes past
        // the new EOF are cut by the truncation).
        if self.clean_lower_locked(file)? > 0 {
            // A persistent tier's lazy `mark_clean`s made durable before the size changes: no
            // record may bring back those blocks, with the old size, after a crash.
            if let Some(t) = self.lower().and_then(|l| l.dirty_tier()) {
                if t.info().persistent {
                    t.sync().map_err(io::Error::from)?;
                }
            }
        }
        // Recorded after the truncate only if this was the recorded stamp (see `versions`).
        let before = FileStamp::of_file(fd).ok();
        self.device().set_len(file, fd, new_size)?;
        // Only once BACKING took the new size: a failed truncate keeps the tail's bytes.
        self.drop_lower_dirty_from(file, new_size.div_ceil(self.bs() as u64));
        let invalidate_below;
        // BACKING's mtime is the truncate's now; dirty blocks left must not move it when written
        // back.
        let stamp = match FileStamp::of_file(fd) {
            Ok(s) => Some(s),
            Err(e) => {
                log::warn!("file {}: fstat after truncate failed: {e}", file.0);
                None
            }
        };
        {
            let mut eng = self.lock();
            let Some(f) = eng.files_mut().get_mut(&file) else {
                return Ok(());
            };
            // Below, after the engine lock (tier I/O must not stall other files); the file is
            // quiesced (`io` + `op`), and the copies there carry the old content version.
            invalidate_below = f.fkey();
            let old_size = f.size();
            f.truncated(new_size);
            if new_size < old_size {
                let bs = self.bs() as u64;
                let gone: Vec<u64> = f.blocks().range(new_size.div_ceil(bs)..).copied().collect();
                for block in gone {
                    let key = Self::key(file, block);
                    if eng.drop_block(key, true) == Dropped::Pinned {
                        log::error!("file {}: block {block} pinned during truncate", file.0);
                    }
                }
                let tail = (new_size % bs) as usize;
                let key = Self::key(file, new_size >> self.shift());
                if let (true, Some(slot)) = (tail != 0, eng.tier().peek(&key)) {
                    // Unpinned (the file is quiesced), so nobody holds its lock.
                    match self.arena().try_write(slot) {
                        Some(mut g) if g.state().holds(key) => g.data_mut()[tail..].fill(0),
                        Some(_) => {}
                        None => log::error!("file {}: tail block locked in truncate", file.0),
                    }
                }
            }
            if let Some(f) = eng.files_mut().get_mut(&file) {
                if let Some(stamp) = stamp {
                    if before.is_none_or(|b| b == f.stamp()) {
                        f.record_stamp(stamp);
                    }
                }
                let mtime = match (f.dirty().is_empty(), stamp) {
                    (true, _) => None,
                    (false, Some(stamp)) => Some(stamp.mtime),
                    (false, None) => f.mtime(),
                };
                f.set_mtime(mtime);
            }
        }
        if let (Some(lower), Some(fk)) = (self.lower(), invalidate_below) {
            lower.invalidate_file(fk, new_size >> self.shift());
        }
        Ok(())
    }
}
