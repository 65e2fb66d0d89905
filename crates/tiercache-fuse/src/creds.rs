//! Acting on BACKING with the caller's identity.
//!
//! With [`BackingIdentity::Caller`] (the default when the daemon runs as root) every backing
//! call that checks permissions or creates an object runs on the serving thread with the
//! caller's file-system uid and gid and the caller's supplementary groups, the way virtiofsd
//! does it: raw `setfsuid`/`setfsgid`/`setgroups` system calls, which change only the calling
//! thread's credentials (glibc's `setgroups` would change every thread of the process). Leaving
//! fsuid 0 makes the kernel drop the file-system capabilities (`CAP_DAC_OVERRIDE`,
//! `CAP_DAC_READ_SEARCH`, `CAP_FOWNER`, `CAP_FSETID`, `CAP_CHOWN`, `CAP_MKNOD`...) from the
//! thread's effective set, and going back to fsuid 0 raises them again; the daemon keeps
//! `CAP_SETUID`/`CAP_SETGID` throughout, so it can always switch back. BACKING therefore decides
//! with the caller's rights (mode bits, ACLs, NFS `root_squash` or a server's own checks), and
//! new objects belong to the caller without a `chown`.
//!
//! [`CredGuard`] is the RAII switch: made by [`Identity::act_as`], it restores the daemon's
//! credentials when dropped, on every path. Code that must act as the daemon while a guard is
//! active (opening an inode by file handle needs `CAP_DAC_READ_SEARCH`) runs through
//! [`as_daemon`]. A restore that fails aborts the process: a serving thread must never go on
//! with a caller's identity.
//!
//! Supplementary groups come from `/proc/TID/status` of the requesting thread (FUSE passes
//! only fsuid, fsgid and the thread id), read afresh for every request that switches, through
//! a descriptor kept open per caller thread (`callers`): a group the caller dropped is gone at
//! its next request, and a reused thread or process id never inherits another's groups. When
//! the thread is gone, belongs to another PID namespace (pid 0), or no longer has the
//! fsuid/fsgid of the request, only the request's gid is used. A status that cannot be read
//! for another reason (out of descriptors) fails the request rather than guess the groups.

use std::cell::RefCell;
use std::io;
use std::marker::PhantomData;
use std::sync::Arc;

use crate::callers::StatusFiles;
use crate::error::FuseError;

/// With whose rights backing operations that check permissions or create objects run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackingIdentity {
    /// `Caller` when the daemon runs as root, else `Daemon`.
    #[default]
    Auto,
    /// The caller's fsuid, fsgid and supplementary groups (needs root: `CAP_SETUID`,
    /// `CAP_SETGID`); new objects belong to the caller on BACKING.
    Caller,
    /// The daemon's own credentials; new objects are `chown`ed to the caller when the daemon
    /// is root (BACKING must then let root bypass its permissions, i.e. no root squash).
    Daemon,
}

/// The identity the switch is tried with at mount time.
const NOBODY: u32 = 65534;

/// The identity a FUSE request came with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Caller {
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) pid: u32,
}

impl Caller {
    pub(crate) fn of(req: &fuser::Request) -> Self {
        Self {
            uid: req.uid(),
            gid: req.gid(),
            pid: req.pid(),
        }
    }
}

/// Credentials of a thread acting for a caller.
#[derive(Debug, Clone)]
struct Creds {
    uid: u32,
    gid: u32,
    groups: Arc<[u32]>,
}

thread_local! {
    /// The caller this thread acts as, while a [`CredGuard`] lives.
    static ACTING: RefCell<Option<Creds>> = const { RefCell::new(None) };
}

/// The daemon's own credentials, restored after each switch.
#[derive(Debug, Clone)]
struct DaemonCreds {
    gid: u32,
    groups: Arc<[u32]>,
}

/// The per-mount policy plus the callers' status files.
#[derive(Debug)]
pub(crate) struct Identity {
    /// `None`: act as the daemon.
    daemon: Option<DaemonCreds>,
    status: StatusFiles,
}

fn cvt(ret: libc::c_long) -> io::Result<libc::c_long> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Sets this thread's fsuid; `setfsuid` reports no error, so the value is read back.
fn set_fsuid(uid: u32) -> io::Result<()> {
    // SAFETY: setfsuid takes an integer and changes only the calling thread's credentials.
    unsafe { libc::syscall(libc::SYS_setfsuid, libc::c_long::from(uid)) };
    // SAFETY: an invalid id (-1) changes nothing and returns the current fsuid.
    let now = unsafe { libc::syscall(libc::SYS_setfsuid, -1 as libc::c_long) };
    if now == libc::c_long::from(uid) {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(libc::EPERM))
    }
}

/// Sets this thread's fsgid, read back as for [`set_fsuid`].
fn set_fsgid(gid: u32) -> io::Result<()> {
    // SAFETY: setfsgid takes an integer and changes only the calling thread's credentials.
    unsafe { libc::syscall(libc::SYS_setfsgid, libc::c_long::from(gid)) };
    // SAFETY: an invalid id (-1) changes nothing and returns the current fsgid.
    let now = unsafe { libc::syscall(libc::SYS_setfsgid, -1 as libc::c_long) };
    if now == libc::c_long::from(gid) {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(libc::EPERM))
    }
}

/// Sets this thread's supplementary groups (the raw system call is per thread).
fn set_groups(groups: &[u32]) -> io::Result<()> {
    // SAFETY: `groups` is valid for `groups.len()` gid_t (u32) values; the call copies them
    // and changes only the calling thread's credentials.
    cvt(unsafe {
        libc::syscall(
            libc::SYS_setgroups,
            groups.len() as libc::c_long,
            groups.as_ptr(),
        )
    })
    .map(drop)
}

/// The process's supplementary groups.
fn get_groups() -> io::Result<Vec<u32>> {
    // SAFETY: a size of 0 only asks for the count.
    let n = cvt(libc::c_long::from(unsafe {
        libc::getgroups(0, std::ptr::null_mut())
    }))?;
    let mut v = vec![0u32; usize::try_from(n).unwrap_or(0)];
    // SAFETY: `v` has room for `v.len()` gid_t values.
    let n = cvt(libc::c_long::from(unsafe {
        libc::getgroups(libc::c_int::try_from(v.len()).unwrap_or(0), v.as_mut_ptr())
    }))?;
    v.truncate(usize::try_from(n).unwrap_or(0));
    Ok(v)
}

/// Switches this thread to `c` (groups first, uid last: fsuid 0 keeps the capabilities needed
/// for the other two). On error the daemon's credentials are back.
fn switch_to(c: &Creds, d: &DaemonCreds) -> io::Result<()> {
    let res = set_groups(&c.groups)
        .and_then(|()| set_fsgid(c.gid))
        .and_then(|()| set_fsuid(c.uid));
    if res.is_err() {
        restore(d);
    }
    res
}

/// Puts the daemon's credentials back, or aborts: a thread must not serve on as a caller.
fn restore(d: &DaemonCreds) {
    let res = set_fsuid(0)
        .and_then(|()| set_fsgid(d.gid))
        .and_then(|()| set_groups(&d.groups));
    if let Err(e) = res {
        log::error!("cannot restore the daemon's credentials on a serving thread: {e}; aborting");
        std::process::abort();
    }
}

/// Restores the daemon's credentials when dropped. Not `Send`: credentials are per thread.
#[derive(Debug)]
pub(crate) struct CredGuard {
    daemon: DaemonCreds,
    _thread: PhantomData<*const ()>,
}

impl Drop for CredGuard {
    fn drop(&mut self) {
        ACTING.with(|a| a.borrow_mut().take());
        restore(&self.daemon);
    }
}

/// Runs `f` with the daemon's credentials, also while this thread acts for a caller (then
/// switching back to the caller afterwards).
pub(crate) fn as_daemon<T>(f: impl FnOnce() -> T) -> T {
    let acting = ACTING.with(|a| a.borrow().clone());
    let Some(c) = acting else {
        return f();
    };
    // fsuid 0 brings the file-system capabilities back, which is all the daemon-only calls
    // (open by handle) need; fsgid and groups stay the caller's meanwhile
    if let Err(e) = set_fsuid(0) {
        log::error!("cannot switch back to the daemon's fsuid: {e}; aborting");
        std::process::abort();
    }
    let out = f();
    if let Err(e) = set_fsuid(c.uid) {
        log::error!("cannot switch back to the caller's fsuid: {e}; aborting");
        std::process::abort();
    }
    out
}

/// Parses `/proc/PID/status`: the supplementary groups when the process's fsuid and fsgid
/// are `uid` and `gid`, else `None`.
pub(crate) fn groups_from_status(status: &str, uid: u32, gid: u32) -> Option<Vec<u32>> {
    let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name));
    // "Uid:\treal\teffective\tsaved\tfs"
    let fs_id = |name: &str| {
        field(name)
            .and_then(|v| v.split_whitespace().nth(3))
            .and_then(|v| v.parse::<u32>().ok())
    };
    if fs_id("Uid:")? != uid || fs_id("Gid:")? != gid {
        return None;
    }
    let groups = field("Groups:")?;
    groups
        .split_whitespace()
        .map(|g| g.parse::<u32>().ok())
        .collect()
}

impl Identity {
    /// The identity policy of a mount; `Caller` needs a root daemon. At most `status_fds`
    /// callers' status files are kept open (see `callers`).
    pub(crate) fn new(mode: BackingIdentity, status_fds: usize) -> Result<Self, FuseError> {
        let root = crate::sys::geteuid() == 0;
        let caller = match mode {
            BackingIdentity::Auto => root,
            BackingIdentity::Caller if !root => return Err(FuseError::CallerIdentityNeedsRoot),
            BackingIdentity::Caller => true,
            BackingIdentity::Daemon => false,
        };
        let daemon = if caller {
            match Self::probe() {
                Ok(d) => Some(d),
                Err(e) if mode == BackingIdentity::Auto => {
                    log::warn!(
                        "cannot act as the caller on BACKING ({e}); acting as the daemon, \
                         new files are chowned to their creator"
                    );
                    None
                }
                Err(e) => return Err(FuseError::CallerIdentityUnavailable(e)),
            }
        } else {
            None
        };
        Ok(Self {
            daemon,
            status: StatusFiles::new(status_fds),
        })
    }

    /// The daemon's credentials, once a scratch thread could switch to another identity (a
    /// root without `CAP_SETUID`/`CAP_SETGID`, e.g. in some containers, cannot). The scratch
    /// thread ends with the identity it switched to: nothing to restore.
    fn probe() -> io::Result<DaemonCreds> {
        let groups = get_groups()?;
        // SAFETY: getegid has no failure mode.
        let gid = unsafe { libc::getegid() };
        let tried = std::thread::spawn(|| {
            set_groups(&[])
                .and_then(|()| set_fsgid(NOBODY))
                .and_then(|()| set_fsuid(NOBODY))
        })
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("probe thread panicked")));
        tried?;
        Ok(DaemonCreds {
            gid,
            groups: groups.into(),
        })
    }

    /// Whether backing calls run with the caller's identity.
    pub(crate) fn per_caller(&self) -> bool {
        self.daemon.is_some()
    }

    /// Supplementary groups of `c` as of now (see the module docs).
    fn groups_of(&self, c: Caller) -> io::Result<Arc<[u32]>> {
        if c.pid == 0 {
            return Ok(Arc::from(Vec::new()));
        }
        self.status.with_status(c.pid, |status| {
            // gone, or changed its fsuid/fsgid since: the request's gid only
            status
                .and_then(|s| groups_from_status(s, c.uid, c.gid))
                .unwrap_or_default()
                .into()
        })
    }

    /// Switches this thread to the caller `c` until the guard is dropped; `None` when backing
    /// calls run as the daemon, or the caller is root:root (nothing to change).
    pub(crate) fn act_as(&self, c: Caller) -> io::Result<Option<CredGuard>> {
        let Some(d) = &self.daemon else {
            return Ok(None);
        };
        if c.uid == 0 && c.gid == 0 {
            return Ok(None);
        }
        if ACTING.with(|a| a.borrow().is_some()) {
            // nested: the outer guard already acts for this request's caller
            return Ok(None);
        }
        let creds = Creds {
            uid: c.uid,
            gid: c.gid,
            groups: self.groups_of(c)?,
        };
        switch_to(&creds, d)?;
        ACTING.with(|a| *a.borrow_mut() = Some(creds));
        Ok(Some(CredGuard {
            daemon: d.clone(),
            _thread: PhantomData,
        }))
    }

    /// Runs `f` as the caller `c` (see [`Identity::act_as`]).
    pub(crate) fn run<T>(&self, c: Caller, f: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
        let _guard = self.act_as(c)?;
        f()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn status_groups_only_for_the_same_fs_ids() {
        let status = "Name:\tx\nUid:\t1000\t1000\t1000\t1000\nGid:\t100\t100\t100\t100\n\
                      Groups:\t4 24 100 \n";
        assert_eq!(
            groups_from_status(status, 1000, 100),
            Some(vec![4, 24, 100])
        );
        assert_eq!(groups_from_status(status, 1001, 100), None);
        assert_eq!(groups_from_status(status, 1000, 101), None);
        let none = "Uid:\t1\t1\t1\t1\nGid:\t2\t2\t2\t2\nGroups:\t\n";
        assert_eq!(groups_from_status(none, 1, 2), Some(vec![]));
    }

    #[test]
    fn acting_as_the_daemon_switches_nothing() {
        let id = Identity::new(BackingIdentity::Daemon, 8).unwrap();
        assert!(!id.per_caller());
        let c = Caller {
            uid: 4321,
            gid: 4322,
            pid: 0,
        };
        assert!(id.act_as(c).unwrap().is_none());
    }

    /// The switch is per thread: another thread of the process keeps root's fsuid.
    #[test]
    fn guard_switches_this_thread_only_and_restores() {
        assert_eq!(
            crate::sys::geteuid(),
            0,
            "this test switches a thread's fsuid and needs root; run it as root"
        );
        let id = Identity::new(BackingIdentity::Caller, 8).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("mine");
        let (switched_tx, switched_rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let (id, p, root) = (&id, &p, dir.path());
        std::thread::scope(|s| {
            s.spawn(move || {
                let c = Caller {
                    uid: 4321,
                    gid: 4322,
                    pid: 0,
                };
                let g = id.act_as(c).unwrap();
                assert!(g.is_some());
                // the tempdir is 0700 root: as uid 4321 creating inside must fail
                let e = std::fs::write(p, b"x").unwrap_err();
                assert_eq!(e.raw_os_error(), Some(libc::EACCES));
                switched_tx.send(()).unwrap();
                done_rx.recv().unwrap();
                as_daemon(|| std::fs::write(p, b"x").unwrap());
                assert!(std::fs::write(root.join("again"), b"x").is_err());
                drop(g);
                std::fs::remove_file(p).unwrap();
            });
            switched_rx.recv().unwrap();
            // this thread still acts as root meanwhile
            std::fs::write(root.join("root"), b"r").unwrap();
            done_tx.send(()).unwrap();
        });
        assert!(dir.path().join("root").exists());
    }
}
