//! A backing file system root cannot bypass: a pass-through FUSE file system over a plain
//! directory that checks permissions itself, as an NFS server exporting with `root_squash`
//! does. Requests by uid 0 are treated as coming from nobody (65534:65534, no groups), new
//! objects belong to the request's (squashed) uid and gid (or the parent's group when it is
//! set-gid), and mode bits are checked against the request's uid, gid and the supplementary
//! groups of the requesting thread (`/proc/PID/status`: FUSE passes no groups). Ownership rules:
//! only the owner may chmod or set times explicitly, nobody may give a file away, the owner
//! may change the group to one of its groups. Entries and attributes are never cached by the
//! kernel (TTL 0), so every lookup is checked. Mounted without `default_permissions`, with
//! `allow_other`. No ACLs, no xattrs, no hard links, no device nodes: not needed by the tests.

use std::collections::HashMap;
use std::ffi::{CString, OsStr};
use std::fs::{File, Metadata, OpenOptions};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    AccessFlags, BsdFileFlags, Config, Errno, FileAttr, FileHandle, FileType, Filesystem,
    FopenFlags, Generation, INodeNo, LockOwner, MountOption, OpenFlags, RenameFlags, ReplyAttr,
    ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyWrite, Request,
    SessionACL, TimeOrNow, WriteFlags,
};

/// The uid and gid root is squashed to.
pub const NOBODY: u32 = 65534;
const TTL: Duration = Duration::ZERO;
const R: u32 = 4;
const W: u32 = 2;
const X: u32 = 1;

/// Who a request acts for, after squashing.
struct Who {
    uid: u32,
    gid: u32,
    groups: Vec<u32>,
}

fn who(req: &Request) -> Who {
    if req.uid() == 0 {
        return Who {
            uid: NOBODY,
            gid: NOBODY,
            groups: Vec::new(),
        };
    }
    let groups = std::fs::read_to_string(format!("/proc/{}/status", req.pid()))
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("Groups:")).map(|g| {
                g.split_whitespace()
                    .filter_map(|v| v.parse().ok())
                    .collect()
            })
        })
        .unwrap_or_default();
    Who {
        uid: req.uid(),
        gid: req.gid(),
        groups,
    }
}

impl Who {
    fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }

    /// Whether the mode bits of `m` grant all of `want` (R|W|X).
    fn may(&self, m: &Metadata, want: u32) -> bool {
        let mode = m.mode();
        let bits = if self.uid == m.uid() {
            (mode >> 6) & 7
        } else if self.in_group(m.gid()) {
            (mode >> 3) & 7
        } else {
            mode & 7
        };
        bits & want == want
    }
}

fn io_errno(e: &std::io::Error) -> Errno {
    Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO))
}

fn kind(m: &Metadata) -> FileType {
    let ft = m.file_type();
    if ft.is_dir() {
        FileType::Directory
    } else if ft.is_symlink() {
        FileType::Symlink
    } else {
        FileType::RegularFile
    }
}

fn time(secs: i64, nsecs: i64) -> SystemTime {
    UNIX_EPOCH + Duration::new(secs.max(0) as u64, nsecs.clamp(0, 999_999_999) as u32)
}

fn attr(ino: u64, m: &Metadata) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: m.size(),
        blocks: m.blocks(),
        atime: time(m.atime(), m.atime_nsec()),
        mtime: time(m.mtime(), m.mtime_nsec()),
        ctime: time(m.ctime(), m.ctime_nsec()),
        crtime: UNIX_EPOCH,
        kind: kind(m),
        perm: (m.mode() & 0o7777) as u16,
        nlink: m.nlink() as u32,
        uid: m.uid(),
        gid: m.gid(),
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap_or_default()
}

/// The root-squashing pass-through.
struct SquashFs {
    /// FUSE node id → path below the lower directory (the root is 1).
    paths: Mutex<HashMap<u64, PathBuf>>,
    files: Mutex<HashMap<u64, File>>,
    next_fh: AtomicU64,
}

type Res<T> = Result<T, Errno>;

/// A setattr request; `opened`: it came through an open file.
struct Change {
    mode: Option<u32>,
    uid: Option<u32>,
    gid: Option<u32>,
    size: Option<u64>,
    atime: Option<TimeOrNow>,
    mtime: Option<TimeOrNow>,
    opened: bool,
}

impl SquashFs {
    fn path(&self, ino: INodeNo) -> Res<PathBuf> {
        self.paths
            .lock()
            .unwrap()
            .get(&ino.0)
            .cloned()
            .ok_or(Errno::ESTALE)
    }

    fn meta(p: &Path) -> Res<Metadata> {
        std::fs::symlink_metadata(p).map_err(|e| io_errno(&e))
    }

    /// Registers `p` and returns its attributes.
    fn node(&self, p: PathBuf) -> Res<FileAttr> {
        let m = Self::meta(&p)?;
        let ino = if m.ino() == 1 { 1 << 40 } else { m.ino() };
        self.paths.lock().unwrap().insert(ino, p);
        Ok(attr(ino, &m))
    }

    /// A parent the caller may add names to or remove names from.
    fn writable_dir(&self, w: &Who, parent: INodeNo) -> Res<(PathBuf, Metadata)> {
        let dir = self.path(parent)?;
        let m = Self::meta(&dir)?;
        if !w.may(&m, W | X) {
            return Err(Errno::EACCES);
        }
        Ok((dir, m))
    }

    /// The sticky-directory rule for removing or replacing `victim` in `dir`.
    fn sticky_ok(w: &Who, dir: &Metadata, victim: &Path) -> bool {
        if dir.mode() & libc::S_ISVTX == 0 {
            return true;
        }
        match std::fs::symlink_metadata(victim) {
            Ok(v) => v.uid() == w.uid || dir.uid() == w.uid,
            Err(_) => true,
        }
    }

    /// Gives a new object to the caller (group from a set-gid parent).
    fn give(w: &Who, p: &Path, parent: &Metadata, mode: Option<u32>) -> Res<()> {
        let sgid = parent.mode() & libc::S_ISGID != 0;
        let gid = if sgid { parent.gid() } else { w.gid };
        std::os::unix::fs::lchown(p, Some(w.uid), Some(gid)).map_err(|e| io_errno(&e))?;
        if let Some(mode) = mode {
            let dir_sgid = if sgid && Self::meta(p)?.is_dir() {
                libc::S_ISGID
            } else {
                0
            };
            std::fs::set_permissions(p, PermissionsExt::from_mode((mode & 0o7777) | dir_sgid))
                .map_err(|e| io_errno(&e))?;
        }
        Ok(())
    }

    fn rename_paths(&self, from: &Path, to: &Path) {
        let mut paths = self.paths.lock().unwrap();
        for p in paths.values_mut() {
            if let Ok(rest) = p.strip_prefix(from) {
                *p = if rest.as_os_str().is_empty() {
                    to.to_path_buf()
                } else {
                    to.join(rest)
                };
            }
        }
    }

    fn add_file(&self, f: File) -> u64 {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.files.lock().unwrap().insert(fh, f);
        fh
    }

    fn do_setattr(&self, w: &Who, ino: INodeNo, ch: Change) -> Res<FileAttr> {
        let Change {
            mode,
            uid,
            gid,
            size,
            atime,
            mtime,
            opened,
        } = ch;
        let p = self.path(ino)?;
        let m = Self::meta(&p)?;
        let owner = w.uid == m.uid();
        if let Some(mode) = mode {
            if !owner {
                return Err(Errno::EPERM);
            }
            std::fs::set_permissions(&p, PermissionsExt::from_mode(mode & 0o7777))
                .map_err(|e| io_errno(&e))?;
        }
        if uid.is_some_and(|u| u != m.uid()) {
            return Err(Errno::EPERM);
        }
        if let Some(g) = gid {
            if g != m.gid() && !(owner && w.in_group(g)) {
                return Err(Errno::EPERM);
            }
            std::os::unix::fs::lchown(&p, None, Some(g)).map_err(|e| io_errno(&e))?;
        }
        if let Some(size) = size {
            // through an open file (ftruncate) the open was the check, as NFS uses the
            // opener's credential then
            if !opened && !w.may(&m, W) {
                return Err(Errno::EACCES);
            }
            let f = OpenOptions::new()
                .write(true)
                .open(&p)
                .map_err(|e| io_errno(&e))?;
            f.set_len(size).map_err(|e| io_errno(&e))?;
        }
        if atime.is_some() || mtime.is_some() {
            let explicit = matches!(atime, Some(TimeOrNow::SpecificTime(_)))
                || matches!(mtime, Some(TimeOrNow::SpecificTime(_)));
            if !owner && (explicit || !w.may(&m, W)) {
                return Err(if explicit {
                    Errno::EPERM
                } else {
                    Errno::EACCES
                });
            }
            let ts = |t: Option<TimeOrNow>| match t {
                None => libc::timespec {
                    tv_sec: 0,
                    tv_nsec: libc::UTIME_OMIT,
                },
                Some(TimeOrNow::Now) => libc::timespec {
                    tv_sec: 0,
                    tv_nsec: libc::UTIME_NOW,
                },
                Some(TimeOrNow::SpecificTime(t)) => {
                    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
                    libc::timespec {
                        tv_sec: d.as_secs() as libc::time_t,
                        tv_nsec: libc::c_long::from(d.subsec_nanos() as i32),
                    }
                }
            };
            let times = [ts(atime), ts(mtime)];
            let c = cpath(&p);
            // SAFETY: `c` is NUL-terminated and `times` points to two timespec values.
            let r = unsafe {
                libc::utimensat(
                    libc::AT_FDCWD,
                    c.as_ptr(),
                    times.as_ptr(),
                    libc::AT_SYMLINK_NOFOLLOW,
                )
            };
            if r != 0 {
                return Err(io_errno(&std::io::Error::last_os_error()));
            }
        }
        self.node(p)
    }
}

fn entry(reply: ReplyEntry, r: Res<FileAttr>) {
    match r {
        Ok(a) => reply.entry(&TTL, &a, Generation(0)),
        Err(e) => reply.error(e),
    }
}

fn empty(reply: ReplyEmpty, r: Res<()>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

impl Filesystem for SquashFs {
    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let w = who(req);
        let r = self.path(parent).and_then(|dir| {
            if !w.may(&Self::meta(&dir)?, X) {
                return Err(Errno::EACCES);
            }
            self.node(dir.join(name))
        });
        entry(reply, r);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.path(ino).and_then(|p| self.node(p)) {
            Ok(a) => reply.attr(&TTL, &a),
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
        let w = who(req);
        let ch = Change {
            mode,
            uid,
            gid,
            size,
            atime,
            mtime,
            opened: fh.is_some(),
        };
        match self.do_setattr(&w, ino, ch) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self
            .path(ino)
            .and_then(|p| std::fs::read_link(p).map_err(|e| io_errno(&e)))
        {
            Ok(t) => reply.data(t.as_os_str().as_bytes()),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let w = who(req);
        let r = self.writable_dir(&w, parent).and_then(|(dir, dm)| {
            let p = dir.join(name);
            std::fs::create_dir(&p).map_err(|e| io_errno(&e))?;
            Self::give(&w, &p, &dm, Some(mode))?;
            self.node(p)
        });
        entry(reply, r);
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let w = who(req);
        let r = self.writable_dir(&w, parent).and_then(|(dir, dm)| {
            let p = dir.join(name);
            if !Self::sticky_ok(&w, &dm, &p) {
                return Err(Errno::EPERM);
            }
            std::fs::remove_file(&p).map_err(|e| io_errno(&e))
        });
        empty(reply, r);
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let w = who(req);
        let r = self.writable_dir(&w, parent).and_then(|(dir, dm)| {
            let p = dir.join(name);
            if !Self::sticky_ok(&w, &dm, &p) {
                return Err(Errno::EPERM);
            }
            std::fs::remove_dir(&p).map_err(|e| io_errno(&e))
        });
        empty(reply, r);
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let w = who(req);
        let r = self.writable_dir(&w, parent).and_then(|(dir, dm)| {
            let p = dir.join(link_name);
            std::os::unix::fs::symlink(target, &p).map_err(|e| io_errno(&e))?;
            Self::give(&w, &p, &dm, None)?;
            self.node(p)
        });
        entry(reply, r);
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
        let w = who(req);
        let r = (|| {
            if flags.bits() != 0 {
                return Err(Errno::EINVAL);
            }
            let (from_dir, fm) = self.writable_dir(&w, parent)?;
            let (to_dir, tm) = self.writable_dir(&w, newparent)?;
            let (from, to) = (from_dir.join(name), to_dir.join(newname));
            if !Self::sticky_ok(&w, &fm, &from) || !Self::sticky_ok(&w, &tm, &to) {
                return Err(Errno::EPERM);
            }
            std::fs::rename(&from, &to).map_err(|e| io_errno(&e))?;
            self.rename_paths(&from, &to);
            Ok(())
        })();
        empty(reply, r);
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let w = who(req);
        let r = self.path(ino).and_then(|p| {
            let m = Self::meta(&p)?;
            let acc = flags.0 & libc::O_ACCMODE;
            let mut want = match acc {
                libc::O_WRONLY => W,
                libc::O_RDWR => R | W,
                _ => R,
            };
            if flags.0 & libc::O_TRUNC != 0 {
                want |= W;
            }
            if !w.may(&m, want) {
                return Err(Errno::EACCES);
            }
            let f = OpenOptions::new()
                .read(acc != libc::O_WRONLY)
                .write(acc != libc::O_RDONLY)
                .truncate(flags.0 & libc::O_TRUNC != 0)
                .open(&p)
                .map_err(|e| io_errno(&e))?;
            Ok(self.add_file(f))
        });
        match r {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::FOPEN_DIRECT_IO),
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
        let files = self.files.lock().unwrap();
        let Some(f) = files.get(&fh.0) else {
            return reply.error(Errno::EBADF);
        };
        let mut buf = vec![0u8; size as usize];
        match f.read_at(&mut buf, offset) {
            Ok(n) => reply.data(&buf[..n]),
            Err(e) => reply.error(io_errno(&e)),
        }
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let files = self.files.lock().unwrap();
        let Some(f) = files.get(&fh.0) else {
            return reply.error(Errno::EBADF);
        };
        match f.write_all_at(data, offset) {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(io_errno(&e)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
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
        self.files.lock().unwrap().remove(&fh.0);
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let files = self.files.lock().unwrap();
        match files.get(&fh.0).map(File::sync_all) {
            Some(Ok(())) => reply.ok(),
            Some(Err(e)) => reply.error(io_errno(&e)),
            None => reply.error(Errno::EBADF),
        }
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let w = who(req);
        let r = self.path(ino).and_then(|p| {
            if w.may(&Self::meta(&p)?, R) {
                Ok(())
            } else {
                Err(Errno::EACCES)
            }
        });
        match r {
            Ok(()) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let p = match self.path(ino) {
            Ok(p) => p,
            Err(e) => return reply.error(e),
        };
        let mut all = vec![
            (ino.0, FileType::Directory, OsStr::new(".").to_owned()),
            (1, FileType::Directory, OsStr::new("..").to_owned()),
        ];
        match std::fs::read_dir(&p) {
            Ok(rd) => {
                for e in rd.flatten() {
                    let Ok(m) = e.metadata() else { continue };
                    all.push((m.ino(), kind(&m), e.file_name()));
                }
            }
            Err(e) => return reply.error(io_errno(&e)),
        }
        for (i, (ino, k, name)) in all.iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(*ino), i as u64 + 1, *k, name) {
                break;
            }
        }
        reply.ok();
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        let w = who(req);
        let r = self.path(ino).and_then(|p| {
            let want = (mask.bits() & 7) as u32;
            if want == 0 || w.may(&Self::meta(&p)?, want) {
                Ok(())
            } else {
                Err(Errno::EACCES)
            }
        });
        empty(reply, r);
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let w = who(req);
        let r = self.writable_dir(&w, parent).and_then(|(dir, dm)| {
            let p = dir.join(name);
            let acc = flags & libc::O_ACCMODE;
            let mut o = OpenOptions::new();
            o.read(acc != libc::O_WRONLY)
                .write(true)
                .mode(mode & 0o7777);
            if flags & libc::O_EXCL != 0 {
                o.create_new(true);
            } else {
                o.create(true);
            }
            let f = o.open(&p).map_err(|e| io_errno(&e))?;
            Self::give(&w, &p, &dm, Some(mode))?;
            let a = self.node(p)?;
            Ok((a, self.add_file(f)))
        });
        match r {
            Ok((a, fh)) => reply.created(
                &TTL,
                &a,
                Generation(0),
                FileHandle(fh),
                FopenFlags::FOPEN_DIRECT_IO,
            ),
            Err(e) => reply.error(e),
        }
    }
}

/// The squashing file system mounted over `lower` on `mnt`; unmounted when dropped.
pub struct SquashMount {
    session: Option<fuser::BackgroundSession>,
    pub mnt: PathBuf,
}

impl SquashMount {
    pub fn new(lower: &Path, mnt: &Path) -> Self {
        let fs = SquashFs {
            paths: Mutex::new(HashMap::from([(1, lower.to_path_buf())])),
            files: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
        };
        let mut config = Config::default();
        config.mount_options = vec![MountOption::FSName("squashtest".to_owned())];
        config.acl = SessionACL::All;
        config.n_threads = Some(2);
        let session = fuser::spawn_mount(fs, mnt, &config).unwrap_or_else(|e| {
            panic!(
                "cannot mount the root-squashing test file system on {} ({e}); \
                 needs root and /dev/fuse",
                mnt.display()
            )
        });
        Self {
            session: Some(session),
            mnt: mnt.to_path_buf(),
        }
    }
}

impl Drop for SquashMount {
    fn drop(&mut self) {
        if let Some(s) = self.session.take() {
            if let Err(e) = s.umount_and_join() {
                eprintln!("unmounting the squash file system failed ({e}); fusermount3 -uz");
                let _ = std::process::Command::new("fusermount3")
                    .arg("-uz")
                    .arg(&self.mnt)
                    .status();
            }
        }
    }
}

/// Runs `script` with `sh -c` as `uid:gid` with supplementary `groups`; returns whether it
/// succeeded and its output.
pub fn run_as(uid: u32, gid: u32, groups: &[u32], script: &str) -> (bool, String) {
    let mut cmd = std::process::Command::new("setpriv");
    cmd.arg(format!("--reuid={uid}"))
        .arg(format!("--regid={gid}"));
    if groups.is_empty() {
        cmd.arg("--clear-groups");
    } else {
        let g: Vec<String> = groups.iter().map(u32::to_string).collect();
        cmd.arg(format!("--groups={}", g.join(",")));
    }
    let out = cmd
        .args(["--", "sh", "-c", script])
        .env("LC_ALL", "C")
        .current_dir("/")
        .output()
        .unwrap_or_else(|e| panic!("cannot run setpriv (util-linux) to act as uid {uid}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}
