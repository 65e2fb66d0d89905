//! The data path: where file contents are read from and written to.
//!
//! The FUSE layer owns names, attributes, permissions and open handles; every
//! byte of regular-file data goes through a [`DataPath`]. [`PassThrough`] (the
//! default) talks to the backing file directly; the block cache will implement
//! the same trait and sit in between.
//!
//! Contract, per call site in the FUSE layer:
//! * `open` after the backing file was opened (also for `create`); an error
//!   fails the open and the handle is never used. Its [`OpenAdvice`] decides whether the
//!   kernel page cache may hold the file and whether what it holds is still valid: the
//!   content version must move whenever the file may have changed other than through this
//!   mount (see `kcache.rs`).
//! * `read`/`write`/`flush`/`fsync`/`fallocate` with that handle (`flush` at each `close()`,
//!   unless the advice said `no_flush`). Offsets are
//!   the kernel's; for `O_APPEND` handles the kernel has already resolved the
//!   offset to the end of file, so the backing file is never opened with
//!   `O_APPEND`. `read` returns fewer bytes than asked only at end of file.
//! * `truncate` for setattr(size) and for `O_TRUNC` opens, with an open,
//!   writable descriptor of the backing file (a handle's or a temporary one).
//!   The implementation must change the backing size (or arrange to).
//! * `size_override` and `times_override` are consulted by every
//!   getattr/lookup/readdirplus reply of a regular file, *after* the backing
//!   `fstat`; return `Some` while the logical value differs from the backing
//!   one (dirty cached data past the backing EOF; cached writes whose
//!   modification time BACKING does not show yet; a change time BACKING moved
//!   when the data path wrote back). Fields without override are taken from
//!   a fresh backing `fstat` made after the query, so a data path may move
//!   data to BACKING (and drop its override) at any time; the
//!   `backing_ctime` it is given may therefore predate its own latest write.
//! * `set_times` wraps setattr(atime/mtime) of a regular file: `apply`
//!   changes BACKING's times; a data path that writes back later must keep
//!   the modification time set there (it is what the application asked for).
//! * `change_metadata` wraps every other change the FUSE layer makes to a
//!   regular file on BACKING that moves its change time but not its data:
//!   chmod, chown, set/remove xattr, link, unlink or rename of one of its
//!   names (also of a file a rename replaces), and the set-ID bits a write
//!   clears. `set_times` and `change_metadata` get a `stat` that
//!   describes the file afterwards, so a data path that detects outside
//!   edits by the change time can record its own.
//! * `release` once per handle after the last use; `evict` when the kernel
//!   forgot the node: its id may later name a different file, so anything
//!   cached for `ino` must be dropped.
//!
//! * `try_read_into`/`try_write` are asked first, on a FUSE request thread, when the
//!   mount has I/O workers (`MountOptions::io_workers`): answer [`Attempt::Done`] only
//!   without I/O and without waiting for a lock held across I/O (a hit); otherwise change
//!   nothing and answer [`Attempt::Wait`] with the request's class. The request is then
//!   queued in that class and made with `read_into`/`write` on an I/O worker. `fsync`,
//!   `fallocate`, `evict` (unless `try_evict` did it) and the `release` of a handle open
//!   for writing always run on a worker (queued in the class `io_class` gives); the other calls run on the request
//!   thread and should not wait for BACKING.
//!
//! `ino` is the FUSE node id (`FileHandleInfo::ino`), equal to the backing
//! inode number for files on BACKING's own device. Calls for different
//! handles, and for the same handle, may arrive concurrently from several
//! threads.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::SystemTime;

use crate::iopool::IoClass;
use crate::kcache::OpenAdvice;
use crate::sys;

/// Backing attributes sampled right after the backing file was opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttrSnapshot {
    /// Backing size in bytes.
    pub size: u64,
    /// Backing modification time.
    pub mtime: SystemTime,
    /// Backing `st_dev`.
    pub dev: u64,
    /// Backing `st_ino`.
    pub ino: u64,
}

/// A backing file's size, times, inode number and link count after a change of metadata (see
/// [`DataPath::change_metadata`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackingStamp {
    pub size: u64,
    pub mtime: SystemTime,
    /// `st_ctime`.
    pub ctime: SystemTime,
    pub ino: u64,
    /// `st_nlink`: 0 once an unlink or a rename over the file took its last name.
    pub links: u64,
}

impl BackingStamp {
    /// The stamp of a backing `stat`.
    pub(crate) fn of(st: &libc::stat) -> Self {
        Self {
            size: u64::try_from(st.st_size).unwrap_or(0),
            mtime: crate::attr::system_time(st.st_mtime, st.st_mtime_nsec),
            ctime: crate::attr::system_time(st.st_ctime, st.st_ctime_nsec),
            ino: st.st_ino,
            links: st.st_nlink,
        }
    }
}

/// Describes a file after a change (see [`DataPath::change_metadata`]).
pub type StatFn<'a> = dyn FnMut() -> io::Result<BackingStamp> + 'a;

/// Times a data path reports instead of BACKING's
/// ([`DataPath::times_override`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TimesOverride {
    /// Modification time of writes BACKING has not seen yet (or an explicit
    /// time set since).
    pub mtime: Option<SystemTime>,
    /// Change time as the application's operations made it, where BACKING's
    /// differs (e.g. moved by a later write-back).
    pub ctime: Option<SystemTime>,
}

/// The answer to a request made on a FUSE request thread, which must not wait (see the module
/// docs).
#[derive(Debug)]
#[must_use]
pub enum Attempt<T> {
    /// Served (or failed) without waiting.
    Done(io::Result<T>),
    /// Nothing done: it has to wait (for BACKING, a slower tier, write-back); queue it in this
    /// class and make the ordinary call on an I/O worker.
    Wait(IoClass),
}

/// One open file, as seen by the data path.
#[derive(Debug)]
pub struct FileHandleInfo {
    /// FUSE file handle (unique among open handles).
    pub fh: u64,
    /// FUSE node id of the file.
    pub ino: u64,
    /// Backing file, opened read-write when the caller asked for write access
    /// (so a cache may read around partial writes), otherwise read-only.
    pub file: Arc<File>,
    /// Open flags as the application passed them (including `O_APPEND`,
    /// `O_SYNC`, `O_DIRECT`...).
    pub flags: i32,
    /// Backing attributes at open time.
    pub snapshot: AttrSnapshot,
}

/// Pluggable data path for regular files. Object safe; see the module docs
/// for the calling contract.
pub trait DataPath: Send + Sync + 'static {
    /// A handle was opened. The advice says whether the kernel should cache the file
    /// (with [`KernelCacheMode::Priority`](crate::KernelCacheMode)) and its content version
    /// (see `kcache.rs`), and whether closes need a FLUSH; the default: not hot, no version,
    /// FLUSH at every close.
    fn open(&self, _fh: &FileHandleInfo) -> io::Result<OpenAdvice> {
        Ok(OpenAdvice::default())
    }
    /// Reads up to `size` bytes at `offset` (short only at end of file).
    fn read(&self, fh: &FileHandleInfo, offset: u64, size: u32) -> io::Result<Vec<u8>>;
    /// Reads into `buf` (its length is the size asked); returns the bytes read, short only at
    /// end of file. The FUSE layer calls this with a reused per-thread buffer; implement it to
    /// avoid the copy of the default.
    fn read_into(&self, fh: &FileHandleInfo, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let size = u32::try_from(buf.len()).unwrap_or(u32::MAX);
        let v = self.read(fh, offset, size)?;
        let n = v.len().min(buf.len());
        buf[..n].copy_from_slice(&v[..n]);
        Ok(n)
    }
    /// `read_into` if it needs no I/O and no wait (a hit); else [`Attempt::Wait`], with
    /// nothing done. The default always waits.
    fn try_read_into(&self, fh: &FileHandleInfo, _offset: u64, _buf: &mut [u8]) -> Attempt<usize> {
        Attempt::Wait(self.io_class(fh))
    }
    /// Writes `data` at `offset`; returns the number of bytes written.
    fn write(&self, fh: &FileHandleInfo, offset: u64, data: &[u8]) -> io::Result<u32>;
    /// `write` if it needs no I/O and no wait; else [`Attempt::Wait`], with nothing done. The
    /// default always waits.
    fn try_write(&self, fh: &FileHandleInfo, _offset: u64, _data: &[u8]) -> Attempt<u32> {
        Attempt::Wait(self.io_class(fh))
    }
    /// The class the handle's requests that wait are queued in.
    fn io_class(&self, _fh: &FileHandleInfo) -> IoClass {
        IoClass::Normal
    }
    /// `close()` of one file descriptor referring to the handle. Not called for handles whose
    /// [`OpenAdvice::no_flush`] was set (opened with `FOPEN_NOFLUSH`).
    fn flush(&self, _fh: &FileHandleInfo) -> io::Result<()> {
        Ok(())
    }
    /// `fsync`/`fdatasync`.
    fn fsync(&self, fh: &FileHandleInfo, datasync: bool) -> io::Result<()>;
    /// Sets the logical size of node `ino`; `file` is a writable backing fd.
    fn truncate(&self, ino: u64, file: &File, new_size: u64) -> io::Result<()>;
    /// `fallocate(2)` with the given mode (allocate, punch hole, zero range...).
    fn fallocate(&self, fh: &FileHandleInfo, mode: i32, offset: u64, len: u64) -> io::Result<()>;
    /// Logical size of node `ino` if it differs from the backing size.
    fn size_override(&self, _ino: u64) -> Option<u64> {
        None
    }
    /// Modification and change times of node `ino` where they differ from
    /// BACKING's, whose `ctime` was `backing_ctime` (see the module docs).
    fn times_override(&self, _ino: u64, _backing_ctime: SystemTime) -> TimesOverride {
        TimesOverride::default()
    }
    /// `utimensat` of regular file `ino`: `apply` sets BACKING's times;
    /// `mtime` tells whether the modification time is among them. A caching
    /// data path runs `apply` serialised with its write-back of `ino`, and
    /// makes later write-back leave the modification time as set. `stat`
    /// describes the file afterwards.
    fn set_times(
        &self,
        _ino: u64,
        _mtime: bool,
        apply: &mut dyn FnMut() -> io::Result<()>,
        _stat: &mut StatFn<'_>,
    ) -> io::Result<()> {
        apply()
    }
    /// `apply` changes regular file `ino`'s metadata on BACKING, not its data
    /// (see the module docs); `stat` describes the file afterwards. A data path
    /// that tells outside edits by the change time runs `apply` serialised with
    /// its write-back of `ino` and records the change time `stat` reports.
    fn change_metadata(
        &self,
        _ino: u64,
        apply: &mut dyn FnMut() -> io::Result<()>,
        _stat: &mut StatFn<'_>,
    ) -> io::Result<()> {
        apply()
    }
    /// The handle is closed; no further calls will use it.
    fn release(&self, _fh: &FileHandleInfo) {}
    /// `release` if that needs no I/O and no wait: done, and `true`. Otherwise nothing is
    /// done, `false`, and `release` follows on an I/O worker. The default always leaves it
    /// to `release`.
    fn try_release(&self, _fh: &FileHandleInfo) -> bool {
        false
    }
    /// The kernel forgot node `ino`; its id may be reused for another file.
    fn evict(&self, _ino: u64) {}
    /// `evict` if that needs no I/O and no wait (nothing is cached for `ino`, say): done, and
    /// `true`. Otherwise nothing is done, `false`, and `evict` follows on an I/O worker. The
    /// default always leaves it to `evict`.
    fn try_evict(&self, _ino: u64) -> bool {
        false
    }
}

/// Direct `pread`/`pwrite`/`fsync` on the backing file; no caching.
#[derive(Debug, Default, Clone, Copy)]
pub struct PassThrough;

impl DataPath for PassThrough {
    fn open(&self, _fh: &FileHandleInfo) -> io::Result<OpenAdvice> {
        // `flush` is the default no-op: no close needs the round trip.
        Ok(OpenAdvice {
            no_flush: true,
            ..OpenAdvice::default()
        })
    }

    fn try_evict(&self, _ino: u64) -> bool {
        true // nothing cached
    }

    fn try_release(&self, _fh: &FileHandleInfo) -> bool {
        true // nothing to let go
    }

    fn read(&self, fh: &FileHandleInfo, offset: u64, size: u32) -> io::Result<Vec<u8>> {
        let mut buf = vec![0u8; size as usize];
        let n = self.read_into(fh, offset, &mut buf)?;
        buf.truncate(n);
        Ok(buf)
    }

    fn read_into(&self, fh: &FileHandleInfo, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let mut done = 0usize;
        while done < buf.len() {
            match fh.file.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(done)
    }

    fn write(&self, fh: &FileHandleInfo, offset: u64, data: &[u8]) -> io::Result<u32> {
        let len =
            u32::try_from(data.len()).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
        fh.file.write_all_at(data, offset)?;
        Ok(len)
    }

    fn fsync(&self, fh: &FileHandleInfo, datasync: bool) -> io::Result<()> {
        if datasync {
            fh.file.sync_data()
        } else {
            fh.file.sync_all()
        }
    }

    fn truncate(&self, _ino: u64, file: &File, new_size: u64) -> io::Result<()> {
        file.set_len(new_size)
    }

    fn fallocate(&self, fh: &FileHandleInfo, mode: i32, offset: u64, len: u64) -> io::Result<()> {
        sys::fallocate(fh.file.as_raw_fd(), mode, offset, len)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn passthrough_reads_short_at_eof() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"hello").unwrap();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&p)
            .unwrap();
        let fh = FileHandleInfo {
            fh: 1,
            ino: 2,
            file: Arc::new(file),
            flags: libc::O_RDWR,
            snapshot: AttrSnapshot {
                size: 5,
                mtime: SystemTime::UNIX_EPOCH,
                dev: 0,
                ino: 0,
            },
        };
        let pt: Arc<dyn DataPath> = Arc::new(PassThrough);
        assert_eq!(pt.read(&fh, 1, 100).unwrap(), b"ello");
        assert_eq!(pt.write(&fh, 7, b"xy").unwrap(), 2);
        assert_eq!(pt.read(&fh, 0, 100).unwrap(), b"hello\0\0xy");
        pt.truncate(2, &fh.file, 3).unwrap();
        assert_eq!(pt.read(&fh, 0, 100).unwrap(), b"hel");
        assert!(pt.size_override(2).is_none());
        pt.fsync(&fh, true).unwrap();
    }
}
