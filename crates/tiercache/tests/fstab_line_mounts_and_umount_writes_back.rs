//! tiercache could not be put in /etc/fstab nor mounted with `mount -t fuse.tiercache` (it only
//! took `tiercache mount BACKING MOUNTPOINT --flags`): an fstab line now mounts with `mount -a`,
//! its `-o` options reach the daemon, a plain `umount` writes everything back, and a bad option
//! fails with one line, mounting nothing.
#![allow(clippy::unwrap_used)]

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};
use support::{s, tc};

/// Puts this thread, and every process it starts, in a mount namespace of its own (nothing
/// propagates out) where `/usr/local/sbin` holds the built `tiercache`. mount(8) runs its
/// helpers with PATH reset to the system's (util-linux drops the caller's), and mount.fuse3
/// finds `tiercache` through that PATH, as it finds an installed one.
fn tiercache_in_system_path(scratch: &Path) {
    let bin = scratch.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_tiercache"), bin.join("tiercache")).unwrap();
    // SAFETY: plain system calls on this thread; the strings outlive them.
    unsafe {
        assert_eq!(libc::unshare(libc::CLONE_NEWNS), 0, "unshare: needs root");
        let root = c"/";
        let rc = libc::mount(
            std::ptr::null(),
            root.as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        );
        assert_eq!(rc, 0, "make / private");
        let src = std::ffi::CString::new(s(&bin)).unwrap();
        let target = c"/usr/local/sbin";
        let rc = libc::mount(
            src.as_ptr(),
            target.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        );
        assert_eq!(rc, 0, "bind {} on /usr/local/sbin", bin.display());
    }
}

/// This thread's mount table (its namespace is not the process's).
fn mountinfo() -> String {
    std::fs::read_to_string("/proc/thread-self/mountinfo").unwrap()
}

fn mounted(p: &Path) -> bool {
    mountinfo()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(s(p)))
}

fn mount_cmd(args: &[&str]) -> Output {
    Command::new("mount").args(args).output().unwrap()
}

/// A temporary BACKING and mount point (canonical), and a scratch directory for files.
struct Dirs {
    _dir: tempfile::TempDir,
    root: PathBuf,
    backing: PathBuf,
    mnt: PathBuf,
}

impl Dirs {
    fn new() -> Dirs {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let (backing, mnt) = (root.join("slow"), root.join("fast"));
        std::fs::create_dir_all(backing.join("top")).unwrap();
        std::fs::create_dir_all(&mnt).unwrap();
        tiercache_in_system_path(&root);
        Dirs {
            _dir: dir,
            root,
            backing,
            mnt,
        }
    }
}

impl Drop for Dirs {
    fn drop(&mut self) {
        if mounted(&self.mnt) {
            let _ = tc(&["unmount", "--force", s(&self.mnt)]);
        }
    }
}

fn wait_gone(pid: i32) {
    let start = Instant::now();
    // SAFETY: signal 0 only probes for the daemon this test started.
    while unsafe { libc::kill(pid, 0) } == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "daemon {pid} still running 120 s after umount"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Bytes that differ from file to file and block to block.
fn content(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn mountinfo_options(mnt: &Path) -> String {
    mountinfo()
        .lines()
        .find(|l| l.split(' ').nth(4) == Some(s(mnt)))
        .map(|l| l.split(' ').nth(5).unwrap_or_default().to_string())
        .unwrap_or_default()
}

#[test]
fn an_fstab_line_mounts_with_its_options_and_umount_writes_everything_back() {
    let d = Dirs::new();
    // Nothing is written back before the unmount but by it.
    let cfg = d.root.join("tc.toml");
    std::fs::write(
        &cfg,
        "flush_interval_ms = 600000\ndirty_expire_ms = 600000\n",
    )
    .unwrap();
    let fstab = d.root.join("fstab");
    std::fs::write(
        &fstab,
        format!(
            "# a comment\n{} {} fuse.tiercache defaults,memory=64M,block_size=8K,priority=top,\
             config={},nofail,_netdev,x-systemd.mount-timeout=30,allow_other,nodev,nosuid,\
             noatime 0 0\n",
            s(&d.backing),
            s(&d.mnt),
            s(&cfg)
        ),
    )
    .unwrap();
    let out = mount_cmd(&["-T", s(&fstab), "-a"]);
    assert!(
        out.status.success(),
        "mount -a: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(mounted(&d.mnt), "mount -a returned before the mount was up");
    // `mount -a` again (as at every boot step that runs it): already mounted is no error.
    let again = mount_cmd(&["-T", s(&fstab), "-a"]);
    assert!(
        again.status.success(),
        "mount -a again: {}",
        String::from_utf8_lossy(&again.stderr)
    );
    let opts = mountinfo_options(&d.mnt);
    for o in ["nodev", "nosuid", "noatime"] {
        assert!(opts.split(',').any(|x| x == o), "{o} missing from {opts}");
    }
    let v = support::json_of(&["stats", s(&d.mnt), "--json"], &[]);
    assert_eq!(v["memory"]["block_size"], 8192);
    assert_eq!(v["memory"]["capacity_blocks"], 64 * 1024 / 8);
    let rules = support::json_of(&["priority", "list", s(&d.mnt), "--json"], &[]);
    assert_eq!(rules[0]["dir"], "top", "{rules}");
    let pid = v["pid"].as_i64().unwrap() as i32;
    let files: Vec<(String, Vec<u8>)> = (0..6u64)
        .map(|i| {
            let name = if i % 2 == 0 {
                format!("top/f{i}")
            } else {
                format!("f{i}")
            };
            (name, content(i + 1, 300_000 + 4097 * i as usize))
        })
        .collect();
    for (name, data) in &files {
        std::fs::write(d.mnt.join(name), data).unwrap();
    }
    let dirty = support::json_of(&["stats", s(&d.mnt), "--json"], &[])["memory"]["dirty_blocks"]
        .as_u64()
        .unwrap();
    assert!(dirty > 0, "the writes were written back before the unmount");
    let st = Command::new("umount").arg(&d.mnt).status().unwrap();
    assert!(st.success());
    wait_gone(pid);
    for (name, data) in &files {
        let got = std::fs::read(d.backing.join(name)).unwrap();
        assert!(got == *data, "{name}: BACKING differs after umount");
    }
}

#[test]
fn mount_t_takes_ro_and_the_mount_refuses_writes() {
    let d = Dirs::new();
    std::fs::write(d.backing.join("a"), b"hello").unwrap();
    let out = mount_cmd(&[
        "-t",
        "fuse.tiercache",
        s(&d.backing),
        s(&d.mnt),
        "-o",
        "ro,memory=32M",
    ]);
    assert!(
        out.status.success(),
        "mount -t: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read(d.mnt.join("a")).unwrap(), b"hello");
    // The `dev` and `suid` mount.fuse3 adds to every list are not taken.
    let opts = mountinfo_options(&d.mnt);
    for o in ["ro", "nodev", "nosuid"] {
        assert!(opts.split(',').any(|x| x == o), "{o} missing from {opts}");
    }
    let e = std::fs::write(d.mnt.join("b"), b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");
    let pid = support::json_of(&["stats", s(&d.mnt), "--json"], &[])["pid"]
        .as_i64()
        .unwrap() as i32;
    assert!(Command::new("umount")
        .arg(&d.mnt)
        .status()
        .unwrap()
        .success());
    wait_gone(pid);
}

/// The lines of `stderr` that tiercache wrote.
fn own_lines(stderr: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(stderr)
        .lines()
        .filter(|l| l.contains("tiercache"))
        .map(str::to_string)
        .collect()
}

#[test]
fn a_bad_option_fails_with_one_line_and_mounts_nothing() {
    let d = Dirs::new();
    let fstab = d.root.join("fstab");
    std::fs::write(
        &fstab,
        format!(
            "{} {} fuse.tiercache memory=64M,bogus_option=1 0 0\n",
            s(&d.backing),
            s(&d.mnt)
        ),
    )
    .unwrap();
    let out = mount_cmd(&["-T", s(&fstab), "-a"]);
    assert!(!out.status.success(), "mount -a took a bad option");
    let lines = own_lines(&out.stderr);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("-o bogus_option=1: unknown option"),
        "{lines:?}"
    );
    assert!(!mounted(&d.mnt));
    // Called directly, as mount.fuse3 does: one line, nothing else.
    for (opts, names) in [
        ("memory=64M,bogus", "-o bogus: unknown option"),
        ("memory", "-o memory: needs a value"),
        ("policy=nope", "nope"),
        ("memory=lots", "-o memory"),
        ("ro,foreground", "-o foreground: unknown option"),
    ] {
        let out = tc(&[s(&d.backing), s(&d.mnt), "-o", opts]);
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(!out.status.success(), "-o {opts} mounted");
        assert_eq!(err.lines().count(), 1, "-o {opts}: {err}");
        assert!(
            err.starts_with("tiercache: ") && err.contains(names),
            "{err}"
        );
        assert!(!mounted(&d.mnt), "-o {opts} left a mount");
    }
}
