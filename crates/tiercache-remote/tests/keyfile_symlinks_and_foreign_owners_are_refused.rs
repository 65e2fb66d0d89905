//! Bug: `load` checked the mode of whatever a symlink pointed at, had no owner check and
//! read the path again after checking it. It now opens with `O_NOFOLLOW`, checks the opened
//! file (regular, owned by this user or root, no group/other access) and reads that file.
#![allow(clippy::unwrap_used)]
use std::fs;
use std::os::unix::fs::PermissionsExt;
use tiercache_remote::{keyfile, RemoteError};

fn refused(path: &std::path::Path, what: &str) {
    let e = keyfile::load(path).unwrap_err();
    assert!(matches!(e, RemoteError::KeyFile { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(msg.contains(what), "{msg}");
    assert!(!msg.contains('\n'), "one line: {msg}");
}

#[test]
fn a_symlink_to_a_good_key_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real.key");
    let k = keyfile::generate(&real).unwrap();
    let link = dir.path().join("remote.key");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    refused(&link, "symbolic link");
    assert_eq!(keyfile::load(&real).unwrap(), k, "the real file is fine");
}

#[test]
fn a_key_owned_by_another_user_is_refused() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "this test needs root (it chowns a key file to another user)"
    );
    let dir = tempfile::tempdir().unwrap();
    let theirs = dir.path().join("theirs.key");
    keyfile::generate(&theirs).unwrap();
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    fs::set_permissions(&theirs, fs::Permissions::from_mode(0o600)).unwrap();
    refused(&theirs, "owned by uid 65534");
}

#[test]
fn a_group_readable_key_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("remote.key");
    keyfile::generate(&path).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).unwrap();
    refused(&path, "group/others");
}

#[test]
fn a_directory_or_fifo_is_refused_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    refused(dir.path(), "not a regular file");
    let fifo = dir.path().join("fifo.key");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    refused(&fifo, "not a regular file");
}

#[test]
fn generate_does_not_follow_a_symlink() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("elsewhere");
    let link = dir.path().join("remote.key");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    assert!(keyfile::generate(&link).is_err());
    assert!(!target.exists(), "nothing created through the link");
}
