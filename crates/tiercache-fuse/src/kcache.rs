//! The kernel page cache as the fast path for hot files.
//!
//! A FUSE read that the kernel answers from its page cache costs no round trip to the daemon;
//! one answered by the daemon costs two context switches and a copy, which halves a web
//! server's throughput on hits (docs/design.md §4, "kernel page cache"). So the files a data
//! path calls hot ([`OpenAdvice::kernel_cache`]; tiercache's: the priority classes) are opened
//! in the kernel's cached mode, while every other file stays direct I/O, so a backup or scan
//! through the mount never enters the page cache and cannot push the hot pages out.
//! [`KernelCacheMode`] picks: `priority` (the default), `all` (every file, libfuse's
//! `kernel_cache`) or `off` (every file direct I/O).
//!
//! **Nothing stale.** Changes made through the mount keep the kernel's pages right by
//! themselves: cached writes update them, direct-I/O writes of another handle invalidate the
//! range they write (kernel ≥ 6.6 with `FUSE_DIRECT_IO_ALLOW_MMAP`), and truncate, fallocate
//! and copy_file_range drop what they change. What the kernel cannot see:
//! * a change behind the mount's back (an edit on BACKING, even one that puts size and mtime
//!   back). The data path gives each open a *content version* ([`OpenAdvice::content`]) that
//!   moves whenever the file may have changed other than through the mount; an open whose
//!   version differs from the one recorded at the node's previous open is answered without
//!   `FOPEN_KEEP_CACHE`, so the kernel drops the node's pages before the open returns.
//!   While a file stays open, `FUSE_AUTO_INVAL_DATA` drops its pages when an attribute refresh
//!   shows another size or mtime;
//! * a change made by the daemon itself for someone else (a zero-copy client's update):
//!   [`KernelCacheHandle::invalidate`], which tells the kernel to drop the range.
//!
//! A node's record goes when the kernel forgets the node: its inode, and its pages, are gone
//! then. Every open of a regular file is recorded, direct ones too: a shared mmap of a
//! direct-I/O file also fills the page cache.

use std::collections::{hash_map, HashMap};
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use fuser::{FopenFlags, INodeNo, Notifier};

/// Which files the kernel page cache may hold (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KernelCacheMode {
    /// Every open is direct I/O: the daemon's tiers are the only cache.
    Off,
    /// Files the data path calls hot (priority classes) are cached by the kernel too.
    #[default]
    Priority,
    /// Every file is cached by the kernel (libfuse's `kernel_cache`).
    All,
}

impl KernelCacheMode {
    /// The name used in flags, config files and stats.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Priority => "priority",
            Self::All => "all",
        }
    }
}

impl fmt::Display for KernelCacheMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A kernel cache mode that is none of `priority`, `all`, `off`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("kernel cache mode must be priority, all or off, got {0:?}")]
pub struct BadKernelCacheMode(pub String);

impl FromStr for KernelCacheMode {
    type Err = BadKernelCacheMode;

    /// `off`, `priority` or `all`; `false`/`true` are `off`/`all` (the old boolean flag).
    fn from_str(s: &str) -> Result<Self, BadKernelCacheMode> {
        match s {
            "off" | "false" => Ok(Self::Off),
            "priority" => Ok(Self::Priority),
            "all" | "true" => Ok(Self::All),
            _ => Err(BadKernelCacheMode(s.to_owned())),
        }
    }
}

/// What a data path says about a newly opened file ([`crate::DataPath::open`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpenAdvice {
    /// The file is hot: with [`KernelCacheMode::Priority`] the kernel caches it.
    pub kernel_cache: bool,
    /// The file's content version: equal at two opens only if nothing changed the file but
    /// requests through this mount in between. `None`: the data path cannot tell, and pages
    /// the kernel holds are kept (libfuse's `kernel_cache`).
    pub content: Option<u64>,
    /// A `close()` of the handle has nothing to report: its [`crate::DataPath::flush`] would
    /// do nothing. The open is then answered with `FOPEN_NOFLUSH` and the kernel sends no
    /// FLUSH at all, one round trip less per `close()`. The default (false) keeps the FLUSH.
    pub no_flush: bool,
}

/// What the kernel may hold of one node.
#[derive(Debug, Clone, Copy)]
struct Entry {
    content: Option<u64>,
    /// Opened in cached mode at least once since the kernel looked the node up.
    cached: bool,
    /// Size at the last open.
    size: u64,
}

/// The kernel page cache's part of a mount's figures.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct KernelCacheStats {
    /// `"priority"`, `"all"` or `"off"`.
    pub mode: &'static str,
    /// Files the kernel may hold pages of: opened in cached mode, not forgotten since.
    pub files: u64,
    /// Sum of those files' sizes at their last open: the most the kernel can hold for them
    /// (it holds what was read, and drops pages under memory pressure).
    pub bytes_at_most: u64,
    /// Opens answered in cached mode.
    pub cached_opens: u64,
    /// Opens whose pages the kernel dropped at open because the file changed behind the mount.
    pub stale_drops: u64,
    /// Ranges the daemon told the kernel to drop (zero-copy clients' updates).
    pub invalidations: u64,
}

/// Per-node records and counters; owned by the mount (see the module docs).
#[derive(Debug)]
pub(crate) struct KernelCache {
    mode: KernelCacheMode,
    nodes: Mutex<HashMap<u64, Entry>>,
    cached_opens: AtomicU64,
    stale_drops: AtomicU64,
    invalidations: AtomicU64,
}

impl KernelCache {
    pub(crate) fn new(mode: KernelCacheMode) -> Self {
        Self {
            mode,
            nodes: Mutex::new(HashMap::new()),
            cached_opens: AtomicU64::new(0),
            stale_drops: AtomicU64::new(0),
            invalidations: AtomicU64::new(0),
        }
    }

    pub(crate) fn mode(&self) -> KernelCacheMode {
        self.mode
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<u64, Entry>> {
        self.nodes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The FOPEN flags of an open of regular file `ino` with application flags `flags`, what
    /// the data path advised, and the file's size; records the open.
    pub(crate) fn open_flags(
        &self,
        ino: u64,
        flags: i32,
        advice: OpenAdvice,
        size: u64,
    ) -> FopenFlags {
        let cached = flags & libc::O_DIRECT == 0
            && match self.mode {
                KernelCacheMode::Off => false,
                KernelCacheMode::Priority => advice.kernel_cache,
                KernelCacheMode::All => true,
            };
        let entry = Entry {
            content: advice.content,
            cached,
            size,
        };
        let fresh = match self.lock().entry(ino) {
            // Never opened since the kernel looked it up: it holds no page of it.
            hash_map::Entry::Vacant(v) => {
                v.insert(entry);
                true
            }
            hash_map::Entry::Occupied(mut o) => {
                let prev = o.insert(Entry {
                    cached: cached || o.get().cached,
                    ..entry
                });
                prev.content == advice.content
            }
        };
        if cached {
            self.cached_opens.fetch_add(1, Ordering::Relaxed);
        }
        if !fresh {
            self.stale_drops.fetch_add(1, Ordering::Relaxed);
        }
        let mut f = if cached {
            FopenFlags::empty()
        } else {
            FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES
        };
        if fresh {
            // Without it the kernel drops the node's pages at the end of the open.
            f |= FopenFlags::FOPEN_KEEP_CACHE;
        }
        f
    }

    /// The kernel forgot node `ino`: its pages went with its inode.
    pub(crate) fn forget(&self, ino: u64) {
        self.lock().remove(&ino);
    }

    /// Whether the kernel may hold pages of `ino`.
    fn may_hold(&self, ino: u64) -> bool {
        self.lock().contains_key(&ino)
    }

    pub(crate) fn stats(&self) -> KernelCacheStats {
        let (files, bytes) = self
            .lock()
            .values()
            .filter(|e| e.cached)
            .fold((0u64, 0u64), |(n, b), e| (n + 1, b.saturating_add(e.size)));
        KernelCacheStats {
            mode: self.mode.as_str(),
            files,
            bytes_at_most: bytes,
            cached_opens: self.cached_opens.load(Ordering::Relaxed),
            stale_drops: self.stale_drops.load(Ordering::Relaxed),
            invalidations: self.invalidations.load(Ordering::Relaxed),
        }
    }
}

/// The daemon's way to the kernel's page cache of a mount: drop ranges the daemon changed
/// itself, read the figures. Cheap to clone.
#[derive(Clone)]
pub struct KernelCacheHandle {
    cache: Arc<KernelCache>,
    notifier: Arc<Notifier>,
}

impl fmt::Debug for KernelCacheHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KernelCacheHandle")
            .field("cache", &self.cache)
            .finish_non_exhaustive()
    }
}

impl KernelCacheHandle {
    pub(crate) fn new(cache: Arc<KernelCache>, notifier: Notifier) -> Self {
        Self {
            cache,
            notifier: Arc::new(notifier),
        }
    }

    /// Makes the kernel drop what it caches of `len` bytes of node `ino` at `offset` (`len`
    /// 0: to the end), after the daemon changed them on someone else's behalf. Returns once
    /// the kernel has dropped them. Must not be called on a FUSE request thread or while
    /// holding a lock a request needs: the kernel waits for reads of those pages in flight.
    pub fn invalidate(&self, ino: u64, offset: u64, len: u64) {
        if !self.cache.may_hold(ino) {
            return;
        }
        self.cache.invalidations.fetch_add(1, Ordering::Relaxed);
        let off = i64::try_from(offset).unwrap_or(i64::MAX);
        let len = i64::try_from(len).unwrap_or(0);
        if let Err(e) = self.notifier.inval_inode(INodeNo(ino), off, len) {
            // ENOENT: the kernel no longer has the inode (nothing cached).
            if e.raw_os_error() != Some(libc::ENOENT) {
                log::warn!("node {ino}: kernel cache invalidation failed: {e}");
            }
        }
    }

    /// The figures of the kernel's part.
    pub fn stats(&self) -> KernelCacheStats {
        self.cache.stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn advice(hot: bool, content: u64) -> OpenAdvice {
        OpenAdvice {
            kernel_cache: hot,
            content: Some(content),
            no_flush: false,
        }
    }

    #[test]
    fn priority_mode_caches_hot_files_only_and_never_o_direct() {
        let k = KernelCache::new(KernelCacheMode::Priority);
        let hot = k.open_flags(2, libc::O_RDONLY, advice(true, 1), 10);
        assert!(!hot.contains(FopenFlags::FOPEN_DIRECT_IO));
        let cold = k.open_flags(3, libc::O_RDONLY, advice(false, 1), 10);
        assert!(cold.contains(FopenFlags::FOPEN_DIRECT_IO));
        let direct = k.open_flags(2, libc::O_RDONLY | libc::O_DIRECT, advice(true, 1), 10);
        assert!(direct.contains(FopenFlags::FOPEN_DIRECT_IO));
        assert_eq!(k.stats().files, 1, "only node 2 was opened cached");
        assert_eq!(k.stats().bytes_at_most, 10);
    }

    #[test]
    fn off_and_all_ignore_the_advice() {
        let off = KernelCache::new(KernelCacheMode::Off);
        assert!(off
            .open_flags(2, 0, advice(true, 1), 0)
            .contains(FopenFlags::FOPEN_DIRECT_IO));
        let all = KernelCache::new(KernelCacheMode::All);
        assert!(!all
            .open_flags(2, 0, advice(false, 1), 0)
            .contains(FopenFlags::FOPEN_DIRECT_IO));
    }

    #[test]
    fn pages_are_kept_only_while_the_content_version_holds() {
        let k = KernelCache::new(KernelCacheMode::Priority);
        let keep = |f: FopenFlags| f.contains(FopenFlags::FOPEN_KEEP_CACHE);
        assert!(keep(k.open_flags(2, 0, advice(true, 7), 1)), "first open");
        assert!(keep(k.open_flags(2, 0, advice(true, 7), 1)), "same version");
        assert!(
            !keep(k.open_flags(2, 0, advice(true, 8), 1)),
            "changed behind"
        );
        assert!(keep(k.open_flags(2, 0, advice(true, 8), 1)), "dropped once");
        // a direct open of a changed file drops the pages a shared mmap may have made
        assert!(!keep(k.open_flags(2, 0, advice(false, 9), 1)));
        k.forget(2);
        assert!(
            keep(k.open_flags(2, 0, advice(true, 1), 1)),
            "a new kernel inode"
        );
        assert_eq!(k.stats().stale_drops, 2);
    }

    #[test]
    fn a_node_opened_cached_once_counts_until_forgotten() {
        let k = KernelCache::new(KernelCacheMode::Priority);
        let _ = k.open_flags(2, 0, advice(true, 1), 100);
        let _ = k.open_flags(2, 0, advice(false, 1), 200);
        assert_eq!((k.stats().files, k.stats().bytes_at_most), (1, 200));
        k.forget(2);
        assert_eq!(k.stats().files, 0);
    }

    #[test]
    fn modes_parse_and_print() {
        for m in [
            KernelCacheMode::Off,
            KernelCacheMode::Priority,
            KernelCacheMode::All,
        ] {
            assert_eq!(m.as_str().parse::<KernelCacheMode>(), Ok(m));
        }
        assert_eq!("true".parse(), Ok(KernelCacheMode::All));
        assert_eq!("false".parse(), Ok(KernelCacheMode::Off));
        assert!("yes".parse::<KernelCacheMode>().is_err());
    }
}
