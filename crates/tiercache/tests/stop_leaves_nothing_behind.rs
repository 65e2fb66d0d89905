//! Bug: noise and litter from stopping — every clean unmount logged `WARN Failed to umount filesystem: Invalid argument` (fuser unmounted the path a second time), and failed mounts and test runs left `.log`, `.pid` and `.sock` files in the runtime directory.
#![allow(clippy::unwrap_used)]

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::{mounted, s, tc};

/// The runtime files of `mountpoint` (`NAME-HASH.{log,pid,sock}`, as `MountFiles` names them).
fn runtime_files(mountpoint: &Path) -> Vec<PathBuf> {
    let canon = std::fs::canonicalize(mountpoint.parent().unwrap())
        .unwrap()
        .join(mountpoint.file_name().unwrap());
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in canon.as_os_str().as_encoded_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    let name = canon.file_name().unwrap().to_str().unwrap().to_string();
    // The tests run as root.
    let base = PathBuf::from("/run/tiercache").join(format!("{name}-{h:016x}"));
    ["log", "pid", "sock"]
        .iter()
        .map(|e| base.with_extension(e))
        .filter(|p| p.exists())
        .collect()
}

fn dirs() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let (backing, mnt) = (dir.path().join("slow"), dir.path().join("fast"));
    std::fs::create_dir_all(&backing).unwrap();
    std::fs::create_dir_all(&mnt).unwrap();
    (dir, backing, mnt)
}

#[test]
fn a_failed_start_leaves_no_files_and_a_clean_stop_removes_its_own() {
    let (dir, backing, mnt) = dirs();
    // The daemon itself fails (after taking its pid file): the trace file cannot be created.
    let bad_trace = dir.path().join("missing-dir/trace.csv");
    let out = tc(&["mount", s(&backing), s(&mnt), "--trace-out", s(&bad_trace)]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--trace-out"), "{err}");
    assert!(!mounted(&mnt));
    assert_eq!(
        runtime_files(&mnt),
        Vec::<PathBuf>::new(),
        "after a failed start"
    );

    let out = tc(&["mount", s(&backing), s(&mnt), "--memory", "8M"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        runtime_files(&mnt).len(),
        3,
        "log, pid and socket while it runs"
    );
    std::fs::write(mnt.join("f"), b"data").unwrap();
    let out = tc(&["unmount", s(&mnt)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t = Instant::now();
    while !runtime_files(&mnt).is_empty() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "left behind: {:?}",
            runtime_files(&mnt)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(std::fs::read(backing.join("f")).unwrap(), b"data");
}

#[test]
fn a_clean_unmount_unmounts_once_without_a_warning() {
    let (_dir, backing, mnt) = dirs();
    let log = _dir.path().join("daemon.log");
    let mut daemon = Command::new(env!("CARGO_BIN_EXE_tiercache"))
        .args([
            "mount",
            s(&backing),
            s(&mnt),
            "--memory",
            "8M",
            "--foreground",
        ])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while tc(&["stats", s(&mnt)]).status.code() != Some(0) {
        assert!(t.elapsed() < Duration::from_secs(30), "never came up");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::fs::write(mnt.join("f"), b"x").unwrap();
    // Reaped at once, or `unmount` would wait for a zombie.
    let reaper = std::thread::spawn(move || daemon.wait().unwrap());
    let out = tc(&["unmount", s(&mnt)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(reaper.join().unwrap().success());
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("stopped"), "{text}");
    assert!(
        !text.contains("Failed to umount"),
        "unmounted twice:\n{text}"
    );
    assert!(!text.contains("WARN"), "{text}");
}
