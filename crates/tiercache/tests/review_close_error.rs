//! Bug: close() never reported write-back errors: the FUSE data path had no `flush`, so close() returned 0 even after the file's background write-back had failed (ENOSPC on a full BACKING).
//!
//! BACKING is a 256 KiB tmpfs.
#![allow(clippy::unwrap_used)]

mod support;

use support::{mount_tmpfs, mounted, s, tc};

use std::fs::OpenOptions;
use std::io::Write;
use std::os::fd::IntoRawFd;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

struct SmallBacking {
    backing: PathBuf,
    mnt: PathBuf,
    /// The daemon, which may stay up with data it cannot write back.
    pid: Option<i32>,
    _dir: tempfile::TempDir,
}

impl Drop for SmallBacking {
    fn drop(&mut self) {
        if mounted(&self.mnt) {
            let _ = tc(&["unmount", "--force", s(&self.mnt)]);
        }
        if let Some(pid) = self.pid {
            // SAFETY: signal 0 probes, SIGKILL ends the daemon this test started.
            if unsafe { libc::kill(pid, 0) } == 0 {
                unsafe { libc::kill(pid, libc::SIGKILL) };
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        let _ = Command::new("umount").arg("-l").arg(&self.backing).status();
    }
}

fn small_backing() -> Option<SmallBacking> {
    let dir = tempfile::tempdir().unwrap();
    let (backing, mnt) = (dir.path().join("slow"), dir.path().join("fast"));
    std::fs::create_dir_all(&backing).unwrap();
    std::fs::create_dir_all(&mnt).unwrap();
    mount_tmpfs(&backing, "256k");
    let cfg = dir.path().join("tc.toml");
    std::fs::write(&cfg, "flush_interval_ms = 50\ndirty_expire_ms = 50\n").unwrap();
    let out = tc(&[
        "mount",
        s(&backing),
        s(&mnt),
        "--memory",
        "16M",
        "--config",
        s(&cfg),
    ]);
    let mut b = SmallBacking {
        backing,
        mnt,
        pid: None,
        _dir: dir,
    };
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stats = tc(&["stats", s(&b.mnt), "--json"]);
    b.pid = serde_json::from_slice::<serde_json::Value>(&stats.stdout)
        .ok()
        .and_then(|v| v["pid"].as_i64())
        .map(|p| p as i32);
    Some(b)
}

/// `close(2)` of `fd`, with its result.
fn close(fd: i32) -> std::io::Result<()> {
    // SAFETY: `fd` was taken out of its owner with into_raw_fd and is closed once.
    if unsafe { libc::close(fd) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[test]
fn close_reports_a_failed_background_write_back() {
    let Some(b) = small_backing() else {
        return;
    };
    let path = b.mnt.join("big");
    let mut w = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    // Cached at once; BACKING has room for a quarter of it.
    w.write_all(&vec![7u8; 1 << 20]).unwrap();
    let reader = std::fs::File::open(&path).unwrap();
    // The flusher tries (and fails) every 50 ms.
    std::thread::sleep(Duration::from_millis(1000));
    assert!(
        close(reader.into_raw_fd()).is_ok(),
        "a reader's close reports nothing"
    );
    let err = close(w.into_raw_fd()).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
}
