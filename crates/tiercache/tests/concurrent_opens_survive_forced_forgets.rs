//! Bug: EBADF under concurrent open/close with forced forgets — reads and writes on freshly opened files failed with `Bad file descriptor` while other handles of the same file closed and the kernel sent FORGET (drop_caches), because the data path lost count of open handles and a late forget dropped the memory tier's state of a file open again.
//!
//! Six threads open, read (30 % also write) and close a dozen small files on the real cached
//! daemon while another thread writes `2` to `/proc/sys/vm/drop_caches` every 5 ms, so FORGET
//! races lookups, opens and releases of the same inodes. Every failed call is counted by errno;
//! the test wants none. The daemon runs 8 request threads over the `ssd` device model (0.08 ms
//! per BACKING request): a forget writes a dirty file back synchronously, and the model widens
//! that window so the race shows thousands of times per run instead of a few per 100,000 opens
//! (before the fix: about 4,000 EBADF and 130 EAGAIN per 160,000 opens in every run; with the
//! default configuration 0–9 EBADF per run). `TIERCACHE_FORGET_RACE_SECS` changes the run time
//! (default 10).
#![allow(clippy::unwrap_used)]

mod support;

use support::Mount;

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const FILES: usize = 12;
const WORKERS: usize = 6;
const FILE_SIZE: usize = 8192;

/// Failures by (operation, errno).
type Failures = Mutex<BTreeMap<(&'static str, i32), u64>>;

fn note(failures: &Failures, op: &'static str, e: &std::io::Error) {
    let code = e.raw_os_error().unwrap_or(-1);
    *failures.lock().unwrap().entry((op, code)).or_default() += 1;
}

/// One worker: open, read, maybe write, close, until `stop`.
fn work(paths: &[PathBuf], seed: u64, stop: &AtomicBool, opens: &AtomicU64, failures: &Failures) {
    let mut x = seed | 1;
    let mut buf = vec![0u8; 4096];
    while !stop.load(Ordering::Relaxed) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let path = &paths[(x % paths.len() as u64) as usize];
        let write = x % 100 < 30;
        let f = match OpenOptions::new().read(true).write(write).open(path) {
            Ok(f) => f,
            Err(e) => {
                note(failures, "open", &e);
                continue;
            }
        };
        opens.fetch_add(1, Ordering::Relaxed);
        let off = (x >> 20) % (FILE_SIZE as u64 - 4096);
        if let Err(e) = f.read_at(&mut buf, off) {
            note(failures, "read", &e);
        }
        if write {
            if let Err(e) = f.write_at(&seed.to_le_bytes(), off) {
                note(failures, "write", &e);
            }
        }
        // close(2), with its result (std ignores it)
        let fd = std::os::fd::IntoRawFd::into_raw_fd(f);
        // SAFETY: `fd` was taken out of its owner and is closed exactly once.
        if unsafe { libc::close(fd) } != 0 {
            note(failures, "close", &std::io::Error::last_os_error());
        }
    }
}

#[test]
fn concurrent_opens_reads_and_writes_never_see_ebadf_while_the_kernel_forgets_inodes() {
    let secs: u64 = std::env::var("TIERCACHE_FORGET_RACE_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let m = Mount::new(&["--memory", "4M", "--threads", "8", "--emulate", "ssd"]);
    let paths: Vec<PathBuf> = (0..FILES)
        .map(|i| {
            let p = m.mnt.join(format!("f{i}"));
            std::fs::write(&p, vec![b'a' + i as u8; FILE_SIZE]).unwrap();
            p
        })
        .collect();
    // The kernel must really forget: drop_caches needs root, and the suite runs as root.
    std::fs::write("/proc/sys/vm/drop_caches", "2")
        .expect("writing /proc/sys/vm/drop_caches (the tests run as root)");

    let stop = Arc::new(AtomicBool::new(false));
    let opens = Arc::new(AtomicU64::new(0));
    let drops = Arc::new(AtomicU64::new(0));
    let failures: Arc<Failures> = Arc::default();
    let dropper = {
        let (stop, drops) = (Arc::clone(&stop), Arc::clone(&drops));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::fs::write("/proc/sys/vm/drop_caches", "2").unwrap();
                drops.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (paths, stop) = (paths.clone(), Arc::clone(&stop));
            let (opens, failures) = (Arc::clone(&opens), Arc::clone(&failures));
            std::thread::spawn(move || {
                work(
                    &paths,
                    0x9E37_79B9_7F4A_7C15 ^ (w as u64 + 1),
                    &stop,
                    &opens,
                    &failures,
                )
            })
        })
        .collect();
    let start = Instant::now();
    std::thread::sleep(Duration::from_secs(secs));
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    dropper.join().unwrap();
    let elapsed = start.elapsed().as_secs_f64();
    let failures = failures.lock().unwrap().clone();
    let opens = opens.load(Ordering::Relaxed);
    eprintln!(
        "{opens} opens in {elapsed:.1} s, {} drop_caches, failures by (op, errno): {failures:?}",
        drops.load(Ordering::Relaxed)
    );
    assert!(opens > 10_000, "too few opens ({opens}) to mean anything");
    assert!(
        failures.is_empty(),
        "failed calls by (op, errno) in {opens} opens: {failures:?} (EBADF = {})",
        libc::EBADF
    );
}
