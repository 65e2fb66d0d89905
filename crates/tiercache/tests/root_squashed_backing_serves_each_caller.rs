//! Issue #10 (item 2), on the real daemon: with the memory tier in the data path, a BACKING that treats root as nobody (like NFS with `root_squash`) refused the owner's own mode-0600 file and gave files created through the mount to nobody.
//!
//! BACKING is the root-squashing, permission-enforcing FUSE pass-through of the fuse crate's
//! test support, served in this process over a plain directory; `tiercache mount` runs over
//! it. As uid 2001 (`setpriv`): its mode-0600 file is read (twice: the second time from the
//! cache); uid 2002 is refused it after that; a file 2001 writes in its mode-0700 directory
//! reaches BACKING, after `tiercache flush`, with 2001's ownership and content, and with the
//! time of the write as its mtime (root may not set it there: the owner does).
#![allow(clippy::unwrap_used)]

#[path = "../../tiercache-fuse/tests/common/squash.rs"]
mod squash;
mod support;

use std::os::unix::fs::{MetadataExt, PermissionsExt};

use support::{s, tc, OwnBacking};

const A: u32 = 2001;
const B: u32 = 2002;

/// Runs `script` with `sh -c` as `uid:uid` without supplementary groups.
fn run_as(uid: u32, script: &str) -> (bool, String) {
    squash::run_as(uid, uid, &[], script)
}

/// The daemon's log so far (shown with a failure).
fn log(m: &OwnBacking) -> String {
    let out = tc(&["stats", s(&m.mnt), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    v["log_file"]
        .as_str()
        .and_then(|p| std::fs::read_to_string(p).ok())
        .unwrap_or_default()
}

fn hits(m: &OwnBacking) -> u64 {
    let out = tc(&["stats", s(&m.mnt), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    ["protected", "normal"]
        .iter()
        .map(|p| v["memory"]["pools"][p]["hits"].as_u64().unwrap_or(0))
        .sum()
}

#[test]
fn root_squashed_backing_serves_each_caller_with_its_own_rights() {
    assert_eq!(
        // SAFETY: geteuid has no preconditions and cannot fail.
        unsafe { libc::geteuid() },
        0,
        "this test mounts FUSE file systems and acts as other users: run it as root"
    );
    let dir = tempfile::Builder::new()
        .prefix("tcsquash")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(dir.path(), PermissionsExt::from_mode(0o755)).unwrap();
    let (lower, backing, mnt) = (
        dir.path().join("lower"),
        dir.path().join("backing"),
        dir.path().join("mnt"),
    );
    for d in [&lower, &backing, &mnt] {
        std::fs::create_dir(d).unwrap();
    }
    std::fs::set_permissions(&lower, PermissionsExt::from_mode(0o755)).unwrap();
    let secret: String = (0..20_000)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let f = lower.join("a_secret");
    std::fs::write(&f, &secret).unwrap();
    std::os::unix::fs::chown(&f, Some(A), Some(A)).unwrap();
    std::fs::set_permissions(&f, PermissionsExt::from_mode(0o600)).unwrap();
    let home = lower.join("a_home");
    std::fs::create_dir(&home).unwrap();
    std::os::unix::fs::chown(&home, Some(A), Some(A)).unwrap();
    std::fs::set_permissions(&home, PermissionsExt::from_mode(0o700)).unwrap();

    let squash = squash::SquashMount::new(&lower, &backing);
    let e = std::fs::read(backing.join("a_secret")).unwrap_err();
    assert_eq!(
        e.raw_os_error(),
        Some(libc::EACCES),
        "BACKING lets root read"
    );

    let dir_for_mount = tempfile::tempdir().unwrap();
    let m = OwnBacking::serve_with(
        dir_for_mount,
        backing.clone(),
        mnt.clone(),
        "8M",
        100_000,
        &["--allow-other"],
    );
    let cat = format!("cat {}/a_secret", mnt.display());
    let (ok, out) = run_as(A, &cat);
    assert!(
        ok && out == secret,
        "owner cannot read its file: {out:.200}\n{}",
        log(&m)
    );
    let before = hits(&m);
    let (ok, out) = run_as(A, &cat);
    assert!(ok && out == secret, "second read: {out:.200}");
    let after = hits(&m);
    assert!(
        after > before,
        "the second read was not served from the cache"
    );
    let (ok, out) = run_as(B, &cat);
    assert!(
        !ok && out.contains("Permission denied"),
        "another user got the cached file: {out:.200}"
    );
    assert_eq!(hits(&m), after, "the refused user was served blocks");

    let (ok, out) = run_as(
        A,
        &format!(
            "set -e; cd {}/a_home; printf new-data > f; mkdir d; mv f d/g; cat d/g",
            mnt.display()
        ),
    );
    assert!(ok && out == "new-data", "owner's directory: {out}");
    let written = std::time::SystemTime::now();
    // Write-back comes later: BACKING's mtime must still be the time of the write.
    std::thread::sleep(std::time::Duration::from_secs(2));
    let flush = tc(&["flush", s(&mnt)]);
    assert!(
        flush.status.success(),
        "flush: {}",
        String::from_utf8_lossy(&flush.stderr)
    );
    let g = home.join("d/g");
    assert_eq!(std::fs::read_to_string(&g).unwrap(), "new-data");
    let md = std::fs::metadata(&g).unwrap();
    assert_eq!((md.uid(), md.gid()), (A, A), "owner on BACKING");
    let mtime = md.modified().unwrap();
    let late = mtime
        .duration_since(written)
        .unwrap_or_default()
        .as_secs_f64();
    assert!(
        late < 1.0,
        "BACKING's mtime is the write-back's ({late:.1} s after the write), not the write's:\n{}",
        log(&m)
    );
    let md = std::fs::metadata(home.join("d")).unwrap();
    assert_eq!((md.uid(), md.gid()), (A, A), "directory owner on BACKING");

    let out = tc(&["unmount", s(&mnt)]);
    assert!(
        out.status.success(),
        "unmount: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    drop(squash); // before `m`, whose drop detaches BACKING lazily
    drop(m);
}
