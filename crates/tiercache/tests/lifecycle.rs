//! Stopping a mount never loses acknowledged data nor reports success it did not have: a busy
//! mount refuses a plain unmount, `--force` aborts open files before the final write-back, a
//! stop signal drains open files first, a failing final write-back keeps the daemon (and the
//! data) alive and says so, and a stale pid file never names a stranger to kill.
#![allow(clippy::unwrap_used)]

mod support;

use std::io::Write;
use std::os::unix::fs::FileExt;
use std::process::Command;
use std::time::{Duration, Instant};
use support::{mounted, s, tc, Mount};

fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only probes for existence.
    unsafe { libc::kill(pid, 0) == 0 }
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn busy_mount_refuses_plain_unmount_and_force_aborts_open_files() {
    let m = Mount::new(&["--memory", "8M"]);
    let mut f = std::fs::File::create(m.mnt.join("open")).unwrap();
    f.write_all(b"acknowledged").unwrap();
    let out = tc(&["unmount", s(&m.mnt)]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("busy"), "{err}");
    assert!(
        mounted(&m.mnt),
        "a refused unmount must leave the mount serving"
    );
    f.write_all(b" and more").unwrap();
    let pid = m.pid();
    let out = tc(&["unmount", "--force", s(&m.mnt)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!mounted(&m.mnt));
    wait_until("daemon exit", || !alive(pid));
    // Everything acknowledged before the forced stop is on BACKING; later writes fail.
    assert_eq!(
        std::fs::read(m.backing.join("open")).unwrap(),
        b"acknowledged and more"
    );
    assert!(f.write_all(b"late").and_then(|_| f.sync_all()).is_err());
}

#[test]
fn stop_signal_drains_open_files_before_writing_back() {
    let m = Mount::new(&["--memory", "8M"]);
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(m.mnt.join("log"))
        .unwrap();
    f.write_at(b"one", 0).unwrap();
    let pid = m.pid();
    // SAFETY: signalling the daemon we started.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    wait_until("lazy detach", || !mounted(&m.mnt));
    // Detached, but the open file is still served and still acknowledged.
    assert!(alive(pid));
    f.write_at(b" two", 3).unwrap();
    let mut buf = [0u8; 7];
    f.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"one two");
    drop(f);
    wait_until("daemon exit after the last close", || !alive(pid));
    assert_eq!(std::fs::read(m.backing.join("log")).unwrap(), b"one two");
}

/// A tmpfs BACKING of 1 MiB that the test can fill and empty.
struct SmallFs {
    dir: tempfile::TempDir,
}

impl SmallFs {
    fn new() -> SmallFs {
        let dir = tempfile::tempdir().unwrap();
        support::mount_tmpfs(dir.path(), "1m");
        SmallFs { dir }
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

#[test]
fn failing_final_write_back_keeps_the_data_and_says_so() {
    let small = SmallFs::new();
    let backing = small.dir.path().join("b");
    std::fs::create_dir(&backing).unwrap();
    let top = tempfile::tempdir().unwrap();
    let mnt = top.path().join("m");
    std::fs::create_dir(&mnt).unwrap();
    let out = tc(&["mount", s(&backing), s(&mnt), "--memory", "16M"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Fill BACKING directly, then write through the cache more than is left.
    std::fs::write(backing.join("filler"), vec![1u8; 700 << 10]).unwrap();
    let payload = vec![7u8; 600 << 10];
    std::fs::write(mnt.join("big"), &payload).unwrap(); // acknowledged by the cache
    let stats: serde_json::Value =
        serde_json::from_slice(&tc(&["stats", s(&mnt), "--json"]).stdout).unwrap();
    let pid = stats["pid"].as_i64().unwrap() as i32;
    let out = tc(&["unmount", s(&mnt)]);
    assert!(
        !out.status.success(),
        "unmount must not report success while data cannot be written"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("write-back failed"), "{err}");
    assert!(alive(pid), "the daemon keeps the dirty data");
    // Make room; the daemon's retry or the next unmount writes it back.
    std::fs::remove_file(backing.join("filler")).unwrap();
    let out = tc(&["unmount", s(&mnt)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_until("daemon exit", || !alive(pid));
    assert_eq!(std::fs::read(backing.join("big")).unwrap(), payload);
}

#[test]
fn stale_pid_file_never_names_a_stranger() {
    let m = Mount::new(&["--memory", "8M"]);
    let log: std::path::PathBuf = m.stats()["log_file"].as_str().unwrap().into();
    let pid_file = log.with_extension("pid");
    let pid = m.pid();
    // SAFETY: killing the daemon we started, to leave a stale pid file and a dead mount.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    wait_until("daemon death", || !alive(pid));
    let mut stranger = Command::new("sleep").arg("60").spawn().unwrap();
    std::fs::write(&pid_file, format!("{}\n", stranger.id())).unwrap();
    let out = tc(&["unmount", "--force", s(&m.mnt)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stranger.try_wait().unwrap().is_none(),
        "unmount --force killed an unrelated process"
    );
    assert!(!mounted(&m.mnt));
    // The mount point can be served again.
    let out = tc(&["mount", s(&m.backing), s(&m.mnt), "--memory", "8M"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = stranger.kill();
    let _ = stranger.wait();
}

#[test]
fn control_commands_follow_a_symlink_to_the_mount_point() {
    let m = Mount::new(&["--memory", "8M"]);
    let link_dir = tempfile::tempdir().unwrap();
    let link = link_dir.path().join("link");
    std::os::unix::fs::symlink(&m.mnt, &link).unwrap();
    let out = tc(&["stats", s(&link), "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = tc(&["unmount", s(&link)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!mounted(&m.mnt));
}
