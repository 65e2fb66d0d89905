//! Bug: `unmount --force` detached whatever was mounted at the path — an unrelated tmpfs (or an NFS volume given by mistake for the mount point) was unmounted with exit 0, and a path where nothing was mounted printed "detached" and exited 0.
#![allow(clippy::unwrap_used)]

mod support;

use support::{mount_tmpfs, mounted, s, tc};

#[test]
fn force_unmount_refuses_a_file_system_that_is_not_tiercache() {
    let dir = tempfile::tempdir().unwrap();
    let tmpfs = dir.path().join("t");
    std::fs::create_dir_all(&tmpfs).unwrap();
    mount_tmpfs(&tmpfs, "1m");
    std::fs::write(tmpfs.join("keep"), b"x").unwrap();
    let out = tc(&["unmount", "--force", s(&tmpfs)]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let still = mounted(&tmpfs);
    let _ = std::process::Command::new("umount")
        .arg("-l")
        .arg(&tmpfs)
        .status();
    assert!(still, "the tmpfs was unmounted: {err}");
    assert!(!out.status.success(), "exit 0 on a tmpfs");
    assert!(
        err.contains("not a tiercache mount") && err.contains("tmpfs"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

#[test]
fn force_unmount_of_a_path_where_nothing_is_mounted_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = tc(&["unmount", "--force", s(dir.path())]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not a mount point"), "{err}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("detached"));
}
