//! The inode table: FUSE node ids ↔ backing inodes.
//!
//! Each live node owns an `O_PATH` descriptor of its backing inode, so it
//! keeps working across renames (and even after the last name is unlinked,
//! exactly like an open file on the backing file system).
//!
//! Node id choice: a backing inode on the same device as BACKING gets its
//! backing inode number as node id (stable across forget/lookup cycles and
//! remounts, so `st_ino` seen through the mount equals the backing one and
//! tools that remember inode numbers — tar, git, rsync — behave). Inodes on
//! other devices (mounts inside BACKING), and the rare numbers that would clash
//! with the root id 1 or the synthetic range, get a synthetic id with the top
//! bit set. Because a node pins its backing inode (via the `O_PATH` fd), the
//! backing number cannot be reused while the node exists, so ids stay unique.
//!
//! Invariants (all under one mutex):
//! * `by_key[(dev, ino)] == id` iff `nodes[id].inode.key == (dev, ino)`;
//! * `nodes[id].lookups` is the number of lookups the kernel holds; the node
//!   is removed when `forget` brings it to zero (the root is never removed).

use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// FUSE node id of the mount root.
pub(crate) const ROOT_ID: u64 = 1;
/// Synthetic node ids have this bit set.
const SYNTHETIC: u64 = 1 << 63;

/// One backing inode known to the kernel.
#[derive(Debug)]
pub(crate) struct Inode {
    /// FUSE node id (also reported as `st_ino`).
    pub(crate) id: u64,
    /// Backing `(st_dev, st_ino)`.
    pub(crate) key: (u64, u64),
    /// `S_IFMT` bits of the backing inode (never changes).
    pub(crate) fmt: u32,
    /// `O_PATH | O_NOFOLLOW` descriptor of the backing inode.
    fd: OwnedFd,
}

impl Inode {
    /// Raw `O_PATH` descriptor of the backing inode.
    pub(crate) fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    pub(crate) fn is_dir(&self) -> bool {
        self.fmt == libc::S_IFDIR
    }

    pub(crate) fn is_reg(&self) -> bool {
        self.fmt == libc::S_IFREG
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
}

/// Thread-safe inode table.
#[derive(Debug)]
pub(crate) struct InodeTable {
    inner: Mutex<Inner>,
    /// Device of BACKING; inodes on it use their backing number as node id.
    root_dev: u64,
}

impl InodeTable {
    /// Creates the table with the root node (BACKING itself).
    pub(crate) fn new(root_fd: OwnedFd, st: &libc::stat) -> Self {
        let key = (st.st_dev, st.st_ino);
        let root = Arc::new(Inode {
            id: ROOT_ID,
            key,
            fmt: st.st_mode & libc::S_IFMT,
            fd: root_fd,
        });
        let mut inner = Inner::default();
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
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Returns the node `id`, if the kernel still holds it.
    pub(crate) fn get(&self, id: u64) -> Option<Arc<Inode>> {
        self.lock().nodes.get(&id).map(|n| Arc::clone(&n.inode))
    }

    /// Records one kernel lookup of the backing inode `st` (opened as `fd`),
    /// creating its node if needed. `fd` is dropped if the node already exists.
    pub(crate) fn lookup(&self, fd: OwnedFd, st: &libc::stat) -> Arc<Inode> {
        let key = (st.st_dev, st.st_ino);
        let mut inner = self.lock();
        if let Some(&id) = inner.by_key.get(&key) {
            if let Some(node) = inner.nodes.get_mut(&id) {
                node.lookups += 1;
                return Arc::clone(&node.inode);
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
        let inode = Arc::new(Inode {
            id,
            key,
            fmt: st.st_mode & libc::S_IFMT,
            fd,
        });
        inner.nodes.insert(
            id,
            Node {
                inode: Arc::clone(&inode),
                lookups: 1,
            },
        );
        inner.by_key.insert(key, id);
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
        if let Some(node) = inner.nodes.remove(&id) {
            inner.by_key.remove(&node.inode.key);
        }
        true
    }

    /// Number of live nodes (root included); for tests and diagnostics.
    pub(crate) fn len(&self) -> usize {
        self.lock().nodes.len()
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

    #[test]
    fn lookup_forget_cycle() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), b"x").unwrap();
        let root = sys::open_dir_path(dir.path()).unwrap();
        let st = stat_of(&root);
        let table = InodeTable::new(root, &st);
        let root_fd = table.get(ROOT_ID).unwrap().fd();
        let open = || sys::open_path_at(root_fd, c"a").unwrap();
        let fd = open();
        let st_a = stat_of(&fd);
        let a = table.lookup(fd, &st_a);
        assert_eq!(a.id, st_a.st_ino, "same device: node id is the backing ino");
        let again = table.lookup(open(), &st_a);
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
    fn clashing_numbers_get_synthetic_ids() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), b"x").unwrap();
        let root = sys::open_dir_path(dir.path()).unwrap();
        let st = stat_of(&root);
        let table = InodeTable::new(root, &st);
        let root_fd = table.get(ROOT_ID).unwrap().fd();
        let fd = sys::open_path_at(root_fd, c"a").unwrap();
        let mut fake = stat_of(&fd);
        fake.st_ino = 1;
        let n = table.lookup(fd, &fake);
        assert_ne!(n.id & SYNTHETIC, 0);
        let fd = sys::open_path_at(root_fd, c"a").unwrap();
        fake.st_dev = st.st_dev.wrapping_add(1);
        fake.st_ino = 77;
        let m = table.lookup(fd, &fake);
        assert_ne!(m.id & SYNTHETIC, 0);
        assert_ne!(m.id, n.id);
    }
}
