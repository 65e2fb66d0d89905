//! The live data path: FUSE requests for regular-file data go to the memory tier
//! (`tiercache_manager::MemCache`), which serves hits, fills misses from BACKING and writes back.
//!
//! Classes come from class directories (`live::classes`; priority directories among them): at
//! open, the file's path inside the mount (from `/proc/self/fd` of its backing descriptor)
//! decides. The last path seen per inode is kept so a rule or class change can reclassify
//! blocks already cached.

use super::classes::LiveClasses;
use super::error::DaemonError;
use super::priority::PriorityRule;
use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock};
use std::time::SystemTime;
use tiercache_core::{Class, FileId};
use tiercache_fuse::{
    Attempt, BackingStamp, DataPath, FileHandleInfo, IoClass, KernelCacheHandle, OpenAdvice,
    StatFn, TimesOverride,
};
use tiercache_manager::{FileStamp, MemCache, NoWait};

/// Per-inode state the adapter keeps, for reclassification only: the memory tier counts the
/// open handles itself (under its engine lock, with the opens), and decides what a forget means
/// for an open file.
#[derive(Debug, Default)]
struct Known {
    /// Path relative to the mount root at the last open.
    path: PathBuf,
    open_handles: usize,
    /// The kernel forgot the inode while handles were open: drop the entry at the last release.
    evicted: bool,
}

/// `DataPath` over the memory tier.
#[derive(Debug)]
pub struct CacheDataPath {
    mem: Arc<MemCache>,
    backing_root: PathBuf,
    /// The class table and rules in force. Lock order: this, then `known`, then the memory
    /// tier; an open holds it (read) until its class is recorded, so that a change never
    /// misses a file nor renumbers a class between classification and the tier's open.
    classes: RwLock<LiveClasses>,
    known: Mutex<HashMap<u64, Known>>,
    /// The mount's kernel page cache, once mounted: changes made for zero-copy clients are
    /// dropped from it.
    kernel: OnceLock<KernelCacheHandle>,
}

impl CacheDataPath {
    /// A handle of `ino` was released by the tier: one open handle less in the
    /// reclassification map (its entry goes at the last one if the kernel forgot `ino`).
    fn released(&self, ino: u64) {
        let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(k) = known.get_mut(&ino) {
            k.open_handles = k.open_handles.saturating_sub(1);
            if k.open_handles == 0 && k.evicted {
                known.remove(&ino);
            }
        }
    }

    /// The kernel forgot `ino`: its reclassification entry goes (at its last release if
    /// handles are still open).
    fn forget_known(&self, ino: u64) {
        let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        match known.get_mut(&ino) {
            Some(k) if k.open_handles == 0 => {
                known.remove(&ino);
            }
            Some(k) => k.evicted = true,
            None => {}
        }
    }

    pub fn new(mem: Arc<MemCache>, backing_root: PathBuf, classes: LiveClasses) -> Self {
        Self {
            mem,
            backing_root,
            classes: RwLock::new(classes),
            known: Mutex::new(HashMap::new()),
            kernel: OnceLock::new(),
        }
    }

    /// The mount's kernel page cache (set once, after mounting).
    pub fn set_kernel_cache(&self, k: KernelCacheHandle) {
        let _ = self.kernel.set(k);
    }

    /// `len` bytes of `ino` at `offset` changed other than through the mount (`len` 0: to the
    /// end): the kernel must not serve what it cached of them. Not on a FUSE request thread
    /// (see `KernelCacheHandle::invalidate`).
    pub fn changed_outside_mount(&self, ino: u64, offset: u64, len: u64) {
        if let Some(k) = self.kernel.get() {
            k.invalidate(ino, offset, len);
        }
    }

    pub fn mem(&self) -> &Arc<MemCache> {
        &self.mem
    }

    pub fn priority_rules(&self) -> Vec<PriorityRule> {
        self.classes().rules.priority_rules()
    }

    /// The class table and rules in force.
    pub fn classes(&self) -> LiveClasses {
        self.classes
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Changes the class table and the rules together: `f` changes a copy and says whether
    /// anything changed (or why the change is refused). A new table goes to the memory tier
    /// (blocks move between pools; classes a removal renumbers keep their blocks, files and
    /// counts, a removed class's go to `normal`), then every file the cache has seen is
    /// classified again. Nothing changes on an error.
    pub fn update_classes(
        &self,
        f: impl FnOnce(&mut LiveClasses) -> Result<bool, DaemonError>,
    ) -> Result<bool, DaemonError> {
        let mut cur = self.classes.write().unwrap_or_else(PoisonError::into_inner);
        let mut next = cur.clone();
        if !f(&mut next)? {
            return Ok(false);
        }
        if next.params != cur.params {
            let remap: Vec<Class> = cur
                .params
                .classes
                .iter()
                .map(|(_, s)| {
                    next.params
                        .classes
                        .by_name(&s.name)
                        .unwrap_or(Class::NORMAL)
                })
                .collect();
            self.mem.set_classes(&next.params, &remap)?;
        }
        *cur = next;
        let known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        for (ino, k) in known.iter() {
            let class = cur.rules.class_of(&k.path, &cur.params.classes);
            self.mem.set_class(FileId(*ino), class);
        }
        Ok(true)
    }

    /// The file's path relative to BACKING, from the kernel's view of its descriptor.
    fn relative_path(&self, file: &File) -> Option<PathBuf> {
        let link = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).ok()?;
        link.strip_prefix(&self.backing_root)
            .ok()
            .map(Path::to_path_buf)
    }
}

/// The stamp of a newly opened handle: a fresh `fstat` of its descriptor, as the handle's
/// snapshot has no change time (which tells edits that restored size and mtime).
fn open_stamp(fh: &FileHandleInfo) -> io::Result<FileStamp> {
    FileStamp::of_file(&fh.file)
}

/// `stat` of the FUSE layer as the memory tier wants it.
fn stamp_of<'a, 'b>(
    stat: &'a mut StatFn<'b>,
) -> impl FnMut() -> io::Result<FileStamp> + use<'a, 'b> {
    move || {
        stat().map(|s: BackingStamp| FileStamp {
            size: s.size,
            mtime: s.mtime,
            ctime: s.ctime,
            ino: s.ino,
        })
    }
}

/// The I/O workers' class of a file's class.
fn io_class(class: Class) -> IoClass {
    match class {
        Class::PRIORITY => IoClass::Priority,
        _ => IoClass::Normal,
    }
}

/// A no-wait answer of the memory tier as the FUSE layer wants it.
fn attempt(r: NoWait<usize>) -> Attempt<usize> {
    match r {
        NoWait::Done(r) => Attempt::Done(r),
        NoWait::Wait(class) => Attempt::Wait(io_class(class)),
    }
}

/// O_SYNC / O_DSYNC writes are made durable before they are acknowledged.
fn sync_flags(flags: i32) -> Option<bool> {
    if flags & libc::O_SYNC == libc::O_SYNC {
        Some(false)
    } else if flags & libc::O_DSYNC != 0 {
        Some(true)
    } else {
        None
    }
}

impl DataPath for CacheDataPath {
    fn open(&self, fh: &FileHandleInfo) -> io::Result<OpenAdvice> {
        let path = self.relative_path(&fh.file).unwrap_or_default();
        let classes = self.classes.read().unwrap_or_else(PoisonError::into_inner);
        let class = classes.rules.class_of(&path, &classes.params.classes);
        // The handle's own descriptor, read-only for a read-only open: the memory tier keeps a
        // writable one it already has, and reopens read-write only if write-back ever needs it
        // (a write-intent open shows in inotify, breaks leases and costs an RPC on NFS).
        let out = self
            .mem
            .open(FileId(fh.ino), Arc::clone(&fh.file), class, open_stamp(fh)?)?;
        let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        let k = known.entry(fh.ino).or_default();
        k.path = path;
        k.open_handles += 1;
        k.evicted = false;
        drop(known);
        drop(classes);
        // Priority files are hot: the kernel caches them in front of the protected pool.
        Ok(OpenAdvice {
            kernel_cache: class == Class::PRIORITY,
            content: Some(out.content_version),
            // `flush` reports background write-back errors to writers' closes only.
            no_flush: fh.flags & libc::O_ACCMODE == libc::O_RDONLY,
        })
    }

    fn read(&self, fh: &FileHandleInfo, offset: u64, size: u32) -> io::Result<Vec<u8>> {
        self.mem.read(FileId(fh.ino), offset, size as usize)
    }

    fn read_into(&self, fh: &FileHandleInfo, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        self.mem.read_into(FileId(fh.ino), offset, buf)
    }

    fn try_read_into(&self, fh: &FileHandleInfo, offset: u64, buf: &mut [u8]) -> Attempt<usize> {
        attempt(self.mem.try_read_into(FileId(fh.ino), offset, buf))
    }

    fn try_write(&self, fh: &FileHandleInfo, offset: u64, data: &[u8]) -> Attempt<u32> {
        // A synchronous write waits for BACKING's sync.
        if sync_flags(fh.flags).is_some() {
            return Attempt::Wait(self.io_class(fh));
        }
        match attempt(self.mem.try_write(FileId(fh.ino), offset, data)) {
            Attempt::Done(r) => Attempt::Done(r.and_then(|n| {
                u32::try_from(n).map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))
            })),
            Attempt::Wait(c) => Attempt::Wait(c),
        }
    }

    fn io_class(&self, fh: &FileHandleInfo) -> IoClass {
        io_class(self.mem.class_of(FileId(fh.ino)).unwrap_or(Class::NORMAL))
    }

    fn write(&self, fh: &FileHandleInfo, offset: u64, data: &[u8]) -> io::Result<u32> {
        let n = self.mem.write(FileId(fh.ino), offset, data)?;
        if let Some(datasync) = sync_flags(fh.flags) {
            self.mem.fsync(FileId(fh.ino), datasync)?;
        }
        u32::try_from(n).map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))
    }

    fn flush(&self, fh: &FileHandleInfo) -> io::Result<()> {
        // close(): report a background write-back error of the file once (no write-back here,
        // that would defeat write-back; `fsync` waits for it). Readers' closes report nothing.
        if fh.flags & libc::O_ACCMODE == libc::O_RDONLY {
            return Ok(());
        }
        match self.mem.take_writeback_error(FileId(fh.ino)) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn fsync(&self, fh: &FileHandleInfo, datasync: bool) -> io::Result<()> {
        self.mem.fsync(FileId(fh.ino), datasync)
    }

    fn truncate(&self, ino: u64, file: &File, new_size: u64) -> io::Result<()> {
        // Through `file` (writable): the tier may hold no descriptor of a closed file. A file it
        // does not know is truncated on BACKING directly.
        self.mem.truncate_with(FileId(ino), file, new_size)
    }

    fn fallocate(&self, fh: &FileHandleInfo, mode: i32, offset: u64, len: u64) -> io::Result<()> {
        // Allocation may extend the file, hole punching and zeroing change its bytes: the memory
        // tier writes back, holds the file while BACKING is changed, then drops its blocks and
        // takes the new size from BACKING (reads past the old EOF must see the zeros).
        self.mem.apply_to_backing(FileId(fh.ino), &mut || {
            tiercache_fuse::PassThrough.fallocate(fh, mode, offset, len)
        })
    }

    fn size_override(&self, ino: u64) -> Option<u64> {
        self.mem.logical_size(FileId(ino))
    }

    fn times_override(&self, ino: u64, backing_ctime: SystemTime) -> TimesOverride {
        let t = self.mem.logical_times(FileId(ino), backing_ctime);
        TimesOverride {
            mtime: t.mtime,
            ctime: t.ctime,
        }
    }

    fn set_times(
        &self,
        ino: u64,
        mtime: bool,
        apply: &mut dyn FnMut() -> io::Result<()>,
        stat: &mut StatFn<'_>,
    ) -> io::Result<()> {
        self.mem
            .set_times(FileId(ino), mtime, apply, &mut stamp_of(stat))
    }

    fn change_metadata(
        &self,
        ino: u64,
        apply: &mut dyn FnMut() -> io::Result<()>,
        stat: &mut StatFn<'_>,
    ) -> io::Result<()> {
        // The memory tier records the change time it moved (its staleness check at open and
        // the version lower tiers keep blocks with include it). The last stat it asks for is
        // after the change: no link left then (an unlink, a rename over the file) means no
        // name leads to a next open, and the tier lets the clean blocks go at forget.
        let mut links = None;
        let mut seen = || {
            stat().inspect(|s| {
                links = Some(s.links);
            })
        };
        self.mem
            .change_metadata(FileId(ino), apply, &mut stamp_of(&mut seen))?;
        if links == Some(0) {
            self.mem.mark_unlinked(FileId(ino));
        }
        Ok(())
    }

    fn release(&self, fh: &FileHandleInfo) {
        // One tier release per tier open: the tier counts handles with its opens, under one
        // lock, so a release racing another open of the same file cannot close that open's
        // state (it did when the last release here set the tier's count to 0 while an open
        // had reached the tier but not this map yet). At the last one the tier carries out a
        // forget that came first.
        self.mem.release(FileId(fh.ino));
        self.released(fh.ino);
    }

    fn try_release(&self, fh: &FileHandleInfo) -> bool {
        // As `release`, when the tier can let go without I/O (see `MemCache::try_release`).
        if !self.mem.try_release(FileId(fh.ino)) {
            return false;
        }
        self.released(fh.ino);
        true
    }

    fn evict(&self, ino: u64) {
        // The inode number may name another file later: the tier writes the file's dirty blocks
        // back and drops everything it has of it (at the last release if handles are still
        // open: FORGET may overtake RELEASE). The FUSE layer calls this after removing the
        // node, without a lock, so a new lookup and open of the same inode may come first: the
        // tier never drops the state of an open handle, and a forget overtaken by an open stops
        // (see `tiercache_manager::MemCache::forget`).
        self.mem.forget(FileId(ino));
        self.forget_known(ino);
    }

    fn try_evict(&self, ino: u64) -> bool {
        // Either the tier has nothing of the file (a directory, a file never opened, or one
        // whose blocks all went): only this map's entry; or it can let go of the file without
        // I/O (closed, nothing to write back, no tier below: what `rm -rf` forgets). Should an
        // open of the same inode reach the tier meanwhile, this forget is stale and the tier's
        // state is the new handle's, which the tier keeps anyway (see `evict`).
        // (`try_forget` answers an unknown file itself, under one lock; with a tier below it
        // refuses at once, and only then is the tier asked whether it knows the file.)
        if !self.mem.try_forget(FileId(ino)) && self.mem.class_of(FileId(ino)).is_some() {
            return false;
        }
        self.forget_known(ino);
        true
    }
}
