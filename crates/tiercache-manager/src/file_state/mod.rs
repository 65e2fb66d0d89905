//! The file table's row: [`FileState`], everything the tier knows about one file, and the
//! transitions that change it. Its fields are private; every change goes through a method
//! here, so the invariants below hold in this one file. Each field's doc names the methods
//! that change it (and so, by their callers, the module that drives the transition).
//!
//! Invariants (all under the engine lock):
//! - `dirty ⊆ blocks` for blocks the engine tracks: a block is marked dirty only when cached
//!   ([`FileState::mark_dirty`] after [`FileState::note_cached`]); dropping a dirty block
//!   clears it first ([`FileTable::gone`]). The block sets change only through the
//!   [`FileTable`]'s transitions (`table`), which the engine calls with the tier's change;
//! - `dirtied_at` is `Some` exactly while `dirty` is not empty;
//! - `backing_size ≤ size` after every transition that changes either ([`FileState::wrote_through`],
//!   [`FileState::wrote_to_backing`] cap at `size`; truncation and direct changes set both);
//! - `mtime` (logical modification time) is only set while cached writes are pending
//!   (`dirty` or `lower_dirty` not empty); write-back clears it when the last ones reach
//!   BACKING, unless a newer time was set meanwhile (this is the callers' care: `set_mtime`
//!   does not check it);
//! - `wb_ctime` is `Some` only between step 1 and step 4 of a BACKING write
//!   (`backing_write`: [`FileState::hide_ctime`] .. [`FileState::take_wb_ctime`]);
//! - `generation` and the shared change counter only grow; every change of the file's bytes
//!   bumps `generation` ([`FileState::begin_write`], [`FileState::truncated`],
//!   [`FileState::changed_directly`], [`FileState::reset_to`]);
//! - the backing handle is the most capable one seen (read-write before read-only):
//!   [`FileState::offer_backing`] never replaces a writable handle with a read-only one;
//! - `lower_dirty` blocks (newest bytes only in the tier below) keep the state and its
//!   backing handle (`Engine::gc_file`); they are only dropped without cleaning when the data
//!   is meaningless (unlinked, replaced forgotten state, truncated away).

mod table;

pub(crate) use table::FileTable;

use crate::error::{ErrorLog, StoredError};
use crate::stamp::{version_of, BirthTime, FileStamp};
use std::collections::BTreeSet;
use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Instant, SystemTime};
use tiercache_core::{Class, FileId};
use tiercache_tier::{FileHandle, FileKey};

/// What `open` did with the blocks cached from an earlier version of the file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpenOutcome {
    /// The file was already known with cached blocks and an identical stamp.
    pub reused_blocks: usize,
    /// Clean blocks dropped because the file changed behind the cache's back.
    pub dropped_blocks: usize,
    /// Dirty blocks kept although the file changed behind the cache's back (logged).
    pub kept_dirty: usize,
    /// The file's content version after the open (`FileState::version`): it moves when the
    /// file is found changed behind the cache's back, never for the cache's own changes, so a
    /// page cache in front of the tier may keep what it read while it holds.
    pub content_version: u64,
}

/// Per-file locks, shared by the requests on that file (outside the engine lock).
#[derive(Debug, Default)]
pub(crate) struct FileShared {
    /// Shared by reads and writes; exclusive for truncate and invalidation.
    pub op: RwLock<()>,
    /// Held by write-back of this file and by truncate.
    pub io: Mutex<()>,
    /// Bumped before and after every change of the file's bytes (write, truncate, change
    /// behind our back): a lower-tier store whose bytes were read at another value is undone
    /// (see `lower`).
    pub change: AtomicU64,
    /// Writes served without waiting (`Inner::try_write`) between their plan and their
    /// finish: they invalidate the tiers below once, at the plan, so while any is under way
    /// no lower-tier store of this file is current (see `transit::Guard`).
    pub no_wait_writes: AtomicU64,
    /// Held while blocks only in the tier below are cleaned or patched in place there (a
    /// write-through of such a block); taken after `io` or `op`, before the engine lock.
    pub below: Mutex<()>,
    /// Where the last BACKING read of this file ended, plus one (0: none yet): a read that
    /// starts there found the disk positioned (`lower_bypass` cost samples).
    pub backing_next: AtomicU64,
}

/// Sequential-stream detector.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ReadAhead {
    /// Where the next read must start to count as sequential.
    pub next: u64,
    /// Current window in blocks (0 = not sequential).
    pub window: u32,
    /// The sequential run in blocks, for tiers that long runs bypass (tracked only then).
    pub run: tiercache_core::seqrun::SeqRun,
}

impl ReadAhead {
    /// Initial window of a sequential stream, in blocks.
    const INITIAL: u32 = 4;

    /// Notes a read of `[offset, end)` and returns how many blocks to read ahead after it.
    pub fn advance(&mut self, offset: u64, end: u64, max: u32) -> u32 {
        self.window = if offset == self.next && max > 0 {
            if self.window == 0 {
                Self::INITIAL.min(max)
            } else {
                self.window.saturating_mul(2).min(max)
            }
        } else {
            0
        };
        self.next = end;
        self.window
    }
}

/// Everything the tier knows about one file (guarded by the engine lock; a row of the
/// [`FileTable`]). Fields are private: see each for the methods that change it.
#[derive(Debug)]
pub(crate) struct FileState {
    /// Per-file locks; never replaced (a new state of the same id has new ones).
    shared: Arc<FileShared>,
    /// The backing handle. Changed by [`Self::offer_backing`] (`open`),
    /// [`Self::upgrade_backing`] (write-back's read-write reopen, `flusher`) and
    /// [`Self::take_backing`] (`Engine::gc_file`, `forget`).
    backing: Option<Arc<File>>,
    /// Access mode of `backing` (`O_RDONLY`, `O_WRONLY` or `O_RDWR`); changes with it.
    backing_mode: i32,
    /// Changed by [`Self::attach`] and [`Self::set_class`] (`files`).
    class: Class,
    /// BACKING's stamp as of the tier's last change to it. Changed by [`Self::record_stamp`]
    /// (`files`, `versions`, `write`) and [`Self::reset_to`] (`open`).
    stamp: FileStamp,
    /// The logical size readers see. Changed by [`Self::extend_size`] (`write`),
    /// [`Self::truncated`], [`Self::changed_directly`] and [`Self::reset_to`].
    size: u64,
    /// What the tier believes BACKING holds (`≤ size`). Changed by [`Self::wrote_through`]
    /// (`write`), [`Self::wrote_to_backing`] (`backing_write`), [`Self::truncated`],
    /// [`Self::changed_directly`] and [`Self::reset_to`].
    backing_size: u64,
    /// Bumped on every change of the file's bytes: [`Self::begin_write`], [`Self::truncated`],
    /// [`Self::changed_directly`], [`Self::reset_to`].
    generation: u64,
    /// Open handles: successful `open`s minus `release`s (0 = closed). Changed by
    /// [`Self::attach`] and [`Self::release_handle`] (`files`).
    handles: u32,
    /// Cached block indices, in order. Changed by [`Self::note_cached`] and
    /// [`Self::note_gone`], private: only [`FileTable`]'s block transitions call them.
    blocks: BTreeSet<u64>,
    /// Dirty block indices, in order (⊆ `blocks`). Changed by [`Self::mark_dirty`] and
    /// [`Self::mark_clean`], private: only [`FileTable`]'s block transitions call them.
    dirty: BTreeSet<u64>,
    /// Blocks whose newest bytes were written back into the lower tier that takes dirty data
    /// and are not on BACKING yet (the cleaner puts them there). A read of one that the tier
    /// cannot serve is an error, never BACKING's older bytes. The state (and its backing
    /// handle) stays while this is not empty. Changed by [`Self::add_lower_dirty`],
    /// [`Self::remove_lower_dirty`], [`Self::lower_dirty_gone_from`] and
    /// [`Self::discard_lower_dirty`] (`flusher`, `lower_wb`, `write`, `forget`).
    lower_dirty: BTreeSet<u64>,
    /// When the file went from clean to dirty; `Some` iff `dirty` is not empty. Changed with
    /// `dirty`.
    dirtied_at: Option<Instant>,
    /// A background write-back or sync error not yet reported by `fsync`/`flush`. Set by
    /// [`Self::writeback_failed`], [`Self::durable_write_failed`], [`Self::sync_lost`];
    /// taken by [`Self::take_error`] (`flusher`); cleared by [`Self::reset_to`].
    error: Option<StoredError>,
    /// Rate limit of the write-back error log of this file: [`Self::log_failure`],
    /// [`Self::log_success`] (`flusher`, `sync_batch`); reset by [`Self::reset_to`].
    error_log: ErrorLog,
    /// Data was written to BACKING since the last sync. Set by [`Self::wrote_through`],
    /// [`Self::wrote_to_backing`], [`Self::truncated`], [`Self::changed_directly`],
    /// [`Self::durable_write_failed`], [`Self::sync_failed`]; cleared by
    /// [`Self::begin_sync`], [`Self::synced_if_unchanged`], [`Self::sync_lost`] and
    /// [`Self::reset_to`] (`flusher`, `sync_batch`).
    needs_sync: bool,
    /// BACKING's device of the file (`st_dev`), once a write-back saw it: the file system a
    /// batched sync covers it with (see `sync_batch`). Set by [`Self::hide_ctime`].
    dev: Option<u64>,
    /// Logical modification time while cached writes are not all on BACKING: the time of the
    /// last write, or of a later truncate or explicit `set_times` (see `times`). Changed by
    /// [`Self::set_mtime`] (`write`, `files`, `flusher` when the last pending write went) and
    /// [`Self::changed_directly`].
    mtime: Option<SystemTime>,
    /// The ctime to report while a write-back is changing BACKING (see `times`):
    /// [`Self::hide_ctime`] .. [`Self::take_wb_ctime`] (`backing_write` only).
    wb_ctime: Option<SystemTime>,
    /// Sequential-stream detector: [`Self::advance_read_ahead`] and [`Self::advance_seq_run`]
    /// (`read`), reset by
    /// [`Self::reset_read_ahead`] (`files`, `forget`) and the byte-changing transitions.
    ra: ReadAhead,
    /// The kernel forgot the inode but the write-back at `forget` failed: only dirty blocks are
    /// kept (with the backing handle, which pins the inode) and the state goes once they are
    /// written back. The next `open` reuses it only with an identical stamp. Set by
    /// [`Self::mark_forgotten`] (`forget`, `files::release`); cleared by [`Self::reset_to`]
    /// and [`Self::remembered`] (`open`).
    forgotten: bool,
    /// `forget` came while handles were open: it is carried out at the last `release`.
    /// Set by [`Self::forget_at_release`] (`forget`), cleared by [`Self::attach`] and
    /// [`Self::take_forget_at_release`] (`files::release`).
    forget_at_release: bool,
    /// The backing inode's birth time (`statx` btime), when BACKING reports one: with it a
    /// forgotten file keeps its clean blocks, as a reused inode number shows a new birth time.
    /// Changed by [`Self::attach`].
    born: Option<BirthTime>,
    /// A change the cache made through the mount (unlink, rename over it) left BACKING's inode
    /// with no link: no name leads to a next open, so clean blocks are not kept when it is
    /// forgotten ([`Self::keeps_clean_when_forgotten`]). Set by [`Self::mark_unlinked`]
    /// (`own_changes`); cleared by [`Self::attach`], [`Self::remembered`] and
    /// [`Self::reset_to`] (an open came by a name after all: `linkat` of an open descriptor).
    unlinked: bool,
    /// Identity in the tiers below memory (only computed when there are some). Fixed.
    fkey: Option<FileKey>,
    /// Content version lower copies are stored with: a fingerprint of the stamp the state
    /// started from (or the version an earlier state left for that stamp, see `versions`),
    /// renewed by [`Self::reset_to`] when the file is found changed behind the cache's back
    /// (not by the cache's own writes, which invalidate the blocks they change).
    version: u64,
    /// BACKING file handle, kept with dirty blocks in a persistent tier (computed at the first
    /// write-back into one; `None` until then or when BACKING has no handles). Set by
    /// [`Self::set_handle`] (`lower_wb`).
    handle: Option<FileHandle>,
}

impl FileState {
    pub(crate) fn new(
        backing: Arc<File>,
        mode: i32,
        class: Class,
        (stamp, version): (FileStamp, u64),
        born: Option<BirthTime>,
        fkey: Option<FileKey>,
    ) -> Self {
        Self {
            fkey,
            version,
            shared: Arc::new(FileShared::default()),
            backing: Some(backing),
            backing_mode: mode,
            class,
            stamp,
            size: stamp.size,
            backing_size: stamp.size,
            generation: 0,
            handles: 1,
            blocks: BTreeSet::new(),
            lower_dirty: BTreeSet::new(),
            handle: None,
            dirty: BTreeSet::new(),
            dirtied_at: None,
            error: None,
            error_log: ErrorLog::default(),
            needs_sync: false,
            dev: None,
            mtime: None,
            wb_ctime: None,
            ra: ReadAhead::default(),
            forgotten: false,
            forget_at_release: false,
            born,
            unlinked: false,
        }
    }

    // ---- read-only accessors ----

    pub(crate) fn shared(&self) -> &Arc<FileShared> {
        &self.shared
    }
    pub(crate) fn backing(&self) -> Option<&Arc<File>> {
        self.backing.as_ref()
    }
    pub(crate) fn backing_mode(&self) -> i32 {
        self.backing_mode
    }
    pub(crate) fn class(&self) -> Class {
        self.class
    }
    pub(crate) fn stamp(&self) -> FileStamp {
        self.stamp
    }
    pub(crate) fn size(&self) -> u64 {
        self.size
    }
    pub(crate) fn backing_size(&self) -> u64 {
        self.backing_size
    }
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }
    pub(crate) fn handles(&self) -> u32 {
        self.handles
    }
    pub(crate) fn blocks(&self) -> &BTreeSet<u64> {
        &self.blocks
    }
    pub(crate) fn dirty(&self) -> &BTreeSet<u64> {
        &self.dirty
    }
    pub(crate) fn lower_dirty(&self) -> &BTreeSet<u64> {
        &self.lower_dirty
    }
    pub(crate) fn dirtied_at(&self) -> Option<Instant> {
        self.dirtied_at
    }
    pub(crate) fn error(&self) -> Option<&StoredError> {
        self.error.as_ref()
    }
    pub(crate) fn needs_sync(&self) -> bool {
        self.needs_sync
    }
    pub(crate) fn dev(&self) -> Option<u64> {
        self.dev
    }
    pub(crate) fn mtime(&self) -> Option<SystemTime> {
        self.mtime
    }
    pub(crate) fn wb_ctime(&self) -> Option<SystemTime> {
        self.wb_ctime
    }
    pub(crate) fn forgotten(&self) -> bool {
        self.forgotten
    }
    pub(crate) fn is_forget_at_release(&self) -> bool {
        self.forget_at_release
    }
    /// Whether the last release carries out a forget that came while the file was open in
    /// full: the file was marked unlinked ([`Self::mark_unlinked`]) and has writes pending,
    /// which a forget discards once BACKING confirms that no link is left.
    pub(crate) fn forget_discards_at_release(&self) -> bool {
        self.forget_at_release && self.unlinked && self.has_pending_writes()
    }
    pub(crate) fn born(&self) -> Option<BirthTime> {
        self.born
    }
    /// Whether a forget keeps the clean blocks for a next open: only when the birth time can
    /// tell this inode from a later one with the same number, and a name still leads to it.
    pub(crate) fn keeps_clean_when_forgotten(&self) -> bool {
        self.born.is_some() && !self.unlinked
    }
    pub(crate) fn fkey(&self) -> Option<FileKey> {
        self.fkey
    }
    pub(crate) fn version(&self) -> u64 {
        self.version
    }
    pub(crate) fn handle(&self) -> Option<&FileHandle> {
        self.handle.as_ref()
    }
    /// Dirty in memory or in the tier below: cached writes not all on BACKING.
    pub(crate) fn has_pending_writes(&self) -> bool {
        !self.dirty.is_empty() || !self.lower_dirty.is_empty()
    }

    // ---- handles, class, backing descriptor (`files`, `flusher`, `engine`) ----

    /// A new handle of the known file (`open`): offers its descriptor as the backing handle,
    /// notes its birth time and class, and takes back a pending forget (the kernel knows the
    /// inode again). Returns the descriptor not kept and whether the class changed.
    pub(crate) fn attach(
        &mut self,
        fd: Arc<File>,
        mode: i32,
        class: Class,
        born: Option<BirthTime>,
    ) -> (Option<Arc<File>>, bool) {
        self.handles += 1;
        self.born = born;
        self.forget_at_release = false;
        self.unlinked = false;
        let unused = self.offer_backing(fd, mode);
        let reclass = self.class != class;
        self.class = class;
        (unused, reclass)
    }

    /// One `release`: returns the handles left open.
    pub(crate) fn release_handle(&mut self) -> u32 {
        self.handles = self.handles.saturating_sub(1);
        self.handles
    }

    pub(crate) fn set_class(&mut self, class: Class) {
        self.class = class;
    }

    /// Installs `fd` (access mode `mode`) as the backing handle unless the current one is at
    /// least as capable; returns the handle no longer used (to be closed outside the lock).
    fn offer_backing(&mut self, fd: Arc<File>, mode: i32) -> Option<Arc<File>> {
        if self.backing.is_some() && mode_rank(mode) <= mode_rank(self.backing_mode) {
            return Some(fd);
        }
        self.backing_mode = mode;
        self.backing.replace(fd)
    }

    /// Write-back reopened the read-only `old` read-write as `rw`: `rw` becomes the backing
    /// handle if `old` still is (the caller holds `old`, so nothing closes under the lock).
    pub(crate) fn upgrade_backing(&mut self, old: &Arc<File>, rw: &Arc<File>) {
        if self.backing.as_ref().is_some_and(|b| Arc::ptr_eq(b, old)) {
            self.backing = Some(Arc::clone(rw));
            self.backing_mode = libc::O_RDWR;
        }
    }

    /// Lets go of the backing handle (to be closed outside the engine lock).
    pub(crate) fn take_backing(&mut self) -> Option<Arc<File>> {
        self.backing.take()
    }

    /// Records BACKING's stamp after a change of the tier's own.
    pub(crate) fn record_stamp(&mut self, stamp: FileStamp) {
        self.stamp = stamp;
    }

    /// Sets the BACKING file handle kept with dirty blocks in a persistent tier.
    pub(crate) fn set_handle(&mut self, h: FileHandle) {
        self.handle = Some(h);
    }

    // ---- cached and dirty blocks: private to this module, driven by [`FileTable`] ----

    fn note_cached(&mut self, block: u64) {
        self.blocks.insert(block);
    }
    /// The block left memory (it must be clean by now: see [`Self::mark_clean`]).
    fn note_gone(&mut self, block: u64) {
        self.blocks.remove(&block);
    }
    /// A write landed in `block` (cached) at `now`.
    fn mark_dirty(&mut self, block: u64, now: Instant) {
        self.dirty.insert(block);
        self.dirtied_at.get_or_insert(now);
    }
    /// `block` is clean (written back, or dropped with its meaningless data).
    fn mark_clean(&mut self, block: u64) {
        self.dirty.remove(&block);
        if self.dirty.is_empty() {
            self.dirtied_at = None;
        }
    }

    // ---- dirty in the tier below (`flusher`, `lower_wb`, `write`, `forget`) ----

    /// Newest bytes of `blocks` are now only in the tier below (write-back stored them there).
    pub(crate) fn add_lower_dirty(&mut self, blocks: impl IntoIterator<Item = u64>) {
        self.lower_dirty.extend(blocks);
    }
    /// `block`'s copy below is no longer the newest (cleaned to BACKING, or superseded).
    /// Returns whether it was dirty there.
    pub(crate) fn remove_lower_dirty(&mut self, block: u64) -> bool {
        self.lower_dirty.remove(&block)
    }
    /// Truncation: blocks from `first` on are gone; returns those that were dirty below.
    pub(crate) fn lower_dirty_gone_from(&mut self, first: u64) -> Vec<u64> {
        let gone = self.lower_dirty.split_off(&first);
        gone.into_iter().collect()
    }
    /// The data below is meaningless (unlinked file, replaced forgotten state): forgets it
    /// without cleaning. Returns how many blocks were dirty there.
    pub(crate) fn discard_lower_dirty(&mut self) -> usize {
        std::mem::take(&mut self.lower_dirty).len()
    }

    // ---- sizes, times, generation (`write`, `files`, `backing_write`) ----

    /// A write (or write-through) is about to change bytes.
    pub(crate) fn begin_write(&mut self) {
        self.generation += 1;
    }
    /// A write of bytes up to `end` finished: the logical size grows to it.
    pub(crate) fn extend_size(&mut self, end: u64) {
        self.size = self.size.max(end);
    }
    /// Bytes up to `end` went straight to BACKING (write-through): BACKING's size grows
    /// (never past the logical size) and it needs a sync.
    pub(crate) fn wrote_through(&mut self, end: u64) {
        self.backing_size = self.backing_size.max(end).min(self.size);
        self.needs_sync = true;
    }
    /// Sets the logical modification time (`None`: BACKING's is the file's).
    pub(crate) fn set_mtime(&mut self, mtime: Option<SystemTime>) {
        self.mtime = mtime;
    }
    /// The file was truncated to `new_size` (on BACKING too).
    pub(crate) fn truncated(&mut self, new_size: u64) {
        self.bump_change();
        self.size = new_size;
        self.backing_size = new_size;
        self.needs_sync = true;
    }
    /// BACKING's bytes or size were changed directly (fallocate, hole punching); `size`:
    /// BACKING's size afterwards, when known.
    pub(crate) fn changed_directly(&mut self, size: Option<u64>) {
        self.bump_change();
        if let Some(size) = size {
            self.size = size;
            self.backing_size = size;
        }
        self.needs_sync = true;
        if self.dirty.is_empty() {
            self.mtime = None;
        }
    }
    fn bump_change(&mut self) {
        self.generation += 1;
        self.shared.change.fetch_add(1, Ordering::SeqCst);
        self.ra = ReadAhead::default();
    }

    /// Step 1 of a BACKING write: report `logical` as ctime meanwhile; BACKING's device `dev`.
    pub(crate) fn hide_ctime(&mut self, logical: SystemTime, dev: u64) {
        self.wb_ctime = Some(logical);
        self.dev = Some(dev);
    }
    /// Step 4: the write is over; returns the ctime that was reported meanwhile.
    pub(crate) fn take_wb_ctime(&mut self) -> Option<SystemTime> {
        self.wb_ctime.take()
    }
    /// Write-back wrote bytes up to `end` to BACKING: its size grows (never past the logical
    /// size) and it needs a sync.
    pub(crate) fn wrote_to_backing(&mut self, end: u64) {
        self.backing_size = self.backing_size.max(end.min(self.size));
        self.needs_sync = true;
    }

    // ---- errors and syncs (`flusher`, `lower_wb`, `sync_batch`) ----

    /// Takes the error to report at `fsync`/`flush`.
    pub(crate) fn take_error(&mut self) -> Option<StoredError> {
        self.error.take()
    }
    /// A background write-back failed: reported at the next `fsync`/`flush`.
    pub(crate) fn writeback_failed(&mut self, e: &std::io::Error) {
        self.error = Some(StoredError::of(e));
    }
    /// A sync that made written-back data durable failed; it may have consumed the EIO of
    /// an earlier write-back, so the next `fsync` must fail, and the sync is still needed.
    pub(crate) fn durable_write_failed(&mut self, e: &std::io::Error) {
        self.error = Some(StoredError::of(e));
        self.needs_sync = true;
    }
    /// A batched sync failed: what it lost cannot be written again (reported once instead);
    /// no sync is needed any more unless the file was written since `generation`.
    pub(crate) fn sync_lost(&mut self, e: &std::io::Error, generation: u64) {
        self.error = Some(StoredError::of(e));
        if self.generation == generation {
            self.needs_sync = false;
        }
    }
    /// A sync of BACKING starts (a write meanwhile sets the need again).
    pub(crate) fn begin_sync(&mut self) {
        self.needs_sync = false;
    }
    /// The sync started by [`Self::begin_sync`] failed: still needed.
    pub(crate) fn sync_failed(&mut self) {
        self.needs_sync = true;
    }
    /// A batched sync covered the file: no more sync needed if it is unchanged since
    /// `generation` and clean (what the sync covered is all it had written).
    pub(crate) fn synced_if_unchanged(&mut self, generation: u64) {
        if self.generation == generation && self.dirty.is_empty() {
            self.needs_sync = false;
        }
    }
    /// Rate limit: a failure to log; see [`ErrorLog::failed`].
    pub(crate) fn log_failure(&mut self, now: Instant) -> Option<u64> {
        self.error_log.failed(now)
    }
    /// Rate limit: a success after failures; see [`ErrorLog::succeeded`].
    pub(crate) fn log_success(&mut self) -> Option<u64> {
        self.error_log.succeeded()
    }

    // ---- read-ahead (`read`) ----

    /// Notes a read of `[offset, end)`; returns how many blocks to read ahead.
    pub(crate) fn advance_read_ahead(&mut self, offset: u64, end: u64, max: u32) -> u32 {
        self.ra.advance(offset, end, max)
    }
    pub(crate) fn reset_read_ahead(&mut self) {
        self.ra = ReadAhead::default();
    }
    /// Notes a read of `count` blocks from `first` in the sequential run (kept only for
    /// tiers that long runs bypass); returns the run's length in blocks.
    pub(crate) fn advance_seq_run(&mut self, first: u64, count: u64) -> u64 {
        self.ra.run.advance(first, count)
    }

    // ---- forget (`forget`, `files`) ----

    /// The kernel forgot the inode: the state is kept only for the blocks left (see `forget`).
    pub(crate) fn mark_forgotten(&mut self) {
        self.forgotten = true;
    }
    /// `open` found the forgotten state is the same file: it is remembered again.
    pub(crate) fn remembered(&mut self) {
        self.forgotten = false;
        self.unlinked = false;
    }
    /// BACKING's inode has no link left after a change the cache made.
    pub(crate) fn mark_unlinked(&mut self) {
        self.unlinked = true;
    }
    /// `forget` came while handles are open: carried out at the last release.
    pub(crate) fn forget_at_release(&mut self) {
        self.forget_at_release = true;
    }
    pub(crate) fn take_forget_at_release(&mut self) -> bool {
        std::mem::take(&mut self.forget_at_release)
    }

    /// The file changed behind the cache (BACKING's stamp is now `now`): a new version —
    /// generation and change counter bumped, read-ahead, remembered errors and sync need
    /// reset, the size BACKING's (or larger, while dirty blocks that will overwrite it are
    /// kept). Returns the blocks cached (the clean ones are stale) and the old stamp.
    pub(crate) fn reset_to(&mut self, now: FileStamp) -> (Vec<u64>, FileStamp) {
        let blocks: Vec<u64> = self.blocks.iter().copied().collect();
        let old = self.stamp;
        self.forgotten = false;
        self.unlinked = false;
        self.stamp = now;
        self.backing_size = now.size;
        self.size = if self.dirty.is_empty() {
            now.size
        } else {
            self.size.max(now.size)
        };
        self.bump_change();
        self.version = version_of(&now) ^ self.generation.rotate_left(32);
        // What the tier remembered of the old version is not this version's.
        self.error = None;
        self.error_log = ErrorLog::default();
        self.needs_sync = false;
        (blocks, old)
    }
}

impl Drop for FileState {
    fn drop(&mut self) {
        // Stores below still queued with this state's bytes are checked against this counter
        // (see `lower`); a later state of the same file has a counter of its own, so once this
        // state is gone they must not land.
        self.shared.change.fetch_add(1, Ordering::SeqCst);
    }
}

/// Checks, under the engine lock, that a request still works on the state whose locks it took
/// (a closed, clean, fully evicted file may have been forgotten and opened anew meanwhile).
pub(crate) fn same_state(f: &FileState, shared: &Arc<FileShared>, file: FileId) -> io::Result<()> {
    if Arc::ptr_eq(f.shared(), shared) {
        Ok(())
    } else {
        log::warn!("file {}: request raced with forget/reopen; retry", file.0);
        Err(io::Error::from_raw_os_error(libc::EAGAIN))
    }
}

/// How useful a descriptor is as the backing handle: read-write serves reads, fills and
/// write-back; read-only serves reads; write-only cannot fill partial blocks.
fn mode_rank(mode: i32) -> u8 {
    match mode {
        libc::O_RDWR => 2,
        libc::O_RDONLY => 1,
        _ => 0,
    }
}
