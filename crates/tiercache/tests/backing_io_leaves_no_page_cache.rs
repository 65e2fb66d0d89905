//! Bug: the daemon read and wrote BACKING with plain buffered I/O, so every block passing through
//! the mount also stayed in the kernel page cache as BACKING's pages: reading 1 GiB through a
//! 64 MiB mount left 1 GiB cached, writing 512 MiB and flushing left 512 MiB, and a backup
//! streaming through the mount evicted other programs' pages — an unbounded second copy beside
//! the memory tier.
//!
//! BACKING here is a directory under the cargo target dir, which must be on a disk file system
//! (on tmpfs the page cache is the storage, and nothing can be measured): the tests say so and
//! fail otherwise. Residency is measured per file with `fincore` (util-linux). The bystander
//! test needs a memory cgroup it can create (cgroup v1's memory controller, or v2 with memory
//! delegated) and fails with a clear message when there is none.
#![allow(clippy::unwrap_used)]

mod support;

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::{mounted, s, tc};

const MIB: u64 = 1 << 20;
/// The most page cache a file may keep after streaming through the mount.
const LEFT_MAX: u64 = 32 * MIB;

/// A BACKING directory and a mount point on a disk file system, removed on drop.
struct Dirs {
    backing: PathBuf,
    mnt: PathBuf,
    _dir: tempfile::TempDir,
}

fn disk_dirs() -> Dirs {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let f = std::fs::File::open(dir.path()).unwrap();
    // SAFETY: all-zero is a valid `statfs` (plain integers).
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid out pointer and `f` an open descriptor.
    assert_eq!(unsafe { libc::fstatfs(f.as_raw_fd(), &mut st) }, 0);
    #[allow(clippy::useless_conversion)]
    let magic = i64::from(st.f_type);
    assert!(
        magic != 0x0102_1994 && magic != 0x8584_58f6,
        "{} is on tmpfs/ramfs: these tests need BACKING on a disk file system (set \
         CARGO_TARGET_DIR to a directory on disk)",
        dir.path().display()
    );
    let backing = dir.path().join("slow");
    let mnt = dir.path().join("fast");
    std::fs::create_dir(&backing).unwrap();
    std::fs::create_dir(&mnt).unwrap();
    Dirs {
        backing,
        mnt,
        _dir: dir,
    }
}

/// Bytes of `path` in the page cache, by `fincore`.
fn resident(path: &Path) -> u64 {
    let out = Command::new("fincore")
        .args(["--bytes", "--noheadings", "--output", "RES"])
        .arg(path)
        .output()
        .unwrap_or_else(|e| panic!("fincore (util-linux) is needed: {e}"));
    assert!(out.status.success(), "fincore {}: {out:?}", path.display());
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// Writes `size` bytes of a pattern (distinct per MiB) to `path`, syncs it and drops its pages,
/// so that whoever reads it next brings it into the page cache (and is charged for it).
fn write_cold(path: &Path, size: u64) {
    let mut f = std::fs::File::create(path).unwrap();
    let mut chunk = vec![0u8; MIB as usize];
    for i in 0..size / MIB {
        fill(&mut chunk, i);
        f.write_all(&chunk).unwrap();
    }
    f.sync_all().unwrap();
    drop_cache(path);
}

fn fill(chunk: &mut [u8], seed: u64) {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for w in chunk.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        w.copy_from_slice(&x.to_le_bytes()[..w.len()]);
    }
}

fn drop_cache(path: &Path) {
    let f = std::fs::File::open(path).unwrap();
    // SAFETY: posix_fadvise passes no memory; `f` keeps the descriptor open.
    let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(rc, 0);
    assert!(
        resident(path) <= MIB,
        "{}: could not drop its pages before the test",
        path.display()
    );
}

/// Reads `path` to the end in 1 MiB requests; returns the bytes read.
fn stream(path: &Path) -> u64 {
    let mut f = std::fs::File::open(path).unwrap();
    let mut buf = vec![0u8; MIB as usize];
    let mut total = 0;
    loop {
        let n = f.read(&mut buf).unwrap();
        if n == 0 {
            return total;
        }
        total += n as u64;
    }
}

/// A background `tiercache mount` of `d`, force-unmounted on drop. `wrap` runs it through
/// `sh -c` (e.g. to enter a cgroup first).
struct Mounted<'a> {
    d: &'a Dirs,
}

impl<'a> Mounted<'a> {
    fn new(d: &'a Dirs, extra: &[&str], wrap: Option<&str>) -> Mounted<'a> {
        let mut args = vec!["mount", s(&d.backing), s(&d.mnt), "--memory", "64M"];
        args.extend_from_slice(extra);
        let out = match wrap {
            None => tc(&args),
            Some(script) => Command::new("sh")
                .arg("-c")
                .arg(format!("{script} && exec \"$0\" \"$@\""))
                .arg(env!("CARGO_BIN_EXE_tiercache"))
                .args(&args)
                .output()
                .unwrap(),
        };
        assert!(out.status.success(), "mount failed: {out:?}");
        assert!(mounted(&d.mnt));
        Mounted { d }
    }

    fn stats(&self) -> serde_json::Value {
        let out = tc(&["stats", s(&self.d.mnt), "--json"]);
        assert!(out.status.success(), "{out:?}");
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

impl Drop for Mounted<'_> {
    fn drop(&mut self) {
        if mounted(&self.d.mnt) {
            let _ = tc(&["unmount", "--force", s(&self.d.mnt)]);
        }
    }
}

#[test]
fn reading_1g_through_a_64m_mount_leaves_backing_uncached() {
    let d = disk_dirs();
    let big = d.backing.join("big");
    write_cold(&big, 1024 * MIB);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    drop(listener);
    let m = Mounted::new(&d, &["--metrics", &addr], None);
    // Said in stats, in the metrics and in the log.
    let stats = m.stats();
    assert_eq!(stats["backing"]["io_mode"], "dontcache", "{stats}");
    let mut conn = std::net::TcpStream::connect(&addr).unwrap();
    conn.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut body = String::new();
    conn.read_to_string(&mut body).unwrap();
    assert!(
        body.contains("tiercache_backing_io_mode{mode=\"dontcache\"} 1"),
        "{body}"
    );
    let log = std::fs::read_to_string(stats["log_file"].as_str().unwrap()).unwrap();
    assert!(log.contains("BACKING I/O: dontcache"), "{log}");
    assert_eq!(stream(&d.mnt.join("big")), 1024 * MIB);
    let left = resident(&big);
    assert!(
        left <= LEFT_MAX,
        "reading 1 GiB through the mount left {} MiB of BACKING's file in the page cache",
        left / MIB
    );
    // What the mount served is what BACKING holds (a sample: the first and last MiB).
    let mut f = std::fs::File::open(d.mnt.join("big")).unwrap();
    let (mut got, mut want) = (vec![0u8; MIB as usize], vec![0u8; MIB as usize]);
    f.read_exact(&mut got).unwrap();
    fill(&mut want, 0);
    assert!(got == want);
}

#[test]
fn writing_512m_and_flushing_leave_backing_uncached() {
    let d = disk_dirs();
    // Also an overwrite of allocated blocks (whose writeback ends where the kernel keeps
    // `RWF_DONTCACHE` pages, on ext4).
    let old = d.backing.join("old");
    write_cold(&old, 128 * MIB);
    let m = Mounted::new(&d, &[], None);
    let write = |name: &str, create: bool, mibs: std::ops::Range<u64>, seed: u64| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(create)
            .open(d.mnt.join(name))
            .unwrap();
        let mut chunk = vec![0u8; MIB as usize];
        for i in mibs {
            fill(&mut chunk, i + seed);
            f.write_all(&chunk).unwrap();
        }
    };
    write("out", true, 0..512, 0);
    write("old", false, 0..128, 1000);
    let out = tc(&["flush", s(&d.mnt)]);
    assert!(out.status.success(), "{out:?}");
    let out_file = d.backing.join("out");
    assert_eq!(std::fs::metadata(&out_file).unwrap().len(), 512 * MIB);
    for (file, what) in [
        (&out_file, "writing 512 MiB"),
        (&old, "overwriting 128 MiB"),
    ] {
        let left = resident(file);
        assert!(
            left <= LEFT_MAX,
            "{what} through the mount and flushing left {} MiB of BACKING's file in the page \
             cache",
            left / MIB
        );
    }
    assert_eq!(m.stats()["backing"]["io_mode"], "dontcache");
    // The bytes are on BACKING (a sample: first and last MiB of each).
    drop(m);
    let mut got = vec![0u8; MIB as usize];
    let mut chunk = vec![0u8; MIB as usize];
    for (file, last, seed) in [(&out_file, 511u64, 0u64), (&old, 127, 1000)] {
        let f = std::fs::File::open(file).unwrap();
        for i in [0u64, last] {
            use std::os::unix::fs::FileExt;
            f.read_exact_at(&mut got, i * MIB).unwrap();
            fill(&mut chunk, i + seed);
            assert!(
                got == chunk,
                "{}: MiB {i} differs on BACKING",
                file.display()
            );
        }
    }
}

#[test]
fn backing_cache_keep_leaves_backing_cached_as_before() {
    let d = disk_dirs();
    let file = d.backing.join("f");
    write_cold(&file, 64 * MIB);
    let m = Mounted::new(&d, &["--backing-cache", "keep"], None);
    assert_eq!(m.stats()["backing"]["io_mode"], "buffered");
    assert_eq!(stream(&d.mnt.join("f")), 64 * MIB);
    assert!(
        resident(&file) >= 60 * MIB,
        "--backing-cache keep: {} MiB cached",
        resident(&file) / MIB
    );
}

#[test]
fn backing_cache_takes_keep_or_drop_only() {
    let d = disk_dirs();
    support::fails_naming(
        &[
            "mount",
            s(&d.backing),
            s(&d.mnt),
            "--backing-cache",
            "maybe",
        ],
        "--backing-cache",
        "not keep or drop",
    );
    let cfg = d.backing.join("tc.toml");
    std::fs::write(&cfg, "backing_cache = \"maybe\"\n").unwrap();
    support::fails_naming(
        &["mount", s(&d.backing), s(&d.mnt), "--config", s(&cfg)],
        "backing_cache",
        "not keep or drop",
    );
    assert!(!mounted(&d.mnt));
}

/// A memory cgroup made for one test (a child of the test's own), removed on drop.
struct Cgroup {
    dir: PathBuf,
    procs: PathBuf,
}

/// The mount point of the cgroup hierarchy with the memory controller, and whether it is v2.
fn memory_hierarchy() -> Option<(PathBuf, bool)> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mut v2 = None;
    for line in info.lines() {
        let (left, right) = line.split_once(" - ")?;
        let point = left.split(' ').nth(4)?;
        let mut r = right.split(' ');
        let (fstype, opts) = (r.next()?, r.nth(1).unwrap_or(""));
        if fstype == "cgroup" && opts.split(',').any(|o| o == "memory") {
            return Some((PathBuf::from(point), false));
        }
        if fstype == "cgroup2" && v2.is_none() {
            v2 = Some(PathBuf::from(point));
        }
    }
    v2.map(|p| (p, true))
}

impl Cgroup {
    /// A child of this process's memory cgroup limited to `limit` bytes; panics saying why when
    /// none can be made.
    fn new(limit: u64) -> Cgroup {
        let why = "the bystander test needs a memory cgroup it can create (cgroup v1 with the \
                   memory controller, or v2 with memory delegated)";
        let (root, v2) = memory_hierarchy().unwrap_or_else(|| panic!("no cgroup mount: {why}"));
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        let path = own
            .lines()
            .find_map(|l| {
                let mut p = l.splitn(3, ':');
                let (_, ctrl, path) = (p.next()?, p.next()?, p.next()?);
                let ours = if v2 {
                    ctrl.is_empty()
                } else {
                    ctrl.split(',').any(|c| c == "memory")
                };
                ours.then(|| path.trim_start_matches('/').to_string())
            })
            .unwrap_or_else(|| panic!("no memory cgroup in /proc/self/cgroup: {why}"));
        let parent = root.join(path);
        let dir = parent.join(format!("tiercache-test-{}", std::process::id()));
        std::fs::create_dir(&dir)
            .unwrap_or_else(|e| panic!("creating {}: {e}: {why}", dir.display()));
        let cg = Cgroup {
            procs: dir.join("cgroup.procs"),
            dir,
        };
        let (knob, enable) = if v2 {
            ("memory.max", Some(parent.join("cgroup.subtree_control")))
        } else {
            ("memory.limit_in_bytes", None)
        };
        if let Some(ctl) = enable.filter(|_| !cg.dir.join(knob).exists()) {
            std::fs::write(&ctl, "+memory")
                .unwrap_or_else(|e| panic!("enabling memory in {}: {e}: {why}", ctl.display()));
        }
        std::fs::write(cg.dir.join(knob), limit.to_string())
            .unwrap_or_else(|e| panic!("{}/{knob}: {e}: {why}", cg.dir.display()));
        cg
    }

    /// A `sh -c` prefix that moves the shell into this cgroup.
    fn enter(&self) -> String {
        format!("echo $$ > {}", self.procs.display())
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // Empty once its processes are gone (the daemon exits after its unmount).
        for _ in 0..100 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("could not remove {}", self.dir.display());
    }
}

/// A process in the cgroup that keeps `file` hot: it reads it every [`BYSTANDER_PERIOD`]
/// seconds, and adds a line to `passes` after each read; killed on drop.
struct Bystander(Child);

/// Seconds between the bystander's reads: a file in use, not one read in a tight loop (which
/// no reclaim could evict, with or without the fix).
const BYSTANDER_PERIOD: u32 = 6;

impl Bystander {
    fn start(cg: &Cgroup, file: &Path, passes: &Path) -> Bystander {
        let child = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "{} && while :; do cat \"$0\" > /dev/null; echo >> \"$1\"; sleep {BYSTANDER_PERIOD}; done",
                cg.enter()
            ))
            .arg(file)
            .arg(passes)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        Bystander(child)
    }
}

impl Drop for Bystander {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_backup_streaming_through_the_mount_leaves_a_bystanders_file_hot() {
    let d = disk_dirs();
    let (hot, backup) = (d.backing.join("hot"), d.backing.join("backup"));
    write_cold(&backup, 1024 * MIB);
    write_cold(&hot, 256 * MIB);
    // Room for the 64 MiB memory tier, the bystander's 256 MiB and 96 MiB more (the daemon
    // itself takes 25–45 MiB of it): BACKING's pages, if the daemon left any, compete with the
    // bystander's for that room. Four FUSE threads: the daemon's size does not follow the CPUs.
    let cg = Cgroup::new(64 * MIB + 256 * MIB + 96 * MIB);
    let passes = d.mnt.parent().unwrap().join("passes");
    let _bystander = Bystander::start(&cg, &hot, &passes);
    // Read twice: hot (on the kernel's active list), all of it in the page cache.
    let t0 = Instant::now();
    let passes_done = || std::fs::read(&passes).map_or(0, |p| p.len());
    while passes_done() < 2 {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the bystander did not read its file twice ({} MiB cached)",
            resident(&hot) / MIB
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(resident(&hot) >= 255 * MIB, "{}", resident(&hot) / MIB);
    let m = Mounted::new(&d, &["--threads", "4"], Some(&cg.enter()));
    assert_eq!(stream(&d.mnt.join("backup")), 1024 * MIB);
    let (kept, left) = (resident(&hot), resident(&backup));
    eprintln!(
        "bystander: {} MiB of 256 cached; backup: {} MiB cached",
        kept / MIB,
        left / MIB
    );
    assert!(
        kept * 10 >= 256 * MIB * 9,
        "the bystander kept only {} MiB of its 256 MiB file in the page cache",
        kept / MIB
    );
    assert!(
        left <= LEFT_MAX,
        "the backup left {} MiB of BACKING's file in the page cache",
        left / MIB
    );
    drop(m);
}
