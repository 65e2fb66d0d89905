//! Regular-file operations: open/create and flush (read/write, fsync, release and fallocate,
//! which may wait for BACKING, are in `ops_io.rs`). All data goes through the
//! [`DataPath`](crate::DataPath).
//!
//! Backing open flags are derived from the application's flags:
//! * `O_CREAT`, `O_EXCL`, `O_NOCTTY` are for name resolution (create only);
//! * `O_NOFOLLOW` is dropped: the kernel already resolved the name and the
//!   `/proc/self/fd` re-open would otherwise fail with `ELOOP`;
//! * `O_APPEND` is dropped: the kernel resolves append offsets (under the
//!   inode lock) and sends explicit offsets, which the data path must honour;
//! * `O_DIRECT` is dropped (the data path decides how to hit the backing
//!   store; with `direct_io` the page cache is bypassed anyway);
//! * `O_TRUNC` is executed through `DataPath::truncate` after opening;
//! * write-only opens of regular files become read-write so a cache can fill
//!   partial blocks (the kernel still enforces the caller's access mode).
//!
//! Identity: the backing file is opened (and created) as the caller (`creds.rs`), so
//! BACKING's own permission check decides with the caller's rights, and every FUSE handle,
//! the only way to the data path and its cached blocks, stands for an open BACKING granted
//! to this caller. A write-only open the caller may not upgrade to read-write (a file it
//! may write but not read) is opened write-only as the caller first, which is the
//! permission check; the read-write descriptor the cache wants is then opened as the
//! daemon, and where BACKING refuses that too (root squash) the write-only descriptor is
//! used. Data I/O on an open descriptor needs no switch: rights were checked at open, and
//! NFS uses the opener's credential.

use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::Arc;

use fuser::{Errno, FileAttr, FileHandle, FopenFlags, INodeNo};

use crate::attr::system_time;
use crate::creds::Caller;
use crate::data::{AttrSnapshot, FileHandleInfo};
use crate::fs::{errno, OpResult, TierFs};
use crate::ops_entry::Umask;
use crate::sys;

/// Flags for opening the backing file, see the module docs.
pub(crate) fn backing_flags(flags: i32, regular: bool) -> i32 {
    let mut f = flags
        & !(libc::O_CREAT
            | libc::O_EXCL
            | libc::O_NOCTTY
            | libc::O_NOFOLLOW
            | libc::O_APPEND
            | libc::O_DIRECT
            | libc::O_TRUNC);
    if regular && f & libc::O_ACCMODE == libc::O_WRONLY {
        f = (f & !libc::O_ACCMODE) | libc::O_RDWR;
    }
    f
}

impl TierFs {
    /// Registers an open backing file as a handle and tells the data path; returns the handle
    /// and its FOPEN flags (which the kernel cache decides with the data path's advice).
    /// `created`: the file was just created (empty), so `O_TRUNC` has nothing to do.
    fn new_handle(
        &self,
        ino: u64,
        file: File,
        flags: i32,
        created: bool,
    ) -> OpResult<(u64, FopenFlags)> {
        let st = sys::fstat(file.as_raw_fd()).map_err(errno)?;
        let fh = self.alloc_fh();
        let info = Arc::new(FileHandleInfo {
            fh,
            ino,
            file: Arc::new(file),
            flags,
            snapshot: AttrSnapshot {
                size: u64::try_from(st.st_size).unwrap_or(0),
                mtime: system_time(st.st_mtime, st.st_mtime_nsec),
                dev: st.st_dev,
                ino: st.st_ino,
            },
        });
        let advice = self.data.open(&info).map_err(errno)?;
        if !created && flags & libc::O_TRUNC != 0 && flags & libc::O_ACCMODE != libc::O_RDONLY {
            if let Err(e) = self.data.truncate(ino, &info.file, 0) {
                self.data.release(&info);
                return Err(errno(e));
            }
        }
        let mut fopen = self
            .kcache
            .open_flags(ino, flags, advice, info.snapshot.size);
        if advice.no_flush {
            fopen |= FopenFlags::FOPEN_NOFLUSH;
        }
        self.insert_file(info);
        if flags & libc::O_ACCMODE != libc::O_RDONLY {
            self.writers.opened();
        }
        Ok((fh, fopen))
    }

    /// Opens with `open(bflags)` as the caller `c`. A write-only open (`flags`) that was
    /// upgraded to read-write and is refused is opened write-only as the caller (the check),
    /// then read-write as the daemon for the cache, or left write-only if that fails too.
    fn open_as_caller(
        &self,
        c: Caller,
        flags: i32,
        bflags: i32,
        open: impl Fn(i32) -> std::io::Result<File>,
    ) -> OpResult<File> {
        match self.as_caller(c, || open(bflags)) {
            Err(e)
                if e == Errno::EACCES
                    && flags & libc::O_ACCMODE == libc::O_WRONLY
                    && bflags & libc::O_ACCMODE == libc::O_RDWR =>
            {
                let wronly = (bflags & !libc::O_ACCMODE) | libc::O_WRONLY;
                let w = self.as_caller(c, || open(wronly))?;
                Ok(if self.ident.per_caller() {
                    open(bflags).unwrap_or(w) // no guard here: as the daemon
                } else {
                    w
                })
            }
            res => res,
        }
    }

    pub(crate) fn op_open(
        &self,
        c: Caller,
        ino: INodeNo,
        flags: i32,
    ) -> OpResult<(u64, FopenFlags)> {
        let node = self.inode(ino)?;
        let nfd = self.node_fd(&node)?;
        if node.is_dir() && flags & libc::O_ACCMODE != libc::O_RDONLY {
            return Err(Errno::EISDIR);
        }
        let bflags = backing_flags(flags, node.is_reg());
        let file = self.open_as_caller(c, flags, bflags, |f| {
            self.inodes.retry("open", || sys::reopen(nfd.raw(), f))
        })?;
        self.new_handle(node.id, file, flags, false)
    }

    pub(crate) fn op_create(
        &self,
        c: Caller,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
    ) -> OpResult<(FileAttr, u64, FopenFlags)> {
        let (_dir, dfd, sgid) = self.parent_dir(parent)?;
        let cname = sys::name_cstr(name).map_err(errno)?;
        let u = Umask::apply(umask);
        // Create exclusively so that only a file we really created is given
        // to the caller; if the name appeared meanwhile (and the caller did
        // not ask for O_EXCL) open the existing file instead, as open(2) would.
        let bflags = backing_flags(flags, true) | libc::O_NOFOLLOW;
        let created = self.as_caller(c, || {
            self.inodes.retry("create", || {
                sys::open_at(
                    dfd.raw(),
                    &cname,
                    bflags | libc::O_CREAT | libc::O_EXCL,
                    mode,
                )
            })
        });
        let (file, created) = match created {
            Ok(f) => (f, true),
            // the name appeared meanwhile: opened as an existing file would be
            Err(e) if flags & libc::O_EXCL == 0 && e == Errno::EEXIST => {
                let f = self
                    .open_as_caller(c, flags, bflags, |f| sys::open_at(dfd.raw(), &cname, f, 0))?;
                (f, false)
            }
            Err(e) => return Err(e),
        };
        let (file, path_fd) = {
            // set up as the caller: BACKING made it the caller's
            let _as_caller = self.caller_guard(c)?;
            let fd = file.as_raw_fd();
            if created {
                let setup = u
                    .fix_mode(fd, mode)
                    .map_err(errno)
                    .and_then(|()| self.chown_new(c, fd, sgid));
                if let Err(e) = setup {
                    let _ = sys::unlink_at(dfd.raw(), &cname, 0);
                    return Err(e);
                }
            }
            let path_fd = self
                .inodes
                .retry("create", || sys::path_fd_of(fd))
                .map_err(errno)?;
            (file, path_fd)
        };
        let attr = self.register(path_fd)?;
        match self.new_handle(attr.ino.0, file, flags, created) {
            // a file we created is as `register` saw it (nothing truncated it since)
            Ok((fh, fopen)) if created => Ok((attr, fh, fopen)),
            Ok((fh, fopen)) => {
                // the handle may have truncated the file: report fresh attrs
                let attr = self.op_getattr(attr.ino, Some(FileHandle(fh)))?;
                Ok((attr, fh, fopen))
            }
            Err(e) => {
                self.forget_node(attr.ino.0, 1);
                Err(e)
            }
        }
    }

    pub(crate) fn op_flush(&self, fh: FileHandle) -> OpResult<()> {
        let h = self.file(fh)?;
        self.data.flush(&h).map_err(errno)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backing_flags_strip_and_upgrade() {
        let f = backing_flags(
            libc::O_WRONLY | libc::O_APPEND | libc::O_TRUNC | libc::O_NOFOLLOW | libc::O_SYNC,
            true,
        );
        assert_eq!(f & libc::O_ACCMODE, libc::O_RDWR);
        assert_eq!(f & (libc::O_APPEND | libc::O_TRUNC | libc::O_NOFOLLOW), 0);
        assert_ne!(f & libc::O_SYNC, 0);
        let d = backing_flags(libc::O_RDONLY | libc::O_DIRECTORY, false);
        assert_eq!(d, libc::O_RDONLY | libc::O_DIRECTORY);
    }
}
