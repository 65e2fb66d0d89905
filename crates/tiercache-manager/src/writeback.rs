//! One file's write-back (`flush_file`): take the file's `io` lock; under the engine lock
//! pin its dirty blocks (in offset order) and note the logical size and each block's dirty
//! sequence; then, with no engine lock, the run writer (`backing_write`) copies each block
//! under its slot's *shared* lock (readers are never blocked by this) into a run buffer —
//! contiguous blocks merged, up to 1 MiB per run, the block holding EOF clipped at EOF — and
//! `pwrite`s each run; then set BACKING's mtime to the file's logical mtime of the snapshot
//! (the time of the writes, not of their write-back); finally, under the engine lock, mark clean
//! each written block whose dirty sequence did not move since the snapshot (a write committed
//! after it may have moved EOF past the clip), and unpin.
//!
//! Invariants: data not known to be on BACKING is never marked clean (a failed run leaves its
//! blocks dirty; the error is remembered for the file's next `fsync`/`flush` when it happened in
//! the background, and returned directly otherwise); a block re-dirtied during its write-back
//! stays dirty; `fsync` returns only after the file's dirty blocks at the time of the call are
//! written and BACKING is synced. Write-back writes through the file's backing handle, or — when
//! only a read-only one is at hand — through a read-write reopen of it made at that moment; if
//! that reopen fails, its errno is the write-back's error.
//!
//! Errors are logged once per file when they start, then at most once a minute with the count
//! of failures in between (the flusher retries every interval), and once when write-back works
//! again.

use crate::backing_write::RunSource;
use crate::cache::{lock, Inner};
use crate::stamp::FileStamp;
use crate::stats::Counters;
use crate::wb_types::{file_meta, DirtySlot, Ident, RunsWritten, StoredBelow};
use std::collections::HashSet;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::{Arc, TryLockError};
use std::time::{Instant, SystemTime};
use tiercache_core::{FileId, SlotId};
use tiercache_tier::{DataTier, FileHandle, TierKey};

/// Why a file is written back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Why {
    /// Flusher thread: skip a file already being written back; remember errors.
    Background,
    /// A writer over the dirty limit: remember errors (they may not be its file's).
    Throttle,
    /// `fsync`: wait, return errors, then sync the file (`true` = data only).
    Sync(bool),
    /// `flush_all`: as `Sync`, but the sync is one `syncfs` for all files, afterwards.
    FlushAll,
    /// `forget` (the caller holds the `io` lock): return errors, no sync. Errors are not
    /// remembered for a later `fsync`/`flush`: nobody has the file open, and its data stays
    /// dirty and is retried (a later `fsync` of it reports a failure that persists).
    Forget,
}

/// What a write-back takes from the file table under the engine lock
/// ([`Inner::flush_snapshot`]).
struct FlushSnap {
    fd: Arc<File>,
    /// `fd`'s access mode (a read-only one is reopened read-write to write).
    mode: i32,
    size: u64,
    /// The time of the writes, to put back on BACKING after ours (`None`: BACKING's own).
    mtime: Option<SystemTime>,
    /// The dirty blocks to write (ascending), pinned until the commit.
    list: Vec<DirtySlot>,
    /// Persistent identity, version and class (`None`: no tier below may hold the file).
    ident: Option<Ident>,
    /// The file's handle, if known (a persistent tier keeps it with the blocks).
    handle: Option<FileHandle>,
    /// The time of the writes a persistent tier keeps with the blocks.
    meta_mtime: SystemTime,
    /// Some of the file's newest blocks are dirty below.
    lower_dirty: bool,
    /// Blocks dirty both here and below.
    held: HashSet<u64>,
}

/// What writing to BACKING did ([`Inner::flush_to_backing`]).
struct BackingWrite {
    /// The descriptor written through (a read-write reopen, or the snapshot's).
    fd: Arc<File>,
    /// The blocks written (or past EOF), the end of the furthest byte written, the first
    /// error (the blocks not written stay dirty).
    runs: RunsWritten<DirtySlot>,
    /// The snapshot's mtime was put back on BACKING.
    mtime_applied: bool,
    /// BACKING's ctime after our writes, recorded as ours.
    end_ctime: Option<SystemTime>,
}

/// What committing a write-back found ([`Inner::flush_commit`]).
struct Committed {
    /// Blocks that became clean here.
    cleaned: usize,
    /// A failure to log (with how many went unlogged since).
    log_err: Option<u64>,
    /// Write-back works again (with how many failures went unlogged).
    recovered: Option<u64>,
    /// Older dirty copies below of blocks now on BACKING (their slots still pinned).
    discards: Vec<(TierKey, SlotId)>,
    /// The file's descriptor, if the file left the table (closed outside the lock).
    fd_to_close: Option<Arc<File>>,
}

impl Inner {
    /// Writes back the dirty blocks of `file`; returns how many became clean.
    pub(crate) fn flush_file(&self, file: FileId, why: Why) -> io::Result<usize> {
        let Some(shared) = self.lock().files().shared(&file) else {
            return Ok(0);
        };
        let _io = match (why, shared.io.try_lock()) {
            (_, Ok(g)) => g,
            (_, Err(TryLockError::Poisoned(p))) => p.into_inner(),
            (Why::Background, Err(TryLockError::WouldBlock)) => return Ok(0),
            (_, Err(TryLockError::WouldBlock)) => lock(&shared.io),
        };
        self.flush_locked(file, why)
    }

    /// [`Inner::flush_file`] for a caller that holds the file's `io` lock. The write-back
    /// pipeline: snapshot the dirty blocks ([`Self::flush_snapshot`]), store them in the tier
    /// below that takes dirty data, write what it turns down to BACKING
    /// ([`Self::flush_to_backing`]), commit the outcome to the file table
    /// ([`Self::flush_commit`]), then report and, for `fsync`, sync.
    pub(crate) fn flush_locked(&self, file: FileId, why: Why) -> io::Result<usize> {
        // `forget` writes to BACKING too: what it leaves may be dropped with the inode's id.
        // `forget` writes to BACKING whatever the tier below: the state may go right after.
        let to_durable = matches!(why, Why::Sync(_) | Why::FlushAll | Why::Forget);
        let below = match why {
            Why::Forget => None,
            _ => self.dirty_tier_for(to_durable),
        };
        // A cleaning that fails (a block a detached tier cannot return) does not hold back
        // memory's newer blocks: they are written, then the error is returned.
        let mut clean_err = None;
        if below.is_none() && to_durable {
            // fsync/flush to BACKING: the file's bytes in a volatile tier below go first (the
            // newer ones in memory then overwrite them).
            if let Err(e) = self.clean_lower_locked(file) {
                clean_err = Some(e);
            }
        }
        let Some(snap) = self.flush_snapshot(file, why) else {
            return Ok(0);
        };
        let below_store = self.flush_meta_below(file, below.as_ref(), &snap);
        // Into the tier below that takes dirty data, if any; what it turns down, to BACKING.
        let split = match (&below_store, snap.ident) {
            (Some(t), Some(ident)) if !snap.list.is_empty() => {
                self.store_dirty_below(&**t, ident, &snap.list, &snap.held)
            }
            _ => StoredBelow {
                stored: Vec::new(),
                rest: snap.list.clone(),
            },
        };
        let wb = self.flush_to_backing(file, &snap, &split.rest, below_store.is_none());
        let done = self.flush_commit(file, why, &snap, &split.stored, &wb);
        if !done.discards.is_empty() {
            self.discard_below(file, &wb.fd, &done.discards, snap.ident);
        }
        drop(done.fd_to_close);
        Counters::add(&self.counters().writeback_blocks, done.cleaned as u64);
        if let Some(e) = wb.runs.err {
            Counters::add(&self.counters().writeback_errors, 1);
            // The flusher retries every interval: log the first failure, then once a minute.
            if let Some(unlogged) = done.log_err {
                log::error!(
                    "file {}: write-back failed, data stays dirty: {e} (errno {:?}){}",
                    file.0,
                    e.raw_os_error(),
                    unlogged_note(unlogged)
                );
            }
            return Err(e);
        }
        if let Some(unlogged) = done.recovered {
            log::info!(
                "file {}: write-back works again ({unlogged} failures not logged)",
                file.0
            );
        }
        if let (Why::Sync(_) | Why::FlushAll, Some(t)) = (why, &below) {
            // A persistent tier below holds them now: make that durable.
            t.sync().map_err(io::Error::from)?;
        }
        if let Why::Sync(datasync) = why {
            self.flush_sync_backing(file, &wb.fd, datasync)?;
        }
        match clean_err {
            Some(e) => Err(e),
            None => Ok(done.cleaned),
        }
    }

    /// The write-back's snapshot of `file` under the engine lock: its descriptor, size and
    /// times, and its dirty blocks (pinned until [`Self::flush_commit`]) with their dirty
    /// sequences. `None`: nothing to write (no such file, or no BACKING descriptor).
    fn flush_snapshot(&self, file: FileId, why: Why) -> Option<FlushSnap> {
        let mut eng = self.lock();
        let f = eng.files().get(&file)?;
        let fd = f.backing().cloned()?;
        let held: HashSet<u64> = f
            .dirty()
            .iter()
            .filter(|b| f.lower_dirty().contains(b))
            .copied()
            .collect();
        // An appender's partial last block is held back from a background or throttled
        // write-back while the file is open and its dirty data young: the next write usually
        // completes it, and writing it now means writing it again (a seek back on a disk).
        // `fsync`, expiry and the last close write it.
        let bs = self.bs() as u64;
        let eof_block = f.size() / bs;
        let hold_eof = matches!(why, Why::Background | Why::Throttle)
            && f.handles() > 0
            && f.size() % bs != 0
            && f.dirty().len() > 1
            && f.dirty().last() == Some(&eof_block)
            && f.dirtied_at()
                .is_some_and(|t| t.elapsed() < self.timings().dirty_expire());
        let blocks: Vec<u64> = f
            .dirty()
            .iter()
            .copied()
            .filter(|&b| !(hold_eof && b == eof_block))
            .collect();
        let mut snap = FlushSnap {
            fd,
            mode: f.backing_mode(),
            size: f.size(),
            mtime: f.mtime(),
            list: Vec::with_capacity(blocks.len()),
            ident: f.fkey().map(|fkey| Ident {
                file,
                fkey,
                version: f.version(),
                class: f.class(),
            }),
            handle: f.handle().cloned(),
            meta_mtime: f.mtime().unwrap_or(f.stamp().mtime),
            lower_dirty: !f.lower_dirty().is_empty(),
            held,
        };
        for block in blocks {
            if let Some(slot) = eng.tier().peek(&Self::key(file, block)) {
                eng.pin(slot);
                // The dirty sequence goes with the size snapshot: a write committed after this
                // point (which may also have moved EOF past our clip) keeps it dirty.
                let seq = self.arena().seq(slot).load(tiercache_memtier::arena::ORD);
                snap.list.push(DirtySlot { block, slot, seq });
            }
        }
        Some(snap)
    }

    /// A persistent tier keeps the file's meta with its dirty blocks: set before every batch
    /// stored there, and whenever some are there (an append patched below needs its size
    /// durable with the tier's `sync`). Returns the tier to store into: `below`, or `None`
    /// when the file has no handle (nothing goes there).
    fn flush_meta_below(
        &self,
        file: FileId,
        below: Option<&Arc<dyn DataTier>>,
        snap: &FlushSnap,
    ) -> Option<Arc<dyn DataTier>> {
        let t = below?;
        if let Some(ident) = snap.ident {
            if t.info().persistent && (!snap.list.is_empty() || snap.lower_dirty) {
                let h = self.handle_of(file, &snap.fd, snap.handle.clone())?;
                let meta = file_meta(snap.size, snap.meta_mtime, h);
                if let Some(p) = t.persistence() {
                    p.set_file_meta(&ident.fkey, &meta);
                }
            }
        }
        Some(Arc::clone(t))
    }

    /// Writes `rest` to BACKING in runs (through a read-write reopen if only a read-only
    /// descriptor is at hand), keeping BACKING's ctime hidden and putting back the time of
    /// the writes. `no_below`: nothing went to a tier below (the snapshot's mtime is
    /// BACKING's to set even with no block to write).
    fn flush_to_backing(
        &self,
        file: FileId,
        snap: &FlushSnap,
        rest: &[DirtySlot],
        no_below: bool,
    ) -> BackingWrite {
        let fd = Arc::clone(&snap.fd);
        let to_backing = !rest.is_empty() || no_below;
        // Only a read-only handle may be at hand (the file was last opened read-only): write
        // through a read-write reopen of the same inode, or fail (and keep the data dirty).
        let wfd = if rest.is_empty() {
            Ok(Arc::clone(&fd))
        } else {
            self.writable_backing(file, &fd, snap.mode)
        };
        // One fstat before our writes serves both below. From the first pwrite on, BACKING's
        // ctime is ours, not the application's: readers see the ctime as it is now until the
        // write-back is done and mapped (see `times`). BACKING's stamp before our writes: ours
        // is recorded after them only if this is the one recorded (see `versions`).
        let touches = !rest.is_empty() || (snap.mtime.is_some() && to_backing);
        let meta_before = match touches.then(|| fd.metadata()) {
            Some(Ok(m)) => Some(m),
            Some(Err(e)) => {
                log::warn!("file {}: fstat before write-back failed: {e}", file.0);
                None
            }
            None => None,
        };
        let hide_ctime = meta_before
            .as_ref()
            .is_some_and(|m| self.hide_backing_ctime(file, m));
        let before = meta_before.as_ref().map(FileStamp::from_metadata);
        let (runs, fd) = match wfd {
            Ok(wfd) => {
                let mut src = FromMemory { inner: self, file };
                (self.write_runs(file, &wfd, snap.size, rest, &mut src), wfd)
            }
            Err(e) => (RunsWritten::failed(e), fd),
        };
        if let (Some(ident), false) = (snap.ident, runs.done.is_empty()) {
            self.fill_written(ident, &runs.done);
        }
        // The pwrites moved BACKING's mtime to now: put back the time of the writes (or the one
        // set explicitly since). Only the snapshot's time; a later write keeps its own.
        let mtime_applied = match (snap.mtime, &runs.err) {
            (Some(t), None) if to_backing => self.restore_backing_mtime(file, &fd, t, "write-back"),
            _ => false,
        };
        let end_ctime = if runs.wrote_end > 0 || mtime_applied || hide_ctime {
            self.refresh_stamp(file, &fd, before.as_ref())
        } else {
            None
        };
        BackingWrite {
            fd,
            runs,
            mtime_applied,
            end_ctime,
        }
    }

    /// Commits a write-back to the file table: blocks written or stored below become clean
    /// here (unless written again meanwhile), blocks stored below are dirty there, older
    /// dirty copies below of blocks now on BACKING are to be discarded (their slots stay
    /// pinned until then), and the file's size on BACKING, times, error state and lifetime
    /// follow.
    fn flush_commit(
        &self,
        file: FileId,
        why: Why,
        snap: &FlushSnap,
        stored: &[DirtySlot],
        wb: &BackingWrite,
    ) -> Committed {
        let mut done = Committed {
            cleaned: 0,
            log_err: None,
            recovered: None,
            discards: Vec::new(),
            fd_to_close: None,
        };
        let now = Instant::now();
        let mut eng = self.lock();
        eng.end_backing_write(file, wb.end_ctime, wb.runs.wrote_end);
        for d in wb.runs.done.iter().chain(stored) {
            let key = Self::key(file, d.block);
            done.cleaned += usize::from(eng.mark_clean(self.arena(), key, d.slot, d.seq));
        }
        if let (Some(f), Some(ident)) = (eng.files_mut().get_mut(&file), snap.ident) {
            for d in &wb.runs.done {
                // Newer bytes on BACKING: an older dirty copy below must never be cleaned over
                // them (we hold the `io` lock, as cleaning does). Discarded below, outside the
                // engine lock; the slot stays pinned till then, so no read can miss memory and
                // find the older copy there meanwhile.
                if f.remove_lower_dirty(d.block) {
                    done.discards
                        .push((TierKey::new(ident.fkey, d.block), d.slot));
                }
            }
            // In the tier below now: dirty there until cleaned.
            f.add_lower_dirty(stored.iter().map(|d| d.block));
        }
        for &DirtySlot { slot, .. } in &snap.list {
            if !done.discards.iter().any(|&(_, s)| s == slot) {
                eng.unpin(slot);
            }
        }
        if let Some(f) = eng.files_mut().get_mut(&file) {
            if wb.mtime_applied
                && f.dirty().is_empty()
                && f.lower_dirty().is_empty()
                && f.mtime() == snap.mtime
            {
                f.set_mtime(None);
            }
            if let (Some(e), Why::Background | Why::Throttle) = (&wb.runs.err, why) {
                f.writeback_failed(e);
            }
            match &wb.runs.err {
                Some(_) => done.log_err = f.log_failure(now),
                None if !snap.list.is_empty() => done.recovered = f.log_success(),
                None => {}
            }
            if f.forgotten() && f.dirty().is_empty() && !f.keeps_clean_when_forgotten() {
                // written back at last: nothing of a forgotten file stays (unless its birth
                // time can tell it from a later inode with the same number)
                eng.drop_file_blocks(file, false);
            }
        }
        done.fd_to_close = eng.gc_file(file);
        done
    }

    /// `fsync`'s last step: syncs `file` on BACKING (`datasync`: data only); a failure keeps
    /// `needs_sync` and is logged (then once a minute).
    fn flush_sync_backing(&self, file: FileId, fd: &File, datasync: bool) -> io::Result<()> {
        if let Some(f) = self.lock().files_mut().get_mut(&file) {
            f.begin_sync();
        }
        if let Err(e) = self.dev_sync(file, fd, datasync) {
            let log = match self.lock().files_mut().get_mut(&file) {
                Some(f) => {
                    f.sync_failed();
                    f.log_failure(Instant::now())
                }
                None => Some(0),
            };
            if let Some(unlogged) = log {
                log::error!(
                    "file {}: sync of BACKING failed: {e}{}",
                    file.0,
                    unlogged_note(unlogged)
                );
            }
            return Err(e);
        }
        let closed = self.lock().gc_file(file);
        drop(closed);
        Ok(())
    }

    /// A descriptor of `file` that write-back can write through: `fd` (access mode `mode`)
    /// unless it is read-only, else a read-write reopen of the same inode through
    /// `/proc/self/fd` (the daemon runs as root), which then becomes the file's backing handle
    /// if `fd` still is. The reopen's error is returned as is.
    pub(crate) fn writable_backing(
        &self,
        file: FileId,
        fd: &Arc<File>,
        mode: i32,
    ) -> io::Result<Arc<File>> {
        if mode != libc::O_RDONLY {
            return Ok(Arc::clone(fd));
        }
        let rw = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(format!("/proc/self/fd/{}", fd.as_raw_fd()))
            .map(Arc::new)
            .inspect_err(|e| {
                // The error itself is reported (rate-limited) by the write-back.
                log::debug!(
                    "file {}: read-write reopen for write-back failed: {e}",
                    file.0
                );
            })?;
        let mut eng = self.lock();
        if let Some(f) = eng.files_mut().get_mut(&file) {
            // The old handle is still held by the caller: not closed under the lock.
            f.upgrade_backing(fd, &rw);
        }
        Ok(rw)
    }
}

/// The run writer's source for memory's dirty blocks: each block's bytes are copied from its
/// pinned slot under the slot's shared lock; a slot that no longer holds the block is left out.
struct FromMemory<'a> {
    inner: &'a Inner,
    file: FileId,
}

impl RunSource for FromMemory<'_> {
    type Item = DirtySlot;
    type Done = DirtySlot;

    fn block(item: &DirtySlot) -> u64 {
        item.block
    }

    fn fetch(&mut self, _: &DirtySlot) -> io::Result<Option<DirtySlot>> {
        Ok(None)
    }

    fn past_eof(&self, item: &DirtySlot) -> DirtySlot {
        *item
    }

    fn append(&mut self, item: &DirtySlot, len: usize, buf: &mut Vec<u8>) -> Option<DirtySlot> {
        let g = self.inner.arena().read(item.slot);
        if !g.state().holds(Inner::key(self.file, item.block)) {
            log::error!(
                "file {}: dirty block {} not valid; left dirty",
                self.file.0,
                item.block
            );
            return None;
        }
        buf.extend_from_slice(&g.data()[..len]);
        Some(*item)
    }
}

/// The tail of a rate-limited error line: how many failures were not logged before it.
pub(crate) fn unlogged_note(unlogged: u64) -> String {
    match unlogged {
        0 => String::new(),
        n => format!("; {n} more failures since the last report"),
    }
}
