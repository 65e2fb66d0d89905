//! The inode table: FUSE node ids ↔ backing inodes.
//!
//! How a node finds its backing inode ([`Source`]):
//! * **handle** (the default where BACKING supports it and the daemon may open by handle, i.e.
//!   has `CAP_DAC_READ_SEARCH`): the node keeps only the inode's file handle; a descriptor is
//!   opened by handle when a request needs one and kept in a bounded LRU ([`FdCache`]), so the
//!   number of inodes the kernel may hold is not bounded by the descriptor limit;
//! * **pinned**: the node owns an `O_PATH` descriptor for its whole life (BACKING cannot make
//!   handles, handles cannot be opened, or the inode lies on another mount inside BACKING). One
//!   descriptor per node the kernel holds, as before handles.
//!
//! Both keep working across renames (a handle names the inode, not a path). A node's serial
//! is unique for the life of the mount and keys the descriptor cache.
//!
//! Node id choice: a backing inode on the same device as BACKING gets its backing inode number
//! as node id (stable across forget/lookup cycles and remounts, so `st_ino` seen through the
//! mount equals the backing one and tools that remember inode numbers behave). Inodes on other
//! devices, numbers that would clash with the root id 1 or the synthetic range, and a new inode
//! that reuses the number of one the kernel still holds (possible in handle mode, where nodes do
//! not pin their inodes; told apart by the handle, which includes the generation) get a
//! synthetic id with the top bit set.
//!
//! Invariants (all under one mutex):
//! * `by_key[(dev, ino)] == id` implies `nodes[id].inode.key == (dev, ino)` (an older node
//!   with the same key may still exist under another id until the kernel forgets it);
//! * `nodes[id].lookups` is the number of lookups the kernel holds; the node is removed when
//!   `forget` brings it to zero (the root is never removed).

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::fdcache::FdCache;
use crate::handle::{self, Handle};

/// FUSE node id of the mount root.
pub(crate) const ROOT_ID: u64 = 1;
/// Synthetic node ids have this bit set.
const SYNTHETIC: u64 = 1 << 63;

/// How a node reaches its backing inode.
#[derive(Debug)]
enum Source {
    /// Reopened by handle on demand.
    Handle(Handle),
    /// An `O_PATH | O_NOFOLLOW` descriptor held for the node's life.
    Pinned(OwnedFd),
}

/// One backing inode known to the kernel.
#[derive(Debug)]
pub(crate) struct Inode {
    /// FUSE node id (also reported as `st_ino`).
    pub(crate) id: u64,
    /// Unique for the life of the mount (never reused, unlike `id`).
    serial: u64,
    /// Backing `(st_dev, st_ino)`.
    pub(crate) key: (u64, u64),
    /// `S_IFMT` bits of the backing inode (never changes).
    pub(crate) fmt: u32,
    src: Source,
}

impl Inode {
    pub(crate) fn is_dir(&self) -> bool {
        self.fmt == libc::S_IFDIR
    }

    pub(crate) fn is_reg(&self) -> bool {
        self.fmt == libc::S_IFREG
    }

    fn handle(&self) -> Option<&Handle> {
        match &self.src {
            Source::Handle(h) => Some(h),
            Source::Pinned(_) => None,
        }
    }

    /// Heap and table bytes this node costs (node, map entries, handle).
    fn cost(&self) -> usize {
        // the node in `nodes` (key + Node) and in `by_key` (key + id), with hashbrown's
        // control byte and ~1/8 spare slots, plus the `Arc<Inode>` allocation
        let tables = (8 + std::mem::size_of::<Node>() + 1 + 16 + 8 + 1) * 9 / 8;
        let arc = 16 + std::mem::size_of::<Inode>();
        tables + arc + self.handle().map_or(0, Handle::heap_bytes)
    }
}

/// An `O_PATH` descriptor of a node's backing inode, valid while this value lives.
#[derive(Debug)]
pub(crate) enum NodeFd {
    /// The node's own pinned descriptor (the node is kept alive by the `Arc`).
    Pinned(Arc<Inode>),
    /// A descriptor shared with the cache.
    Cached(Arc<OwnedFd>),
}

impl NodeFd {
    pub(crate) fn raw(&self) -> RawFd {
        match self {
            NodeFd::Pinned(node) => match &node.src {
                Source::Pinned(fd) => fd.as_raw_fd(),
                // never constructed for handle nodes
                Source::Handle(_) => -1,
            },
            NodeFd::Cached(fd) => fd.as_raw_fd(),
        }
    }
}

#[derive(Debug)]
struct Node {
    inode: Arc<Inode>,
    lookups: u64,
}

#[derive(Debug, Default)]
struct Inner {
    nodes: HashMap<u64, Node>,
    by_key: HashMap<(u64, u64), u64>,
    next_synthetic: u64,
    next_serial: u64,
    /// Sum of `Inode::cost` over `nodes`.
    bytes: usize,
    /// Nodes holding a pinned descriptor (root included).
    pinned: usize,
}

/// What the table reports in stats.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct InodeStats {
    /// `"handles"` (open by handle, bounded descriptors) or `"descriptors"` (one per node).
    pub mode: &'static str,
    /// Why handles are not used, in `"descriptors"` mode.
    pub fallback_reason: Option<String>,
    /// Nodes the kernel holds (root included).
    pub known: u64,
    /// Nodes holding a descriptor for their whole life.
    pub pinned: u64,
    /// Descriptors open in the cache now, and its capacity.
    pub cached_fds: u64,
    pub fd_cache_capacity: u64,
    pub fd_cache_hits: u64,
    pub fd_cache_misses: u64,
    /// Table memory per known node, in bytes (estimate from the real sizes).
    pub bytes_per_inode: u64,
    /// Times the process ran out of descriptors (EMFILE/ENFILE) and shed cached ones.
    pub fd_exhausted: u64,
    /// `RLIMIT_NOFILE` soft limit in force.
    pub nofile_limit: u64,
}

/// Thread-safe inode table.
#[derive(Debug)]
pub(crate) struct InodeTable {
    inner: Mutex<Inner>,
    /// Device of BACKING; inodes on it use their backing number as node id.
    root_dev: u64,
    /// BACKING opened for `open_by_handle_at`, and its mount id, when handles work; `None` =
    /// descriptors mode.
    by_handle: Option<(OwnedFd, i32)>,
    fallback_reason: Option<String>,
    fds: FdCache,
    fd_exhausted: AtomicU64,
    last_exhaustion_log: Mutex<Option<Instant>>,
}

impl InodeTable {
    /// Creates the table with the root node (BACKING itself). Handles are used if they work
    /// for BACKING; `fd_cache` bounds the descriptors kept open for handle nodes.
    pub(crate) fn new(root_fd: OwnedFd, st: &libc::stat, fd_cache: usize, handles: bool) -> Self {
        let probe = if handles {
            handle::probe(root_fd.as_raw_fd())
        } else {
            Err(io::Error::other("turned off by the mount options"))
        };
        let (by_handle, fallback_reason) = match probe {
            Ok(h) => (Some(h), None),
            Err(e) => (
                None,
                Some(format!("file handles unavailable on BACKING: {e}")),
            ),
        };
        let key = (st.st_dev, st.st_ino);
        let root = Arc::new(Inode {
            id: ROOT_ID,
            serial: 0,
            key,
            fmt: st.st_mode & libc::S_IFMT,
            src: Source::Pinned(root_fd),
        });
        let mut inner = Inner {
            next_serial: 1,
            pinned: 1,
            bytes: root.cost(),
            ..Inner::default()
        };
        inner.nodes.insert(
            ROOT_ID,
            Node {
                inode: root,
                lookups: 1,
            },
        );
        inner.by_key.insert(key, ROOT_ID);
        Self {
            inner: Mutex::new(inner),
            root_dev: st.st_dev,
            by_handle,
            fallback_reason,
            fds: FdCache::new(fd_cache),
            fd_exhausted: AtomicU64::new(0),
            last_exhaustion_log: Mutex::new(None),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether nodes are opened by handle (else each pins a descriptor).
    pub(crate) fn uses_handles(&self) -> bool {
        self.by_handle.is_some()
    }

    pub(crate) fn fallback_reason(&self) -> Option<&str> {
        self.fallback_reason.as_deref()
    }

    /// Returns the node `id`, if the kernel still holds it.
    pub(crate) fn get(&self, id: u64) -> Option<Arc<Inode>> {
        self.lock().nodes.get(&id).map(|n| Arc::clone(&n.inode))
    }

    /// The newest node of backing inode `key` (`(st_dev, st_ino)`), if the kernel holds one.
    pub(crate) fn get_by_key(&self, key: (u64, u64)) -> Option<Arc<Inode>> {
        let inner = self.lock();
        let id = inner.by_key.get(&key)?;
        inner.nodes.get(id).map(|n| Arc::clone(&n.inode))
    }

    /// An `O_PATH` descriptor of `node`'s backing inode: its own, a cached one, or one
    /// opened by handle now (shedding cached descriptors if the process ran out).
    pub(crate) fn fd(&self, node: &Arc<Inode>) -> io::Result<NodeFd> {
        let h = match &node.src {
            Source::Pinned(_) => return Ok(NodeFd::Pinned(Arc::clone(node))),
            Source::Handle(h) => h,
        };
        if let Some(fd) = self.fds.get(node.serial) {
            return Ok(NodeFd::Cached(fd));
        }
        let Some((mount_fd, _)) = &self.by_handle else {
            return Err(io::Error::from_raw_os_error(libc::ESTALE));
        };
        // needs CAP_DAC_READ_SEARCH, which a thread acting for a caller does not have
        let fd = crate::creds::as_daemon(|| {
            self.retry("open by handle", || {
                handle::open_by_handle(mount_fd.as_raw_fd(), h, libc::O_PATH)
            })
        })?;
        Ok(NodeFd::Cached(self.fds.insert(node.serial, fd)))
    }

    /// Runs `f` (which opens a descriptor); if the process is out of descriptors, sheds
    /// cached ones, logs what ran out (at most every 10 s) and tries once more.
    pub(crate) fn retry<T>(
        &self,
        what: &str,
        mut f: impl FnMut() -> io::Result<T>,
    ) -> io::Result<T> {
        match f() {
            Err(e) if handle::is_fd_exhaustion(&e) => {
                self.fd_exhausted.fetch_add(1, Ordering::Relaxed);
                let shed = self.fds.shrink();
                let res = f();
                self.log_exhaustion(what, &e, shed, res.is_ok());
                res
            }
            r => r,
        }
    }

    fn log_exhaustion(&self, what: &str, e: &io::Error, shed: usize, recovered: bool) {
        let mut last = self
            .last_exhaustion_log
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if last.is_some_and(|t| t.elapsed() < Duration::from_secs(10)) {
            return;
        }
        *last = Some(Instant::now());
        let limit = handle::nofile_limit().map_or(0, |l| l.0);
        let outcome = if recovered {
            "recovered"
        } else {
            "the request failed with that error"
        };
        log::warn!(
            "out of file descriptors ({e}; RLIMIT_NOFILE {limit}, {} times so far) during {what}: \
             closed {shed} cached descriptors, {outcome}",
            self.fd_exhausted.load(Ordering::Relaxed)
        );
    }

    /// Records one kernel lookup of the backing inode `st` (opened as `fd`), creating its
    /// node if needed. In handle mode `fd` goes to the descriptor cache (or is closed).
    pub(crate) fn lookup(&self, fd: OwnedFd, st: &libc::stat) -> Arc<Inode> {
        let key = (st.st_dev, st.st_ino);
        let handle = match &self.by_handle {
            Some((_, root_mnt)) => match handle::name_to_handle(fd.as_raw_fd()) {
                // an inode on a mount inside BACKING needs that mount's fd: pin it instead
                Ok((h, mnt)) if mnt == *root_mnt => Some(h),
                _ => None,
            },
            None => None,
        };
        let mut inner = self.lock();
        if let Some(&id) = inner.by_key.get(&key) {
            if let Some(node) = inner.nodes.get_mut(&id) {
                // same inode unless both have handles and they differ (number reused)
                let same = match (&handle, node.inode.handle()) {
                    (Some(a), Some(b)) => a == b,
                    _ => true,
                };
                if same {
                    node.lookups += 1;
                    let inode = Arc::clone(&node.inode);
                    drop(inner);
                    if inode.handle().is_some() {
                        self.fds.insert(inode.serial, fd);
                    }
                    return inode;
                }
            }
        }
        let id = if st.st_dev == self.root_dev
            && st.st_ino > ROOT_ID
            && st.st_ino & SYNTHETIC == 0
            && !inner.nodes.contains_key(&st.st_ino)
        {
            st.st_ino
        } else {
            loop {
                inner.next_synthetic = inner.next_synthetic.wrapping_add(1) & !SYNTHETIC;
                let candidate = SYNTHETIC | inner.next_synthetic;
                if !inner.nodes.contains_key(&candidate) {
                    break candidate;
                }
            }
        };
        let serial = inner.next_serial;
        inner.next_serial += 1;
        let (src, cache) = match handle {
            Some(h) => (Source::Handle(h), Some(fd)),
            None => (Source::Pinned(fd), None),
        };
        let inode = Arc::new(Inode {
            id,
            serial,
            key,
            fmt: st.st_mode & libc::S_IFMT,
            src,
        });
        inner.bytes += inode.cost();
        if inode.handle().is_none() {
            inner.pinned += 1;
        }
        inner.nodes.insert(
            id,
            Node {
                inode: Arc::clone(&inode),
                lookups: 1,
            },
        );
        inner.by_key.insert(key, id);
        drop(inner);
        if let Some(fd) = cache {
            self.fds.insert(serial, fd);
        }
        inode
    }

    /// Adds one lookup to an existing node (hard link creation).
    pub(crate) fn add_lookup(&self, id: u64) -> Option<Arc<Inode>> {
        let mut inner = self.lock();
        let node = inner.nodes.get_mut(&id)?;
        node.lookups += 1;
        Some(Arc::clone(&node.inode))
    }

    /// Drops `n` lookups; returns `true` if the node was removed.
    pub(crate) fn forget(&self, id: u64, n: u64) -> bool {
        let mut inner = self.lock();
        let Some(node) = inner.nodes.get_mut(&id) else {
            return false;
        };
        node.lookups = node.lookups.saturating_sub(n);
        if node.lookups > 0 || id == ROOT_ID {
            return false;
        }
        let Some(node) = inner.nodes.remove(&id) else {
            return false;
        };
        if inner.by_key.get(&node.inode.key) == Some(&id) {
            inner.by_key.remove(&node.inode.key);
        }
        inner.bytes = inner.bytes.saturating_sub(node.inode.cost());
        if node.inode.handle().is_none() {
            inner.pinned = inner.pinned.saturating_sub(1);
        }
        drop(inner);
        self.fds.remove(node.inode.serial);
        true
    }

    /// Number of live nodes (root included); for tests and diagnostics.
    pub(crate) fn len(&self) -> usize {
        self.lock().nodes.len()
    }

    pub(crate) fn stats(&self) -> InodeStats {
        let (known, pinned, bytes) = {
            let inner = self.lock();
            (inner.nodes.len(), inner.pinned, inner.bytes)
        };
        let (cached, hits, misses) = self.fds.counters();
        InodeStats {
            mode: if self.uses_handles() {
                "handles"
            } else {
                "descriptors"
            },
            fallback_reason: self.fallback_reason.clone(),
            known: known as u64,
            pinned: pinned as u64,
            cached_fds: cached as u64,
            fd_cache_capacity: self.fds.capacity() as u64,
            fd_cache_hits: hits,
            fd_cache_misses: misses,
            bytes_per_inode: (bytes / known.max(1)) as u64,
            fd_exhausted: self.fd_exhausted.load(Ordering::Relaxed),
            nofile_limit: handle::nofile_limit().map_or(0, |l| l.0),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::sys;

    fn stat_of(fd: &OwnedFd) -> libc::stat {
        sys::fstat(fd.as_raw_fd()).unwrap()
    }

    fn table(dir: &std::path::Path) -> InodeTable {
        let root = sys::open_dir_path(dir).unwrap();
        let st = stat_of(&root);
        InodeTable::new(root, &st, 8, true)
    }

    fn open(t: &InodeTable, name: &std::ffi::CStr) -> OwnedFd {
        let root = t.get(ROOT_ID).unwrap();
        let fd = t.fd(&root).unwrap();
        sys::open_path_at(fd.raw(), name).unwrap()
    }

    #[test]
    fn lookup_forget_cycle() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), b"x").unwrap();
        let table = table(dir.path());
        assert!(table.uses_handles(), "{:?}", table.fallback_reason());
        let fd = open(&table, c"a");
        let st_a = stat_of(&fd);
        let a = table.lookup(fd, &st_a);
        assert_eq!(a.id, st_a.st_ino, "same device: node id is the backing ino");
        let again = table.lookup(open(&table, c"a"), &st_a);
        assert_eq!(again.id, a.id);
        assert_eq!(table.len(), 2);
        assert!(!table.forget(a.id, 1));
        assert!(table.forget(a.id, 1));
        assert!(table.get(a.id).is_none());
        assert_eq!(table.len(), 1);
        // the root is never removed
        assert!(!table.forget(ROOT_ID, 100));
        assert!(table.get(ROOT_ID).is_some());
    }

    #[test]
    fn many_nodes_hold_a_bounded_number_of_descriptors() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..200 {
            std::fs::write(dir.path().join(format!("f{i}")), b"x").unwrap();
        }
        let table = table(dir.path());
        let mut nodes = Vec::new();
        for i in 0..200 {
            let name = std::ffi::CString::new(format!("f{i}")).unwrap();
            let fd = open(&table, &name);
            let st = stat_of(&fd);
            nodes.push((table.lookup(fd, &st), st.st_ino));
        }
        let s = table.stats();
        assert_eq!(s.known, 201);
        assert_eq!(s.pinned, 1, "only the root pins a descriptor");
        assert!(s.cached_fds <= 8);
        // every node still reaches its own inode
        for (n, ino) in &nodes {
            let fd = table.fd(n).unwrap();
            assert_eq!(sys::fstat(fd.raw()).unwrap().st_ino, *ino);
        }
        assert!(s.bytes_per_inode > 0 && s.bytes_per_inode < 512, "{s:?}");
    }

    #[test]
    fn a_reused_inode_number_gets_a_new_node() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), b"x").unwrap();
        std::fs::write(dir.path().join("b"), b"y").unwrap();
        let table = table(dir.path());
        let fd = open(&table, c"a");
        let st = stat_of(&fd);
        // the kernel still holds `old`; in handle mode nodes do not pin their inodes, so the
        // number may name another file later: `b` stands in for it (same number, other handle)
        let old = table.lookup(fd, &st);
        let fd = open(&table, c"b");
        let mut st_b = stat_of(&fd);
        st_b.st_ino = st.st_ino;
        let new = table.lookup(fd, &st_b);
        assert_ne!(new.id, old.id, "a different inode under the same number");
        assert_ne!(new.id & SYNTHETIC, 0);
        // forgetting the old node leaves the new one reachable by key
        assert!(table.forget(old.id, 1));
        let again = table.lookup(open(&table, c"b"), &st_b);
        assert_eq!(again.id, new.id);
        // `a` is told apart from `b` by its handle: a node of its own, under its number again
        let a_again = table.lookup(open(&table, c"a"), &st);
        assert_eq!(a_again.id, st.st_ino);
    }

    #[test]
    fn clashing_numbers_get_synthetic_ids() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), b"x").unwrap();
        let table = table(dir.path());
        let fd = open(&table, c"a");
        let mut fake = stat_of(&fd);
        fake.st_ino = 1;
        let n = table.lookup(fd, &fake);
        assert_ne!(n.id & SYNTHETIC, 0);
        let fd = open(&table, c"a");
        let root_dev = table.root_dev;
        fake.st_dev = root_dev.wrapping_add(1);
        fake.st_ino = 77;
        let m = table.lookup(fd, &fake);
        assert_ne!(m.id & SYNTHETIC, 0);
        assert_ne!(m.id, n.id);
    }
}
