//! A bounded cache of open `O_PATH` descriptors of inodes named by handles.
//!
//! Keyed by the node's serial (unique for the life of the mount, never reused, unlike node
//! ids), so a descriptor can never be handed to a different node. Users get an `Arc` of the
//! descriptor: evicting an entry while a request uses it only closes the descriptor when that
//! request is done. The number of open descriptors is therefore at most the capacity plus one
//! per request in flight.
//!
//! Eviction is batched LRU: when full, the least recently used eighth is closed at once
//! (one sort per `capacity / 8` insertions).

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

#[derive(Debug)]
struct Entry {
    fd: Arc<OwnedFd>,
    last_use: u64,
}

#[derive(Debug, Default)]
struct Inner {
    map: HashMap<u64, Entry>,
    tick: u64,
}

/// Bounded LRU of descriptors by node serial.
#[derive(Debug)]
pub(crate) struct FdCache {
    inner: Mutex<Inner>,
    capacity: usize,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl FdCache {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            capacity: capacity.max(8),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// The cached descriptor of `serial`, if any (marks it used).
    pub(crate) fn get(&self, serial: u64) -> Option<Arc<OwnedFd>> {
        let mut inner = self.lock();
        inner.tick += 1;
        let tick = inner.tick;
        let found = inner.map.get_mut(&serial).map(|e| {
            e.last_use = tick;
            Arc::clone(&e.fd)
        });
        let counter = if found.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// Caches `fd` for `serial` (replacing an older one) and returns it shared.
    pub(crate) fn insert(&self, serial: u64, fd: OwnedFd) -> Arc<OwnedFd> {
        let fd = Arc::new(fd);
        let mut evicted = Vec::new();
        {
            let mut inner = self.lock();
            if inner.map.len() >= self.capacity && !inner.map.contains_key(&serial) {
                evicted = Self::evict_lru(&mut inner, self.capacity / 8 + 1);
            }
            inner.tick += 1;
            let last_use = inner.tick;
            inner.map.insert(
                serial,
                Entry {
                    fd: Arc::clone(&fd),
                    last_use,
                },
            );
        }
        drop(evicted); // closed outside the lock
        fd
    }

    /// Removes `serial`'s descriptor (the node is gone).
    pub(crate) fn remove(&self, serial: u64) {
        let e = self.lock().map.remove(&serial);
        drop(e);
    }

    /// Closes the least recently used half: called when the process ran out of descriptors.
    /// Returns how many were closed (descriptors in use by requests close when those end).
    pub(crate) fn shrink(&self) -> usize {
        let evicted = {
            let mut inner = self.lock();
            let n = inner.map.len().div_ceil(2);
            Self::evict_lru(&mut inner, n)
        };
        evicted.len()
    }

    fn evict_lru(inner: &mut Inner, n: usize) -> Vec<Entry> {
        let mut ages: Vec<(u64, u64)> = inner.map.iter().map(|(k, e)| (e.last_use, *k)).collect();
        let n = n.min(ages.len());
        if n == 0 {
            return Vec::new();
        }
        ages.select_nth_unstable(n - 1);
        ages[..n]
            .iter()
            .filter_map(|(_, k)| inner.map.remove(k))
            .collect()
    }

    /// `(open descriptors, hits, misses)`.
    pub(crate) fn counters(&self) -> (usize, u64, u64) {
        (
            self.lock().map.len(),
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
        )
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::os::fd::AsRawFd;

    fn devnull() -> OwnedFd {
        std::fs::File::open("/dev/null").unwrap().into()
    }

    #[test]
    fn stays_bounded_and_keeps_recent_entries() {
        let c = FdCache::new(16);
        for s in 0..100 {
            c.insert(s, devnull());
            assert!(
                c.get(0).is_some() || s == 0,
                "entry 0 is used on every step"
            );
            assert!(c.counters().0 <= 16);
        }
        assert!(c.get(99).is_some());
        assert!(c.get(1).is_none());
    }

    #[test]
    fn an_evicted_descriptor_stays_open_while_in_use() {
        let c = FdCache::new(8);
        let held = c.insert(1, devnull());
        for s in 2..50 {
            c.insert(s, devnull());
        }
        assert!(c.get(1).is_none());
        // still a valid descriptor
        assert!(crate::sys::fstat(held.as_raw_fd()).is_ok());
        assert!(c.shrink() > 0);
        c.remove(49);
        assert!(c.get(49).is_none());
    }
}
