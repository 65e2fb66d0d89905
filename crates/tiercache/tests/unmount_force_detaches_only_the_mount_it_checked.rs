//! Bug (issue 17 review): `unmount --force` checked in the mount table that MOUNTPOINT was a tiercache mount, then unmounted whatever the path led to at the time of `umount2(path)` — a directory renamed or swapped for a symlink on the way, or a mount over a directory above it, made root detach another file system.
#![allow(clippy::unwrap_used)]

#[path = "support/fake_fuse.rs"]
mod fake_fuse;
mod support;

use fake_fuse::FakeFuse;
use std::path::Path;
use std::process::Command;
use support::{mount_tmpfs, s, tc};

/// `mount` with `args`, which must succeed.
fn mount_cmd(args: &[&str]) {
    let st = Command::new("mount").args(args).status().unwrap();
    assert!(st.success(), "mount {args:?}");
}

/// Whether the mount table lists a mount of `source` on `path`.
fn listed(path: &Path, source: &str) -> bool {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let dash = f.iter().position(|x| *x == "-").unwrap();
            f[4] == path.to_str().unwrap() && f.get(dash + 2) == Some(&source)
        })
}

/// Lazily detaches everything beneath `base` when dropped.
struct Detach<'a>(&'a Path);

impl Drop for Detach<'_> {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.0).status();
    }
}

/// A tiercache mount on `d/mnt` whose daemon is gone, hidden when a tmpfs that holds another
/// mount at `mnt` is moved over `d`: the mount table still lists the tiercache mount on
/// `d/mnt` (after the other one), while the path `d/mnt` leads to the other mount. Forced
/// unmount of `d/mnt` must not detach that other mount.
#[test]
fn a_mount_that_hides_the_checked_one_is_not_detached() {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap().join("base");
    std::fs::create_dir_all(&base).unwrap();
    // A private tmpfs for the whole scene (a move needs a parent mount that is not shared).
    mount_tmpfs(&base, "1m");
    let _detach = Detach(&base);
    mount_cmd(&["--make-private", s(&base)]);
    let (e, d) = (base.join("e"), base.join("d"));
    std::fs::create_dir_all(&e).unwrap();
    std::fs::create_dir_all(d.join("mnt")).unwrap();
    mount_cmd(&["-t", "tmpfs", "-o", "size=1m", "shadow", s(&e)]);
    std::fs::create_dir_all(e.join("mnt")).unwrap();
    mount_cmd(&["-t", "tmpfs", "-o", "size=1m", "victim", s(&e.join("mnt"))]);
    std::fs::write(e.join("mnt/keep"), b"victim's data").unwrap();
    // A tiercache mount (as root makes one) whose daemon is gone.
    let tc_mount = FakeFuse::mount(&d.join("mnt"), "tiercache:/nowhere", 0);
    mount_cmd(&["--move", s(&e), s(&d)]);
    let mnt = d.join("mnt");
    assert!(listed(&mnt, "tiercache:/nowhere") && listed(&mnt, "victim"));

    let out = tc(&["unmount", "--force", s(&mnt)]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        listed(&mnt, "victim") && std::fs::read(mnt.join("keep")).is_ok(),
        "the mount over the checked one was detached: {err}"
    );
    assert!(!out.status.success(), "exit 0");
    assert!(err.contains("not a tiercache mount"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    drop(tc_mount);
}
