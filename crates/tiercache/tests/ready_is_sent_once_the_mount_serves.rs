//! tiercache told systemd nothing (no `Type=notify` support): a unit could not know when the
//! mount was up. The daemon now sends READY=1 on $NOTIFY_SOCKET once the mount serves, with
//! MAINPID= of the daemon (also when `tiercache mount` daemonizes) and STATUS=.
#![allow(clippy::unwrap_used)]

mod support;

use std::collections::HashMap;
use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::{mounted, s, tc};

/// Force-unmounts its mount point when a check fails with the mount up.
struct Guard(std::path::PathBuf);

impl Drop for Guard {
    fn drop(&mut self) {
        if mounted(&self.0) {
            let _ = tc(&["unmount", "--force", s(&self.0)]);
        }
    }
}

/// `KEY=VALUE` lines of every datagram until one has READY=1 (or 60 s pass).
fn until_ready(sock: &UnixDatagram) -> (HashMap<String, String>, Vec<String>) {
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let start = Instant::now();
    let mut all = Vec::new();
    let mut buf = [0u8; 4096];
    while start.elapsed() < Duration::from_secs(60) {
        let Ok(n) = sock.recv(&mut buf) else { continue };
        let text = String::from_utf8_lossy(&buf[..n]).to_string();
        all.push(text.clone());
        let kv: HashMap<String, String> = text
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        if kv.get("READY").map(String::as_str) == Some("1") {
            return (kv, all);
        }
    }
    panic!("no READY=1 within 60 s; got {all:?}");
}

/// READY=1 arrives, and at that moment a file of BACKING is already served through the mount.
fn check(foreground: bool) {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let (backing, mnt) = (root.join("slow"), root.join("fast"));
    std::fs::create_dir_all(&backing).unwrap();
    std::fs::create_dir_all(&mnt).unwrap();
    std::fs::write(backing.join("hello"), b"served").unwrap();
    let sock_path = root.join("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    // Foreground as tiercache@.service runs it: BACKING from the config file (relative to
    // its directory), the mount point from the instance.
    let cfg = root.join("fast.toml");
    std::fs::write(&cfg, "backing = \"slow\"\nmemory = \"32M\"\n").unwrap();
    let args = if foreground {
        vec!["mount", "--foreground", "--config", s(&cfg), s(&mnt)]
    } else {
        vec!["mount", s(&backing), s(&mnt), "--memory", "32M"]
    };
    let _guard = Guard(mnt.clone());
    let mut child = Command::new(env!("CARGO_BIN_EXE_tiercache"))
        .args(&args)
        .env("NOTIFY_SOCKET", &sock_path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (kv, all) = until_ready(&sock);
    // The mount serves now: no waiting, no retry.
    let got = std::fs::read(mnt.join("hello"));
    let stats = support::json_of(&["stats", s(&mnt), "--json"], &[]);
    let daemon = stats["pid"].as_i64().unwrap();
    let status = kv.get("STATUS").cloned().unwrap_or_default();
    let mainpid = kv.get("MAINPID").cloned();
    if !foreground {
        assert!(child.wait().unwrap().success());
        // The first process handed the service over to the daemon it started.
        assert!(
            all.iter().any(|d| d.contains(&format!("MAINPID={daemon}"))),
            "{all:?}"
        );
    }
    let child_pid = i64::from(child.id());
    // Reaped as soon as it exits: `unmount` waits for the daemon's pid to go away.
    let reaper = std::thread::spawn(move || child.wait());
    let out = tc(&["unmount", s(&mnt)]);
    let _ = reaper.join();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(got.unwrap(), b"served");
    assert_eq!(mainpid, Some(daemon.to_string()), "{all:?}");
    if foreground {
        assert_eq!(daemon, child_pid);
    }
    assert!(
        status.contains(s(&backing)) && status.contains(s(&mnt)),
        "STATUS={status}"
    );
    assert!(!mounted(&mnt));
}

#[test]
fn ready_comes_once_the_foreground_mount_serves() {
    check(true);
}

#[test]
fn ready_comes_from_the_daemon_of_a_background_mount() {
    check(false);
}

#[test]
fn an_abstract_notify_socket_is_reached_too() {
    let name = format!("tiercache-test-notify-{}", std::process::id());
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let sock = UnixDatagram::bind_addr(&addr).unwrap();
    let m_dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(m_dir.path()).unwrap();
    let (backing, mnt) = (root.join("slow"), root.join("fast"));
    std::fs::create_dir_all(&backing).unwrap();
    std::fs::create_dir_all(&mnt).unwrap();
    let _guard = Guard(mnt.clone());
    let out = Command::new(env!("CARGO_BIN_EXE_tiercache"))
        .args(["mount", s(&backing), s(&mnt), "--memory", "32M"])
        .env("NOTIFY_SOCKET", format!("@{name}"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (kv, _) = until_ready(&sock);
    let unmounted = tc(&["unmount", s(&mnt)]);
    assert!(unmounted.status.success());
    assert!(kv.contains_key("MAINPID"));
}
