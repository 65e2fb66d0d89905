//! Requests that may wait for BACKING: read, write, fsync, fallocate, fsyncdir, the release
//! of a handle open for writing, and the data path's eviction of a forgotten node.
//!
//! With I/O workers (`MountOptions::io_workers` > 0) a read or write is first offered to the
//! data path without waiting (`DataPath::try_read_into`/`try_write`) and answered on the
//! request thread when it is a hit; otherwise the request, its handle and its reply go to the
//! I/O pool (`iopool.rs`) in the class the data path names, and a worker makes the ordinary
//! call and replies. The others always go to the pool. Without workers everything runs on the
//! request thread, as the data path's contract always allowed.
//!
//! Ordering: the kernel sends a request and waits for its reply before the system call
//! returns, so a caller's requests are not reordered by the pool; concurrent requests on one
//! file were never ordered. A forgotten node's eviction may run after a new lookup and open of
//! the same inode, which the data path's contract allows (`DataPath::evict`).

use std::sync::Arc;

use fuser::{FileHandle, ReplyData, ReplyEmpty, ReplyWrite};

use crate::data::{Attempt, DataPath, FileHandleInfo};
use crate::fs::{errno, OpResult, TierFs};
use crate::iopool::IoClass;

thread_local! {
    /// Each request thread's and worker's reusable read buffer.
    static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Runs `f` on this thread's read buffer, at least `size` bytes long, so a large read costs no
/// allocation or zeroing per request.
fn with_buf<R>(size: u32, f: impl FnOnce(&mut [u8]) -> R) -> R {
    BUF.with(|cell| {
        let mut buf = cell.borrow_mut();
        if buf.len() < size as usize {
            buf.resize(size as usize, 0);
        }
        f(&mut buf[..size as usize])
    })
}

/// Reads through the data path, waiting as long as it takes, and replies.
fn read_and_reply(data: &dyn DataPath, h: &FileHandleInfo, offset: u64, size: u32, r: ReplyData) {
    with_buf(size, |buf| match data.read_into(h, offset, buf) {
        Ok(n) => r.data(&buf[..n]),
        Err(e) => r.error(errno(e)),
    });
}

/// Writes through the data path; `kill_suidgid` is the caller `(pid, fsgid)` of a write the
/// kernel flagged `FUSE_WRITE_KILL_SUIDGID`, whose set-ID bits are cleared first.
fn write_now(
    data: &dyn DataPath,
    h: &FileHandleInfo,
    offset: u64,
    bytes: &[u8],
    kill_suidgid: Option<(u32, u32)>,
) -> OpResult<u32> {
    if let Some((pid, fsgid)) = kill_suidgid {
        crate::killpriv::clear_for_caller(data, h.ino, &h.file, pid, fsgid).map_err(errno)?;
    }
    data.write(h, offset, bytes).map_err(errno)
}

fn reply_written(reply: ReplyWrite, r: OpResult<u32>) {
    match r {
        Ok(n) => reply.written(n),
        Err(e) => reply.error(e),
    }
}

fn reply_empty(reply: ReplyEmpty, r: OpResult<()>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

impl TierFs {
    /// `read`: a hit on this thread, anything else on an I/O worker.
    pub(crate) fn io_read(&self, fh: FileHandle, offset: u64, size: u32, reply: ReplyData) {
        let h = match self.file(fh) {
            Ok(h) => h,
            Err(e) => return reply.error(e),
        };
        if !self.pool.enabled() {
            return read_and_reply(&*self.data, &h, offset, size, reply);
        }
        // A hit is replied from this thread's buffer; the reply comes back out for a wait.
        let mut reply = Some(reply);
        let wait = with_buf(size, |buf| match self.data.try_read_into(&h, offset, buf) {
            Attempt::Done(r) => {
                if let Some(reply) = reply.take() {
                    match r {
                        Ok(n) => reply.data(&buf[..n]),
                        Err(e) => reply.error(errno(e)),
                    }
                }
                None
            }
            Attempt::Wait(class) => Some(class),
        });
        if let (Some(class), Some(reply)) = (wait, reply) {
            let data = Arc::clone(&self.data);
            self.pool.submit(class, move || {
                read_and_reply(&*data, &h, offset, size, reply);
            });
        }
    }

    /// `write`: into the cache on this thread when that needs no I/O, else on an I/O worker
    /// (with a copy of the bytes).
    pub(crate) fn io_write(
        &self,
        fh: FileHandle,
        offset: u64,
        bytes: &[u8],
        kill_suidgid: Option<(u32, u32)>,
        reply: ReplyWrite,
    ) {
        let h = match self.file(fh) {
            Ok(h) => h,
            Err(e) => return reply.error(e),
        };
        if !self.pool.enabled() {
            return reply_written(
                reply,
                write_now(&*self.data, &h, offset, bytes, kill_suidgid),
            );
        }
        // Clearing set-ID bits changes BACKING's metadata in step with write-back: a worker's.
        let class = match kill_suidgid {
            Some(_) => self.data.io_class(&h),
            None => match self.data.try_write(&h, offset, bytes) {
                Attempt::Done(r) => return reply_written(reply, r.map_err(errno)),
                Attempt::Wait(class) => class,
            },
        };
        let (data, bytes) = (Arc::clone(&self.data), bytes.to_vec());
        self.pool.submit(class, move || {
            reply_written(reply, write_now(&*data, &h, offset, &bytes, kill_suidgid));
        });
    }

    /// Runs `op` on the handle `fh` on an I/O worker (in the handle's class) and replies.
    fn on_worker(
        &self,
        fh: FileHandle,
        reply: ReplyEmpty,
        op: impl FnOnce(&dyn DataPath, &FileHandleInfo) -> std::io::Result<()> + Send + 'static,
    ) {
        let h = match self.file(fh) {
            Ok(h) => h,
            Err(e) => return reply.error(e),
        };
        let data = Arc::clone(&self.data);
        let class = if self.pool.enabled() {
            data.io_class(&h)
        } else {
            IoClass::Normal
        };
        self.pool.submit(class, move || {
            reply_empty(reply, op(&*data, &h).map_err(errno));
        });
    }

    /// `fsync`: waits for write-back and BACKING's sync, on an I/O worker.
    pub(crate) fn io_fsync(&self, fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        self.on_worker(fh, reply, move |d, h| d.fsync(h, datasync));
    }

    /// `fallocate`: writes back and changes BACKING, on an I/O worker.
    pub(crate) fn io_fallocate(
        &self,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        self.on_worker(fh, reply, move |d, h| d.fallocate(h, mode, offset, length));
    }

    /// `fsyncdir`: BACKING's sync of the directory, on an I/O worker.
    pub(crate) fn io_fsyncdir(&self, fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        let dir = match self.dir(fh) {
            Ok(d) => d,
            Err(e) => return reply.error(e),
        };
        self.pool.submit(IoClass::Normal, move || {
            reply_empty(reply, dir.sync(datasync).map_err(errno));
        });
    }

    /// `release`: the handle is gone at once; the data path's release (which may write back to
    /// bound the descriptors closed files keep, or carry out a forget that came first) runs on
    /// this thread when it needs no I/O (`DataPath::try_release`: a `tar x` closes every file
    /// it writes, and a hand-over to a worker costs two thread switches), else on an I/O
    /// worker; a writable handle's is counted as pending until done (`writers.rs`).
    pub(crate) fn io_release(&self, fh: FileHandle, reply: ReplyEmpty) {
        let Some(h) = self.remove_file(fh) else {
            return reply.ok();
        };
        let writable = h.flags & libc::O_ACCMODE != libc::O_RDONLY;
        let done = if self.pool.enabled() {
            self.data.try_release(&h)
        } else {
            self.data.release(&h);
            true
        };
        if done {
            if writable {
                self.writers.released(false);
            }
            return reply.ok();
        }
        let (data, writers) = (Arc::clone(&self.data), Arc::clone(&self.writers));
        let class = data.io_class(&h);
        if writable {
            writers.releasing();
        }
        self.pool.submit(class, move || {
            data.release(&h);
            drop(h);
            if writable {
                writers.released(true);
            }
            reply.ok();
        });
    }

    /// The data path's eviction of node `id` (the kernel forgot it), which may write back: on
    /// an I/O worker (whose rights are the daemon's) unless the data path had nothing to do.
    pub(crate) fn evict_data(&self, id: u64) {
        if !self.pool.enabled() {
            return crate::creds::as_daemon(|| self.data.evict(id));
        }
        if self.data.try_evict(id) {
            return;
        }
        let data = Arc::clone(&self.data);
        self.pool.submit(IoClass::Normal, move || data.evict(id));
    }
}
