//! Issue #17 (item 5): a file's version includes BACKING's change time, which every change the cache makes moves too; such a change must not make the next open take it for an edit behind the cache's back and drop the file's cached blocks — in memory, or in the SSD tier once the file's state is gone (a written and flushed file lost its SSD copies there before: its version followed the mtime the write-back moved).
#![allow(clippy::unwrap_used)]

mod support;

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};
use support::{mounted, s, tc, Dirs};

/// BACKING, mount point and SSD cache file in one temp dir.
struct Rig {
    _dir: tempfile::TempDir,
    backing: PathBuf,
    mnt: PathBuf,
}

impl Rig {
    /// A 256 KiB memory tier (64 blocks) over a 32 MiB SSD tier.
    fn mounted() -> Rig {
        let Dirs { dir, backing, mnt } = Dirs::new();
        let dev = format!("{}:32M", s(&dir.path().join("ssd.cache")));
        let out = tc(&[
            "mount",
            s(&backing),
            s(&mnt),
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
        assert!(mounted(&mnt));
        Rig {
            _dir: dir,
            backing,
            mnt,
        }
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

    fn backing_reads(&self) -> u64 {
        self.stats()["backing"]["reads"].as_u64().unwrap()
    }

    fn flash_hits(&self) -> u64 {
        let st = self.stats();
        let tiers = st["tiers"].as_array().unwrap();
        let flash = tiers.iter().find(|t| t["kind"] == "flash").unwrap();
        flash["hits"].as_u64().unwrap()
    }

    /// Waits until the copies sent to the SSD tier have landed there.
    fn settle(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.stats()["lower"]["transit_blocks"].as_u64().unwrap() != 0 {
            assert!(Instant::now() < deadline, "copies never landed");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn flush(&self) {
        let out = tc(&["flush", s(&self.mnt)]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        if mounted(&self.mnt) {
            let _ = tc(&["unmount", "--force", s(&self.mnt)]);
        }
    }
}

fn block(i: u64, version: u64) -> Vec<u8> {
    (0..4096u64)
        .map(|j| (i.wrapping_mul(131) ^ j.wrapping_mul(7) ^ version.wrapping_mul(29)) as u8)
        .collect()
}

fn content(blocks: u64, version: u64) -> Vec<u8> {
    (0..blocks).flat_map(|i| block(i, version)).collect()
}

/// Opens `p` and reads every block in a scattered order (no sequential run); returns its bytes.
fn read_scattered(p: &Path, blocks: u64) -> Vec<u8> {
    let f = File::open(p).unwrap();
    let mut all = vec![0u8; (blocks * 4096) as usize];
    for i in 0..blocks {
        let b = (i * 37) % blocks;
        let at = (b * 4096) as usize;
        f.read_exact_at(&mut all[at..at + 4096], b * 4096).unwrap();
    }
    all
}

fn setxattr(p: &Path, name: &str, value: Option<&[u8]>) {
    let path = CString::new(p.as_os_str().as_bytes()).unwrap();
    let name = CString::new(name).unwrap();
    // SAFETY: NUL-terminated strings and a value buffer valid for its length.
    let rc = unsafe {
        match value {
            Some(v) => libc::setxattr(path.as_ptr(), name.as_ptr(), v.as_ptr().cast(), v.len(), 0),
            None => libc::removexattr(path.as_ptr(), name.as_ptr()),
        }
    };
    assert_eq!(
        rc,
        0,
        "xattr on {}: {}",
        p.display(),
        std::io::Error::last_os_error()
    );
}

/// One change made through the mount.
type Change<'a> = Box<dyn Fn() + 'a>;

/// `utimensat` by path (no descriptor open) of the modification and access times.
fn set_mtime(p: &Path, t: SystemTime) {
    let path = CString::new(p.as_os_str().as_bytes()).unwrap();
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap();
    let ts = libc::timespec {
        tv_sec: d.as_secs() as libc::time_t,
        tv_nsec: libc::c_long::from(d.subsec_nanos()),
    };
    // SAFETY: a NUL-terminated path and two valid timespecs.
    let rc = unsafe { libc::utimensat(libc::AT_FDCWD, path.as_ptr(), [ts, ts].as_ptr(), 0) };
    assert_eq!(
        rc,
        0,
        "utimensat {}: {}",
        p.display(),
        std::io::Error::last_os_error()
    );
}

/// Each change the FUSE layer makes to a cached file's metadata (its ctime moves), then a
/// close and an open: the file's blocks are still served from memory.
#[test]
fn metadata_changes_through_the_mount_keep_the_blocks_in_memory() {
    let r = Rig::mounted();
    const N: u64 = 16;
    std::fs::write(r.backing.join("f"), content(N, 1)).unwrap();
    let f = r.mnt.join("f");
    let (g, h) = (r.mnt.join("g"), r.mnt.join("h"));
    assert_eq!(read_scattered(&f, N), content(N, 1));
    let when = SystemTime::UNIX_EPOCH + Duration::from_secs(1_500_000_000);
    let changes: Vec<(&str, Change)> = vec![
        (
            "chmod",
            Box::new(|| std::fs::set_permissions(&f, PermissionsExt::from_mode(0o640)).unwrap()),
        ),
        (
            "chown",
            Box::new(|| std::os::unix::fs::chown(&f, Some(1234), Some(1234)).unwrap()),
        ),
        ("setxattr", Box::new(|| setxattr(&f, "user.tc", Some(b"v")))),
        ("removexattr", Box::new(|| setxattr(&f, "user.tc", None))),
        ("link", Box::new(|| std::fs::hard_link(&f, &g).unwrap())),
        (
            "unlink of the other name",
            Box::new(|| std::fs::remove_file(&g).unwrap()),
        ),
        (
            "rename away and back",
            Box::new(|| {
                std::fs::rename(&f, &h).unwrap();
                std::fs::rename(&h, &f).unwrap();
            }),
        ),
        // by path: the file is closed, the cache holds no descriptor of it
        ("utimes", Box::new(|| set_mtime(&f, when))),
    ];
    // BACKING's inode, whatever its name
    let inode = File::open(r.backing.join("f")).unwrap();
    let ctime = || inode.metadata().unwrap().ctime_nsec();
    for (what, change) in changes {
        let reads = r.backing_reads();
        let before = ctime();
        std::thread::sleep(Duration::from_millis(10)); // a later ctime even on a coarse clock
        change();
        assert_ne!(
            ctime(),
            before,
            "{what} did not move BACKING's ctime: this shows nothing"
        );
        assert_eq!(read_scattered(&f, N), content(N, 1), "after {what}");
        assert_eq!(
            r.backing_reads(),
            reads,
            "after {what} the next open dropped the file's blocks: they were read again"
        );
    }
}

/// A file written through the mount, written back (`tiercache flush`), closed and opened
/// again: its blocks are still served from memory.
#[test]
fn a_written_and_flushed_file_keeps_its_blocks_in_memory() {
    let r = Rig::mounted();
    const N: u64 = 16;
    std::fs::write(r.backing.join("f"), content(N, 1)).unwrap();
    let f = r.mnt.join("f");
    let mut want = read_scattered(&f, N);
    let w = OpenOptions::new().write(true).open(&f).unwrap();
    w.write_all_at(&block(3, 7), 3 * 4096).unwrap();
    want[3 * 4096..4 * 4096].copy_from_slice(&block(3, 7));
    drop(w);
    r.flush();
    assert_eq!(std::fs::read(r.backing.join("f")).unwrap(), want);
    let reads = r.backing_reads();
    assert_eq!(read_scattered(&f, N), want);
    assert_eq!(
        r.backing_reads(),
        reads,
        "the write-back cost the file its blocks"
    );
}

/// Once the file's state is gone (closed, clean, nothing left in memory), its blocks in the SSD
/// tier are still its own after a chmod through the mount, and after a write and a flush.
#[test]
fn the_ssd_copies_outlive_the_file_state_after_the_caches_own_changes() {
    let r = Rig::mounted();
    const N: u64 = 32;
    const BIG: u64 = 512;
    for (name, blocks, v) in [("a", N, 1), ("w", N, 2), ("big", BIG, 3)] {
        std::fs::write(r.backing.join(name), content(blocks, v)).unwrap();
    }
    let (a, w) = (r.mnt.join("a"), r.mnt.join("w"));
    assert_eq!(read_scattered(&a, N), content(N, 1));
    let mut want_w = read_scattered(&w, N);
    r.settle();
    std::fs::set_permissions(&a, PermissionsExt::from_mode(0o600)).unwrap();
    let fw = OpenOptions::new().write(true).open(&w).unwrap();
    fw.write_all_at(&block(5, 9), 5 * 4096).unwrap();
    want_w[5 * 4096..6 * 4096].copy_from_slice(&block(5, 9));
    drop(fw);
    r.flush();
    // 512 blocks through a 64-block memory tier, twice: a and w leave memory (for the SSD).
    for _ in 0..2 {
        assert_eq!(read_scattered(&r.mnt.join("big"), BIG), content(BIG, 3));
    }
    r.settle();
    // The rewritten block of w went from memory to BACKING (`flush`): the SSD tier (write-back
    // mode) keeps no copy of it, so that one block is read from BACKING. All others are the
    // SSD's, under the version the file's state left behind.
    for (p, want, what, rewritten) in [
        (&a, content(N, 1), "chmod", 0),
        (&w, want_w, "write and flush", 1),
    ] {
        let (reads, hits) = (r.backing_reads(), r.flash_hits());
        assert_eq!(read_scattered(p, N), want, "{what}");
        let (reads, hits) = (r.backing_reads() - reads, r.flash_hits() - hits);
        assert!(
            reads <= rewritten && hits >= N - rewritten,
            "after {what}: {reads} blocks read from BACKING, {hits} from the SSD tier: its \
             copies were not taken for the file's own"
        );
    }
}
