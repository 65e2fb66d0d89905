//! [`UncachedBacking`]: BACKING I/O that leaves nothing behind in the kernel page cache (the
//! default, `--backing-cache drop`), so the memory tier is tiercache's only copy of BACKING's
//! data in RAM, and streaming through the mount does not evict other programs' pages.
//!
//! Reads are plain buffered `pread`s followed by `posix_fadvise(POSIX_FADV_DONTNEED)` of what
//! they read: the kernel's read-ahead keeps its full window (large BACKING requests, issued
//! ahead of the reader), and what a request has passed is dropped. Since a range's ends may lie
//! inside a larger folio (up to [`FOLIO_WINDOW`](super::FOLIO_WINDOW)) that a range drop cannot take, each request
//! also drops the whole windows it has passed the end of, and everything from its window on at
//! end of file. Left behind: at most the window where a stream stopped, and the kernel's
//! read-ahead past it. (`RWF_DONTCACHE` reads were measured slower: the kernel keeps its
//! read-ahead small for them; see `docs/design.md`, "BACKING I/O and the page cache".)
//!
//! Writes, per file system, the first way that works ([`IoMode`]):
//! - `dontcache`: `pwritev2` with `RWF_DONTCACHE` (Linux 6.14+; ext4, xfs, btrfs...): the write
//!   starts its pages' writeback, and the kernel drops them once it has finished — when it
//!   finishes in task context: on ext4 an overwrite of allocated blocks finishes in interrupt
//!   context and keeps them all (measured on 6.18).
//! - `fadvise`: where the flag is refused (`EOPNOTSUPP`): a plain write, then its range's
//!   writeback started (`sync_file_range`, not a durability point).
//! - `memory`: BACKING keeps its files in memory (tmpfs, ramfs): the page cache is its storage,
//!   there is nothing to drop; reads and writes are plain.
//!
//! In both dropping modes every written range is then queued (`behind`): waited for and
//! dropped once 8 MiB more have been written, at the file's `sync`, or when the flusher
//! settles after each round; a writeback failure seen on the way is returned by the file's
//! next `sync`. Durability is unchanged in every mode: `sync` is `fsync`/`fdatasync` as with
//! [`super::RealBacking`], and returns only when the file's data is on BACKING and synced.
//!
//! Probing: [`UncachedBacking::probe`] at mount writes 4 KiB with the flag to an unnamed
//! `O_TMPFILE` file in BACKING's root. File systems met later (mounts inside BACKING, or BACKING
//! itself when the probe could not run, e.g. read-only) are probed by their first write: one
//! refused with `EOPNOTSUPP` is redone the fallback way, and that file system (`st_dev`) keeps
//! the fallback. Until some file system has refused the flag (or is in memory), requests use
//! the default ways without looking their file system up; after that, each request costs one
//! `fstat` more.

use super::behind::{self, Behind};
use super::drop::drop_behind;
use super::{sys, BackingIo};
use serde::Serialize;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{PoisonError, RwLock};
use tiercache_core::{FileId, ParseError};

/// `--backing-cache`: whether BACKING I/O may leave BACKING's pages in the kernel page cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BackingCache {
    /// Plain buffered I/O ([`super::RealBacking`]): pages stay, a second copy of what passes
    /// through the mount (a BACKING on tmpfs, or who wants the old behaviour).
    Keep,
    /// Nothing left behind ([`UncachedBacking`]).
    #[default]
    Drop,
}

impl FromStr for BackingCache {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "keep" => Ok(Self::Keep),
            "drop" => Ok(Self::Drop),
            _ => Err(ParseError::invalid(s, "not keep or drop")),
        }
    }
}

impl fmt::Display for BackingCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Keep => "keep",
            Self::Drop => "drop",
        })
    }
}

/// How BACKING I/O leaves no page cache behind (`stats` `backing.io_mode`; see the module docs).
/// Reads drop what they read in every mode but `Memory` and `Buffered`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum IoMode {
    /// Writes with `RWF_DONTCACHE`.
    Dontcache,
    /// Writes written out, then dropped with `posix_fadvise(POSIX_FADV_DONTNEED)` (the file
    /// system refuses `RWF_DONTCACHE`).
    Fadvise,
    /// BACKING is in memory (tmpfs, ramfs): its pages are its storage.
    Memory,
    /// Plain buffered I/O, pages kept (`--backing-cache keep`).
    Buffered,
    /// Not probed yet: the first write decides (`RWF_DONTCACHE` is tried first).
    #[default]
    Unprobed,
}

impl IoMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Dontcache => "dontcache",
            Self::Fadvise => "fadvise",
            Self::Memory => "memory",
            Self::Buffered => "buffered",
            Self::Unprobed => "unprobed",
        }
    }
}

impl fmt::Display for IoMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What is known about the file systems requests went to.
#[derive(Debug, Default)]
struct Modes {
    /// By `st_dev`: probed, or found refusing `RWF_DONTCACHE`.
    known: Vec<(u64, IoMode)>,
    /// BACKING's own file system, once `probe` ran.
    root: Option<u64>,
}

impl Modes {
    fn get(&self, dev: u64) -> Option<IoMode> {
        self.known.iter().find(|(d, _)| *d == dev).map(|&(_, m)| m)
    }

    /// Records `mode` for `dev`; false when it was known with that mode already.
    fn set(&mut self, dev: u64, mode: IoMode) -> bool {
        match self.known.iter_mut().find(|(d, _)| *d == dev) {
            Some((_, m)) if *m == mode => false,
            Some((_, m)) => {
                *m = mode;
                true
            }
            None => {
                self.known.push((dev, mode));
                true
            }
        }
    }
}

/// BACKING I/O leaving no pages in the page cache. See the module docs.
#[derive(Debug, Default)]
pub struct UncachedBacking {
    /// Every request this way, no probing, no fallback (tests and measurements).
    forced: Option<IoMode>,
    modes: RwLock<Modes>,
    /// Some file system refused `RWF_DONTCACHE` (or is in memory): requests look theirs up
    /// (one `fstat`).
    refusals: AtomicBool,
    /// BACKING's root could not be probed: writes look their file system up until one on
    /// BACKING's own has settled it.
    root_pending: AtomicBool,
    /// Written ranges whose pages are dropped a little later.
    behind: Behind,
}

/// `EOPNOTSUPP`: the file system (or a kernel before 6.14) does not take `RWF_DONTCACHE`.
fn refusal(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EOPNOTSUPP)
}

fn dev_name(dev: u64) -> String {
    format!("{}:{}", libc::major(dev), libc::minor(dev))
}

/// Reads until `buf` is full or end of file.
fn read_full(fd: &File, buf: &mut [u8], off: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match fd.read_at(&mut buf[done..], off + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// Writes all of `buf`.
fn write_full(fd: &File, buf: &[u8], off: u64, flags: libc::c_int) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match sys::pwritev2(fd, &buf[done..], off + done as u64, flags) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Tries `RWF_DONTCACHE` on an unnamed file in `dir`: `Memory` for tmpfs/ramfs, `Dontcache`
/// when a write with the flag works, `Fadvise` when it is refused.
fn probe_dir(dir: &Path, root: &File) -> io::Result<IoMode> {
    if sys::in_memory(root.as_fd())? {
        return Ok(IoMode::Memory);
    }
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_TMPFILE)
        .open(dir)?;
    match write_full(&f, &[0u8; 4096], 0, sys::RWF_DONTCACHE) {
        Ok(()) => Ok(IoMode::Dontcache),
        // EINVAL too: a file system with its own idea of unknown flags.
        Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EINVAL)) => {
            Ok(IoMode::Fadvise)
        }
        Err(e) => Err(e),
    }
}

impl UncachedBacking {
    /// Tries `RWF_DONTCACHE` first on every file system, falling back per file system.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every request uses `mode` (`Dontcache`, `Fadvise`, or a plain mode), with no probing
    /// and no fallback: for tests and measurements of one way.
    pub fn forced(mode: IoMode) -> Self {
        Self {
            forced: Some(mode),
            ..Self::default()
        }
    }

    /// Probes BACKING's root file system (see the module docs), logs the outcome and returns
    /// it; `Unprobed` when the probe could not run (the first request will decide).
    pub fn probe(&self, backing: &Path) -> IoMode {
        if let Some(m) = self.forced {
            return m;
        }
        let opened = File::open(backing).and_then(|f| Ok((sys::device_of(f.as_fd())?, f)));
        let (dev, root) = match opened {
            Ok(x) => x,
            Err(e) => {
                log::warn!(
                    "BACKING {}: cannot probe its page cache use: {e}",
                    backing.display()
                );
                return IoMode::Unprobed;
            }
        };
        let mode = match probe_dir(backing, &root) {
            Ok(m) => m,
            Err(e) => {
                log::info!(
                    "BACKING I/O: unprobed: {} could not be probed ({e}); reads are dropped \
                     with posix_fadvise, the first write tries RWF_DONTCACHE and falls back to \
                     posix_fadvise if it is refused",
                    backing.display()
                );
                IoMode::Unprobed
            }
        };
        let mut modes = self.modes.write().unwrap_or_else(PoisonError::into_inner);
        modes.set(dev, mode);
        modes.root = Some(dev);
        drop(modes);
        match mode {
            IoMode::Dontcache => log::info!(
                "BACKING I/O: dontcache: writes with RWF_DONTCACHE, reads and writes dropped \
                 with posix_fadvise behind them: no page cache left behind"
            ),
            IoMode::Fadvise => {
                self.refusals.store(true, Relaxed);
                log::info!(
                    "BACKING I/O: fadvise: its file system refuses RWF_DONTCACHE; reads and \
                     writes dropped with posix_fadvise behind them: no page cache left behind"
                );
            }
            IoMode::Memory => {
                self.refusals.store(true, Relaxed);
                log::info!(
                    "BACKING I/O: memory: BACKING is in memory (tmpfs/ramfs): its pages are its \
                     storage, nothing to drop"
                );
            }
            _ => self.root_pending.store(true, Relaxed),
        }
        mode
    }

    /// The way a write on `fd` goes now.
    fn mode_for(&self, fd: &File) -> IoMode {
        if let Some(m) = self.forced {
            return m;
        }
        if !self.refusals.load(Relaxed) && !self.root_pending.load(Relaxed) {
            return IoMode::Dontcache;
        }
        // A descriptor fstat fails on fails its request too, with its own error.
        let Ok(dev) = sys::device_of(fd.as_fd()) else {
            return IoMode::Dontcache;
        };
        match self.read_modes().get(dev) {
            Some(m @ (IoMode::Fadvise | IoMode::Memory)) => m,
            _ => IoMode::Dontcache,
        }
    }

    /// Whether a read on `fd` drops what it read: everywhere but in memory (and with a plain
    /// mode forced).
    fn drops_reads(&self, fd: &File) -> bool {
        if let Some(m) = self.forced {
            return !matches!(m, IoMode::Memory | IoMode::Buffered);
        }
        if !self.refusals.load(Relaxed) {
            return true;
        }
        let Ok(dev) = sys::device_of(fd.as_fd()) else {
            return true;
        };
        self.read_modes().get(dev) != Some(IoMode::Memory)
    }

    fn read_modes(&self) -> std::sync::RwLockReadGuard<'_, Modes> {
        self.modes.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// A write with `RWF_DONTCACHE` on `fd` succeeded: settles BACKING's own file system if the
    /// probe could not.
    fn took_flag(&self, fd: &File) {
        if !self.root_pending.load(Relaxed) {
            return;
        }
        let Ok(dev) = sys::device_of(fd.as_fd()) else {
            return;
        };
        let mut modes = self.modes.write().unwrap_or_else(PoisonError::into_inner);
        if modes.root == Some(dev) && modes.set(dev, IoMode::Dontcache) {
            self.root_pending.store(false, Relaxed);
            log::info!(
                "BACKING I/O: dontcache: RWF_DONTCACHE works on BACKING (found at its first write)"
            );
        }
    }

    /// `fd`'s file system refused `RWF_DONTCACHE`: records its fallback and returns it.
    fn refused(&self, fd: &File) -> IoMode {
        let memory = sys::in_memory(fd.as_fd()).unwrap_or(false);
        let mode = if memory {
            IoMode::Memory
        } else {
            IoMode::Fadvise
        };
        let Ok(dev) = sys::device_of(fd.as_fd()) else {
            return mode;
        };
        let mut modes = self.modes.write().unwrap_or_else(PoisonError::into_inner);
        let new = modes.set(dev, mode);
        let root = modes.root == Some(dev);
        drop(modes);
        self.refusals.store(true, Relaxed);
        if root {
            self.root_pending.store(false, Relaxed);
        }
        if new {
            log::info!(
                "BACKING I/O: file system {} ({}) refuses RWF_DONTCACHE: {mode} from now on",
                dev_name(dev),
                if root {
                    "BACKING's own"
                } else {
                    "a mount inside BACKING"
                },
            );
        }
        mode
    }

    /// A write the way `mode` says.
    fn write_as(&self, mode: IoMode, fd: &File, buf: &[u8], off: u64) -> io::Result<()> {
        match mode {
            IoMode::Dontcache => {
                write_full(fd, buf, off, sys::RWF_DONTCACHE)?;
                self.queue(fd, off, buf.len() as u64);
                Ok(())
            }
            IoMode::Fadvise => {
                write_full(fd, buf, off, 0)?;
                // Its error is the write's: the block stays dirty, and is written again.
                behind::start_writeback(fd, off, buf.len() as u64)?;
                self.queue(fd, off, buf.len() as u64);
                Ok(())
            }
            _ => write_full(fd, buf, off, 0),
        }
    }

    /// Queues a written range whose writeback has started, to be dropped a little later.
    fn queue(&self, fd: &File, off: u64, len: u64) {
        match behind::inode_of(fd) {
            Ok(inode) => self.behind.wrote(inode, fd, off, len),
            // Not expected on a descriptor just written through; nothing is left cached for
            // it anyway: dropped at once once written.
            Err(_) => {
                let _ = sys::write_out(fd, off, len);
                drop_behind(fd, off, len, false);
            }
        }
    }

    /// Whether writes on `fd` may be queued (a mode that drops pages).
    fn queues(&self, fd: &File) -> bool {
        matches!(self.mode_for(fd), IoMode::Dontcache | IoMode::Fadvise)
    }
}

impl BackingIo for UncachedBacking {
    fn read_at(&self, _file: FileId, fd: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let n = read_full(fd, buf, offset)?;
        if self.drops_reads(fd) {
            drop_behind(fd, offset, n as u64, n < buf.len());
        }
        Ok(n)
    }

    fn write_at(&self, _file: FileId, fd: &File, buf: &[u8], offset: u64) -> io::Result<()> {
        let mode = self.mode_for(fd);
        if mode != IoMode::Dontcache || self.forced.is_some() {
            return self.write_as(mode, fd, buf, offset);
        }
        match write_full(fd, buf, offset, sys::RWF_DONTCACHE) {
            // Refused before anything was written (the flag is checked first): redone.
            Err(e) if refusal(&e) => self.write_as(self.refused(fd), fd, buf, offset),
            Err(e) => Err(e),
            Ok(()) => {
                self.took_flag(fd);
                self.queue(fd, offset, buf.len() as u64);
                Ok(())
            }
        }
    }

    fn sync(&self, _file: FileId, fd: &File, datasync: bool) -> io::Result<()> {
        let sync = || {
            if datasync {
                fd.sync_data()
            } else {
                fd.sync_all()
            }
        };
        match behind::inode_of(fd) {
            Ok(inode) if self.queues(fd) => self.behind.sync_with(|i| i == inode, sync),
            _ => sync(),
        }
    }

    fn sync_fs(&self, fd: &File) -> io::Result<()> {
        match sys::device_of(fd.as_fd()) {
            Ok(dev) if self.queues(fd) => self.behind.sync_with(|i| i.0 == dev, || sys::syncfs(fd)),
            _ => sys::syncfs(fd),
        }
    }

    fn set_len(&self, _file: FileId, fd: &File, len: u64) -> io::Result<()> {
        fd.set_len(len)
    }

    fn settle(&self) {
        self.behind.settle();
    }

    fn io_mode(&self) -> IoMode {
        if let Some(m) = self.forced {
            return m;
        }
        let modes = self.read_modes();
        modes
            .root
            .and_then(|d| modes.get(d))
            .unwrap_or(IoMode::Unprobed)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn backing_cache_parses_keep_and_drop_only() {
        assert_eq!("keep".parse::<BackingCache>(), Ok(BackingCache::Keep));
        assert_eq!("drop".parse::<BackingCache>(), Ok(BackingCache::Drop));
        assert!("Drop".parse::<BackingCache>().is_err());
        assert_eq!(BackingCache::default(), BackingCache::Drop);
    }

    #[test]
    fn modes_record_changes_once() {
        let mut m = Modes::default();
        assert!(m.set(7, IoMode::Fadvise));
        assert!(!m.set(7, IoMode::Fadvise));
        assert!(m.set(7, IoMode::Memory));
        assert_eq!(m.get(7), Some(IoMode::Memory));
        assert_eq!(m.get(8), None);
    }

    #[test]
    fn a_file_system_in_memory_is_probed_as_memory() {
        let dir = Path::new("/dev/shm");
        let b = UncachedBacking::new();
        assert_eq!(b.probe(dir), IoMode::Memory);
        assert_eq!(b.io_mode(), IoMode::Memory);
    }
}
