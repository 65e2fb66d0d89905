//! The POSIX suites of `tiercache-fuse` (scripted workload + errno probes, seeded random
//! operations with a concurrent reader, shared mmap, permissions) run ON THE CACHED MOUNT: the
//! real `tiercache mount` daemon with a small memory tier in the data path, so that evictions,
//! read-ahead, write-back and throttling really happen underneath. Every result must match a
//! plain directory errno for errno and byte for byte, and after `tiercache unmount` BACKING must
//! hold exactly what the plain directory holds. The fixture scripts are the fuse crate's own
//! files, used by path.
//!
//! Nothing is normalised: the manifests compare no `st_blocks` or atime, and the mtimes and
//! ctimes that write-back would move are kept by the memory tier (`tiercache_manager` `times`).
#![allow(clippy::unwrap_used)]

#[path = "../../tiercache-fuse/tests/common/mod.rs"]
mod common;
mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{diff, manifest, random, run_in, text};
use support::{mounted, s, tc};

macro_rules! fixture {
    ($name:literal) => {
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tiercache-fuse/tests/",
            $name
        ))
    };
}

const WORKLOAD_SH: &str = fixture!("workload.sh");
const ERRNO_PY: &str = fixture!("errno.py");
const MMAP_PY: &str = fixture!("mmap.py");
const PERM_SETUP: &str = fixture!("perm_setup.sh");
const PERM_CHECK: &str = fixture!("perm_check.py");

/// 256 blocks of 4 KiB: far less than the workloads touch (a 2.5 MiB file, a git repo, sqlite,
/// four random files of up to 340 KB and a growing pattern file).
const SMALL: [&str; 4] = ["--memory", "1M", "--block-size", "4K"];
/// 512 blocks of 512 B: many blocks per file, so write-back runs while files are read.
const TINY_BLOCKS: [&str; 4] = ["--memory", "256K", "--block-size", "512"];

/// `root/backing` served by a background `tiercache mount` daemon on `root/mnt`, plus a plain
/// directory `root/plain` on the same file system as BACKING. Dropping it force-unmounts
/// whatever is left (and prints the daemon's log when the test failed).
struct CacheMount {
    backing: PathBuf,
    mnt: PathBuf,
    plain: PathBuf,
    log: Option<PathBuf>,
    _dir: tempfile::TempDir,
}

impl CacheMount {
    /// Mounts with the tier size flags `tier` (e.g. [`SMALL`]) plus `extra` flags; `config` is
    /// written to a `--config` file when given (TOML, e.g. short flush intervals).
    fn new(tier: &[&str], extra: &[&str], config: Option<&str>) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("tcposix")
            .tempdir()
            .unwrap();
        // traversable by the unprivileged user of the permission test
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let root = dir.path();
        let (backing, mnt, plain) = (root.join("backing"), root.join("mnt"), root.join("plain"));
        for d in [&backing, &mnt, &plain] {
            std::fs::create_dir(d).unwrap();
        }
        let cfg = root.join("tiercache.toml");
        let mut args = vec!["mount", s(&backing), s(&mnt)];
        args.extend_from_slice(tier);
        args.extend_from_slice(extra);
        if let Some(c) = config {
            std::fs::write(&cfg, c).unwrap();
            args.extend_from_slice(&["--config", s(&cfg)]);
        }
        let out = tc(&args);
        assert!(
            out.status.success(),
            "mount {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(mounted(&mnt));
        // "tiercache: mounted B on M (pid N, log PATH)"
        let log = String::from_utf8_lossy(&out.stdout)
            .rsplit_once(", log ")
            .map(|(_, l)| PathBuf::from(l.trim().trim_end_matches(')')));
        Self {
            backing,
            mnt,
            plain,
            log,
            _dir: dir,
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

    /// Asserts that the small tier was really exercised: blocks were evicted and dirty blocks
    /// written back while the mount was up. Returns a one-line summary for the test log.
    fn assert_tier_worked(&self) -> String {
        let v = self.stats();
        let p = &v["paths"];
        let summary = format!(
            "evictions {} writeback {} bypass {} write-through {} readahead {} throttled {}",
            p["evictions"],
            p["writeback_blocks"],
            p["bypass_blocks"],
            p["write_through_blocks"],
            p["readahead_blocks"],
            p["throttled_writes"]
        );
        assert!(
            v["memory"]["capacity_blocks"].as_u64().unwrap() <= 512,
            "{v}"
        );
        assert!(p["evictions"].as_u64().unwrap() > 0, "{summary}");
        assert!(p["writeback_blocks"].as_u64().unwrap() > 0, "{summary}");
        assert_eq!(p["writeback_errors"], 0, "{summary}");
        eprintln!("memory tier: {summary}");
        summary
    }

    /// Asserts that the tier below memory was used as `placement` says: blocks stored in it
    /// (demoted or filled) and reads served from it, with no errors.
    fn assert_lower_tier_worked(&self, placement: &str) {
        let v = self.stats();
        let tiers = v["tiers"].as_array().unwrap();
        assert_eq!(tiers.len(), 2, "{v}");
        assert_eq!(tiers[0]["kind"], "memory", "{v}");
        let t = &tiers[1];
        assert_eq!(t["kind"], "test", "{v}");
        let stored = if placement == "exclusive" {
            t["demotions_in"].as_u64().unwrap()
        } else {
            t["fills"].as_u64().unwrap()
        };
        eprintln!("lower tier: {t} {}", v["lower"]);
        assert!(stored > 0, "nothing stored in the {placement} tier: {t}");
        assert!(
            v["lower"]["hits"].as_u64().unwrap() > 0,
            "no lower hit: {}",
            v["lower"]
        );
        assert_eq!(v["lower"]["errors"], 0, "{}", v["lower"]);
        assert_eq!(t["errors"], 0, "{t}");
    }

    /// Clean `tiercache unmount`: the daemon writes everything back and exits.
    fn unmount(&self) {
        let out = tc(&["unmount", s(&self.mnt)]);
        assert!(
            out.status.success(),
            "unmount failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!mounted(&self.mnt));
    }
}

impl Drop for CacheMount {
    fn drop(&mut self) {
        // Before the unmount: a clean stop removes the daemon's log.
        if let (Some(log), true) = (&self.log, std::thread::panicking()) {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(40).collect();
            eprintln!("--- daemon log {} (tail) ---", log.display());
            for l in tail.iter().rev() {
                eprintln!("{l}");
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

fn compare(what: &str, mount: &str, plain: &str) {
    assert!(
        mount == plain,
        "{what} differs between the cached mount and a plain directory:\n{}\n--- mount ---\n{mount}",
        diff(mount, plain)
    );
}

// ---------------------------------------------------------------------------------------------
// (a), (d): workload.sh + errno.py

fn run_script(dir: &Path) -> String {
    let out = run_in(dir, Command::new("bash").arg("-c").arg(WORKLOAD_SH));
    text(&out, dir)
}

fn run_errno(dir: &Path) -> String {
    let out = run_in(dir, Command::new("python3").arg("-c").arg(ERRNO_PY));
    text(&out, dir)
}

fn workload(tier: &[&str], extra: &[&str], config: Option<&str>) {
    workload_then(tier, extra, config, |_| {});
}

/// [`workload`], calling `check` on the mount after the tier assertions, before unmounting.
fn workload_then(tier: &[&str], extra: &[&str], config: Option<&str>, check: impl Fn(&CacheMount)) {
    let m = CacheMount::new(tier, extra, config);
    let on_mount = run_script(&m.mnt);
    let on_plain = run_script(&m.plain);
    compare("workload output", &on_mount, &on_plain);
    assert!(
        on_mount.contains("### git fsck --no-progress\nrc=0"),
        "{on_mount}"
    );

    let e_mount = run_errno(&m.mnt);
    let e_plain = run_errno(&m.plain);
    compare("errno output", &e_mount, &e_plain);
    assert!(e_mount.starts_with("exit=Some(0)"), "{e_mount}");

    let (tm, tp) = (manifest(&m.mnt), manifest(&m.plain));
    compare("tree (mount vs plain)", &tm, &tp);
    assert!(tm.lines().count() > 50, "{tm}");
    m.assert_tier_worked();
    check(&m);

    // Everything written back: BACKING is the plain directory's twin.
    m.unmount();
    compare("tree (backing vs plain)", &manifest(&m.backing), &tp);
}

/// Background write-back every 50 ms and after 100 ms of dirtiness, so the flusher runs
/// concurrently with the workload rather than only at fsync and unmount.
const EAGER_FLUSH: &str = "flush_interval_ms = 50\ndirty_expire_ms = 100\n";

#[test]
fn workload_on_cache_direct_io() {
    workload(&SMALL, &["--partition", "none"], Some(EAGER_FLUSH));
}

/// dirprio with priority directories covering part of the tree (the copied `dst` tree, the git
/// repository's object store and the files directly under `src`), and 512-byte blocks: the
/// write-back of `src` files then overlaps `tar`'s reading of them, which must not see their
/// ctime move ("file changed as we read it").
#[test]
fn workload_on_cache_dirprio_priority_dirs() {
    workload(
        &TINY_BLOCKS,
        &[
            "--partition",
            "dirprio",
            "--priority-recursive",
            "dst",
            "--priority-recursive",
            "repo/.git",
            "--priority",
            "src",
        ],
        None,
    );
}

#[test]
fn workload_on_cache_kernel_cache() {
    workload(
        &SMALL,
        &[
            "--partition",
            "dirprio",
            "--priority",
            "src",
            "--kernel-cache",
        ],
        Some(EAGER_FLUSH),
    );
}

/// Two tiers: the small memory tier over an in-memory test tier that takes the blocks memory
/// evicts (exclusive) and hands them back up on a hit.
#[test]
fn workload_on_memory_over_an_exclusive_test_tier() {
    workload_then(
        &SMALL,
        &["--partition", "none", "--tier", "test:4M:exclusive"],
        Some(EAGER_FLUSH),
        |m| m.assert_lower_tier_worked("exclusive"),
    );
}

/// Two tiers, the lower one inclusive (filled with a copy of every block read past it).
#[test]
fn workload_on_memory_over_an_inclusive_test_tier() {
    workload_then(
        &TINY_BLOCKS,
        &["--partition", "none", "--tier", "test:2M:inclusive"],
        None,
        |m| m.assert_lower_tier_worked("inclusive"),
    );
}

/// A lower tier that takes dirty data: write-back goes into it and its cleaning reaches
/// BACKING (checked after unmount against the plain directory).
const DIRTY_TEST_TIER: &str = "flush_interval_ms = 50\ndirty_expire_ms = 100\n\n[[tier]]\nkind = \"test\"\nsize = \"4M\"\nplacement = \"exclusive\"\naccepts_dirty = true\n";

#[test]
fn workload_on_memory_writing_back_into_a_test_tier() {
    workload_then(
        &SMALL,
        &["--partition", "none"],
        Some(DIRTY_TEST_TIER),
        |m| {
            m.assert_lower_tier_worked("exclusive");
            let v = m.stats();
            let t = &v["tiers"][1];
            assert!(
                t["writebacks_in"].as_u64().unwrap() > 0,
                "no write-back into it: {t}"
            );
            assert!(t["cleaned"].as_u64().unwrap() > 0, "never cleaned: {t}");
        },
    );
}

#[test]
fn random_ops_on_memory_writing_back_into_a_test_tier() {
    random_ops_then(
        &["--partition", "none"],
        Some(DIRTY_TEST_TIER),
        [0x7777_1111_2222_3333, 0x4444_5555_6666_8888],
        |m| m.assert_lower_tier_worked("exclusive"),
    );
}

/// The SSD tier under memory, small (8 sets of 1 MiB) with a high floor and a short wait, so
/// write-back lands there, sets run out (bypass), and idle cleaning reaches BACKING while the
/// workload runs: checked after unmount against the plain directory.
fn ssd_flags(dir: &Path) -> Vec<String> {
    [
        "--partition",
        "none",
        "--flash",
        &format!("{}:9M", s(&dir.join("ssd.cache"))),
        "--flash-wait",
        "50",
        "--flash-free-floor",
        "50%",
    ]
    .iter()
    .map(|a| a.to_string())
    .collect()
}

fn assert_ssd_tier_worked(m: &CacheMount) {
    let v = m.stats();
    let t = v["tiers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["kind"] == "flash")
        .unwrap()
        .clone();
    eprintln!("ssd tier: {t} {}", v["flash"]);
    assert!(
        t["writebacks_in"].as_u64().unwrap() > 0,
        "no write-back into it: {t}"
    );
    assert_eq!(t["errors"], 0, "{t}");
    assert_eq!(v["lower"]["errors"], 0, "{}", v["lower"]);
}

#[test]
fn workload_on_memory_writing_back_into_an_ssd_tier() {
    let ssd = tempfile::tempdir().unwrap();
    let flags = ssd_flags(ssd.path());
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    workload_then(&SMALL, &flags, Some(EAGER_FLUSH), assert_ssd_tier_worked);
}

#[test]
fn random_ops_on_memory_writing_back_into_an_ssd_tier() {
    let ssd = tempfile::tempdir().unwrap();
    let mut flags = ssd_flags(ssd.path());
    flags.extend(["--flash-cleaner".to_string(), "eager".to_string()]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    random_ops_then(
        &flags,
        Some(EAGER_FLUSH),
        [0x0fab_1ed5_5d00_0001, 0x0fab_1ed5_5d00_0002],
        assert_ssd_tier_worked,
    );
}

// ---------------------------------------------------------------------------------------------
// (b): random operation sequence

/// Two seeded sequences at once, in `a/` and `b/` of the mount and of the shadow directory, so
/// that their requests, evictions and write-backs interleave.
fn random_ops(extra: &[&str], config: Option<&str>, seeds: [u64; 2]) {
    random_ops_then(extra, config, seeds, |_| {});
}

fn random_ops_then(
    extra: &[&str],
    config: Option<&str>,
    seeds: [u64; 2],
    check: impl Fn(&CacheMount),
) {
    let m = CacheMount::new(&SMALL, extra, config);
    let dirs = ["a", "b"];
    for d in dirs {
        std::fs::create_dir(m.mnt.join(d)).unwrap();
        std::fs::create_dir(m.plain.join(d)).unwrap();
    }
    let outcomes: Vec<random::Outcome> = std::thread::scope(|s| {
        let runs: Vec<_> = dirs
            .iter()
            .zip(seeds)
            .map(|(d, seed)| {
                let (mnt, plain) = (m.mnt.join(d), m.plain.join(d));
                s.spawn(move || random::run(&mnt, &plain, seed))
            })
            .collect();
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    });
    m.assert_tier_worked();
    check(&m);
    m.unmount();
    for (d, outcome) in dirs.iter().zip(&outcomes) {
        outcome.check_tree(
            "backing after unmount vs plain",
            &m.backing.join(d),
            &m.plain.join(d),
        );
    }
}

#[test]
fn random_ops_on_cache() {
    random_ops(
        &["--partition", "none"],
        Some(EAGER_FLUSH),
        [0x1234_5678_9abc_def1, 0x5555_aaaa_1234_8765],
    );
}

#[test]
fn random_ops_on_memory_over_an_exclusive_test_tier() {
    random_ops_then(
        &["--partition", "none", "--tier", "test:4M:exclusive"],
        Some(EAGER_FLUSH),
        [0x2468_1357_aaaa_5555, 0x0bad_cafe_f00d_1234],
        |m| m.assert_lower_tier_worked("exclusive"),
    );
}

/// `a/` is a priority directory: its files use the protected pool while `b/`'s compete in the
/// normal one.
#[test]
fn random_ops_on_cache_dirprio_kernel_cache() {
    random_ops(
        &[
            "--partition",
            "dirprio",
            "--priority",
            "a",
            "--kernel-cache",
        ],
        None,
        [0x0fed_cba9_8765_4321, 0x1357_9bdf_2468_ace0],
    );
}

/// The default fast path: `a/`'s files are priority files, so the kernel page cache serves
/// them (cached mode) while `b/`'s stay direct I/O.
#[test]
fn random_ops_on_cache_dirprio_priority_files_in_the_kernel_cache() {
    random_ops_then(
        &["--partition", "dirprio", "--priority", "a"],
        None,
        [0x3141_5926_5358_9793, 0x2718_2818_2845_9045],
        |m| {
            let k = &m.stats()["kernel_cache"];
            assert_eq!(k["mode"], "priority");
            assert!(k["cached_opens"].as_u64().unwrap() > 0, "{k}");
        },
    );
}

// ---------------------------------------------------------------------------------------------
// (c): shared mmap

fn mmap_roundtrip(extra: &[&str]) {
    let m = CacheMount::new(&SMALL, extra, Some(EAGER_FLUSH));
    let out = run_in(&m.mnt, Command::new("python3").arg("-c").arg(MMAP_PY));
    assert!(out.status.success(), "{}", text(&out, &m.mnt));
    let check = |what: &str, data: &[u8]| {
        assert_eq!(data.len(), 3 * 4096 + 100, "{what}");
        assert_eq!(&data[..4], b"\0\0\0\0", "{what}: private mapping leaked");
        assert_eq!(&data[100..105], b"hello", "{what}");
        assert_eq!(&data[4096 + 7..4096 + 10], b"XYZ", "{what}");
        assert_eq!(&data[8192..8195], b"abc", "{what}");
        assert_eq!(&data[data.len() - 5..], b"world", "{what}");
    };
    check(
        "through the mount",
        &std::fs::read(m.mnt.join("m")).unwrap(),
    );
    m.unmount();
    check(
        "BACKING after unmount",
        &std::fs::read(m.backing.join("m")).unwrap(),
    );
}

#[test]
fn shared_mmap_on_cache_direct_io() {
    mmap_roundtrip(&[]);
}

#[test]
fn shared_mmap_on_cache_kernel_cache() {
    mmap_roundtrip(&["--kernel-cache"]);
}

// ---------------------------------------------------------------------------------------------
// (e): permissions

fn perm_outcome(dir: &Path) -> String {
    let mut all = String::new();
    for (sub, mode) in [("a", "nobody"), ("b", "group")] {
        let d = dir.join(sub);
        std::fs::create_dir(&d).unwrap();
        let setup = run_in(&d, Command::new("bash").arg("-c").arg(PERM_SETUP));
        assert!(setup.status.success(), "{}", text(&setup, &d));
        let out = run_in(
            &d,
            Command::new("python3").arg("-c").arg(PERM_CHECK).arg(mode),
        );
        all.push_str(&format!("== {mode}\n{}\n", text(&out, &d)));
    }
    all
}

/// Reads two root-owned files as uid/gid 65534 after root has read them (so their blocks are
/// in the memory tier): cached data must not bypass the permission check.
const NOBODY_READS: &str = r#"
import errno, os
for p in ("root0600", "root0644"):
    with open(p, "rb") as f:
        assert f.read() == b"root data\n" * 1000
os.setgroups([])
os.setgid(65534)
os.setuid(65534)
for p in ("root0600", "root0644"):
    try:
        with open(p, "rb") as f:
            print(p, "OK", len(f.read()))
    except OSError as e:
        print(p, errno.errorcode[e.errno])
"#;

#[test]
fn permissions_on_cache() {
    let m = CacheMount::new(&SMALL, &["--allow-other"], None);
    let on_mount = perm_outcome(&m.mnt);
    let on_plain = perm_outcome(&m.plain);
    compare("permission results", &on_mount, &on_plain);
    for expect in [
        "read_secret EACCES",
        "read_public OK pub",
        "write_public EACCES",
        "owner_new OK open/new 65534:65534 644",
        "unlink_sticky_victim EPERM",
    ] {
        assert!(
            on_mount.contains(expect),
            "missing {expect:?} in\n{on_mount}"
        );
    }

    let mut results = Vec::new();
    for dir in [&m.mnt, &m.plain] {
        for (name, mode) in [("root0600", 0o600), ("root0644", 0o644)] {
            let p = dir.join(name);
            std::fs::write(&p, b"root data\n".repeat(1000)).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        let out = run_in(dir, Command::new("python3").arg("-c").arg(NOBODY_READS));
        results.push(text(&out, dir));
    }
    compare("uid 65534 reads", &results[0], &results[1]);
    assert!(
        results[0].contains("root0600 EACCES\nroot0644 OK 10000\n"),
        "{}",
        results[0]
    );
    m.unmount();
    let st = std::fs::metadata(m.backing.join("a/open/new")).unwrap();
    assert_eq!(std::os::unix::fs::MetadataExt::uid(&st), 65534);
}

// ---------------------------------------------------------------------------------------------
// (f): the same suites with requests on FUSE over io_uring

fn assert_ring_served(m: &CacheMount) {
    let t = &m.stats()["transport"];
    eprintln!("transport: {t}");
    assert_eq!(t["kind"], "io_uring", "{t}");
    assert!(t["queues"].as_u64().unwrap() >= 1, "{t}");
    assert!(t["ring_requests"].as_u64().unwrap() > 1000, "{t}");
    // The small tier misses: I/O workers answer on the rings too.
    assert!(t["ring_worker_replies"].as_u64().unwrap() > 0, "{t}");
    assert_eq!(t["ring_entries_replaced"], 0, "{t}");
}

/// A daemon killed with requests on the rings: the mount fails fast (ENOTCONN), nothing hangs,
/// and what was fsync'd is on BACKING.
fn killed_ring_daemon_fails_fast() {
    let m = CacheMount::new(&SMALL, &["--transport", "io-uring"], None);
    let p = m.mnt.join("synced");
    let mut f = std::fs::File::create(&p).unwrap();
    std::io::Write::write_all(&mut f, &vec![7u8; 300_000]).unwrap();
    f.sync_all().unwrap();
    drop(f);
    let pid = m.stats()["pid"].as_i64().unwrap();
    assert!(Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap()
        .success());
    let (tx, rx) = std::sync::mpsc::channel();
    let probe = m.mnt.clone();
    std::thread::spawn(move || {
        // Until the kernel sees the daemon gone, a stat may still succeed.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        // A request the kernel had handed to a ring of the dead daemon may fail ECANCELED;
        // once the connection is torn down, every request fails ENOTCONN.
        let errno = || {
            std::fs::metadata(&probe)
                .err()
                .and_then(|e| e.raw_os_error())
        };
        let mut last = errno();
        while last != Some(libc::ENOTCONN) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
            last = errno();
        }
        let _ = tx.send(last);
    });
    let errno = rx
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("the mount hangs after its daemon was killed");
    assert_eq!(errno, Some(libc::ENOTCONN));
    assert_eq!(
        std::fs::read(m.backing.join("synced")).unwrap(),
        vec![7u8; 300_000]
    );
}

#[test]
fn posix_suites_over_io_uring() {
    let off = common::ring::RingSwitch::set(false);
    // Asked for and not offered: one line naming the switch, and nothing mounted.
    let dir = tempfile::tempdir().unwrap();
    let (b, mnt) = (dir.path().join("b"), dir.path().join("m"));
    std::fs::create_dir(&b).unwrap();
    std::fs::create_dir(&mnt).unwrap();
    let out = tc(&["mount", s(&b), s(&mnt), "--transport", "io-uring"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("enable_uring"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(!mounted(&mnt));
    // `auto` serves through /dev/fuse then.
    let m = CacheMount::new(&SMALL, &["--transport", "auto"], None);
    assert_eq!(m.stats()["transport"]["kind"], "dev_fuse");
    m.unmount();
    drop(off);

    let _on = common::ring::RingSwitch::set(true);
    let ring = ["--transport", "io-uring", "--partition", "none"];
    workload_then(&SMALL, &ring, Some(EAGER_FLUSH), assert_ring_served);
    random_ops_then(
        &ring,
        Some(EAGER_FLUSH),
        [0x0fed_cba9_8765_4321, 0x1357_9bdf_2468_ace0],
        assert_ring_served,
    );
    // Every file in the kernel page cache: invalidations travel on /dev/fuse beside the rings.
    random_ops_then(
        &["--transport", "io-uring", "--kernel-cache"],
        Some(EAGER_FLUSH),
        [0x2468_1357_aceb_dfca, 0x9999_0000_7777_3333],
        assert_ring_served,
    );
    mmap_roundtrip(&["--transport", "io-uring"]);
    killed_ring_daemon_fails_fast();
}
