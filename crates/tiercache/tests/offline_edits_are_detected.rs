//! Issue #17 (item 5): a file edited on BACKING with its size kept and its mtime put back (`touch -r`) was served from the old cached blocks: from the SSD tier after a remount over the same cache, and from memory at the next open of a running mount, because a file's version was its size, mtime and inode number only.
#![allow(clippy::unwrap_used)]

mod support;

use std::fs::FileTimes;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use support::{mounted, s, tc, Dirs};

/// BACKING, mount point and SSD cache file in one temp dir, mounted and remounted by the test.
struct Rig {
    _dir: tempfile::TempDir,
    backing: PathBuf,
    mnt: PathBuf,
    cache: PathBuf,
}

impl Rig {
    fn new() -> Rig {
        let Dirs { dir, backing, mnt } = Dirs::new();
        let cache = dir.path().join("ssd.cache");
        Rig {
            _dir: dir,
            backing,
            mnt,
            cache,
        }
    }

    /// A 256 KiB memory tier over a 32 MiB SSD tier.
    fn mount(&self) {
        let dev = format!("{}:32M", s(&self.cache));
        let out = tc(&[
            "mount",
            s(&self.backing),
            s(&self.mnt),
            "--memory",
            "256K",
            "--flash",
            &dev,
        ]);
        assert!(
            out.status.success(),
            "mount failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(mounted(&self.mnt));
    }

    fn unmount(&self) {
        let out = tc(&["unmount", s(&self.mnt)]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
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

    fn flash_hits(&self) -> u64 {
        let st = self.stats();
        let tiers = st["tiers"].as_array().unwrap();
        let flash = tiers.iter().find(|t| t["kind"] == "flash").unwrap();
        flash["hits"].as_u64().unwrap()
    }

    /// Waits until the copies reads sent to the SSD tier have landed there.
    fn settle(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.stats()["lower"]["transit_blocks"].as_u64().unwrap() != 0 {
            assert!(Instant::now() < deadline, "fills never landed");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        if mounted(&self.mnt) {
            let _ = tc(&["unmount", "--force", s(&self.mnt)]);
        }
    }
}

const BLOCKS: u64 = 64;

fn block(i: u64, version: u64) -> Vec<u8> {
    (0..4096u64)
        .map(|j| (i.wrapping_mul(131) ^ j.wrapping_mul(7) ^ version.wrapping_mul(29)) as u8)
        .collect()
}

fn content(version: u64) -> Vec<u8> {
    (0..BLOCKS).flat_map(|i| block(i, version)).collect()
}

/// Reads every block of `p` in a scattered order (a scan would be a sequential run, which the
/// SSD tier does not take) and checks it is `version`'s.
fn read_scattered(p: &Path, version: u64, what: &str) {
    let f = std::fs::File::open(p).unwrap();
    let mut buf = vec![0u8; 4096];
    for i in 0..BLOCKS {
        let b = (i * 37) % BLOCKS;
        f.read_exact_at(&mut buf, b * 4096).unwrap();
        assert!(
            buf == block(b, version),
            "{what}: block {b} of {} is not version {version}'s",
            p.display()
        );
    }
}

/// Rewrites `p` with `version`'s bytes in place (same size), then puts its modification and
/// access times back as `touch -r` from a copy would: only the change time tells.
fn edit_keeping_size_and_mtime(p: &Path, version: u64) {
    let before = std::fs::metadata(p).unwrap();
    std::thread::sleep(Duration::from_millis(20)); // a later ctime even on a coarse clock
    let f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
    f.write_all_at(&content(version), 0).unwrap();
    f.set_times(
        FileTimes::new()
            .set_modified(before.modified().unwrap())
            .set_accessed(before.accessed().unwrap()),
    )
    .unwrap();
    drop(f);
    let after = std::fs::metadata(p).unwrap();
    assert_eq!(after.len(), before.len());
    assert_eq!(after.modified().unwrap(), before.modified().unwrap());
}

#[test]
fn an_offline_edit_that_keeps_size_and_mtime_is_not_served_from_the_ssd_after_a_remount() {
    let r = Rig::new();
    let (f, g) = (r.backing.join("f"), r.backing.join("g"));
    std::fs::write(&f, content(1)).unwrap();
    std::fs::write(&g, content(3)).unwrap();
    r.mount();
    read_scattered(&r.mnt.join("f"), 1, "first mount");
    read_scattered(&r.mnt.join("g"), 3, "first mount");
    r.settle();
    let cached = r.stats()["flash"]["valid_blocks"].as_u64().unwrap();
    assert!(
        cached >= BLOCKS,
        "the SSD tier holds too little: {}",
        r.stats()["flash"]
    );
    r.unmount();

    edit_keeping_size_and_mtime(&f, 2);

    r.mount();
    assert_eq!(r.stats()["flash"]["opened_clean"], true);
    read_scattered(&r.mnt.join("f"), 2, "after the remount");
    // The untouched file still comes from the SSD: the warm restart works, it just does not
    // trust the edited file's old blocks.
    let hits = r.flash_hits();
    read_scattered(&r.mnt.join("g"), 3, "after the remount");
    assert!(
        r.flash_hits() - hits >= BLOCKS * 9 / 10,
        "g was not served from the SSD tier after the remount"
    );
    r.unmount();
}

#[test]
fn an_edit_behind_a_running_mount_that_keeps_size_and_mtime_is_seen_at_the_next_open() {
    let r = Rig::new();
    let f = r.backing.join("f");
    std::fs::write(&f, content(1)).unwrap();
    r.mount();
    read_scattered(&r.mnt.join("f"), 1, "before the edit");
    r.settle();
    edit_keeping_size_and_mtime(&f, 2);
    read_scattered(&r.mnt.join("f"), 2, "after the edit, reopened");
    r.unmount();
}
