//! Directory streams: opendir, readdir, readdirplus, fsyncdir.
//!
//! A directory handle keeps an open backing directory and a snapshot of its
//! entries, taken when the kernel reads from offset 0 (opendir or rewinddir).
//! The offset of entry `i` in the snapshot is `i + 1`, so a stream continued
//! at offset `k` resumes with entry `k`: entries are neither skipped nor
//! repeated while the directory changes, as POSIX allows for readdir.
//!
//! readdirplus counts as a lookup for every entry except `.` and `..`
//! (which the kernel ignores); an entry that does not fit into the reply any
//! more has its lookup undone.

use std::ffi::OsStr;
use std::fs::File;
use std::sync::{Arc, Mutex, PoisonError};

use fuser::{Errno, FileHandle, FileType, Generation, INodeNo, ReplyDirectory, ReplyDirectoryPlus};

use crate::creds::{as_daemon, Caller};
use crate::fs::{errno, OpResult, TierFs};
use crate::sys::{self, RawDirEntry};

/// An open directory stream.
#[derive(Debug)]
pub(crate) struct DirHandle {
    dir: File,
    /// Snapshot shared with in-flight readdir calls; `None` until the first read.
    entries: Mutex<Option<Arc<Vec<RawDirEntry>>>>,
}

impl DirHandle {
    /// `fsync`/`fdatasync` of the backing directory.
    pub(crate) fn sync(&self, datasync: bool) -> std::io::Result<()> {
        if datasync {
            self.dir.sync_data()
        } else {
            self.dir.sync_all()
        }
    }

    pub(crate) fn new(dir: File) -> Self {
        Self {
            dir,
            entries: Mutex::new(None),
        }
    }

    /// Entries from `offset` on, re-reading the directory when `offset == 0`, and also on the
    /// first read of this handle at any offset: a kernel that served a new open from its own
    /// cache of the entries (`FOPEN_CACHE_DIR`, not requested today) goes on reading from us
    /// at the offset it reached when a cache page went missing (an offset into an earlier
    /// handle's snapshot of the same, unchanged directory: the same order).
    fn entries_from(&self, offset: u64) -> OpResult<(Arc<Vec<RawDirEntry>>, usize)> {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let snapshot = match &*entries {
            Some(e) if offset != 0 => Arc::clone(e),
            _ => {
                let e = Arc::new(sys::read_dir(&self.dir).map_err(errno)?);
                *entries = Some(Arc::clone(&e));
                e
            }
        };
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        Ok((snapshot, start))
    }
}

fn is_dot(name: &OsStr) -> bool {
    name == "." || name == ".."
}

/// File type of a dirent, asking the backing file system for `DT_UNKNOWN` (no descriptor
/// needed). An entry that cannot be stat'ed is listed as a regular file rather than dropped: a
/// listing never loses a name (lookup will then tell the truth or the error).
fn dirent_kind(dir_fd: i32, e: &RawDirEntry) -> FileType {
    let mode = match e.dtype {
        libc::DT_DIR => libc::S_IFDIR,
        libc::DT_LNK => libc::S_IFLNK,
        libc::DT_FIFO => libc::S_IFIFO,
        libc::DT_SOCK => libc::S_IFSOCK,
        libc::DT_CHR => libc::S_IFCHR,
        libc::DT_BLK => libc::S_IFBLK,
        libc::DT_REG => libc::S_IFREG,
        _ => sys::name_cstr(&e.name)
            .and_then(|c| sys::fstat_at(dir_fd, &c))
            .map(|st| st.st_mode)
            .unwrap_or(libc::S_IFREG),
    };
    crate::attr::kind_from_mode(mode)
}

/// What to do with an entry whose node could not be made for readdirplus.
fn entry_failed(e: &Errno, added: usize) -> Flow {
    if *e == Errno::ENOENT {
        Flow::Skip // removed since the snapshot: POSIX lets readdir omit it
    } else if added == 0 {
        Flow::Fail // nothing sent yet: the caller gets the error
    } else {
        Flow::Stop // send what we have; the next call starts here and fails if it persists
    }
}

enum Flow {
    Skip,
    Stop,
    Fail,
}

impl TierFs {
    pub(crate) fn op_opendir(&self, c: Caller, ino: INodeNo, flags: i32) -> OpResult<u64> {
        let node = self.inode(ino)?;
        let nfd = self.node_fd(&node)?;
        if !node.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        let keep = flags & (libc::O_NONBLOCK | libc::O_NOATIME);
        // as the caller: BACKING checks read permission
        let dir = self.as_caller(c, || {
            self.inodes.retry("opendir", || {
                sys::reopen(nfd.raw(), libc::O_RDONLY | libc::O_DIRECTORY | keep)
            })
        })?;
        let fh = self.alloc_fh();
        self.insert_dir(fh, Arc::new(DirHandle::new(dir)));
        Ok(fh)
    }

    pub(crate) fn op_readdir(
        &self,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: &mut ReplyDirectory,
    ) -> OpResult<()> {
        let node = self.inode(ino)?;
        let nfd = self.node_fd(&node)?;
        let handle = self.dir(fh)?;
        let (entries, start) = handle.entries_from(offset)?;
        for (i, e) in entries.iter().skip(start).enumerate() {
            let ino = if e.name == "." { node.id } else { e.ino };
            let kind = dirent_kind(nfd.raw(), e);
            if reply.add(INodeNo(ino), offset + i as u64 + 1, kind, &e.name) {
                break;
            }
        }
        Ok(())
    }

    /// Every entry from `offset` on is either in the reply (with its node) or the reply ends
    /// before it; an error other than "gone since the snapshot" is never turned into a
    /// silently shorter listing (see [`entry_failed`]).
    ///
    /// Entries are looked up as the caller (BACKING checks search permission on the
    /// directory); in a directory the caller may read but not search, the lookup is made as
    /// the daemon (attributes only, as before identities were switched; a later open is
    /// still checked as the caller).
    pub(crate) fn op_readdirplus(
        &self,
        c: Caller,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: &mut ReplyDirectoryPlus,
    ) -> OpResult<()> {
        let node = self.inode(ino)?;
        let nfd = self.node_fd(&node)?;
        let handle = self.dir(fh)?;
        let ttl = self.cfg.attr_ttl;
        let (entries, start) = handle.entries_from(offset)?;
        // held for the whole batch; registering a node opens by handle through `as_daemon`
        let _as_caller = self.caller_guard(c)?;
        let lookup = |name: &std::ffi::CStr| {
            let open = || {
                self.inodes
                    .retry("readdirplus", || sys::open_path_at(nfd.raw(), name))
            };
            match open() {
                Err(e) if e.raw_os_error() == Some(libc::EACCES) => as_daemon(open),
                res => res,
            }
        };
        let mut added = 0usize;
        for (i, e) in entries.iter().skip(start).enumerate() {
            let next = offset + i as u64 + 1;
            if is_dot(&e.name) {
                // not a lookup: the kernel skips "." and ".." when linking
                let id = if e.name == "." { node.id } else { e.ino };
                let attr = match sys::fstat(nfd.raw()) {
                    Ok(st) => crate::attr::file_attr(id, &st, None, Default::default()),
                    Err(err) if added == 0 => return Err(errno(err)),
                    Err(_) => break,
                };
                if reply.add(INodeNo(id), next, &e.name, &ttl, &attr, Generation(0)) {
                    break;
                }
                added += 1;
                continue;
            }
            let res = sys::name_cstr(&e.name)
                .and_then(|n| lookup(&n))
                .map_err(errno)
                .and_then(|fd| self.register(fd));
            let attr = match res {
                Ok(attr) => attr,
                Err(err) => match entry_failed(&err, added) {
                    Flow::Skip => continue,
                    Flow::Stop => break,
                    Flow::Fail => return Err(err),
                },
            };
            if reply.add(attr.ino, next, &e.name, &ttl, &attr, Generation(0)) {
                self.forget_node(attr.ino.0, 1);
                break;
            }
            added += 1;
        }
        Ok(())
    }
}
