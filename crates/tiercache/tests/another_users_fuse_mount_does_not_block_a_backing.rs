//! Bug (issue 17 review): the one-mount check took any FUSE mount whose source read `tiercache:BACKING` for a running tiercache mount of BACKING — which any user can make (`fusermount3 -o fsname=tiercache:/data`), so refusing every mount of that BACKING (or of a directory above or inside it) to everybody, root included.
#![allow(clippy::unwrap_used)]

#[path = "support/fake_fuse.rs"]
mod fake_fuse;
mod support;

use fake_fuse::FakeFuse;
use std::os::unix::fs::{chown, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Output};
use support::{mounted, s, tc};

/// Force-unmounts the tiercache mount on the path when dropped.
struct Mounted(PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        if mounted(&self.0) {
            let _ = tc(&["unmount", "--force", s(&self.0)]);
        }
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_fuse_mount_of_another_user_naming_backing_does_not_block_it() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    // uid 65534 must reach the tree and own its mount points.
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (tree, data, fake, m1, m2) = (
        root.join("tree"),
        root.join("tree/data"),
        root.join("fake"),
        root.join("m1"),
        root.join("m2"),
    );
    for d in [data.join("sub"), fake.clone(), m1.clone(), m2.clone()] {
        std::fs::create_dir_all(d).unwrap();
    }
    for d in [&fake, &m2] {
        chown(d, Some(65534), Some(65534)).unwrap();
    }
    // What `fusermount3 -o fsname=tiercache:DATA,subtype=tiercache` run by uid 65534 mounts.
    let source = format!("tiercache:{}", data.display());
    assert!(
        !source.contains(['%', ' ', ',']),
        "{source} would be encoded"
    );
    let _fake = FakeFuse::mount(&fake, &source, 65534);

    // A daemon of uid 65534 counts its own user's mounts: refused, naming that mount.
    let out = Command::new(env!("CARGO_BIN_EXE_tiercache"))
        .args(["mount", s(&data.join("sub")), s(&m2), "--memory", "16M"])
        .env_remove("XDG_RUNTIME_DIR")
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    let _second = Mounted(m2.clone());
    let err = stderr(&out);
    assert!(!out.status.success(), "uid 65534's mount succeeded");
    assert!(!mounted(&m2));
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!("tiercache mount on {}", fake.display())),
        "{err}"
    );

    // Root's daemon does not: another user's mount proves nothing about BACKING.
    for backing in [&data, &tree, &data.join("sub")] {
        let out = tc(&["mount", s(backing), s(&m1), "--memory", "16M"]);
        let _first = Mounted(m1.clone());
        assert!(
            out.status.success(),
            "root's mount of {} was refused: {}",
            backing.display(),
            stderr(&out)
        );
        assert!(mounted(&m1));
        let out = tc(&["unmount", s(&m1)]);
        assert!(out.status.success(), "{}", stderr(&out));
    }
}
