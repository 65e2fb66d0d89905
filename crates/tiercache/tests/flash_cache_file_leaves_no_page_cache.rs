//! Bug (issue 23, item 2): the SSD tier read and wrote its cache file with buffered I/O, so
//! every block in the tier also sat in the kernel's page cache — a second RAM copy of the SSD
//! tier under the memory tier, taking memory from every other program.
//!
//! On a real mount with `--flash` on a file of this machine's disk, 64 MiB read through the
//! mount land in the SSD tier and are read back from it: with the default I/O the cache file
//! then holds at most 2 MiB of page cache (`fincore`), with `--flash-io buffered` (the old
//! behaviour, kept on request) nearly all of the 64 MiB; `stats` says which mode. A cache file
//! on tmpfs (memory already) is `buffered` under `auto`, and an uncached mode asked for there
//! is refused with one line.
#![allow(clippy::unwrap_used)]

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;
use support::{mount_tmpfs, mounted, s, tc};

const MIB: u64 = 1 << 20;
/// The file streamed through the mount.
const LEN: usize = 64 << 20;

/// BACKING, mount point and cache file in one temp dir on this machine's disk.
struct Rig {
    _dir: tempfile::TempDir,
    backing: PathBuf,
    mnt: PathBuf,
    cache: PathBuf,
}

impl Rig {
    fn new() -> Rig {
        let dir = tempfile::tempdir().unwrap();
        let backing = dir.path().join("slow");
        let mnt = dir.path().join("fast");
        std::fs::create_dir_all(&backing).unwrap();
        std::fs::create_dir_all(&mnt).unwrap();
        let cache = dir.path().join("ssd.cache");
        Rig {
            _dir: dir,
            backing,
            mnt,
            cache,
        }
    }

    /// `mount --memory 4M --flash CACHE:256M --flash-seq-cutoff 1T extra...` (no cutoff: the
    /// sequential read is allocated in the tier).
    fn try_mount(&self, extra: &[&str]) -> std::process::Output {
        let dev = format!("{}:256M", s(&self.cache));
        let mut args = vec![
            "mount",
            s(&self.backing),
            s(&self.mnt),
            "--memory",
            "4M",
            "--flash",
            &dev,
            "--flash-seq-cutoff",
            "1T",
        ];
        args.extend_from_slice(extra);
        tc(&args)
    }

    fn mount(&self, extra: &[&str]) {
        let out = self.try_mount(extra);
        assert!(
            out.status.success(),
            "mount failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(mounted(&self.mnt));
    }

    fn stats(&self) -> serde_json::Value {
        let out = tc(&["stats", s(&self.mnt), "--json"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    fn flash_counter(&self, name: &str) -> u64 {
        let st = self.stats();
        let t = st["tiers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["kind"] == "flash")
            .unwrap()
            .clone();
        t[name].as_u64().unwrap()
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        if mounted(&self.mnt) {
            let _ = tc(&["unmount", "--force", s(&self.mnt)]);
        }
    }
}

/// Bytes of `path` in the page cache, as util-linux's `fincore` counts them.
fn cached_bytes(path: &Path) -> u64 {
    let out = std::process::Command::new("fincore")
        .args(["--bytes", "--noheadings", "--output", "RES"])
        .arg(path)
        .output()
        .expect("fincore (util-linux) is needed to see the page cache");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// `n` bytes that differ everywhere (xorshift).
fn pattern(n: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut v = Vec::with_capacity(n);
    while v.len() < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(n);
    v
}

/// Mounts with `extra`, reads the 64 MiB file through the mount until nearly all of it is in
/// the SSD tier (fills are queued and dropped under load: one read may not do), then once more
/// from the tier; returns `flash.io_mode` and the page cache the cache file holds once the
/// mount is quiet.
fn stream_through(extra: &[&str]) -> (String, u64) {
    let r = Rig::new();
    let want = pattern(LEN);
    std::fs::write(r.backing.join("big.dat"), &want).unwrap();
    r.mount(extra);
    for pass in 1.. {
        assert!(std::fs::read(r.mnt.join("big.dat")).unwrap() == want);
        // Nearly every block in the SSD tier (the 4 MiB memory tier keeps a few).
        let held = r.flash_counter("used_blocks");
        if held * 4096 >= 60 * MIB {
            break;
        }
        assert!(pass < 8, "{held} blocks in the SSD tier after {pass} reads");
        std::thread::sleep(Duration::from_millis(200));
    }
    let hits = r.flash_counter("hits");
    assert!(std::fs::read(r.mnt.join("big.dat")).unwrap() == want);
    let served = r.flash_counter("hits") - hits;
    assert!(
        served * 4096 >= 56 * MIB,
        "{served} blocks came from the SSD tier"
    );
    let mode = r.stats()["flash"]["io_mode"].as_str().unwrap().to_string();
    // Quiet: the tier's cleaning ticks (every 20 ms) drop what the last interval left.
    std::thread::sleep(Duration::from_millis(500));
    let cached = cached_bytes(&r.cache);
    let out = tc(&["unmount", s(&r.mnt)]);
    assert!(out.status.success());
    (mode, cached)
}

#[test]
fn an_ssd_tier_leaves_its_cache_file_out_of_the_page_cache() {
    let (mode, cached) = stream_through(&[]);
    eprintln!("default ({mode}): the cache file holds {cached} bytes of page cache");
    assert!(
        ["fadvise", "dontcache", "direct"].contains(&mode.as_str()),
        "io_mode {mode} on a disk file system"
    );
    // The tier's metadata (records, checksum tables) goes the same way as its blocks: the
    // bound is for pages a drop found still being written out.
    assert!(cached <= 2 * MIB, "{mode}: {cached} bytes of page cache");

    // What it did before, and still does when asked: the 64 MiB stay cached.
    let (mode, cached) = stream_through(&["--flash-io", "buffered"]);
    eprintln!("buffered: the cache file holds {cached} bytes of page cache");
    assert_eq!(mode, "buffered");
    assert!(cached >= 56 * MIB, "buffered: {cached} bytes of page cache");
}

#[test]
fn a_cache_file_on_tmpfs_is_buffered_and_an_uncached_mode_there_is_refused() {
    let r = Rig::new();
    let mem = Tmpfs::new(r._dir.path().join("mem"));
    let cache = mem.0.join("ssd.cache");
    let dev = format!("{}:16M", s(&cache));
    let mount = |extra: &[&str]| {
        let mut args = vec!["mount", s(&r.backing), s(&r.mnt), "--flash", &dev];
        args.extend_from_slice(extra);
        tc(&args)
    };
    let out = mount(&["--flash-io", "direct"]);
    let err = String::from_utf8_lossy(&out.stderr);
    let first = err.lines().next().unwrap_or_default();
    assert!(!out.status.success(), "{err}");
    assert!(
        first.contains("--flash-io") && first.contains("tmpfs") && first.contains(s(&cache)),
        "{err}"
    );
    assert!(!mounted(&r.mnt));
    // Nothing half done: the file it created for the refused mount is gone.
    assert!(!cache.exists());
    let out = mount(&[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(r.stats()["flash"]["io_mode"], "buffered");
    let out = tc(&["unmount", s(&r.mnt)]);
    assert!(out.status.success());
}

/// A 64 MiB tmpfs mounted at a path, lazily unmounted when dropped (a failed test too).
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn new(at: PathBuf) -> Tmpfs {
        std::fs::create_dir_all(&at).unwrap();
        mount_tmpfs(&at, "64m");
        Tmpfs(at)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}
