//! Bug: the daemon pinned one descriptor per inode the kernel held and never raised its
//! open-files limit, so on a tree of a few thousand files `ls` came back silently short, `find`
//! and `tar x` failed with "Too many open files", and the control socket stopped answering.
//!
//! Here the daemon runs under `ulimit -n 1024` (soft and hard) while real tools walk and fill
//! trees far larger than that through the mount.
#![allow(clippy::unwrap_used)]

mod support;

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write as _;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use support::{s, tc, Mount};

const LIMIT: u32 = 1024;

/// Runs a shell command; panics with its stderr unless it exits 0 with nothing on stderr.
fn sh(cmd: &str) -> String {
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!("set -o pipefail; {cmd}"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && err.trim().is_empty(),
        "`{cmd}` failed ({}): {}",
        out.status,
        err.lines().take(5).collect::<Vec<_>>().join(" | ")
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `dirs` directories of `per_dir` files (sizes 0..4000 B, a few modes), written natively.
fn make_tree(root: &Path, dirs: usize, per_dir: usize) {
    std::fs::create_dir_all(root).unwrap();
    let mut buf = vec![0u8; 4000];
    for d in 0..dirs {
        let dir = root.join(format!("dir{d:04}"));
        std::fs::create_dir(&dir).unwrap();
        for f in 0..per_dir {
            let n = (d * 7919 + f * 104_729) % 4000;
            for (i, b) in buf[..n].iter_mut().enumerate() {
                *b = (i + d + f) as u8;
            }
            let p = dir.join(format!("file{f:03}.dat"));
            File::create(&p).unwrap().write_all(&buf[..n]).unwrap();
            if f % 5 == 0 {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
            }
        }
    }
}

/// `ls -lR` of `dir` without the "total" lines (block counts depend on write-back) and the
/// directory headers (paths differ), sorted per directory by ls itself.
fn ls_lr(dir: &Path) -> Vec<String> {
    sh(&format!(
        "cd {} && LC_ALL=C ls -lR --time-style=+%s .",
        s(dir)
    ))
    .lines()
    .filter(|l| !l.starts_with("total "))
    .map(str::to_owned)
    .collect()
}

/// name → (mode, size, mtime) of every entry in a tar stream listing.
fn tar_listing(dir: &Path) -> BTreeMap<String, String> {
    sh(&format!(
        "tar cf - -C {} . | LC_ALL=C tar tvf - --numeric-owner --full-time",
        s(dir)
    ))
    .lines()
    .map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        // mode owner size date time name
        (
            f[5..].join(" "),
            format!("{} {} {} {}", f[0], f[2], f[3], f[4]),
        )
    })
    .collect()
}

fn rss_kib(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap()
}

#[test]
fn tools_walk_and_fill_200k_files_under_a_1024_descriptor_limit() {
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("src");
    make_tree(&src, 2000, 100);
    let archive = work.path().join("tree.tar");
    sh(&format!("tar cf {} -C {} .", s(&archive), s(&src)));

    let m = Mount::with_fd_limit(Some(LIMIT), &["--memory", "64M"]);
    let pid = m.pid();
    let st = m.stats();
    assert_eq!(st["inodes"]["mode"], "handles", "{}", st["inodes"]);
    assert_eq!(st["inodes"]["nofile_limit"], LIMIT as u64);

    // tar x of 200,000 files into the mount, then the walks, each compared with the source
    sh(&format!("tar xf {} -C {}", s(&archive), s(&m.mnt)));
    let small = |d: &Path| {
        let mut v: Vec<String> = sh(&format!("cd {} && find . -type f -size -2", s(d)))
            .lines()
            .map(str::to_owned)
            .collect();
        v.sort();
        v
    };
    let want_small = small(&src);
    assert!(want_small.len() > 10_000, "the tree has small files");
    assert_eq!(small(&m.mnt), want_small, "find -size");
    assert_eq!(ls_lr(&m.mnt), ls_lr(&src), "ls -lR");
    let du = |d: &Path| sh(&format!("du -s --apparent-size -b {}/dir0*", s(d)));
    assert_eq!(
        du(&m.mnt).replace(s(&m.mnt), ""),
        du(&src).replace(s(&src), "")
    );
    let listing = tar_listing(&m.mnt);
    assert_eq!(listing.len(), 2000 * 100 + 2000 + 1);
    assert_eq!(listing, tar_listing(&src), "tar of the whole mount");
    // contents of a sample, through the mount and on BACKING after a flush
    let st = m.stats();
    let out = tc(&["flush", s(&m.mnt)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for i in 0..200 {
        let rel = format!("dir{:04}/file{:03}.dat", (i * 37) % 2000, (i * 13) % 100);
        let want = std::fs::read(src.join(&rel)).unwrap();
        assert_eq!(std::fs::read(m.mnt.join(&rel)).unwrap(), want, "{rel}");
        assert_eq!(
            std::fs::read(m.backing.join(&rel)).unwrap(),
            want,
            "{rel} on BACKING"
        );
    }
    let inodes = &st["inodes"];
    let known = inodes["known"].as_u64().unwrap();
    assert!(
        inodes["cached_fds"].as_u64().unwrap() <= u64::from(LIMIT) / 4,
        "{inodes}"
    );
    eprintln!(
        "after the walks: {known} inodes known, {} B each, daemon RSS {} MiB (memory tier 64 MiB)",
        inodes["bytes_per_inode"],
        rss_kib(pid) / 1024
    );
    // the control socket still answers; unmount writes back and stops
    let out = tc(&["unmount", s(&m.mnt)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(ls_lr(&m.backing), ls_lr(&src), "BACKING after unmount");
}

#[test]
fn control_socket_answers_when_the_daemon_is_out_of_descriptors() {
    let m = Mount::with_fd_limit(Some(LIMIT), &[]);
    for i in 0..(LIMIT + 200) {
        std::fs::write(m.backing.join(format!("f{i}")), b"x").unwrap();
    }
    // every open file on the mount holds one backing descriptor in the daemon
    let mut open = Vec::new();
    let mut refused = None;
    for i in 0..(LIMIT + 200) {
        match File::open(m.mnt.join(format!("f{i}"))) {
            Ok(f) => open.push(f),
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
    }
    let e = refused.expect("the daemon cannot hold more open files than its limit");
    assert!(
        matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)),
        "an open beyond the limit fails with EMFILE, got {e}"
    );
    let st = m.stats();
    assert!(
        st["inodes"]["fd_exhausted"].as_u64().unwrap() > 0,
        "{}",
        st["inodes"]
    );
    let out = tc(&["flush", s(&m.mnt)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = tc(&["unmount", s(&m.mnt)]);
    assert!(!out.status.success(), "busy: files are open");
    drop(open);
    let out = tc(&["unmount", s(&m.mnt)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn concurrent_walkers_see_complete_listings_while_files_come_and_go() {
    let m = Mount::with_fd_limit(Some(LIMIT), &[]);
    make_tree(&m.backing.join("stable"), 40, 100);
    std::fs::create_dir(m.backing.join("churn")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let walks = Arc::new(AtomicU64::new(0));
    let churners: Vec<_> = (0..2)
        .map(|t| {
            let dir = m.mnt.join("churn");
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let p = dir.join(format!("t{t}-{}", i % 500));
                    if i % 3 == 2 {
                        let _ = std::fs::remove_file(&p);
                    } else {
                        std::fs::write(&p, i.to_le_bytes()).unwrap();
                    }
                    i += 1;
                }
            })
        })
        .collect();
    let walkers: Vec<_> = (0..3)
        .map(|_| {
            let root = m.mnt.clone();
            let walks = Arc::clone(&walks);
            std::thread::spawn(move || {
                for _ in 0..4 {
                    // the stable part is complete every time; the churning part may change
                    let out = Command::new("find")
                        .arg(root.join("stable"))
                        .arg("-type")
                        .arg("f")
                        .output()
                        .unwrap();
                    assert!(
                        out.status.success(),
                        "{}",
                        String::from_utf8_lossy(&out.stderr)
                    );
                    assert_eq!(out.stdout.iter().filter(|&&b| b == b'\n').count(), 4000);
                    for e in std::fs::read_dir(root.join("churn")).unwrap() {
                        let e = e.unwrap();
                        match std::fs::symlink_metadata(e.path()) {
                            Ok(_) => {}
                            Err(err) => assert_eq!(err.kind(), std::io::ErrorKind::NotFound),
                        }
                    }
                    walks.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for w in walkers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for c in churners {
        c.join().unwrap();
    }
    assert_eq!(walks.load(Ordering::Relaxed), 12);
    let out = tc(&["unmount", s(&m.mnt)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
