//! Setting a file's times as its owner: on a BACKING that treats root as nobody (NFS with
//! `root_squash`) the daemon may not set the mtime of a file it wrote back, but the file's
//! owner may. The switch is per thread (raw `setfsuid`/`setfsgid`: glibc's wrappers do not
//! broadcast these, and Linux keeps them per thread) and undone before returning.

use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::time::SystemTime;

/// Sets `fd`'s modification time to `t`; if BACKING refuses the daemon (EPERM/EACCES) and the
/// daemon runs as root, once more with the owner's fsuid and fsgid.
pub(crate) fn set_mtime(fd: &File, t: SystemTime) -> io::Result<()> {
    match fd.set_modified(t) {
        Err(e) if is_denied(&e) && is_root() => as_owner(fd, || fd.set_modified(t)),
        r => r,
    }
}

fn is_denied(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES))
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The fsuid/fsgid a `setfs*id` call of this thread left in place (queried with an invalid id,
/// which changes nothing).
fn current(call: libc::c_long) -> libc::c_long {
    // SAFETY: setfsuid/setfsgid with -1 only return the current value.
    unsafe { libc::syscall(call, -1i64 as libc::c_long) }
}

fn as_owner<T>(fd: &File, f: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
    let m = fd.metadata()?;
    let (uid, gid) = (libc::c_long::from(m.uid()), libc::c_long::from(m.gid()));
    // Group first: once fsuid leaves 0 the thread loses CAP_SETGID for the fs ids.
    // SAFETY: these only change this thread's filesystem ids; both are restored below.
    let old_gid = unsafe { libc::syscall(libc::SYS_setfsgid, gid) };
    // SAFETY: as above.
    let old_uid = unsafe { libc::syscall(libc::SYS_setfsuid, uid) };
    let switched = current(libc::SYS_setfsuid) == uid && current(libc::SYS_setfsgid) == gid;
    let r = if switched {
        f()
    } else {
        Err(io::Error::from_raw_os_error(libc::EPERM))
    };
    // User first: fsuid 0 gives the capabilities back that restoring the group needs.
    // SAFETY: restores the values saved above.
    unsafe {
        libc::syscall(libc::SYS_setfsuid, old_uid);
        libc::syscall(libc::SYS_setfsgid, old_gid);
    }
    if current(libc::SYS_setfsuid) != old_uid || current(libc::SYS_setfsgid) != old_gid {
        // Serving on with someone else's rights would be a security bug: stop.
        log::error!("could not restore this thread's filesystem ids; aborting");
        std::process::abort();
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_as_the_owner_and_restores_the_threads_ids() {
        assert!(is_root(), "this test needs root (it switches fsuid)");
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"x").unwrap();
        std::os::unix::fs::chown(&p, Some(2001), Some(2002)).unwrap();
        let f = File::open(&p).unwrap();
        let before = (current(libc::SYS_setfsuid), current(libc::SYS_setfsgid));
        let inside = as_owner(&f, || {
            Ok((current(libc::SYS_setfsuid), current(libc::SYS_setfsgid)))
        })
        .unwrap();
        assert_eq!(inside, (2001, 2002));
        assert_eq!(
            (current(libc::SYS_setfsuid), current(libc::SYS_setfsgid)),
            before
        );
        set_mtime(&f, SystemTime::UNIX_EPOCH).unwrap();
        assert_eq!(
            f.metadata().unwrap().modified().unwrap(),
            SystemTime::UNIX_EPOCH
        );
    }
}
