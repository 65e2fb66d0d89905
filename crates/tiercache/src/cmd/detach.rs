//! Detaching exactly the mount that was checked (`unmount --force`).
//!
//! A path is only a name: between reading the mount table for it and `umount2(path)`, a
//! directory on the way may be renamed or swapped for a symlink, and a mount may cover the one
//! that was checked (or be hidden by one mounted over a directory above it, while the table
//! still lists the tiercache mount at that path). So the mount point is opened once
//! (`O_PATH|O_NOFOLLOW`: no file system code runs), the mount the descriptor is on is named
//! by its ID (`statx` `STATX_MNT_ID`, with `AT_STATX_DONT_SYNC` so a dead or hung daemon is
//! never asked) and looked up in the mount table by that ID, and the unmount goes through
//! `/proc/self/fd/N`, which leads to the descriptor's own mount and directory, not to
//! whatever the path names by then. (`UMOUNT_NOFOLLOW` cannot be used: `/proc/self/fd/N` is
//! itself a link, which must be followed, and the kernel refuses an unmount of the link.)

use super::mounts::{mounts, MountEntry};
use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// A mount point held open, and the mount-table entry of the mount it is the root of.
#[derive(Debug)]
pub struct OpenedMount {
    fd: File,
    pub entry: MountEntry,
}

/// What is at a path, seen through one descriptor.
#[derive(Debug)]
pub enum AtPath {
    /// The root of a mount listed in the mount table.
    Mount(OpenedMount),
    /// No such path, or not the root of a mount.
    NotMounted,
}

/// Opens `mp` (not following a symlink at its end) and finds the mount whose root it is.
pub fn open_mount(mp: &Path) -> io::Result<AtPath> {
    let fd = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_NOFOLLOW)
        .open(mp)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(AtPath::NotMounted),
        Err(e) => return Err(e),
    };
    let (id, root) = mount_id(&fd)?;
    if !root {
        return Ok(AtPath::NotMounted);
    }
    match mounts().into_iter().find(|m| m.id == id) {
        Some(entry) => Ok(AtPath::Mount(OpenedMount { fd, entry })),
        // Detached since it was opened (the descriptor keeps it, outside the table).
        None => Ok(AtPath::NotMounted),
    }
}

/// The ID of the mount `fd` is on, and whether `fd` is that mount's root.
fn mount_id(fd: &File) -> io::Result<(u64, bool)> {
    // SAFETY: an all-zero statx is a valid value; statx writes only into it.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: valid fd, empty NUL-terminated path with AT_EMPTY_PATH, `stx` outlives the call.
    let rc = unsafe {
        libc::statx(
            fd.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW | libc::AT_STATX_DONT_SYNC,
            libc::STATX_MNT_ID,
            &mut stx,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let root_attr = libc::STATX_ATTR_MOUNT_ROOT as u64;
    if stx.stx_mask & libc::STATX_MNT_ID == 0 || stx.stx_attributes_mask & root_attr == 0 {
        return Err(io::Error::other(
            "the kernel does not report mount IDs (statx STATX_MNT_ID, Linux 5.8 or later)",
        ));
    }
    Ok((stx.stx_mnt_id, stx.stx_attributes & root_attr != 0))
}

impl OpenedMount {
    /// Lazily detaches this mount (`MNT_DETACH`), through the descriptor. An unprivileged
    /// caller, whom the kernel refuses, falls back on `fusermount3 -uz` by path (which detaches
    /// only a FUSE mount of the calling user, and checks that itself).
    pub fn detach(self, mp: &Path) -> Result<(), String> {
        let proc_path = format!("/proc/self/fd/{}", self.fd.as_raw_fd());
        let c = CString::new(proc_path).map_err(|e| e.to_string())?;
        // SAFETY: `c` is a valid NUL-terminated path; `self.fd` stays open across the call.
        let rc = unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        if rc == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::EPERM) {
            let st = std::process::Command::new("fusermount3")
                .arg("-uz")
                .arg(mp)
                .status();
            if st.is_ok_and(|s| s.success()) {
                return Ok(());
            }
        }
        Err(format!("{}: cannot detach: {err}", mp.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn tmpfs(dir: &Path, name: &str) {
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1m", name])
            .arg(dir)
            .status()
            .expect("mount");
        assert!(st.success(), "mounting a tmpfs needs root");
    }

    fn listed(dir: &Path) -> Option<String> {
        mounts()
            .into_iter()
            .rev()
            .find(|m| m.mount_point == dir)
            .map(|m| m.source)
    }

    /// The path swapped for a symlink to another mount between the check and the unmount:
    /// the mount checked is detached, the other stays.
    #[test]
    fn a_symlink_swapped_in_after_the_check_is_not_followed() {
        let d = tempfile::tempdir().expect("tempdir");
        let base = std::fs::canonicalize(d.path()).expect("canonical");
        let (x, y, z) = (base.join("x"), base.join("y"), base.join("z"));
        std::fs::create_dir_all(x.join("mnt")).expect("mkdir");
        std::fs::create_dir_all(z.join("mnt")).expect("mkdir");
        tmpfs(&x.join("mnt"), "checked");
        tmpfs(&z.join("mnt"), "other");
        let AtPath::Mount(m) = open_mount(&x.join("mnt")).expect("open") else {
            panic!("not found as a mount");
        };
        assert_eq!(m.entry.source, "checked");
        std::fs::rename(&x, &y).expect("rename");
        std::os::unix::fs::symlink(&z, &x).expect("symlink");
        let result = m.detach(&x.join("mnt"));
        let (checked, other) = (listed(&y.join("mnt")), listed(&z.join("mnt")));
        for p in [y.join("mnt"), z.join("mnt")] {
            let _ = Command::new("umount").arg("-l").arg(p).status();
        }
        result.expect("detach");
        assert_eq!(checked, None, "the checked mount is still there");
        assert_eq!(
            other.as_deref(),
            Some("other"),
            "the other mount was detached"
        );
    }
}
