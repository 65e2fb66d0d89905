//! The `fuser::Filesystem` implementation: request dispatch and replies.
//!
//! Each trait method is a thin adapter that calls an `op_*` method (in
//! `ops_entry.rs`, `ops_file.rs`, `ops_dir.rs`, `ops_xattr.rs`) returning
//! `Result<_, Errno>` and turns the result into exactly one reply. fuser runs
//! `MountOptions::threads` session threads, each executing requests
//! synchronously; requests that may wait for BACKING's data I/O (a read miss, a
//! write that needs I/O, fsync, fallocate) are handed to the I/O workers
//! (`ops_io.rs`, `iopool.rs`), which reply from their own threads, so the
//! session threads stay free for hits and metadata.
//!
//! Permission model: the mount uses `default_permissions`, so the kernel checks
//! mode bits, POSIX ACLs (`FUSE_POSIX_ACL`), ownership, sticky directories and supplementary groups against
//! the attributes we report, before a request reaches us. Backing calls that check
//! permissions or create objects then run with the caller's fsuid, fsgid and
//! supplementary groups (`creds.rs`), so BACKING checks again with the caller's rights
//! (root-squashed NFS included) and new objects belong to the caller; with
//! `BackingIdentity::Daemon` the daemon acts as itself and `chown`s new objects to the
//! caller (see `ops_entry.rs`).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use fuser::{
    AccessFlags, BsdFileFlags, Errno, FileHandle, Filesystem, FopenFlags, Generation, INodeNo,
    InitFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite,
    ReplyXattr, Request, TimeOrNow, WriteFlags,
};

use crate::creds::{Caller, CredGuard, Identity};
use crate::data::{DataPath, FileHandleInfo};
use crate::inode::{Inode, InodeTable, NodeFd};
use crate::iopool::IoPool;
use crate::kcache::{KernelCache, KernelCacheMode};
use crate::ops_dir::DirHandle;
use crate::writers::Writers;

/// Result type of the `op_*` methods.
pub(crate) type OpResult<T> = Result<T, Errno>;

/// Converts an I/O error to the errno sent to the kernel.
pub(crate) fn errno(e: std::io::Error) -> Errno {
    Errno::from(e)
}

/// Settings of one mounted file system.
#[derive(Debug, Clone)]
pub(crate) struct FsConfig {
    pub(crate) attr_ttl: Duration,
    pub(crate) entry_ttl: Duration,
    /// Handles open for writing from which creates and writable opens wait for pending
    /// releases (`writers.rs`).
    pub(crate) writers_threshold: usize,
}

/// What was negotiated with the kernel at `FUSE_INIT`.
#[derive(Debug, Default)]
pub(crate) struct Negotiated {
    pub(crate) direct_io_allow_mmap: AtomicBool,
    pub(crate) readdirplus: AtomicBool,
}

/// The pass-through file system.
pub(crate) struct TierFs {
    pub(crate) inodes: Arc<InodeTable>,
    pub(crate) data: Arc<dyn DataPath>,
    pub(crate) cfg: FsConfig,
    pub(crate) negotiated: Arc<Negotiated>,
    /// Effective uid of the daemon; new objects are chowned only when root.
    pub(crate) euid: u32,
    /// With whose rights permission-checking and creating backing calls run.
    pub(crate) ident: Identity,
    /// Where requests that may wait are answered (`ops_io.rs`).
    pub(crate) pool: IoPool,
    /// Handles open for writing and their pending releases (backpressure on new ones).
    pub(crate) writers: Arc<Writers>,
    /// Which opens the kernel may cache, and what it may hold (`kcache.rs`).
    pub(crate) kcache: Arc<KernelCache>,
    files: Mutex<HashMap<u64, Arc<FileHandleInfo>>>,
    dirs: Mutex<HashMap<u64, Arc<DirHandle>>>,
    /// Source of file handle numbers (shared by files and directories).
    next_fh: AtomicU64,
}

impl std::fmt::Debug for TierFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TierFs")
            .field("inodes", &self.inodes.len())
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl TierFs {
    pub(crate) fn new(
        inodes: Arc<InodeTable>,
        data: Arc<dyn DataPath>,
        cfg: FsConfig,
        negotiated: Arc<Negotiated>,
        ident: Identity,
        pool: IoPool,
        kcache: Arc<KernelCache>,
    ) -> Self {
        let writers = Arc::new(Writers::new(cfg.writers_threshold));
        Self {
            inodes,
            data,
            cfg,
            negotiated,
            euid: crate::sys::geteuid(),
            ident,
            pool,
            writers,
            kcache,
            files: Mutex::new(HashMap::new()),
            dirs: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
        }
    }

    /// Returns the node `id` or `ESTALE` if the kernel used an unknown id.
    pub(crate) fn inode(&self, id: INodeNo) -> OpResult<Arc<Inode>> {
        self.inodes.get(id.0).ok_or(Errno::ESTALE)
    }

    /// An `O_PATH` descriptor of `node` for the duration of one request.
    pub(crate) fn node_fd(&self, node: &Arc<Inode>) -> OpResult<NodeFd> {
        self.inodes.fd(node).map_err(errno)
    }

    /// Runs the backing calls in `f` as the caller `c` (see `creds.rs`).
    pub(crate) fn as_caller<T>(
        &self,
        c: Caller,
        f: impl FnOnce() -> std::io::Result<T>,
    ) -> OpResult<T> {
        self.ident.run(c, f).map_err(errno)
    }

    /// Acts as the caller `c` until the guard is dropped (`None`: nothing to switch).
    pub(crate) fn caller_guard(&self, c: Caller) -> OpResult<Option<CredGuard>> {
        self.ident.act_as(c).map_err(errno)
    }

    pub(crate) fn alloc_fh(&self) -> u64 {
        self.next_fh.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn insert_file(&self, info: Arc<FileHandleInfo>) {
        lock(&self.files).insert(info.fh, info);
    }

    pub(crate) fn file(&self, fh: FileHandle) -> OpResult<Arc<FileHandleInfo>> {
        lock(&self.files).get(&fh.0).cloned().ok_or(Errno::EBADF)
    }

    pub(crate) fn remove_file(&self, fh: FileHandle) -> Option<Arc<FileHandleInfo>> {
        lock(&self.files).remove(&fh.0)
    }

    pub(crate) fn insert_dir(&self, fh: u64, dir: Arc<DirHandle>) {
        lock(&self.dirs).insert(fh, dir);
    }

    pub(crate) fn dir(&self, fh: FileHandle) -> OpResult<Arc<DirHandle>> {
        lock(&self.dirs).get(&fh.0).cloned().ok_or(Errno::EBADF)
    }

    pub(crate) fn remove_dir(&self, fh: FileHandle) -> Option<Arc<DirHandle>> {
        lock(&self.dirs).remove(&fh.0)
    }

    /// Drops `n` kernel lookups of node `id`, evicting it from the data path
    /// when the node goes away.
    /// The data path's eviction may write back; it runs on an I/O worker, or with the
    /// daemon's rights also when called while acting for a caller (readdirplus).
    pub(crate) fn forget_node(&self, id: u64, n: u64) {
        if self.inodes.forget(id, n) {
            self.kcache.forget(id);
            self.evict_data(id);
        }
    }

    /// Requests one optional init capability, logging when unsupported.
    fn want(config: &mut KernelConfig, flag: InitFlags, name: &str) -> bool {
        match config.add_capabilities(flag) {
            Ok(()) => true,
            Err(_) => {
                log::info!("kernel does not support {name}");
                false
            }
        }
    }
}

impl Filesystem for TierFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let plus = Self::want(config, InitFlags::FUSE_DO_READDIRPLUS, "READDIRPLUS");
        if plus {
            Self::want(config, InitFlags::FUSE_READDIRPLUS_AUTO, "READDIRPLUS_AUTO");
        }
        self.negotiated.readdirplus.store(plus, Ordering::Relaxed);
        // we apply the caller's umask ourselves (per-thread umask), so that
        // default ACLs of the backing directory keep their native meaning
        Self::want(config, InitFlags::FUSE_DONT_MASK, "DONT_MASK");
        // POSIX ACLs: the kernel reads `system.posix_acl_*` through getxattr (passed through
        // to BACKING) and decides with them, as BACKING would; without this flag it checks
        // mode bits only and a named-user deny entry would be bypassed.
        if !Self::want(config, InitFlags::FUSE_POSIX_ACL, "POSIX_ACL") {
            log::warn!("POSIX ACLs on BACKING are not enforced: the kernel lacks FUSE_POSIX_ACL");
        }
        Self::want(config, InitFlags::FUSE_PARALLEL_DIROPS, "PARALLEL_DIROPS");
        // Not FUSE_HANDLE_KILLPRIV(_V2): the kernel clears set-ID bits on truncate, O_TRUNC,
        // chown and cached writes itself; direct-I/O writes are handled in `write` (killpriv.rs).
        // Cached files: drop their pages when an attribute refresh shows another size or
        // mtime (a change behind the mount while the file stays open; `kcache.rs`).
        if self.kcache.mode() != KernelCacheMode::Off {
            Self::want(config, InitFlags::FUSE_AUTO_INVAL_DATA, "AUTO_INVAL_DATA");
        }
        let mmap = Self::want(
            config,
            InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP,
            "DIRECT_IO_ALLOW_MMAP",
        );
        self.negotiated
            .direct_io_allow_mmap
            .store(mmap, Ordering::Relaxed);
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.op_lookup(Caller::of(req), parent, name) {
            Ok(attr) => reply.entry_with_ttls(
                &self.cfg.attr_ttl,
                &self.cfg.entry_ttl,
                &attr,
                Generation(0),
            ),
            Err(e) => reply.error(e),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.forget_node(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.op_getattr(ino, fh) {
            Ok(attr) => reply.attr(&self.cfg.attr_ttl, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let set = crate::ops_entry::SetAttr {
            mode,
            uid,
            gid,
            size,
            atime,
            mtime,
            fh,
        };
        match self.op_setattr(Caller::of(req), ino, &set) {
            Ok(attr) => reply.attr(&self.cfg.attr_ttl, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.op_readlink(ino) {
            Ok(target) => reply.data(&target),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let c = Caller::of(req);
        self.reply_entry(reply, self.op_mknod(c, parent, name, mode, umask, rdev));
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let c = Caller::of(req);
        self.reply_entry(reply, self.op_mkdir(c, parent, name, mode, umask));
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply_empty(reply, self.op_unlink(Caller::of(req), parent, name, 0));
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let c = Caller::of(req);
        reply_empty(reply, self.op_unlink(c, parent, name, libc::AT_REMOVEDIR));
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let c = Caller::of(req);
        self.reply_entry(reply, self.op_symlink(c, parent, link_name, target));
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        reply_empty(
            reply,
            self.op_rename(
                Caller::of(req),
                parent,
                name,
                newparent,
                newname,
                flags.bits(),
            ),
        );
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let c = Caller::of(req);
        self.reply_entry(reply, self.op_link(c, ino, newparent, newname));
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if flags.0 & libc::O_ACCMODE != libc::O_RDONLY {
            self.writers.wait_for_room();
        }
        match self.op_open(Caller::of(req), ino, flags.0) {
            Ok((fh, fopen)) => reply.opened(FileHandle(fh), fopen),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.io_read(fh, offset, size, reply);
    }

    fn write(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        // A direct-I/O write by a caller without CAP_FSETID: clear set-user-ID/set-group-ID
        // first, as the kernel would for a local file (see `killpriv.rs`).
        let kill = write_flags
            .contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID)
            .then(|| (req.pid(), req.gid()));
        self.io_write(fh, offset, data, kill, reply);
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply_empty(reply, self.op_flush(fh));
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.io_release(fh, reply);
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.io_fsync(fh, datasync, reply);
    }

    fn opendir(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        match self.op_opendir(Caller::of(req), ino, flags.0) {
            // No FOPEN_CACHE_DIR: every listing from offset 0 is a readdirplus that brings the
            // attributes along; measured on 200,000 files, walks with the kernel's directory
            // cache were 3x slower (each entry then needs its own LOOKUP once the TTL passed).
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        match self.op_readdir(ino, fh, offset, &mut reply) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn readdirplus(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        match self.op_readdirplus(Caller::of(req), ino, fh, offset, &mut reply) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.remove_dir(fh);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.io_fsyncdir(fh, datasync, reply);
    }

    fn statfs(&self, _req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        match self.op_statfs(ino) {
            Ok(s) => reply.statfs(
                s.f_blocks,
                s.f_bfree,
                s.f_bavail,
                s.f_files,
                s.f_ffree,
                u32::try_from(s.f_bsize).unwrap_or(4096),
                u32::try_from(s.f_namemax).unwrap_or(255),
                u32::try_from(s.f_frsize).unwrap_or(4096),
            ),
            Err(e) => reply.error(e),
        }
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let c = Caller::of(req);
        reply_empty(reply, self.op_setxattr(c, ino, name, value, flags));
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        reply_xattr(
            reply,
            size,
            self.op_getxattr(Caller::of(req), ino, name, size),
        );
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        reply_xattr(reply, size, self.op_listxattr(Caller::of(req), ino, size));
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply_empty(reply, self.op_removexattr(Caller::of(req), ino, name));
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        reply_empty(reply, self.op_access(Caller::of(req), ino, mask.bits()));
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        self.writers.wait_for_room();
        match self.op_create(Caller::of(req), parent, name, mode, umask, flags) {
            Ok((attr, fh, fopen)) => reply.created(
                &self.cfg.entry_ttl,
                &attr,
                Generation(0),
                FileHandle(fh),
                fopen,
            ),
            Err(e) => reply.error(e),
        }
    }

    /// No ioctl is passed through (BACKING's could act on the wrong file system); `ENOTTY` is
    /// what a file without ioctls answers (e.g. the `TCGETS` Python sends on every open).
    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: fuser::IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: fuser::ReplyIoctl,
    ) {
        reply.error(Errno::ENOTTY);
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        self.io_fallocate(fh, offset, length, mode, reply);
    }
}

impl TierFs {
    fn reply_entry(&self, reply: ReplyEntry, res: OpResult<fuser::FileAttr>) {
        match res {
            Ok(attr) => reply.entry_with_ttls(
                &self.cfg.attr_ttl,
                &self.cfg.entry_ttl,
                &attr,
                Generation(0),
            ),
            Err(e) => reply.error(e),
        }
    }
}

fn reply_empty(reply: ReplyEmpty, res: OpResult<()>) {
    match res {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

/// Replies to getxattr/listxattr: the length for a size query, else the data
/// (or `ERANGE` if it does not fit, which the backing call already reports).
fn reply_xattr(reply: ReplyXattr, size: u32, res: OpResult<Vec<u8>>) {
    match res {
        Ok(v) if size == 0 => match u32::try_from(v.len()) {
            Ok(n) => reply.size(n),
            Err(_) => reply.error(Errno::E2BIG),
        },
        Ok(v) if v.len() > size as usize => reply.error(Errno::ERANGE),
        Ok(v) => reply.data(&v),
        Err(e) => reply.error(e),
    }
}
