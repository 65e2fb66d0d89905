//! A mount with an SSD tier (a cache file on the test machine's disk): write-back lands there
//! and reaches BACKING on `flush` or by cleaning; a kill -9 in the middle of a write-heavy run
//! loses no fsync-acknowledged byte and serves nothing stale after the remount; a clean
//! remount serves cached blocks from the tier on the first read; the idle and eager cleaners
//! do what paper 001 says; bad flash settings mount nothing.
#![allow(clippy::unwrap_used)]

mod support;

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use support::{mounted, s, tc};

/// BACKING, mount point and cache file in one temp dir, mounted and remounted by the test.
struct Rig {
    dir: tempfile::TempDir,
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
            dir,
            backing,
            mnt,
            cache,
        }
    }

    /// `tiercache mount BACKING MNT --memory 256K --flash CACHE:SIZE extra...`.
    fn try_mount(&self, size: &str, extra: &[&str]) -> std::process::Output {
        let dev = format!("{}:{size}", s(&self.cache));
        let mut args = vec![
            "mount",
            s(&self.backing),
            s(&self.mnt),
            "--memory",
            "256K",
            "--flash",
            &dev,
        ];
        args.extend_from_slice(extra);
        tc(&args)
    }

    fn mount(&self, size: &str, extra: &[&str]) {
        let out = self.try_mount(size, extra);
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

    fn unmount(&self) {
        let out = tc(&["unmount", s(&self.mnt)]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn flash_tier(&self) -> serde_json::Value {
        let st = self.stats();
        st["tiers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["kind"] == "flash")
            .unwrap()
            .clone()
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        if mounted(&self.mnt) {
            let _ = tc(&["unmount", "--force", s(&self.mnt)]);
        }
        if mounted(&self.mnt) {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(&self.mnt)
                .status();
        }
        let _ = &self.dir;
    }
}

/// `GET /metrics` from the mount's `--metrics` address.
fn scrape(addr: &str) -> String {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(addr).unwrap();
    conn.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut body = String::new();
    conn.read_to_string(&mut body).unwrap();
    body
}

fn block(i: u64, version: u64) -> Vec<u8> {
    (0..4096u64)
        .map(|j| (i.wrapping_mul(131) ^ j.wrapping_mul(7) ^ version.wrapping_mul(29)) as u8)
        .collect()
}

fn wait_until(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Writes `blocks` blocks of `name` through the mount in a scattered order (no sequential
/// run reaches the cutoff), then fsyncs. Returns the bytes and the file, still open: while it
/// is, the kernel cannot forget the inode (a `forget` writes the file's dirty data to BACKING,
/// and another test's `drop_caches` may force one at any time).
fn write_scattered(mnt: &Path, name: &str, blocks: u64, version: u64) -> (Vec<u8>, std::fs::File) {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(mnt.join(name))
        .unwrap();
    let mut all = vec![0u8; (blocks * 4096) as usize];
    for i in 0..blocks {
        let b = (i * 7) % blocks;
        let d = block(b, version);
        f.write_all_at(&d, b * 4096).unwrap();
        all[(b * 4096) as usize..((b + 1) * 4096) as usize].copy_from_slice(&d);
    }
    f.sync_all().unwrap();
    (all, f)
}

#[test]
fn fsync_lands_in_the_flash_tier_and_flush_makes_backing_current() {
    let r = Rig::new();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    drop(listener);
    r.mount("32M", &["--flash-wait", "600000", "--metrics", &addr]);
    // 256 blocks (1 MiB) through a 64-block memory tier: most leave memory for the SSD.
    let (want, f) = write_scattered(&r.mnt, "f", 256, 1);
    let body = scrape(&addr);
    let dirty = body
        .lines()
        .find(|l| l.starts_with("tiercache_flash_dirty_blocks{tier=\"flash\"}"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok());
    assert!(dirty.is_some_and(|d| d > 0.0), "{body}");
    assert!(body.contains("tiercache_tier_hits_total{tier=\"flash\",kind=\"flash\"}"));
    assert!(
        body.contains("tiercache_flash_checksum_errors_total{tier=\"flash\"} 0"),
        "{body}"
    );
    let st = r.stats();
    assert!(
        st["flash"]["dirty_blocks"].as_u64().unwrap() > 0,
        "{}",
        st["flash"]
    );
    assert_eq!(st["flash"]["mode"], "writeback");
    assert!(r.flash_tier()["writebacks_in"].as_u64().unwrap() > 0);
    // BACKING has not got them yet (they are durable in the SSD tier).
    assert_ne!(std::fs::read(r.backing.join("f")).unwrap(), want);
    // Read back through the mount: the SSD tier serves what memory let go.
    assert_eq!(std::fs::read(r.mnt.join("f")).unwrap(), want);
    assert!(
        r.flash_tier()["hits"].as_u64().unwrap() > 0,
        "{}",
        r.flash_tier()
    );
    let out = tc(&["flush", s(&r.mnt)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read(r.backing.join("f")).unwrap(), want);
    assert_eq!(
        r.stats()["flash"]["dirty_blocks"],
        0,
        "{}",
        r.stats()["flash"]
    );
    drop(f);
    r.unmount();
}

/// One file operation of the write-heavy run: `model` becomes what the file holds if it
/// lands (whether or not the daemon lived to acknowledge it); `Ok` once it is acknowledged.
fn apply(model: &mut Vec<u8>, f: &std::fs::File, step: u64) -> std::io::Result<()> {
    let len = model.len() as u64;
    let (off, n) = if step.is_multiple_of(3) || len < 8192 {
        (len, 4096 + (step % 5) * 1000) // append, not block aligned
    } else {
        ((step * 7919) % (len - 4096), 1 + (step * 104_729) % 12_000) // overwrite inside
    };
    let data: Vec<u8> = (0..n).map(|j| (j ^ step.wrapping_mul(131)) as u8).collect();
    let end = (off + n) as usize;
    if model.len() < end {
        model.resize(end, 0);
    }
    model[off as usize..end].copy_from_slice(&data);
    f.write_all_at(&data, off)?;
    f.sync_data()
}

#[test]
fn kill_9_in_a_write_heavy_run_loses_no_fsynced_byte_and_serves_nothing_stale() {
    let r = Rig::new();
    // No idle cleaning: what is acknowledged lives in the SSD tier only when the daemon dies.
    r.mount("64M", &["--flash-wait", "600000"]);
    let pid = r.stats()["pid"].as_i64().unwrap() as i32;
    const FILES: usize = 4;
    let mnt = r.mnt.clone();
    // Each writer: (acknowledged contents, contents if the op in flight landed).
    let writers: Vec<_> = (0..FILES)
        .map(|k| {
            let mnt = mnt.clone();
            std::thread::spawn(move || {
                let f = std::fs::OpenOptions::new()
                    .create(true)
                    .truncate(true)
                    .read(true)
                    .write(true)
                    .open(mnt.join(format!("f{k}")))
                    .unwrap();
                let mut acked: Vec<u8> = Vec::new();
                for step in (k as u64 * 1000)..u64::MAX {
                    let mut next = acked.clone();
                    if apply(&mut next, &f, step).is_err() {
                        return (acked, next, step);
                    }
                    acked = next;
                }
                unreachable!()
            })
        })
        .collect();
    // Let the run go until the SSD tier holds plenty of dirty data, then kill the daemon.
    wait_until("dirty blocks in the SSD tier", || {
        r.stats()["flash"]["dirty_blocks"].as_u64().unwrap() > 300
    });
    std::thread::sleep(Duration::from_millis(200));
    // SAFETY: kill(2) on the daemon's pid; no memory is involved.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let results: Vec<_> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    // The dead FUSE connection: detach it, then mount again over the same cache file.
    let st = std::process::Command::new("umount")
        .arg("-l")
        .arg(&r.mnt)
        .status()
        .unwrap();
    assert!(st.success());
    r.mount("64M", &["--flash-wait", "600000"]);
    let rec = r.stats()["flash"]["recovery"].clone();
    assert!(rec["blocks_written"].as_u64().unwrap() > 0, "{rec}");
    for (k, (acked, inflight, step)) in results.iter().enumerate() {
        let name = format!("f{k}");
        let got = std::fs::read(r.mnt.join(&name)).unwrap();
        check_after_crash(&name, &got, acked, inflight, *step);
        // BACKING itself is current after recovery (nothing dirty stays from before).
        let on_backing = std::fs::read(r.backing.join(&name)).unwrap();
        check_after_crash(
            &format!("{name} on BACKING"),
            &on_backing,
            acked,
            inflight,
            *step,
        );
    }
    r.unmount();
}

/// After a crash a file holds what was acknowledged, except that the operation in flight
/// (not acknowledged) may have landed in part: each byte is the acknowledged one or the new
/// one (or, past the acknowledged end, a hole), and the length is between the two (an append
/// may have landed in part).
fn check_after_crash(name: &str, got: &[u8], acked: &[u8], inflight: &[u8], step: u64) {
    assert!(
        got.len() >= acked.len() && got.len() <= inflight.len(),
        "{name}: {} bytes; acknowledged {}, in flight (step {step}) {}",
        got.len(),
        acked.len(),
        inflight.len()
    );
    let bad = got.iter().enumerate().position(|(i, &b)| {
        let old = acked.get(i).copied();
        let new = inflight.get(i).copied();
        !(Some(b) == old || Some(b) == new || (old.is_none() && b == 0))
    });
    if let Some(i) = bad {
        let bad_n = got
            .iter()
            .enumerate()
            .filter(|&(j, &b)| {
                let old = acked.get(j).copied();
                !(Some(b) == old
                    || Some(b) == inflight.get(j).copied()
                    || (old.is_none() && b == 0))
            })
            .count();
        let last = (i..got.len())
            .take_while(|&j| Some(got[j]) != acked.get(j).copied())
            .last();
        panic!(
            "{name}: byte {i} (block {}, +{}) is neither acknowledged nor in flight (step {step}): \
             got {} acked {:?} in flight {:?}; {bad_n} such bytes, this run to {last:?}; \
             lengths got {} acked {} in flight {}",
            i / 4096,
            i % 4096,
            got[i],
            acked.get(i),
            inflight.get(i),
            got.len(),
            acked.len(),
            inflight.len()
        );
    }
}

#[test]
fn a_clean_remount_serves_cached_blocks_from_the_ssd_on_the_first_read() {
    let r = Rig::new();
    let data: Vec<u8> = (0..512u64).flat_map(|i| block(i, 3)).collect();
    std::fs::write(r.backing.join("f"), &data).unwrap();
    r.mount("32M", &[]);
    // Random reads (a scan would be a sequential run: not allocated).
    let f = std::fs::File::open(r.mnt.join("f")).unwrap();
    let mut buf = vec![0u8; 4096];
    for i in 0..512u64 {
        let b = (i * 37) % 512;
        f.read_exact_at(&mut buf, b * 4096).unwrap();
    }
    drop(f);
    wait_until("fills to land", || {
        r.stats()["lower"]["transit_blocks"].as_u64().unwrap() == 0
    });
    let cached = r.stats()["flash"]["valid_blocks"].as_u64().unwrap();
    assert!(cached > 400, "{}", r.stats()["flash"]);
    r.unmount();
    r.mount("32M", &[]);
    assert_eq!(r.stats()["flash"]["opened_clean"], true);
    let f = std::fs::File::open(r.mnt.join("f")).unwrap();
    for i in 0..512u64 {
        let b = (i * 37) % 512;
        f.read_exact_at(&mut buf, b * 4096).unwrap();
        assert_eq!(buf, block(b, 3), "block {b} after the remount");
    }
    drop(f);
    let hits = r.flash_tier()["hits"].as_u64().unwrap();
    assert!(
        hits * 10 >= cached * 9,
        "{hits} SSD hits of {cached} cached blocks"
    );
    r.unmount();
}

/// Six 1 MiB regions dirty in an 8-set tier with a floor of half the sets: idle cleaning
/// waits for quiet, cleans from the LRU end down to the floor and stops; eager cleans in the
/// request path as soon as the floor is crossed.
#[test]
fn idle_cleaning_waits_for_quiet_and_eager_cleans_in_the_request_path() {
    for cleaner in ["idle", "eager"] {
        let r = Rig::new();
        r.mount(
            "9M",
            &[
                "--flash-cleaner",
                cleaner,
                "--flash-wait",
                "2000",
                "--flash-free-floor",
                "50%",
            ],
        );
        let sets = r.stats()["flash"]["sets"].as_u64().unwrap();
        assert!(sets >= 7, "{}", r.stats()["flash"]);
        let open: Vec<std::fs::File> = (0..6)
            .map(|k| write_scattered(&r.mnt, &format!("f{k}"), 200, 5).1)
            .collect();
        let st = r.stats()["flash"].clone();
        match cleaner {
            "eager" => {
                assert!(st["bytes_cleaned"].as_u64().unwrap() > 0, "eager: {st}");
                assert_eq!(st["state"], "normal", "{st}");
                // Cleaned one set per request below the floor: the last store may sit below.
                let floor = st["free_floor"].as_u64().unwrap();
                assert!(st["free_sets"].as_u64().unwrap() + 1 >= floor, "{st}");
            }
            _ => {
                assert_eq!(
                    st["bytes_cleaned"], 0,
                    "idle cleans nothing while busy: {st}"
                );
                wait_until("idle cleaning down to the floor", || {
                    let st = r.stats()["flash"].clone();
                    st["state"] == "normal" && st["bytes_cleaned"].as_u64().unwrap() > 0
                });
            }
        }
        if cleaner == "idle" {
            let st = r.stats()["flash"].clone();
            let floor = st["free_floor"].as_u64().unwrap();
            assert!(st["free_sets"].as_u64().unwrap() >= floor, "{st}");
        }
        // Still written back where it was cleaned, and everything reads right.
        for k in 0..6 {
            let got = std::fs::read(r.mnt.join(format!("f{k}"))).unwrap();
            let want: Vec<u8> = (0..200u64).flat_map(|b| block(b, 5)).collect();
            assert!(got == want, "f{k} with the {cleaner} cleaner");
        }
        drop(open);
        r.unmount();
    }
}

#[test]
fn writethrough_keeps_backing_current_and_the_ssd_clean() {
    let r = Rig::new();
    r.mount("32M", &["--flash-mode", "writethrough"]);
    let (want, f) = write_scattered(&r.mnt, "f", 128, 2);
    assert_eq!(std::fs::read(r.backing.join("f")).unwrap(), want);
    wait_until("write-through copies to land", || {
        r.stats()["lower"]["transit_blocks"].as_u64().unwrap() == 0
    });
    let st = r.stats();
    assert_eq!(st["flash"]["dirty_blocks"], 0, "{}", st["flash"]);
    assert!(
        r.flash_tier()["fills"].as_u64().unwrap() > 0,
        "{}",
        r.flash_tier()
    );
    assert_eq!(std::fs::read(r.mnt.join("f")).unwrap(), want);
    drop(f);
    r.unmount();
}

#[test]
fn bad_flash_settings_mount_nothing_and_name_what_is_wrong() {
    let r = Rig::new();
    // No size for a new cache file.
    let out = tc(&["mount", s(&r.backing), s(&r.mnt), "--flash", s(&r.cache)]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("give its size"),
        "{err}"
    );
    // A file that is not a cache is never overwritten (private, as a cache must be: one with
    // group or other bits is refused before its contents are looked at).
    std::fs::write(&r.cache, b"precious data").unwrap();
    std::fs::set_permissions(
        &r.cache,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let out = r.try_mount("16M", &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("refusing to overwrite"),
        "{err}"
    );
    assert_eq!(std::fs::read(&r.cache).unwrap(), b"precious data");
    std::fs::remove_file(&r.cache).unwrap();
    for (flag, value, why) in [
        ("--flash-mode", "sideways", "unknown mode"),
        ("--flash-cleaner", "lazy", "unknown cleaner"),
        ("--flash-dirty-max", "2", "fraction"),
        ("--flash-free-floor", "lots", "free floor"),
        ("--flash-placement", "sideways", "placement"),
        ("--flash-io", "sideways", "unknown I/O mode"),
    ] {
        let out = r.try_mount("16M", &[flag, value]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(why), "{flag}: {err}");
        assert!(err.contains(flag), "{flag}: {err}");
        assert!(!mounted(&r.mnt));
    }
    // A cache of another size keeps its own; asking for another is an error.
    r.mount("16M", &[]);
    // One mount per cache: a second daemon on it is refused.
    let other = Rig::new();
    let dev = format!("{}:16M", s(&r.cache));
    let out = tc(&["mount", s(&other.backing), s(&other.mnt), "--flash", &dev]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("in use"), "{err}");
    assert!(!mounted(&other.mnt));
    r.unmount();
    let out = r.try_mount("32M", &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("keeps its size"),
        "{err}"
    );
}
