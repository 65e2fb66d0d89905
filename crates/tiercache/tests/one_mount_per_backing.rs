//! Bug (issue 17, item 7): a second mount whose BACKING was the same directory as, inside or above a running mount's BACKING was allowed — two write-back caches over one tree, whose concurrent writers lose each other's writes.
#![allow(clippy::unwrap_used)]

mod support;

use std::os::unix::fs::{chown, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use support::{mounted, s, tc};

/// `tiercache mount BACKING MOUNTPOINT`; the mount is force-unmounted when dropped.
struct Mounted(PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        if mounted(&self.0) {
            let _ = tc(&["unmount", "--force", s(&self.0)]);
        }
    }
}

fn mount(backing: &Path, mnt: &Path) -> (Output, Mounted) {
    (
        tc(&["mount", s(backing), s(mnt), "--memory", "16M"]),
        Mounted(mnt.to_path_buf()),
    )
}

/// The tree `root/{tree/a/b, tree/c, m1, m2}`, canonical.
fn tree() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    for d in ["tree/a/b", "tree/c", "m1", "m2"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    (dir, root)
}

#[track_caller]
fn assert_ok(out: &Output) {
    assert!(
        out.status.success(),
        "mount failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The mount on `mnt` failed with one line naming the running mount (`other_mnt`, its
/// BACKING `other_backing`), and nothing is mounted there.
#[track_caller]
fn assert_refused(out: &Output, mnt: &Path, other_mnt: &Path, other_backing: &Path) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the second mount succeeded");
    assert!(!mounted(mnt), "something is mounted on {}", mnt.display());
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!("tiercache mount on {}", other_mnt.display()))
            && err.contains(&format!("(BACKING {})", other_backing.display())),
        "{err}"
    );
}

#[test]
fn a_second_mount_over_the_same_an_inner_or_an_outer_backing_is_refused() {
    let (_dir, root) = tree();
    let (a, m1, m2) = (root.join("tree/a"), root.join("m1"), root.join("m2"));
    let (out, _first) = mount(&a, &m1);
    assert_ok(&out);
    for backing in [a.clone(), a.join("b"), root.join("tree"), root.clone()] {
        let (out, _second) = mount(&backing, &m2);
        assert_refused(&out, &m2, &m1, &a);
    }
    // Given through a symlink, it is still the same directory.
    std::os::unix::fs::symlink(&a, root.join("link")).unwrap();
    let (out, _second) = mount(&root.join("link"), &m2);
    assert_refused(&out, &m2, &m1, &a);
    // A sibling is no conflict, even one whose name starts with the other's.
    std::fs::create_dir_all(root.join("tree/ab")).unwrap();
    for sibling in [root.join("tree/c"), root.join("tree/ab")] {
        let (out, second) = mount(&sibling, &m2);
        assert_ok(&out);
        let out = tc(&["unmount", s(&m2)]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        drop(second);
    }
    // Once the first is unmounted, the same BACKING mounts again elsewhere.
    let out = tc(&["unmount", s(&m1)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (out, _second) = mount(&a, &m2);
    assert_ok(&out);
}

#[test]
fn of_two_mounts_started_at_once_over_one_backing_one_mounts() {
    let (_dir, root) = tree();
    let (a, m1, m2) = (root.join("tree/a"), root.join("m1"), root.join("m2"));
    for round in 0..3 {
        let _guards = (Mounted(m1.clone()), Mounted(m2.clone()));
        // Each with an SSD tier to create: more time between a daemon's check and its mount.
        let start = |m: &Path| {
            let name = m.file_name().unwrap().to_str().unwrap();
            let cache = root.join(format!("cache-{round}-{name}.img"));
            let flash = format!("{}:64M", cache.display());
            Command::new(env!("CARGO_BIN_EXE_tiercache"))
                .args(["mount", s(&a), s(m), "--memory", "16M", "--flash", &flash])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        };
        let (c1, c2) = (start(&m1), start(&m2));
        let (o1, o2) = (
            c1.wait_with_output().unwrap(),
            c2.wait_with_output().unwrap(),
        );
        let ok = [o1.status.success(), o2.status.success()];
        assert_eq!(
            ok.iter().filter(|&&b| b).count(),
            1,
            "round {round}: {} / {}",
            String::from_utf8_lossy(&o1.stderr),
            String::from_utf8_lossy(&o2.stderr)
        );
        match ok {
            [true, _] => assert_refused(&o2, &m2, &m1, &a),
            _ => assert_refused(&o1, &m1, &m2, &a),
        }
    }
}

#[test]
fn another_users_mount_is_refused_over_root_mounts_backing() {
    let (_dir, root) = tree();
    // uid 65534 must reach the tree and own its mount point.
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (a, m1, m2) = (root.join("tree/a"), root.join("m1"), root.join("m2"));
    chown(&m2, Some(65534), Some(65534)).unwrap();
    let (out, _first) = mount(&a, &m1);
    assert_ok(&out);
    for backing in [a.clone(), root.join("tree")] {
        let out = Command::new(env!("CARGO_BIN_EXE_tiercache"))
            .args(["mount", s(&backing), s(&m2), "--memory", "16M"])
            .env_remove("XDG_RUNTIME_DIR")
            .uid(65534)
            .gid(65534)
            .output()
            .unwrap();
        let _second = Mounted(m2.clone());
        assert_refused(&out, &m2, &m1, &a);
    }
}
