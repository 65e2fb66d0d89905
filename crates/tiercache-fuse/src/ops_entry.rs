//! Name and attribute operations: lookup, getattr, setattr, node creation,
//! unlink/rmdir, rename, link, readlink, statfs, access.
//!
//! Identity: lookups, creations, removals, renames, links and attribute changes run
//! on BACKING with the caller's fsuid, fsgid and supplementary groups (`creds.rs`), so
//! BACKING checks them with the caller's rights and new objects belong to the caller
//! (group: the caller's fsgid, or the parent's when it is set-gid, as BACKING's file
//! system decides). Node descriptors are obtained before switching (opening by file
//! handle needs the daemon's `CAP_DAC_READ_SEARCH`); nodes are registered after.
//! With `BackingIdentity::Daemon` the daemon creates objects with its own credentials
//! (root) and then `chown`s them to the caller's fsuid and fsgid, or leaves the group
//! alone when the parent directory is set-gid. `chown` clears set-uid/set-gid bits on
//! non-directories, so they are put back afterwards. The caller's umask is applied through a per-thread umask
//! (`sys::thread_umask`), so default ACLs on the backing directory still take
//! precedence as they would natively.

use std::ffi::{CStr, CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;

use fuser::{Errno, FileAttr, FileHandle, INodeNo, TimeOrNow};

use crate::attr::{file_attr, system_time, timespec};
use crate::creds::Caller;
use crate::data::{BackingStamp, TimesOverride};
use crate::fs::{errno, OpResult, TierFs};
use crate::inode::{Inode, NodeFd, ROOT_ID};
use crate::sys;

/// Arguments of a setattr request (only the fields Linux uses).
#[derive(Debug, Default)]
pub(crate) struct SetAttr {
    pub(crate) mode: Option<u32>,
    pub(crate) uid: Option<u32>,
    pub(crate) gid: Option<u32>,
    pub(crate) size: Option<u64>,
    pub(crate) atime: Option<TimeOrNow>,
    pub(crate) mtime: Option<TimeOrNow>,
    pub(crate) fh: Option<FileHandle>,
}

/// Per-request umask handling, see [`sys::thread_umask`].
pub(crate) struct Umask {
    /// `Some(mask)` when the thread could not get a private umask and the
    /// mode must be fixed up after creation.
    manual: Option<u32>,
}

impl Umask {
    pub(crate) fn apply(mask: u32) -> Self {
        let manual = (!sys::thread_umask(mask)).then_some(mask);
        Self { manual }
    }

    /// Restores the intended mode if the umask had to be applied by hand.
    pub(crate) fn fix_mode(&self, fd: RawFd, mode: u32) -> std::io::Result<()> {
        match self.manual {
            Some(mask) => sys::chmod_fd(fd, mode & !mask & 0o7777),
            None => Ok(()),
        }
    }
}

impl TierFs {
    /// Builds the attributes of node `id` from `st`, a backing stat taken
    /// through `fd`, and the data path's overrides.
    ///
    /// The overrides are asked after `st` was taken, and the data path may
    /// have written data back in between (extending BACKING and dropping its
    /// size override, or applying its modification time): size and times
    /// without override are then taken from a fresh stat, made after the
    /// query. (Using `st` would report a size or mtime older than both the
    /// backing file's and the data path's, e.g. a file that shrinks while it
    /// is appended to.)
    pub(crate) fn attr_of(&self, id: u64, st: &libc::stat, fd: RawFd) -> FileAttr {
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return file_attr(id, st, None, TimesOverride::default());
        }
        let size = self.data.size_override(id);
        let times = self
            .data
            .times_override(id, system_time(st.st_ctime, st.st_ctime_nsec));
        if size.is_none() || times.mtime.is_none() {
            if let Ok(fresh) = sys::fstat(fd) {
                return file_attr(id, &fresh, size, times);
            }
        }
        file_attr(id, st, size, times)
    }

    /// Registers a kernel lookup of the backing inode behind `fd`.
    pub(crate) fn register(&self, fd: OwnedFd) -> OpResult<FileAttr> {
        let st = sys::fstat(fd.as_raw_fd()).map_err(errno)?;
        let node = self.inodes.lookup(fd, &st);
        match self.node_fd(&node) {
            Ok(nfd) => Ok(self.attr_of(node.id, &st, nfd.raw())),
            Err(e) => {
                self.forget_node(node.id, 1);
                Err(e)
            }
        }
    }

    pub(crate) fn op_lookup(&self, c: Caller, parent: INodeNo, name: &OsStr) -> OpResult<FileAttr> {
        let dir = self.inode(parent)?;
        let dfd = self.node_fd(&dir)?;
        if !dir.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        // the kernel resolves "." and ".." itself; never let ".." leave BACKING
        if name == ".." && dir.id == ROOT_ID || name == "." {
            let st = sys::fstat(dfd.raw()).map_err(errno)?;
            let node = self.inodes.add_lookup(dir.id).ok_or(Errno::ESTALE)?;
            return Ok(self.attr_of(node.id, &st, dfd.raw()));
        }
        let cname = sys::name_cstr(name).map_err(errno)?;
        // as the caller: BACKING checks search permission on the directory
        let fd = self.as_caller(c, || {
            self.inodes
                .retry("lookup", || sys::open_path_at(dfd.raw(), &cname))
        })?;
        self.register(fd)
    }

    pub(crate) fn op_getattr(&self, ino: INodeNo, fh: Option<FileHandle>) -> OpResult<FileAttr> {
        let node = self.inode(ino)?;
        let nfd = self.node_fd(&node)?;
        let st = match fh.and_then(|fh| self.file(fh).ok()) {
            Some(f) => sys::fstat(f.file.as_raw_fd()),
            None => sys::fstat(nfd.raw()),
        }
        .map_err(errno)?;
        Ok(self.attr_of(node.id, &st, nfd.raw()))
    }

    pub(crate) fn op_setattr(&self, c: Caller, ino: INodeNo, set: &SetAttr) -> OpResult<FileAttr> {
        let node = self.inode(ino)?;
        let nfd = self.node_fd(&node)?;
        let fd = nfd.raw();
        // ownership and permission are BACKING's to check, with the caller's rights
        if set.mode.is_some() || set.uid.is_some() || set.gid.is_some() {
            self.meta_change(&node, Some(&nfd), &mut || {
                if let Some(mode) = set.mode {
                    self.set_mode(c, fd, mode & 0o7777).map_err(io_error)?;
                }
                if set.uid.is_some() || set.gid.is_some() {
                    let uid = set.uid.unwrap_or(u32::MAX);
                    let gid = set.gid.unwrap_or(u32::MAX);
                    self.ident.run(c, || sys::chown_fd(fd, uid, gid))?;
                }
                Ok(())
            })
            .map_err(errno)?;
        }
        if let Some(size) = set.size {
            self.truncate_node(c, &node, &nfd, set.fh, size)?;
        }
        if set.atime.is_some() || set.mtime.is_some() {
            let times = [timespec(set.atime), timespec(set.mtime)];
            let mut apply = || self.ident.run(c, || sys::utimens_fd(fd, &times));
            if node.is_reg() {
                // the data path may hold writes whose write-back would move the mtime
                self.data
                    .set_times(node.id, set.mtime.is_some(), &mut apply, &mut || {
                        snapshot(fd)
                    })
                    .map_err(errno)?;
            } else {
                apply().map_err(errno)?;
            }
        }
        let st = sys::fstat(fd).map_err(errno)?;
        Ok(self.attr_of(node.id, &st, fd))
    }

    /// chmod as the caller. A change that only clears set-user-ID/set-group-ID which BACKING
    /// refuses the caller is the kernel's own clearing on a write, truncate or `O_TRUNC` open
    /// by a non-owner (`default_permissions` refused any other chmod by a non-owner before it
    /// reached us; the kernel does it with `ATTR_FORCE`): that one is made as the daemon.
    fn set_mode(&self, c: Caller, fd: RawFd, mode: u32) -> OpResult<()> {
        match self.as_caller(c, || sys::chmod_fd(fd, mode)) {
            Err(e) if e == Errno::EPERM && self.ident.per_caller() => {
                let old = sys::fstat(fd).map_err(errno)?.st_mode & 0o7777;
                let setid = libc::S_ISUID | libc::S_ISGID;
                let only_clears_setid =
                    mode != old && mode & !old == 0 && (old ^ mode) & !setid == 0;
                if only_clears_setid {
                    sys::chmod_fd(fd, mode).map_err(errno)
                } else {
                    Err(e)
                }
            }
            res => res,
        }
    }

    /// Truncates through the data path, using the handle's backing file when
    /// the request came with a writable handle (ftruncate), else a temporary
    /// write-only descriptor (truncate(2)).
    fn truncate_node(
        &self,
        c: Caller,
        node: &Inode,
        nfd: &NodeFd,
        fh: Option<FileHandle>,
        size: u64,
    ) -> OpResult<()> {
        if node.is_dir() {
            return Err(Errno::EISDIR);
        }
        if !node.is_reg() {
            return Err(Errno::EINVAL);
        }
        if let Some(h) = fh.and_then(|fh| self.file(fh).ok()) {
            if h.flags & libc::O_ACCMODE != libc::O_RDONLY {
                return self.data.truncate(node.id, &h.file, size).map_err(errno);
            }
        }
        // opened as the caller (BACKING checks write permission); truncated as the daemon
        let file = self.as_caller(c, || {
            self.inodes.retry("truncate", || {
                sys::reopen(nfd.raw(), libc::O_WRONLY | libc::O_NONBLOCK)
            })
        })?;
        self.data.truncate(node.id, &file, size).map_err(errno)
    }

    /// Gives a freshly created object (`fd`, may be `O_PATH`) to the caller.
    /// `parent_sgid` tells whether the group was inherited from the parent. Nothing to do
    /// when the object was created as the caller.
    pub(crate) fn chown_new(&self, c: Caller, fd: RawFd, parent_sgid: bool) -> OpResult<()> {
        if !self.chowns_new() {
            return Ok(()); // created as the caller, or an unprivileged daemon
        }
        let gid = if parent_sgid { u32::MAX } else { c.gid };
        if c.uid == 0 && (gid == u32::MAX || gid == 0) {
            return Ok(()); // already owned by root:root (or root:<inherited>)
        }
        let before = sys::fstat(fd).map_err(errno)?;
        sys::chown_fd(fd, c.uid, gid).map_err(errno)?;
        let fmt = before.st_mode & libc::S_IFMT;
        if before.st_mode & 0o6000 != 0 && fmt != libc::S_IFDIR && fmt != libc::S_IFLNK {
            sys::chmod_fd(fd, before.st_mode & 0o7777).map_err(errno)?;
        }
        Ok(())
    }

    /// Parent directory node plus whether it is set-gid, which only [`TierFs::chown_new`]
    /// asks (else `false`, without the `fstat`).
    pub(crate) fn parent_dir(&self, parent: INodeNo) -> OpResult<(Arc<Inode>, NodeFd, bool)> {
        let dir = self.inode(parent)?;
        let dfd = self.node_fd(&dir)?;
        if !dir.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        if !self.chowns_new() {
            return Ok((dir, dfd, false));
        }
        let st = sys::fstat(dfd.raw()).map_err(errno)?;
        Ok((dir, dfd, st.st_mode & libc::S_ISGID != 0))
    }

    /// Whether new objects are made as the daemon and `chown`ed to the caller.
    fn chowns_new(&self) -> bool {
        self.euid == 0 && !self.ident.per_caller()
    }

    /// Common tail of mknod/mkdir/symlink, called as the caller: open the new name and hand
    /// it to the caller. On failure the new name is removed again. The result is registered
    /// (as the daemon) by the caller of this function.
    fn finish_new(
        &self,
        c: Caller,
        dfd: &NodeFd,
        sgid: bool,
        cname: &CString,
        umask: Option<(&Umask, u32)>,
    ) -> OpResult<OwnedFd> {
        let res = self
            .inodes
            .retry("create", || sys::open_path_at(dfd.raw(), cname))
            .map_err(errno)
            .and_then(|fd| {
                if let Some((u, mode)) = umask {
                    u.fix_mode(fd.as_raw_fd(), mode).map_err(errno)?;
                }
                self.chown_new(c, fd.as_raw_fd(), sgid)?;
                Ok(fd)
            });
        match res {
            Ok(fd) => Ok(fd),
            Err(e) => {
                let st =
                    sys::open_path_at(dfd.raw(), cname).and_then(|fd| sys::fstat(fd.as_raw_fd()));
                let flag = match st {
                    Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFDIR => libc::AT_REMOVEDIR,
                    _ => 0,
                };
                if let Err(e2) = sys::unlink_at(dfd.raw(), cname, flag) {
                    log::warn!("cannot remove half-created {cname:?}: {e2}");
                }
                Err(e)
            }
        }
    }

    pub(crate) fn op_mknod(
        &self,
        c: Caller,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
    ) -> OpResult<FileAttr> {
        let (_dir, dfd, sgid) = self.parent_dir(parent)?;
        let cname = sys::name_cstr(name).map_err(errno)?;
        let u = Umask::apply(umask);
        let fd = {
            let _as_caller = self.caller_guard(c)?;
            sys::mknod_at(dfd.raw(), &cname, mode, u64::from(rdev)).map_err(errno)?;
            self.finish_new(c, &dfd, sgid, &cname, Some((&u, mode)))?
        };
        self.register(fd)
    }

    pub(crate) fn op_mkdir(
        &self,
        c: Caller,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
    ) -> OpResult<FileAttr> {
        let (_dir, dfd, sgid) = self.parent_dir(parent)?;
        let cname = sys::name_cstr(name).map_err(errno)?;
        let u = Umask::apply(umask);
        let fd = {
            let _as_caller = self.caller_guard(c)?;
            sys::mkdir_at(dfd.raw(), &cname, mode).map_err(errno)?;
            self.finish_new(c, &dfd, sgid, &cname, Some((&u, mode)))?
        };
        self.register(fd)
    }

    pub(crate) fn op_symlink(
        &self,
        c: Caller,
        parent: INodeNo,
        name: &OsStr,
        target: &Path,
    ) -> OpResult<FileAttr> {
        let (_dir, dfd, sgid) = self.parent_dir(parent)?;
        let cname = sys::name_cstr(name).map_err(errno)?;
        let ctarget = sys::bytes_cstr(target.as_os_str().as_bytes()).map_err(errno)?;
        let fd = {
            let _as_caller = self.caller_guard(c)?;
            sys::symlink_at(&ctarget, dfd.raw(), &cname).map_err(errno)?;
            self.finish_new(c, &dfd, sgid, &cname, None)?
        };
        self.register(fd)
    }

    pub(crate) fn op_link(
        &self,
        c: Caller,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
    ) -> OpResult<FileAttr> {
        let node = self.inode(ino)?;
        let nfd = self.node_fd(&node)?;
        let dir = self.inode(newparent)?;
        let dfd = self.node_fd(&dir)?;
        let cname = sys::name_cstr(newname).map_err(errno)?;
        self.meta_change(&node, Some(&nfd), &mut || {
            self.ident
                .run(c, || sys::link_fd(nfd.raw(), dfd.raw(), &cname))
        })
        .map_err(errno)?;
        // the kernel now holds one more reference to the same node
        let node = self.inodes.add_lookup(node.id).ok_or(Errno::ESTALE)?;
        let st = sys::fstat(nfd.raw()).map_err(errno)?;
        Ok(self.attr_of(node.id, &st, nfd.raw()))
    }

    pub(crate) fn op_unlink(
        &self,
        c: Caller,
        parent: INodeNo,
        name: &OsStr,
        flags: i32,
    ) -> OpResult<()> {
        let dir = self.inode(parent)?;
        let dfd = self.node_fd(&dir)?;
        let cname = sys::name_cstr(name).map_err(errno)?;
        // a file with more names (or still open) keeps living, its ctime moved
        let files: Vec<_> = (flags & libc::AT_REMOVEDIR == 0)
            .then(|| self.reg_node_at(dfd.raw(), &cname))
            .flatten()
            .into_iter()
            .collect();
        self.meta_change_all(&files, &mut || {
            self.ident
                .run(c, || sys::unlink_at(dfd.raw(), &cname, flags))
        })
        .map_err(errno)
    }

    pub(crate) fn op_rename(
        &self,
        c: Caller,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: u32,
    ) -> OpResult<()> {
        let old = self.inode(parent)?;
        let ofd = self.node_fd(&old)?;
        let new = self.inode(newparent)?;
        let nwfd = self.node_fd(&new)?;
        let oldc = sys::name_cstr(name).map_err(errno)?;
        let newc = sys::name_cstr(newname).map_err(errno)?;
        // the renamed file's ctime moves, and that of a file the new name replaced (or, with
        // RENAME_EXCHANGE, moved); ascending ids, one lock order for the data path
        let mut files: Vec<_> = [
            self.reg_node_at(ofd.raw(), &oldc),
            self.reg_node_at(nwfd.raw(), &newc),
        ]
        .into_iter()
        .flatten()
        .collect();
        files.sort_by_key(|n| n.id);
        files.dedup_by_key(|n| n.id);
        self.meta_change_all(&files, &mut || {
            self.ident.run(c, || {
                sys::rename_at2(ofd.raw(), &oldc, nwfd.raw(), &newc, flags)
            })
        })
        .map_err(errno)
    }

    /// The node of `name` in directory `dfd` when it is a regular file the kernel knows (a
    /// name it unlinks or renames was looked up first).
    fn reg_node_at(&self, dfd: RawFd, name: &CStr) -> Option<Arc<Inode>> {
        let st = sys::fstat_at(dfd, name).ok()?;
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return None;
        }
        self.inodes
            .get_by_key((st.st_dev, st.st_ino))
            .filter(|n| n.is_reg())
    }

    /// Runs `apply`, a change of `node`'s metadata on BACKING (not its data), through the data
    /// path when `node` is a regular file, so the change time it moves is recorded there
    /// (`DataPath::change_metadata`). `nfd`: a descriptor of the node, if the caller has one;
    /// else one is taken before `apply` (an unlinked inode may not be opened by handle after).
    pub(crate) fn meta_change(
        &self,
        node: &Arc<Inode>,
        nfd: Option<&NodeFd>,
        apply: &mut dyn FnMut() -> io::Result<()>,
    ) -> io::Result<()> {
        if !node.is_reg() {
            return apply();
        }
        let own;
        let nfd = match nfd {
            Some(fd) => Some(fd),
            None => {
                own = self.node_fd(node).ok();
                own.as_ref()
            }
        };
        let mut stat = || match nfd {
            Some(fd) => snapshot(fd.raw()),
            None => snapshot(self.inodes.fd(node)?.raw()),
        };
        self.data.change_metadata(node.id, apply, &mut stat)
    }

    /// [`TierFs::meta_change`] for several regular files at once (in the order given).
    fn meta_change_all(
        &self,
        nodes: &[Arc<Inode>],
        apply: &mut dyn FnMut() -> io::Result<()>,
    ) -> io::Result<()> {
        match nodes.split_first() {
            None => apply(),
            Some((node, rest)) => {
                self.meta_change(node, None, &mut || self.meta_change_all(rest, apply))
            }
        }
    }

    pub(crate) fn op_readlink(&self, ino: INodeNo) -> OpResult<Vec<u8>> {
        let node = self.inode(ino)?;
        let nfd = self.node_fd(&node)?;
        sys::readlink_fd(nfd.raw()).map_err(errno)
    }

    pub(crate) fn op_statfs(&self, ino: INodeNo) -> OpResult<libc::statvfs> {
        let node = self.inode(ino).or_else(|_| self.inode(INodeNo(ROOT_ID)))?;
        let nfd = self.node_fd(&node)?;
        sys::fstatvfs(nfd.raw()).map_err(errno)
    }

    /// `access(2)`. With `default_permissions` the kernel answers access()
    /// itself and never sends this. Acting as the caller, BACKING answers (`faccessat` with
    /// `AT_EACCESS` checks with the fsuid, fsgid and groups); else mode bits only.
    pub(crate) fn op_access(&self, c: Caller, ino: INodeNo, mask: i32) -> OpResult<()> {
        let node = self.inode(ino)?;
        let nfd = self.node_fd(&node)?;
        if self.ident.per_caller() {
            return self.as_caller(c, || sys::access_fd(nfd.raw(), mask));
        }
        let st = sys::fstat(nfd.raw()).map_err(errno)?;
        if mask == libc::F_OK {
            return Ok(());
        }
        let mode = st.st_mode;
        if c.uid == 0 {
            let any_x = mode & 0o111 != 0 || mode & libc::S_IFMT == libc::S_IFDIR;
            return if mask & libc::X_OK != 0 && !any_x {
                Err(Errno::EACCES)
            } else {
                Ok(())
            };
        }
        let bits = if c.uid == st.st_uid {
            (mode >> 6) & 7
        } else if c.gid == st.st_gid {
            (mode >> 3) & 7
        } else {
            mode & 7
        };
        let want = (mask & 7) as u32;
        if bits & want == want {
            Ok(())
        } else {
            Err(Errno::EACCES)
        }
    }
}

/// The stamp of the backing inode behind `fd` (an `O_PATH` descriptor will do).
fn snapshot(fd: RawFd) -> io::Result<BackingStamp> {
    sys::fstat(fd).map(|st| BackingStamp::of(&st))
}

/// Back from the errno of an `op_*` to an I/O error (inside a data path callback).
pub(crate) fn io_error(e: Errno) -> io::Error {
    io::Error::from_raw_os_error(e.code())
}
