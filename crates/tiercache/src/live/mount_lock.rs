//! The lock that makes one daemon's one-mount check and its FUSE mount a single step for the
//! other daemons of its user: `flock` on `mount.lock` in the user's private runtime directory
//! (`control::runtime_dir`: `/run/tiercache` for root). The directory must be the user's own,
//! mode 0700, and the file the user's own, mode 0600 — both checked on the opened descriptors,
//! no symlink followed — so no other user can open the file, let alone hold its lock. (An
//! abstract Unix socket name, used before, could be bound by any local user, forever, stopping
//! every mount.) The kernel drops a `flock` when its holder exits, however it exits.
//!
//! A daemon waits for the lock as long as it takes: only a daemon of the same user can hold
//! it, and a holder keeps it through the write-back of an SSD tier's dirty blocks from before
//! a crash, which has no fixed bound. The holder writes its pid and BACKING into the file, so
//! a waiting daemon logs whom it waits for.

use super::error::DaemonError;
use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::time::{Duration, Instant};

/// The lock file's name in the runtime directory.
const NAME: &str = "mount.lock";

/// The held lock; dropping it (or exiting) releases it.
#[derive(Debug)]
pub struct MountLock {
    _file: File,
}

/// Takes the lock in `dir` (the runtime directory), waiting while another daemon of this
/// user holds it; `backing` is recorded for the daemons that wait meanwhile.
pub fn take(dir: &Path, backing: &Path) -> Result<MountLock, DaemonError> {
    let path = dir.join(NAME);
    let file =
        open_checked(dir).map_err(|e| e.context(format!("the mount lock {}", path.display())))?;
    let start = Instant::now();
    let mut next_note = Duration::from_secs(1);
    loop {
        // SAFETY: flock on a descriptor `file` owns.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            break;
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(DaemonError::io(
                format!("the mount lock {}: flock", path.display()),
                e,
            ));
        }
        if start.elapsed() >= next_note {
            log::info!(
                "waiting {} s for the mount lock {} (mounts are checked against each other one \
                 at a time), held by tiercache {}",
                start.elapsed().as_secs(),
                path.display(),
                holder(&file)
            );
            next_note *= 4;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let record = |f: &File| -> io::Result<()> {
        f.set_len(0)?;
        let mut line = format!("pid {} mounting BACKING ", std::process::id()).into_bytes();
        line.extend_from_slice(backing.as_os_str().as_bytes());
        line.push(b'\n');
        f.write_all_at(&line, 0)
    };
    // Only informs waiters: a failure to write it does not stop the mount.
    if let Err(e) = record(&file) {
        log::warn!(
            "the mount lock {}: recording the holder: {e}",
            path.display()
        );
    }
    Ok(MountLock { _file: file })
}

/// What the holder of the lock wrote about itself (`pid N mounting BACKING B`).
fn holder(file: &File) -> String {
    let mut buf = [0u8; 512];
    let n = file.read_at(&mut buf, 0).unwrap_or(0);
    let text = String::from_utf8_lossy(&buf[..n]);
    match text.trim_end() {
        "" => "(no record of the holder yet)".to_string(),
        t => t.to_string(),
    }
}

/// Opens `dir` and then `NAME` in it, neither through a symlink, and checks both: the
/// directory ours and closed to group and others, the file a regular file, ours, mode 0600
/// (created so when missing). Nothing is chmod'ed: a wrong one is reported, to be removed.
fn open_checked(dir: &Path) -> Result<File, DaemonError> {
    // SAFETY: getuid has no preconditions and cannot fail.
    let me = unsafe { libc::getuid() };
    let d = open_at(
        libc::AT_FDCWD,
        dir,
        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
        0,
    )
    .map_err(|e| DaemonError::io(format!("opening its directory {}", dir.display()), e))?;
    let dm = d.metadata().map_err(|e| DaemonError::io("fstat", e))?;
    if dm.uid() != me || dm.mode() & 0o077 != 0 {
        return Err(DaemonError::refused(format!(
            "its directory {} must be owned by uid {me} with mode 0700 (it is uid {}, mode \
             {:04o}); remove it",
            dir.display(),
            dm.uid(),
            dm.mode() & 0o7777
        )));
    }
    let f = open_at(
        d.as_raw_fd(),
        Path::new(NAME),
        libc::O_RDWR | libc::O_CREAT | libc::O_NOFOLLOW | libc::O_NONBLOCK,
        0o600,
    )
    .map_err(|e| match e.raw_os_error() {
        Some(libc::ELOOP) => {
            DaemonError::refused("it is a symlink; it must be a regular file: remove it")
        }
        _ => DaemonError::io("", e),
    })?;
    let m = f.metadata().map_err(|e| DaemonError::io("fstat", e))?;
    if !m.file_type().is_file() {
        return Err(DaemonError::refused("it is not a regular file; remove it"));
    }
    if m.uid() != me || m.mode() & 0o077 != 0 {
        return Err(DaemonError::refused(format!(
            "it must be owned by uid {me} with mode 0600 (it is uid {}, mode {:04o}); remove it",
            m.uid(),
            m.mode() & 0o7777
        )));
    }
    Ok(f)
}

/// `openat(2)` with `O_CLOEXEC`.
fn open_at(dirfd: libc::c_int, path: &Path, flags: libc::c_int, mode: u32) -> io::Result<File> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(io::Error::other)?;
    // SAFETY: `c` is a valid NUL-terminated path; `dirfd` is AT_FDCWD or a descriptor the
    // caller keeps open for the call.
    let fd = unsafe { libc::openat(dirfd, c.as_ptr(), flags | libc::O_CLOEXEC, mode) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by nobody else.
    Ok(unsafe { File::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn path_in(dir: &Path) -> std::path::PathBuf {
        dir.join(NAME)
    }

    fn private_dir() -> tempfile::TempDir {
        let d = tempfile::tempdir().expect("tempdir");
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
        d
    }

    #[test]
    fn the_lock_file_is_created_private_and_names_its_holder() {
        let d = private_dir();
        let lock = take(d.path(), Path::new("/srv/data")).expect("lock");
        let m = std::fs::symlink_metadata(path_in(d.path())).expect("stat");
        assert_eq!(m.mode() & 0o7777, 0o600);
        let text = std::fs::read_to_string(path_in(d.path())).expect("read");
        assert_eq!(
            text,
            format!("pid {} mounting BACKING /srv/data\n", std::process::id())
        );
        drop(lock);
        // Released: taken again at once.
        take(d.path(), Path::new("/srv/other")).expect("again");
    }

    #[test]
    fn a_symlink_or_a_file_or_directory_open_to_others_is_refused() {
        let d = private_dir();
        let target = d.path().join("elsewhere");
        std::fs::write(&target, b"").expect("write");
        std::os::unix::fs::symlink(&target, path_in(d.path())).expect("symlink");
        let e = take(d.path(), Path::new("/b"))
            .expect_err("a symlink")
            .to_string();
        assert!(e.contains("symlink") && e.contains("remove it"), "{e}");
        std::fs::remove_file(path_in(d.path())).expect("rm");
        std::fs::write(path_in(d.path()), b"").expect("write");
        std::fs::set_permissions(path_in(d.path()), std::fs::Permissions::from_mode(0o644))
            .expect("chmod");
        let e = take(d.path(), Path::new("/b"))
            .expect_err("mode 0644")
            .to_string();
        assert!(e.contains("mode 0600") && e.contains("remove it"), "{e}");
        std::fs::remove_file(path_in(d.path())).expect("rm");
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let e = take(d.path(), Path::new("/b"))
            .expect_err("directory mode 0755")
            .to_string();
        assert!(e.contains("mode 0700") && e.contains("remove it"), "{e}");
    }
}
