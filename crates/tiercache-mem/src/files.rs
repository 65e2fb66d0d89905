//! Per-file state and the file-level operations: `open` (with the staleness check), `release`,
//! `set_class`, `invalidate`/`forget`, sizes and generations.
//!
//! Invariants:
//! - a file has a state while it is open, has cached blocks, or has dirty blocks; its backing
//!   handle is kept while it is open, dirty or not yet synced (the flusher needs an fd);
//! - `backing_size ≤ size`; `size` is the logical size readers see (EOF), `backing_size` what
//!   the tier believes BACKING holds (writes past it are cached until written back);
//! - `stamp` describes BACKING as of the tier's last change to it, so a different stamp at open
//!   means someone changed the file behind the tier's back;
//! - `mtime` (the logical modification time) is `Some` while cached writes are not all on
//!   BACKING, and `wb_ctime` while a write-back is changing BACKING (see `times`);
//! - lock order per file: `io` (write-back, truncate) before `op` (reads/writes shared;
//!   truncate and invalidation exclusive); nothing takes `op` while holding a slot lock, and
//!   writers throttle *before* taking `op`.

use crate::cache::Inner;
use crate::engine::Dropped;
use crate::error::{unknown_file, StoredError};
use crate::times::LogicalTimes;
use std::collections::BTreeSet;
use std::fs::{File, Metadata};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Instant, SystemTime};
use tiercache_core::{BlockIndex, BlockKey, Class, FileId};

/// What identifies a version of a backing file: size, modification time, inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp {
    pub size: u64,
    pub mtime: SystemTime,
    pub ino: u64,
}

impl FileStamp {
    /// The stamp of a file as `metadata` describes it.
    pub fn from_metadata(m: &Metadata) -> Self {
        Self {
            size: m.len(),
            mtime: m.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            ino: m.ino(),
        }
    }

    /// `fstat` of an open file.
    pub fn of_file(f: &File) -> io::Result<Self> {
        Ok(Self::from_metadata(&f.metadata()?))
    }
}

/// What `open` did with the blocks cached from an earlier version of the file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpenOutcome {
    /// The file was already known with cached blocks and an identical stamp.
    pub reused_blocks: usize,
    /// Clean blocks dropped because the file changed behind the cache's back.
    pub dropped_blocks: usize,
    /// Dirty blocks kept although the file changed behind the cache's back (logged).
    pub kept_dirty: usize,
}

/// Per-file locks, shared by the requests on that file (outside the engine lock).
#[derive(Debug, Default)]
pub(crate) struct FileShared {
    /// Shared by reads and writes; exclusive for truncate and invalidation.
    pub op: RwLock<()>,
    /// Held by write-back of this file and by truncate.
    pub io: Mutex<()>,
}

/// Sequential-stream detector.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ReadAhead {
    /// Where the next read must start to count as sequential.
    pub next: u64,
    /// Current window in blocks (0 = not sequential).
    pub window: u32,
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

/// Everything the tier knows about one file (guarded by the engine lock).
#[derive(Debug)]
pub(crate) struct FileState {
    pub shared: Arc<FileShared>,
    pub backing: Option<Arc<File>>,
    pub class: Class,
    pub stamp: FileStamp,
    pub size: u64,
    pub backing_size: u64,
    /// Bumped on every write and truncate.
    pub generation: u64,
    /// `open` calls since the last `release` (0 = closed).
    pub handles: u32,
    /// Cached block indices, in order.
    pub blocks: BTreeSet<u64>,
    /// Dirty block indices, in order (⊆ `blocks`).
    pub dirty: BTreeSet<u64>,
    /// When the file went from clean to dirty.
    pub dirtied_at: Option<Instant>,
    /// A background write-back error not yet reported by `fsync`/`flush`.
    pub error: Option<StoredError>,
    /// Data was written to BACKING since the last sync.
    pub needs_sync: bool,
    /// Logical modification time while cached writes are not all on BACKING: the time of the
    /// last write, or of a later truncate or explicit `set_times` (see `times`).
    pub mtime: Option<SystemTime>,
    /// The ctime to report while a write-back is changing BACKING (see `times`).
    pub wb_ctime: Option<SystemTime>,
    pub ra: ReadAhead,
}

impl FileState {
    fn new(backing: Arc<File>, class: Class, stamp: FileStamp) -> Self {
        Self {
            shared: Arc::new(FileShared::default()),
            backing: Some(backing),
            class,
            stamp,
            size: stamp.size,
            backing_size: stamp.size,
            generation: 0,
            handles: 1,
            blocks: BTreeSet::new(),
            dirty: BTreeSet::new(),
            dirtied_at: None,
            error: None,
            needs_sync: false,
            mtime: None,
            wb_ctime: None,
            ra: ReadAhead::default(),
        }
    }
}

impl Inner {
    /// The per-file locks of a known file.
    pub(crate) fn shared(&self, file: FileId) -> io::Result<Arc<FileShared>> {
        let eng = self.lock();
        eng.files
            .get(&file)
            .map(|f| Arc::clone(&f.shared))
            .ok_or_else(|| unknown_file(file))
    }

    pub(crate) fn open(
        &self,
        file: FileId,
        backing: Arc<File>,
        class: Class,
        stamp: FileStamp,
    ) -> io::Result<OpenOutcome> {
        let shared = {
            let mut eng = self.lock();
            let Some(f) = eng.files.get_mut(&file) else {
                eng.files
                    .insert(file, FileState::new(backing, class, stamp));
                return Ok(OpenOutcome::default());
            };
            f.handles += 1;
            f.backing = Some(backing);
            let reclass = f.class != class;
            f.class = class;
            let stale = f.stamp != stamp;
            let shared = Arc::clone(&f.shared);
            if reclass {
                self.reclassify(&mut eng, file, class);
            }
            if !stale {
                let n = eng.files.get(&file).map_or(0, |f| f.blocks.len());
                return Ok(OpenOutcome {
                    reused_blocks: n,
                    ..OpenOutcome::default()
                });
            }
            shared
        };
        // The stamp differs. Quiesce the file (no write-back, write-through or truncate can run)
        // and look at BACKING ourselves: the caller's stamp may simply predate our own latest
        // write-back, which already refreshed the stored stamp.
        let _io = crate::cache::lock(&shared.io);
        let _op = crate::cache::write_lock(&shared.op);
        let fd = self.lock().files.get(&file).and_then(|f| f.backing.clone());
        let stamp = match fd.as_deref().map(FileStamp::of_file) {
            Some(Ok(fresh)) => fresh,
            Some(Err(e)) => {
                log::warn!("file {}: fstat at open failed: {e}", file.0);
                stamp
            }
            None => stamp,
        };
        let mut eng = self.lock();
        let Some(f) = eng.files.get_mut(&file) else {
            return Ok(OpenOutcome::default());
        };
        if f.stamp == stamp {
            return Ok(OpenOutcome {
                reused_blocks: f.blocks.len(),
                ..OpenOutcome::default()
            });
        }
        let blocks: Vec<u64> = f.blocks.iter().copied().collect();
        let kept_dirty = f.dirty.len();
        let old = f.stamp;
        f.stamp = stamp;
        f.backing_size = stamp.size;
        f.size = if kept_dirty > 0 {
            f.size.max(stamp.size)
        } else {
            stamp.size
        };
        f.generation += 1;
        f.ra = ReadAhead::default();
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
        if kept_dirty > 0 {
            log::warn!(
                "file {} changed behind the cache ({old:?} -> {stamp:?}); dropped {dropped} \
                 clean blocks, kept {kept_dirty} dirty blocks that will overwrite it",
                file.0
            );
        } else if dropped > 0 {
            log::info!(
                "file {} changed behind the cache; dropped {dropped} stale blocks",
                file.0
            );
        }
        Ok(OpenOutcome {
            reused_blocks: 0,
            dropped_blocks: dropped,
            kept_dirty,
        })
    }

    pub(crate) fn release(&self, file: FileId) {
        let fd = {
            let mut eng = self.lock();
            match eng.files.get_mut(&file) {
                // The last handle closed (the caller calls this once, at the last close).
                Some(f) => f.handles = 0,
                None => return,
            }
            eng.gc_file(file)
        };
        drop(fd);
    }

    /// Moves the file's cached blocks to the pool of `class`.
    fn reclassify(&self, eng: &mut crate::engine::Engine, file: FileId, class: Class) {
        let Some(f) = eng.files.get(&file) else {
            return;
        };
        let blocks: Vec<u64> = f.blocks.iter().copied().collect();
        for b in blocks {
            let key = BlockKey {
                file,
                block: BlockIndex(b),
            };
            if let Some(slot) = eng.tier.peek(&key) {
                eng.tier.set_class(slot, class);
            }
        }
    }

    pub(crate) fn set_class(&self, file: FileId, class: Class) {
        let mut eng = self.lock();
        if let Some(f) = eng.files.get_mut(&file) {
            f.class = class;
            self.reclassify(&mut eng, file, class);
        }
    }

    /// Drops the file's clean blocks; with `forget`, also its state when it is closed and clean.
    pub(crate) fn invalidate(&self, file: FileId, forget: bool) -> usize {
        let Ok(shared) = self.shared(file) else {
            return 0;
        };
        let _io = crate::cache::lock(&shared.io);
        let _op = crate::cache::write_lock(&shared.op);
        let (dropped, fd) = {
            let mut eng = self.lock();
            let Some(f) = eng.files.get_mut(&file) else {
                return 0;
            };
            f.ra = ReadAhead::default();
            let blocks: Vec<u64> = f.blocks.iter().copied().collect();
            let mut dropped = 0;
            for b in blocks {
                let key = BlockKey {
                    file,
                    block: BlockIndex(b),
                };
                if eng.drop_block(key, false) == Dropped::Yes {
                    dropped += 1;
                }
            }
            let fd = if forget { eng.gc_file(file) } else { None };
            (dropped, fd)
        };
        drop(fd);
        dropped
    }

    pub(crate) fn logical_size(&self, file: FileId) -> Option<u64> {
        let eng = self.lock();
        let f = eng.files.get(&file)?;
        (f.size > f.backing_size).then_some(f.size)
    }

    pub(crate) fn generation(&self, file: FileId) -> Option<u64> {
        self.lock().files.get(&file).map(|f| f.generation)
    }

    pub(crate) fn logical_times(&self, file: FileId, backing_ctime: SystemTime) -> LogicalTimes {
        let mut eng = self.lock();
        let (mtime, during) = eng
            .files
            .get(&file)
            .map_or((None, None), |f| (f.mtime, f.wb_ctime));
        if mtime.is_none() && during.is_none() && eng.ctimes.get(file).is_none() {
            return LogicalTimes::default();
        }
        // Also when it equals `backing_ctime`: the caller may combine it with a later stat, taken
        // after a write-back of ours moved BACKING's.
        let ctime = eng.ctimes.resolve(file, backing_ctime, during, mtime);
        LogicalTimes {
            mtime,
            ctime: Some(ctime),
        }
    }

    /// Runs `apply` (which sets BACKING's times) with the file quiesced: no write-back, write or
    /// truncate runs meanwhile. When `mtime` is among the times and the file has dirty blocks,
    /// the time BACKING now shows becomes the logical mtime, so their write-back keeps it.
    pub(crate) fn set_times(
        &self,
        file: FileId,
        mtime: bool,
        apply: &mut dyn FnMut() -> io::Result<()>,
    ) -> io::Result<()> {
        let Ok(shared) = self.shared(file) else {
            return apply();
        };
        let _io = crate::cache::lock(&shared.io);
        let _op = crate::cache::write_lock(&shared.op);
        apply()?;
        let fd = {
            let mut eng = self.lock();
            let Some(f) = eng.files.get_mut(&file) else {
                return Ok(());
            };
            match f.backing.clone() {
                Some(fd) => fd,
                None => {
                    // closed and clean: BACKING's times are the file's
                    if mtime {
                        f.mtime = None;
                    }
                    return Ok(());
                }
            }
        };
        let stamp = FileStamp::of_file(&fd);
        let mut eng = self.lock();
        let Some(f) = eng.files.get_mut(&file) else {
            return Ok(());
        };
        match stamp {
            Ok(stamp) => {
                f.stamp = stamp;
                if mtime {
                    f.mtime = (!f.dirty.is_empty()).then_some(stamp.mtime);
                }
            }
            Err(e) => log::warn!("file {}: fstat after set_times failed: {e}", file.0),
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
        self.flush_locked(file, crate::flusher::Why::Sync(true))?;
        let result = op();
        let fd = self.lock().files.get(&file).and_then(|f| f.backing.clone());
        let stamp = match fd.as_deref().map(FileStamp::of_file) {
            Some(Ok(stamp)) => Some(stamp),
            Some(Err(e)) => {
                log::warn!("file {}: fstat after a direct change failed: {e}", file.0);
                None
            }
            None => None,
        };
        let mut eng = self.lock();
        let Some(f) = eng.files.get_mut(&file) else {
            return result;
        };
        f.generation += 1;
        f.ra = ReadAhead::default();
        if let Some(stamp) = stamp {
            f.stamp = stamp;
            f.size = stamp.size;
            f.backing_size = stamp.size;
        }
        f.needs_sync = true;
        if f.dirty.is_empty() {
            f.mtime = None;
        }
        let blocks: Vec<u64> = f.blocks.iter().copied().collect();
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
        result
    }

    /// Cached and dirty block counts of a file.
    pub(crate) fn file_blocks(&self, file: FileId) -> (usize, usize) {
        self.lock()
            .files
            .get(&file)
            .map_or((0, 0), |f| (f.blocks.len(), f.dirty.len()))
    }

    /// Re-reads the backing file's stamp after the tier changed it, so that the next `open`
    /// does not mistake our own writes for a change behind our back. Returns BACKING's ctime.
    pub(crate) fn refresh_stamp(&self, file: FileId, fd: &File) -> Option<SystemTime> {
        match fd.metadata() {
            Ok(m) => {
                if let Some(f) = self.lock().files.get_mut(&file) {
                    f.stamp = FileStamp::from_metadata(&m);
                }
                Some(crate::times::ctime_of(&m))
            }
            Err(e) => {
                log::warn!("file {}: fstat after write-back failed: {e}", file.0);
                None
            }
        }
    }
}

/// Checks, under the engine lock, that a request still works on the state whose locks it took
/// (a closed, clean, fully evicted file may have been forgotten and opened anew meanwhile).
pub(crate) fn same_state(f: &FileState, shared: &Arc<FileShared>, file: FileId) -> io::Result<()> {
    if Arc::ptr_eq(&f.shared, shared) {
        Ok(())
    } else {
        log::warn!("file {}: request raced with forget/reopen; retry", file.0);
        Err(io::Error::from_raw_os_error(libc::EAGAIN))
    }
}
