//! A config file could not say what to mount (BACKING and MOUNTPOINT were only positional
//! arguments), so a service reading /etc/tiercache/NAME.toml could not be written: the file's
//! `backing` and `mountpoint` (relative to its directory) are used when the command line
//! gives none, one path is MOUNTPOINT, and a missing one is named in one line.
#![allow(clippy::unwrap_used)]

mod support;

use support::{mounted, s, tc};

#[test]
fn the_config_file_names_what_to_mount() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let (backing, mnt) = (root.join("slow"), root.join("fast"));
    std::fs::create_dir_all(&backing).unwrap();
    std::fs::create_dir_all(&mnt).unwrap();
    std::fs::write(backing.join("f"), b"through the file").unwrap();
    let cfg = root.join("both.toml");
    std::fs::write(
        &cfg,
        "backing = \"slow\"\nmountpoint = \"fast\"\nmemory = \"32M\"\n",
    )
    .unwrap();
    let out = tc(&["mount", "--config", s(&cfg)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Checked after the unmount, so that a failed check leaves nothing mounted.
    let read = std::fs::read(mnt.join("f"));
    let v = tc(&["stats", s(&mnt), "--json"]);
    assert!(tc(&["unmount", s(&mnt)]).status.success());
    let v: serde_json::Value = serde_json::from_slice(&v.stdout).unwrap();
    assert_eq!(read.unwrap(), b"through the file");
    assert_eq!(v["backing_dir"], s(&backing));
    assert!(!mounted(&mnt));

    // Only `memory`: one path is MOUNTPOINT, and BACKING is missing.
    let bare = root.join("bare.toml");
    std::fs::write(&bare, "memory = \"32M\"\n").unwrap();
    let out = tc(&["mount", "--config", s(&bare), s(&mnt)]);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("BACKING: not given") && err.contains("`backing`") && err.contains(s(&bare)),
        "{err}"
    );
    assert!(!mounted(&mnt));
}
