//! Helpers the mount tests share: run the built `tiercache`, find mounts, and a background
//! mount guard that force-unmounts on drop.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Runs the built binary with `args`.
pub fn tc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tiercache"))
        .args(args)
        .output()
        .unwrap()
}

/// An `O_PATH` descriptor of `p` (a lookup, no FUSE open): while held, the kernel keeps the
/// inode and sends no FORGET for it, not even when another test drops the caches.
pub fn pin(p: &Path) -> std::fs::File {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH)
        .open(p)
        .unwrap()
}

/// Runs the built binary with `args`, which must succeed, and parses what it printed as JSON.
pub fn tc_json(args: &[&str]) -> serde_json::Value {
    let out = tc(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Runs `args`, which must fail with a first stderr line (clap may add hints below) naming
/// `flag` and saying `why`.
pub fn fails_naming(args: &[&str], flag: &str, why: &str) {
    let out = tc(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} succeeded");
    let first = err.lines().next().unwrap_or_default();
    assert!(
        first.contains(flag) && first.contains(why),
        "{args:?}: {err}"
    );
}

/// Runs `base` then `extra` (a command printing JSON), which must succeed; its JSON.
pub fn json_of(base: &[&str], extra: &[&str]) -> serde_json::Value {
    let args: Vec<&str> = base.iter().chain(extra).copied().collect();
    let out = tc(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Whether `p` is a mount point now (its parent canonicalised, as the daemon does).
pub fn mounted(p: &Path) -> bool {
    let want = std::fs::canonicalize(p.parent().unwrap())
        .unwrap()
        .join(p.file_name().unwrap());
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(want.to_str().unwrap()))
}

/// A temp dir holding an empty BACKING (`slow`) and mount point (`fast`); both go with it.
pub struct Dirs {
    pub dir: tempfile::TempDir,
    pub backing: PathBuf,
    pub mnt: PathBuf,
}

impl Dirs {
    pub fn new() -> Dirs {
        let dir = tempfile::tempdir().unwrap();
        let (backing, mnt) = (dir.path().join("slow"), dir.path().join("fast"));
        std::fs::create_dir_all(&backing).unwrap();
        std::fs::create_dir_all(&mnt).unwrap();
        Dirs { dir, backing, mnt }
    }
}

/// `root/slow` served by a background `tiercache mount` on `root/fast`; force-unmounted on drop.
pub struct Mount {
    pub backing: PathBuf,
    pub mnt: PathBuf,
    /// The daemon's log (the daemon removes it when it stops cleanly; a test that fails prints
    /// it).
    log: Option<PathBuf>,
    _dir: tempfile::TempDir,
}

impl Mount {
    /// Mounts with `extra` flags; panics with the daemon's error when the mount fails.
    pub fn new(extra: &[&str]) -> Mount {
        Self::with_fd_limit(None, extra)
    }

    /// [`Mount::new`] with the daemon started under `ulimit -n LIMIT` (soft and hard), as a
    /// service manager might start it.
    pub fn with_fd_limit(limit: Option<u32>, extra: &[&str]) -> Mount {
        let Dirs { dir, backing, mnt } = Dirs::new();
        let mut args = vec!["mount", s(&backing), s(&mnt)];
        args.extend_from_slice(extra);
        let out = match limit {
            None => tc(&args),
            Some(n) => Command::new("bash")
                .arg("-c")
                .arg(format!("ulimit -n {n} && exec \"$0\" \"$@\""))
                .arg(env!("CARGO_BIN_EXE_tiercache"))
                .args(&args)
                .output()
                .unwrap(),
        };
        assert!(
            out.status.success(),
            "mount failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(mounted(&mnt));
        let mut m = Mount {
            _dir: dir,
            backing,
            mnt,
            log: None,
        };
        m.log = m.stats()["log_file"].as_str().map(PathBuf::from);
        m
    }

    /// Requests the request threads handed to I/O workers, both classes: done, running or
    /// still queued (a hand-over counts from the moment it is made).
    pub fn io_handed_over(&self) -> u64 {
        let io = &self.stats()["io"];
        ["normal", "priority"]
            .iter()
            .flat_map(|c| ["completed", "in_flight", "queued"].map(|k| &io[c][k]))
            .map(|v| v.as_u64().unwrap())
            .sum()
    }

    /// `tiercache stats --json`.
    pub fn stats(&self) -> serde_json::Value {
        let out = tc(&["stats", s(&self.mnt), "--json"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    pub fn pid(&self) -> i32 {
        self.stats()["pid"].as_i64().unwrap() as i32
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // A clean stop removes the daemon's log: show it with the failure.
            if let Some(text) = self
                .log
                .as_ref()
                .and_then(|l| std::fs::read_to_string(l).ok())
            {
                eprintln!(
                    "--- daemon log of {} ---\n{text}--- end ---",
                    self.mnt.display()
                );
            }
        }
        if mounted(&self.mnt) {
            let _ = tc(&["unmount", "--force", s(&self.mnt)]);
        }
        if let Some(log) = &self.log {
            let _ = std::fs::remove_file(log);
        }
    }
}

/// Mounts a tmpfs of `size` (e.g. "1m") on `dir`: a small BACKING a test can fill. The tests run
/// as root, so this must work; unmount it with `umount -l` when done.
pub fn mount_tmpfs(dir: &Path, size: &str) {
    let st = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
        .arg(dir)
        .status()
        .unwrap();
    assert!(
        st.success(),
        "cannot mount a tmpfs on {} (the tests need root)",
        dir.display()
    );
}

/// A daemon over a BACKING the test mounted itself (a small tmpfs, a loop ext4), writing back
/// within `dirty_expire_ms`. Drop force-unmounts, kills the daemon (it may be holding data it
/// cannot write back, by design) and detaches BACKING.
pub struct OwnBacking {
    pub backing: PathBuf,
    pub mnt: PathBuf,
    pub pid: i32,
    _dir: tempfile::TempDir,
}

impl OwnBacking {
    /// Serves `backing` (already mounted by the caller) on `mnt`, both inside `dir`.
    pub fn serve(
        dir: tempfile::TempDir,
        backing: PathBuf,
        mnt: PathBuf,
        memory: &str,
        dirty_expire_ms: u32,
    ) -> OwnBacking {
        Self::serve_with(dir, backing, mnt, memory, dirty_expire_ms, &[])
    }

    /// [`OwnBacking::serve`] with `extra` mount flags.
    pub fn serve_with(
        dir: tempfile::TempDir,
        backing: PathBuf,
        mnt: PathBuf,
        memory: &str,
        dirty_expire_ms: u32,
        extra: &[&str],
    ) -> OwnBacking {
        let cfg = dir.path().join("tc.toml");
        std::fs::write(
            &cfg,
            format!("flush_interval_ms = 50\ndirty_expire_ms = {dirty_expire_ms}\n"),
        )
        .unwrap();
        let mut args = vec![
            "mount",
            s(&backing),
            s(&mnt),
            "--memory",
            memory,
            "--config",
            s(&cfg),
        ];
        args.extend_from_slice(extra);
        let out = tc(&args);
        let ok = out.status.success();
        let mut b = OwnBacking {
            backing,
            mnt,
            pid: 0,
            _dir: dir,
        };
        assert!(ok, "mount failed: {}", String::from_utf8_lossy(&out.stderr));
        let stats = tc(&["stats", s(&b.mnt), "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&stats.stdout).unwrap();
        b.pid = v["pid"].as_i64().unwrap() as i32;
        b
    }
}

impl Drop for OwnBacking {
    fn drop(&mut self) {
        if mounted(&self.mnt) {
            let _ = tc(&["unmount", "--force", s(&self.mnt)]);
        }
        // SAFETY: signal 0 only probes for the daemon this test started.
        if self.pid > 0 && unsafe { libc::kill(self.pid, 0) } == 0 {
            // SAFETY: ends the daemon this test started.
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        let _ = Command::new("umount").arg("-l").arg(&self.backing).status();
    }
}

/// Reads every file of `dir` whole, `rounds` times, in name order.
pub fn read_dir_files(dir: &Path, rounds: usize) {
    use std::io::Read;
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let mut buf = Vec::new();
    for _ in 0..rounds {
        for f in &files {
            buf.clear();
            std::fs::File::open(f)
                .unwrap()
                .read_to_end(&mut buf)
                .unwrap();
        }
    }
}
