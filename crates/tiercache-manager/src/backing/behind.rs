//! Dropping what BACKING writes leave in the page cache, a little behind the writes.
//!
//! Neither way of writing leaves nothing by itself: `RWF_DONTCACHE` pages are dropped when
//! their writeback ends in task context only, and on ext4 an overwrite of allocated blocks
//! ends in interrupt context, leaving every page cached (measured on Linux 6.18); the
//! fallback's plain writes leave all. So every written range is queued here, its writeback
//! started, and dropped — after waiting for that writeback, so the pages are clean — once
//! [`LAG_BYTES`] more have been written, or at the file's next `sync`, or at [`Behind::settle`]
//! (the flusher, after each round). Waiting for the range written just before would halve
//! write-back throughput; the lag lets the device work while the writer goes on.
//!
//! Bounds: at most [`LAG_BYTES`] written and not dropped yet, in at most [`MAX_PENDING`]
//! ranges, each holding a duplicate of its file's descriptor (a duplicate that cannot be
//! made: the range is waited for and dropped at once).
//!
//! Errors: waiting for a range's writeback reports a failed writeback, and consumes it for the
//! open file (a later `fsync` on it would not see it). So the error is kept here, by inode,
//! and returned by that file's next `sync` (or `sync_fs` of its file system): a failed
//! writeback is reported by `fsync` as it would be without the queue.

use super::sys;
use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Written bytes not dropped yet, at most (the writer runs this far ahead of the drops).
pub(super) const LAG_BYTES: u64 = 8 << 20;
/// Queued ranges (each holds a descriptor) at most.
pub(super) const MAX_PENDING: usize = 16;
/// Remembered writeback errors at most (inodes not synced since); the oldest goes first.
const MAX_ERRORS: usize = 1024;

/// An inode: (`st_dev`, `st_ino`).
pub(super) type Inode = (u64, u64);

/// A written range whose pages are not dropped yet.
#[derive(Debug)]
struct Pending {
    inode: Inode,
    fd: Arc<File>,
    start: u64,
    end: u64,
}

impl Pending {
    fn len(&self) -> u64 {
        self.end - self.start
    }
}

#[derive(Debug, Default)]
struct State {
    /// Oldest first.
    queue: VecDeque<Pending>,
    /// Sum of the queued ranges' lengths.
    bytes: u64,
    /// Writeback errors found while waiting, not reported by a `sync` yet (errno by inode).
    errors: VecDeque<(Inode, i32)>,
}

/// The queue of written ranges (see the module docs).
#[derive(Debug, Default)]
pub(super) struct Behind {
    state: Mutex<State>,
}

/// A range to wait for and drop, outside the lock.
type Work = (Inode, Arc<File>, u64, u64);

impl Behind {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `[off, off + len)` of `inode` was just written through `fd`, and its writeback started
    /// (`RWF_DONTCACHE` starts it; the fallback calls [`start_writeback`] first). Queues it,
    /// then waits for and drops what is more than [`LAG_BYTES`] behind.
    pub(super) fn wrote(&self, inode: Inode, fd: &File, off: u64, len: u64) {
        if len == 0 {
            return;
        }
        let mut work = Vec::new();
        {
            let mut st = self.lock();
            let merged = st
                .queue
                .back_mut()
                .filter(|p| p.inode == inode && p.end == off)
                .map(|p| p.end += len)
                .is_some();
            if !merged {
                match fd.try_clone() {
                    Ok(dup) => st.queue.push_back(Pending {
                        inode,
                        fd: Arc::new(dup),
                        start: off,
                        end: off + len,
                    }),
                    Err(_) => {
                        // No descriptor to spare (EMFILE): no lag for this one.
                        drop(st);
                        self.settle_range(inode, fd, off, len);
                        return;
                    }
                }
            }
            st.bytes += len;
            while st.bytes > LAG_BYTES || st.queue.len() > MAX_PENDING {
                let over = if st.queue.len() > MAX_PENDING {
                    u64::MAX
                } else {
                    st.bytes - LAG_BYTES
                };
                let Some(front) = st.queue.front_mut() else {
                    break;
                };
                let take = over.min(front.len());
                work.push((front.inode, Arc::clone(&front.fd), front.start, take));
                front.start += take;
                if front.start == front.end {
                    st.queue.pop_front();
                }
                st.bytes -= take;
            }
        }
        for (inode, fd, off, len) in work {
            self.settle_range(inode, &fd, off, len);
        }
    }

    /// Waits for the writeback of `[off, off + len)` and drops its pages; a failed writeback
    /// is kept for the inode's next `sync`.
    fn settle_range(&self, inode: Inode, fd: &File, off: u64, len: u64) {
        if let Err(e) = sys::write_out(fd, off, len) {
            log::warn!(
                "BACKING inode {}:{}: writeback of {len} bytes at {off} failed: {e} (reported by \
                 the file's next fsync)",
                inode.0,
                inode.1
            );
            let mut st = self.lock();
            if !st.errors.iter().any(|&(i, _)| i == inode) {
                if st.errors.len() >= MAX_ERRORS {
                    st.errors.pop_front();
                }
                st.errors
                    .push_back((inode, e.raw_os_error().unwrap_or(libc::EIO)));
            }
        }
        super::drop::drop_behind(fd, off, len, false);
    }

    /// Takes the queued ranges `pick` selects.
    fn take(&self, pick: impl Fn(&Pending) -> bool) -> Vec<Work> {
        let mut st = self.lock();
        let mut out = Vec::new();
        let mut kept = VecDeque::with_capacity(st.queue.len());
        while let Some(p) = st.queue.pop_front() {
            if pick(&p) {
                let len = p.len();
                st.bytes -= len;
                out.push((p.inode, p.fd, p.start, len));
            } else {
                kept.push_back(p);
            }
        }
        st.queue = kept;
        out
    }

    /// The error kept for an inode `pick` selects, if any (and forgets it).
    fn take_error(&self, pick: impl Fn(Inode) -> bool) -> Option<io::Error> {
        let mut st = self.lock();
        let at = st.errors.iter().position(|&(i, _)| pick(i))?;
        let (_, errno) = st.errors.remove(at)?;
        Some(io::Error::from_raw_os_error(errno))
    }

    /// Runs `sync` (an `fsync` or a `syncfs`) for the inodes `pick` selects, then drops their
    /// ranges queued before it (clean once it returns: no waiting), and returns its error, else
    /// a writeback error kept for one of them.
    pub(super) fn sync_with(
        &self,
        pick: impl Fn(Inode) -> bool,
        sync: impl FnOnce() -> io::Result<()>,
    ) -> io::Result<()> {
        let taken = self.take(|p| pick(p.inode));
        let synced = sync();
        for (_, fd, off, len) in taken {
            super::drop::drop_behind(&fd, off, len, false);
        }
        let kept = self.take_error(pick);
        synced?;
        kept.map_or(Ok(()), Err)
    }

    /// Waits for and drops everything queued (the flusher, once a round).
    pub(super) fn settle(&self) {
        for (inode, fd, off, len) in self.take(|_| true) {
            self.settle_range(inode, &fd, off, len);
        }
    }

    /// Bytes queued (tests).
    #[cfg(test)]
    pub(super) fn queued(&self) -> (usize, u64) {
        let st = self.lock();
        (st.queue.len(), st.bytes)
    }
}

/// The inode `fd` is open on.
pub(super) fn inode_of(fd: &File) -> io::Result<Inode> {
    sys::inode_of(fd.as_fd())
}

/// Starts writeback of `[off, off + len)` without waiting (the fallback's plain writes).
pub(super) fn start_writeback(fd: &File, off: u64, len: u64) -> io::Result<()> {
    sys::start_writeback(fd, off, len)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::os::unix::fs::FileExt;

    fn file(dir: &tempfile::TempDir, name: &str) -> (File, Inode) {
        let f = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.path().join(name))
            .unwrap();
        let inode = inode_of(&f).unwrap();
        (f, inode)
    }

    #[test]
    fn the_queue_stays_within_its_byte_and_range_bounds() {
        let dir = tempfile::tempdir().unwrap();
        let b = Behind::default();
        let (f, inode) = file(&dir, "seq");
        let mib = vec![1u8; 1 << 20];
        for i in 0..32u64 {
            f.write_all_at(&mib, i << 20).unwrap();
            b.wrote(inode, &f, i << 20, 1 << 20);
            let (ranges, bytes) = b.queued();
            assert!(bytes <= LAG_BYTES, "{bytes}");
            assert_eq!(ranges, 1, "contiguous writes merge into one range");
        }
        assert_eq!(b.queued(), (1, LAG_BYTES));
        let files: Vec<(File, Inode)> = (0..2 * MAX_PENDING)
            .map(|i| file(&dir, &i.to_string()))
            .collect();
        for (f, inode) in &files {
            f.write_all_at(b"x", 0).unwrap();
            b.wrote(*inode, f, 0, 1);
            assert!(b.queued().0 <= MAX_PENDING);
        }
        b.settle();
        assert_eq!(b.queued(), (0, 0));
    }

    #[test]
    fn a_kept_writeback_error_is_returned_once_by_its_files_next_sync() {
        let dir = tempfile::tempdir().unwrap();
        let b = Behind::default();
        let (f, inode) = file(&dir, "a");
        let (g, other) = file(&dir, "b");
        f.write_all_at(b"data", 0).unwrap();
        b.wrote(inode, &f, 0, 4);
        g.write_all_at(b"data", 0).unwrap();
        b.wrote(other, &g, 0, 4);
        b.lock().errors.push_back((inode, libc::EIO));
        // Another file's sync neither sees it nor loses it.
        b.sync_with(|i| i == other, || Ok(())).unwrap();
        assert_eq!(b.queued(), (1, 4));
        let e = b.sync_with(|i| i == inode, || Ok(())).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EIO));
        assert_eq!(b.queued(), (0, 0));
        b.sync_with(|i| i == inode, || Ok(())).unwrap();
        // The sync's own error comes first.
        b.lock().errors.push_back((inode, libc::ENOSPC));
        let e = b
            .sync_with(
                |i| i == inode,
                || Err(io::Error::from_raw_os_error(libc::EIO)),
            )
            .unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EIO));
    }
}
