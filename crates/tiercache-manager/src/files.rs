//! Per-file state and the file-level operations: `open` (with the staleness check), `release`,
//! `set_class`, `invalidate`, sizes and generations (`forget` has its own module).
//!
//! Invariants:
//! - a file has a state while it is open, has cached blocks, has dirty blocks, or has a
//!   write-back error not yet reported; its backing handle is kept while it is open, dirty or
//!   not yet synced (the flusher needs an fd; see `sync_batch`);
//! - the backing handle is the most capable one seen (read-write before read-only): a later
//!   read-only open never replaces a writable handle that pending write-back needs;
//! - `backing_size ≤ size`; `size` is the logical size readers see (EOF), `backing_size` what
//!   the tier believes BACKING holds (writes past it are cached until written back);
//! - `stamp` describes BACKING as of the tier's last change to it (ctime included, see
//!   `stamp` and `versions`), so a different stamp at open means someone changed the file
//!   behind the tier's back;
//! - `mtime` (the logical modification time) is `Some` while cached writes are not all on
//!   BACKING, and `wb_ctime` while a write-back is changing BACKING (see `times`);
//! - lock order per file: `io` (write-back, truncate) before `op` (reads/writes shared;
//!   truncate and invalidation exclusive); nothing takes `op` while holding a slot lock, and
//!   writers throttle *before* taking `op`.
//!
//! Inode reuse and FORGET: see `forget`.

use crate::cache::Inner;
use crate::engine::{Dropped, Engine};
use crate::error::unknown_file;
pub(crate) use crate::file_state::{FileShared, FileState, OpenOutcome};
pub use crate::stamp::FileStamp;
use crate::stamp::{birth_time, file_key, reborn, BirthTime};
use crate::times::LogicalTimes;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

use std::sync::{Arc, MutexGuard};
use std::time::SystemTime;
use tiercache_core::{BlockIndex, BlockKey, Class, FileId};
use tiercache_tier::FileKey;

/// The access mode (`fcntl(F_GETFL) & O_ACCMODE`) of an open descriptor.
pub(crate) fn access_mode(f: &File) -> io::Result<i32> {
    // SAFETY: F_GETFL only reads the flags of a descriptor `f` keeps open.
    let flags = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(flags & libc::O_ACCMODE)
}

/// Drops the clean ones of `file`'s `blocks` from memory (a changed file's stale blocks);
/// dirty ones stay (they overwrite BACKING). Returns how many went.
fn drop_stale_blocks(eng: &mut Engine, file: FileId, blocks: Vec<u64>) -> usize {
    let mut dropped = 0;
    for b in blocks {
        let key = BlockKey {
            file,
            block: BlockIndex(b),
        };
        match eng.drop_block(key, false) {
            Dropped::Yes => dropped += 1,
            Dropped::Pinned => log::error!("file {}: block {b} pinned at open", file.0),
            Dropped::Dirty | Dropped::NotCached => {}
        }
    }
    dropped
}

/// What `open` knows of the caller's descriptor (its steps share it).
struct Opening {
    file: FileId,
    backing: Arc<File>,
    /// Access mode of `backing`.
    mode: i32,
    class: Class,
    born: Option<BirthTime>,
    fkey: Option<FileKey>,
}

impl Opening {
    fn new_state(&self, stamp: FileStamp, version: u64) -> FileState {
        let fd = Arc::clone(&self.backing);
        FileState::new(
            fd,
            self.mode,
            self.class,
            (stamp, version),
            self.born,
            self.fkey,
        )
    }
}

/// The outcome of one of `open`'s steps.
enum Step<T, D = OpenOutcome> {
    /// Opened: return this.
    Done(D),
    /// The state locked went away meanwhile: start over.
    Retry,
    /// Go on to the next step with this.
    Next(T),
}

impl Inner {
    /// The per-file locks of a known file.
    pub(crate) fn shared(&self, file: FileId) -> io::Result<Arc<FileShared>> {
        let eng = self.lock();
        eng.files().shared(&file).ok_or_else(|| unknown_file(file))
    }

    pub(crate) fn open(
        &self,
        file: FileId,
        backing: Arc<File>,
        class: Class,
        stamp: FileStamp,
    ) -> io::Result<OpenOutcome> {
        let mode = access_mode(&backing)?;
        let born = birth_time(&backing);
        let fkey = match self.lower() {
            Some(_) => Some(file_key(&backing, born)?),
            None => None,
        };
        let a = Opening {
            file,
            backing,
            mode,
            class,
            born,
            fkey,
        };
        // Stale-stamp checks quiesce the file; they start over when the state they locked went
        // away meanwhile (closed and evicted, or forgotten and replaced).
        let mut fresh: Option<FileStamp> = None;
        loop {
            let shared = match self.open_unchanged(&a, fresh.unwrap_or(stamp), stamp) {
                Ok(outcome) => return Ok(outcome),
                Err(shared) => shared,
            };
            // The stamp differs (or the kernel forgot the file). Quiesce the file (no
            // write-back, write-through or truncate can run) and look at BACKING ourselves,
            // through the caller's descriptor (the same inode): the caller's stamp may simply
            // predate our own latest write-back, which already refreshed the stored stamp.
            let _io = crate::cache::lock(&shared.io);
            let _op = crate::cache::write_lock(&shared.op);
            let now = *fresh.get_or_insert_with(|| match FileStamp::of_file(&a.backing) {
                Ok(s) => s,
                Err(e) => {
                    log::warn!("file {}: fstat at open failed: {e}", file.0);
                    stamp
                }
            });
            match self.replace_forgotten(&a, &shared, now) {
                Step::Done(outcome) => return Ok(outcome),
                Step::Retry => continue,
                Step::Next(()) => {}
            }
            let (changed, now) = match self.clean_below_at_open(&a, &shared, now)? {
                Step::Done(never) => match never {},
                Step::Retry => continue,
                Step::Next(r) => r,
            };
            if changed {
                fresh = Some(now);
            }
            match self.open_quiesced(&a, &shared, changed, now) {
                Some(outcome) => return Ok(outcome),
                None => continue,
            }
        }
    }

    /// `open`'s first step, under the engine lock alone: a new state for an unknown file
    /// (with stamp `st`), or a new handle of a known one whose stamp is still `stamp`.
    /// Otherwise returns the file's locks, to quiesce it for a closer look.
    fn open_unchanged(
        &self,
        a: &Opening,
        st: FileStamp,
        stamp: FileStamp,
    ) -> Result<OpenOutcome, Arc<FileShared>> {
        let mut eng = self.lock();
        let Some(f) = eng.files_mut().get_mut(&a.file) else {
            let v = eng.kept_mut().take(a.file, &st, a.born);
            eng.files_mut().insert(a.file, a.new_state(st, v));
            return Ok(OpenOutcome::default());
        };
        if f.stamp() == stamp && !f.forgotten() {
            let reused_blocks = self.attach(eng, a);
            return Ok(OpenOutcome {
                reused_blocks,
                ..OpenOutcome::default()
            });
        }
        Err(Arc::clone(f.shared()))
    }

    /// `open` of a quiesced file whose state is forgotten and is another file (stamp `now`
    /// or the birth time differs): its data goes to its own inode (through its own handle)
    /// and the state is replaced by a new one.
    fn replace_forgotten(&self, a: &Opening, shared: &Arc<FileShared>, now: FileStamp) -> Step<()> {
        let replace = {
            let eng = self.lock();
            match eng.files().get(&a.file) {
                Some(f) if Arc::ptr_eq(f.shared(), shared) => {
                    f.forgotten() && (f.stamp() != now || reborn(f.born(), a.born))
                }
                _ => return Step::Retry,
            }
        };
        if !replace {
            return Step::Next(());
        }
        let Some((old_fd, dropped)) = self.drop_forgotten_state(a.file, shared) else {
            // Could not be dropped (logged): handled as a change behind our back.
            return Step::Next(());
        };
        drop(old_fd);
        let mut eng = self.lock();
        if eng.files().contains(&a.file) {
            return Step::Retry; // another open of the id came first
        }
        let v = eng.kept_mut().take(a.file, &now, a.born);
        eng.files_mut().insert(a.file, a.new_state(now, v));
        Step::Done(OpenOutcome {
            dropped_blocks: dropped,
            ..OpenOutcome::default()
        })
    }

    /// Whether the quiesced file changed behind our back, decided on the stamp from before
    /// any cleaning (which moves BACKING's stamp itself); then our writes still only in the
    /// tier below go to BACKING, before the version changes: they win over an outside change,
    /// like memory's dirty blocks. Returns whether it changed and BACKING's stamp to take.
    fn clean_below_at_open(
        &self,
        a: &Opening,
        shared: &Arc<FileShared>,
        now: FileStamp,
    ) -> io::Result<Step<(bool, FileStamp), std::convert::Infallible>> {
        let (changed, below) = {
            let eng = self.lock();
            match eng.files().get(&a.file) {
                Some(f) if Arc::ptr_eq(f.shared(), shared) => (
                    f.stamp() != now || (f.forgotten() && reborn(f.born(), a.born)),
                    !f.lower_dirty().is_empty(),
                ),
                _ => return Ok(Step::Retry),
            }
        };
        if !below {
            return Ok(Step::Next((changed, now)));
        }
        match self.clean_lower_locked(a.file) {
            Ok(_) => {}
            // Unchanged file: what could not be cleaned stays listed and reads of it
            // fail alone (a detached tier's leftovers); the open itself is fine.
            Err(e) if !changed => {
                log::warn!("file {}: cleaning at open: {e}", a.file.0);
            }
            Err(e) => return Err(e),
        }
        // A reset takes BACKING as it is after our cleaning.
        let now = match changed {
            true => FileStamp::of_file(&a.backing).unwrap_or(now),
            false => now,
        };
        Ok(Step::Next((changed, now)))
    }

    /// `open`'s last step on the quiesced file: a new handle of the same file, or (`changed`)
    /// a new version at stamp `now` whose clean blocks, here and below, are dropped. `None`
    /// when the state went meanwhile (start over).
    fn open_quiesced(
        &self,
        a: &Opening,
        shared: &Arc<FileShared>,
        changed: bool,
        now: FileStamp,
    ) -> Option<OpenOutcome> {
        let mut eng = self.lock();
        let f = eng.files_mut().get_mut(&a.file)?;
        if !Arc::ptr_eq(f.shared(), shared) {
            return None;
        }
        if !changed {
            f.remembered();
            let reused_blocks = self.attach(eng, a);
            return Some(OpenOutcome {
                reused_blocks,
                ..OpenOutcome::default()
            });
        }
        let (blocks, old) = f.reset_to(now);
        let kept_dirty = f.dirty().len();
        // Dropped below after the engine lock (the file is quiesced: `io` + `op`).
        let invalidate_below = f.fkey();
        let dropped = drop_stale_blocks(&mut eng, a.file, blocks);
        if kept_dirty > 0 {
            log::warn!(
                "file {} changed behind the cache ({old:?} -> {now:?}); dropped {dropped} \
                 clean blocks, kept {kept_dirty} dirty blocks that will overwrite it",
                a.file.0
            );
        } else if dropped > 0 {
            log::info!(
                "file {} changed behind the cache; dropped {dropped} stale blocks",
                a.file.0
            );
        }
        self.attach(eng, a);
        if let (Some(lower), Some(fk)) = (self.lower(), invalidate_below) {
            lower.invalidate_file(fk, 0);
        }
        Some(OpenOutcome {
            reused_blocks: 0,
            dropped_blocks: dropped,
            kept_dirty,
            ..OpenOutcome::default()
        })
    }

    /// Counts a new handle of the known `file`: offers its descriptor as the backing handle,
    /// applies its class, and closes the descriptor not kept once the engine lock is let go.
    /// Returns the file's cached blocks.
    fn attach(&self, mut eng: MutexGuard<'_, Engine>, a: &Opening) -> usize {
        let (file, class) = (a.file, a.class);
        let Some(f) = eng.files_mut().get_mut(&file) else {
            return 0;
        };
        let (unused, reclass) = f.attach(Arc::clone(&a.backing), a.mode, class, a.born);
        let blocks = f.blocks().len();
        if reclass {
            eng.reclassify_blocks(file, class);
        }
        drop(eng);
        drop(unused);
        blocks
    }

    /// [`Inner::release`] unless it may wait: when the closing thread may have to write back
    /// and sync to bound the descriptors closed files hold, or the last release must carry out
    /// a forget that came first — dropping the file's copies in the tiers below, or a removed
    /// file's full forget (a link-count `fstat`, the close of what may be the inode's last
    /// descriptor). Returns whether it released; if not, nothing changed.
    pub(crate) fn try_release(&self, file: FileId) -> bool {
        !self.closed_fds_near_bound() && self.release_unless(file, true)
    }

    /// A handle of `file` closed (see [`crate::MemCache::release`]); the last one carries out
    /// a forget that came while the file was open, which may wait and do I/O.
    pub(crate) fn release(&self, file: FileId) {
        self.release_unless(file, false);
    }

    /// The release; with `no_wait`, only if it is not a last release that must do a forget's
    /// waiting work (decided under the same engine lock as the count, so a concurrent close
    /// or FORGET cannot slip in between). Returns whether it released.
    fn release_unless(&self, file: FileId, no_wait: bool) -> bool {
        let lower = self.lower().is_some();
        let mut invalidate_below = None;
        let mut forget_now = None;
        let (fd, kick, holds) = {
            let mut eng = self.lock();
            let Some(f) = eng.files_mut().get_mut(&file) else {
                return true;
            };
            if no_wait
                && f.handles() <= 1
                && f.is_forget_at_release()
                && (lower || f.forget_discards_at_release())
            {
                return false;
            }
            // One release per successful open: counted under the engine lock, like the opens,
            // so a release racing another open of the file cannot close the new handle's state.
            if f.release_handle() > 0 {
                return true;
            }
            let mut kick = false;
            if f.forget_discards_at_release() {
                // Removed while open, and forgotten: its pending writes would go to an inode
                // nobody can reach. The forget, carried out below for this state only, checks
                // that BACKING agrees (no link left) and discards them; with a link after all
                // it writes back.
                f.take_forget_at_release();
                forget_now = Some(Arc::clone(f.shared()));
            } else if f.take_forget_at_release() {
                // The kernel forgot the file while it was open. Without blocking the close:
                // dirty blocks are left to the flusher; clean blocks stay if the birth time can
                // tell this inode from a later one with the same number, else they go and the
                // state, forgotten, goes once written back (its handle pins the inode until then).
                f.mark_forgotten();
                kick = !f.dirty().is_empty();
                if !f.keeps_clean_when_forgotten() {
                    if let (Some(fk), true) = (f.fkey(), f.lower_dirty().is_empty()) {
                        // Clean copies only; dropped after the engine lock.
                        invalidate_below = Some(fk);
                    }
                    eng.drop_file_blocks(file, false);
                }
            }
            let fd = eng.gc_file(file);
            let holds = eng
                .files()
                .get(&file)
                .is_some_and(|f| f.backing().is_some());
            (fd, kick, holds)
        };
        drop(fd);
        if let Some(shared) = forget_now {
            self.forget_released(file, &shared);
            return true;
        }
        if let (Some(lower), Some(fk)) = (self.lower(), invalidate_below) {
            lower.invalidate_file(fk, 0);
        }
        if kick {
            self.kick_flusher();
        }
        if holds {
            self.help_bound_closed_fds();
        }
        true
    }

    pub(crate) fn set_class(&self, file: FileId, class: Class) {
        let mut eng = self.lock();
        if let Some(f) = eng.files_mut().get_mut(&file) {
            f.set_class(class);
            eng.reclassify_blocks(file, class);
        }
    }

    /// Drops the file's clean blocks (dirty ones stay).
    pub(crate) fn invalidate(&self, file: FileId) -> usize {
        let Ok(shared) = self.shared(file) else {
            return 0;
        };
        let _io = crate::cache::lock(&shared.io);
        let _op = crate::cache::write_lock(&shared.op);
        let mut eng = self.lock();
        let Some(f) = eng.files_mut().get_mut(&file) else {
            return 0;
        };
        f.reset_read_ahead();
        eng.drop_file_blocks(file, false).0
    }

    pub(crate) fn logical_size(&self, file: FileId) -> Option<u64> {
        let eng = self.lock();
        let f = eng.files().get(&file)?;
        (f.size() > f.backing_size()).then_some(f.size())
    }

    pub(crate) fn generation(&self, file: FileId) -> Option<u64> {
        self.lock().files().get(&file).map(|f| f.generation())
    }

    pub(crate) fn logical_times(&self, file: FileId, backing_ctime: SystemTime) -> LogicalTimes {
        let mut eng = self.lock();
        let (mtime, during) = eng
            .files()
            .get(&file)
            .map_or((None, None), |f| (f.mtime(), f.wb_ctime()));
        if mtime.is_none() && during.is_none() && eng.ctimes().get(file).is_none() {
            return LogicalTimes::default();
        }
        // Also when it equals `backing_ctime`: the caller may combine it with a later stat, taken
        // after a write-back of ours moved BACKING's.
        let ctime = eng.ctimes_mut().resolve(file, backing_ctime, during, mtime);
        LogicalTimes {
            mtime,
            ctime: Some(ctime),
        }
    }

    /// Runs `apply` (which sets BACKING's times) with the file quiesced: no write-back, write or
    /// truncate runs meanwhile. When `mtime` is among the times and the file has dirty blocks,
    /// the time BACKING now shows becomes the logical mtime, so their write-back keeps it. The
    /// stamp BACKING shows afterwards is recorded (`stat` gives it when the tier holds no
    /// descriptor of the file), as for any change of the tier's own (see `versions`).
    pub(crate) fn set_times(
        &self,
        file: FileId,
        mtime: bool,
        apply: &mut dyn FnMut() -> io::Result<()>,
        stat: &mut dyn FnMut() -> io::Result<FileStamp>,
    ) -> io::Result<()> {
        let Ok(shared) = self.shared(file) else {
            // No state; a version kept for the file follows the times (its bytes stay).
            return self.change_metadata(file, apply, stat);
        };
        let _io = crate::cache::lock(&shared.io);
        let _op = crate::cache::write_lock(&shared.op);
        let fd = match self.lock().files().get(&file) {
            Some(f) => f.backing().cloned(),
            None => return apply(),
        };
        // Without a descriptor the file is closed and clean: BACKING's times are the file's.
        let mut stamp_now = || match &fd {
            Some(fd) => FileStamp::of_file(fd),
            None => stat(),
        };
        // Recorded after our change only if this was the recorded stamp (see `versions`).
        let before = stamp_now().ok();
        apply()?;
        let stamp = stamp_now();
        let mut eng = self.lock();
        let Some(f) = eng.files_mut().get_mut(&file) else {
            return Ok(());
        };
        let mut meta = None;
        match stamp {
            Ok(stamp) => {
                if before.is_none_or(|b| b == f.stamp()) {
                    f.record_stamp(stamp);
                }
                if mtime {
                    f.set_mtime(f.has_pending_writes().then_some(stamp.mtime));
                    // A persistent tier below keeps the new time with the file's dirty blocks.
                    if let (false, Some(fk), Some(h)) =
                        (f.lower_dirty().is_empty(), f.fkey(), f.handle().cloned())
                    {
                        meta = Some((fk, crate::wb_types::file_meta(f.size(), stamp.mtime, h)));
                    }
                }
            }
            Err(e) => {
                if mtime && fd.is_none() {
                    f.set_mtime(None);
                }
                log::warn!("file {}: fstat after set_times failed: {e}", file.0);
            }
        }
        drop(eng);
        if let (Some((fk, m)), Some(t)) = (meta, self.lower().and_then(|l| l.dirty_tier())) {
            if let Some(p) = t.persistence() {
                p.set_file_meta(&fk, &m);
            }
        }
        Ok(())
    }

    /// Runs `op`, which changes BACKING's bytes or size directly (fallocate, hole punching),
    /// with the file written back and quiesced; then drops the file's cached blocks and takes
    /// its size from BACKING. `op`'s error is returned after the state was refreshed.
    pub(crate) fn apply_to_backing(
        &self,
        file: FileId,
        op: &mut dyn FnMut() -> io::Result<()>,
    ) -> io::Result<()> {
        let Ok(shared) = self.shared(file) else {
            return op();
        };
        let _io = crate::cache::lock(&shared.io);
        let _op = crate::cache::write_lock(&shared.op);
        self.flush_locked(file, crate::writeback::Why::Sync(true))?;
        self.clean_lower_locked(file)?;
        let fd = self
            .lock()
            .files()
            .get(&file)
            .and_then(|f| f.backing().cloned());
        // Recorded after `op` only if this was the recorded stamp (see `versions`).
        let before = fd.as_deref().and_then(|fd| FileStamp::of_file(fd).ok());
        let result = op();
        let stamp = match fd.as_deref().map(FileStamp::of_file) {
            Some(Ok(stamp)) => Some(stamp),
            Some(Err(e)) => {
                log::warn!("file {}: fstat after a direct change failed: {e}", file.0);
                None
            }
            None => None,
        };
        let mut eng = self.lock();
        let Some(f) = eng.files_mut().get_mut(&file) else {
            return result;
        };
        if let Some(stamp) = stamp {
            if before.is_none_or(|b| b == f.stamp()) {
                f.record_stamp(stamp);
            }
        }
        f.changed_directly(stamp.map(|s| s.size));
        // `op` may have changed bytes anywhere (a punched hole): no copy below is current.
        // Dropped there after the engine lock (the file is quiesced: `io` + `op`).
        let invalidate_below = f.fkey();
        let blocks: Vec<u64> = f.blocks().iter().copied().collect();
        for b in blocks {
            let key = BlockKey {
                file,
                block: BlockIndex(b),
            };
            match eng.drop_block(key, false) {
                Dropped::Yes | Dropped::NotCached => {}
                Dropped::Pinned | Dropped::Dirty => {
                    log::error!("file {}: block {b} busy after a direct change", file.0);
                }
            }
        }
        drop(eng);
        if let (Some(lower), Some(fk)) = (self.lower(), invalidate_below) {
            lower.invalidate_file(fk, 0);
        }
        result
    }

    /// Cached and dirty block counts of a file.
    pub(crate) fn file_blocks(&self, file: FileId) -> (usize, usize) {
        self.lock()
            .files()
            .get(&file)
            .map_or((0, 0), |f| (f.blocks().len(), f.dirty().len()))
    }

    /// Re-reads the backing file's stamp after the tier changed it, so that the next `open`
    /// does not mistake our own writes for a change behind our back. Returns BACKING's ctime.
    pub(crate) fn refresh_stamp(
        &self,
        file: FileId,
        fd: &File,
        before: Option<&FileStamp>,
    ) -> Option<SystemTime> {
        match fd.metadata() {
            Ok(m) => {
                self.note_own_stamp(file, before, FileStamp::from_metadata(&m));
                Some(crate::times::ctime_of(&m))
            }
            Err(e) => {
                log::warn!("file {}: fstat after write-back failed: {e}", file.0);
                None
            }
        }
    }
}
