//! Bug (found by `tiercache bench meta`): with the kernel keeping directory entries across
//! opens (`FOPEN_CACHE_DIR`), a listing that found a page of that cache missing went on reading
//! at a non-zero offset on its own new directory handle, which had no snapshot yet and answered
//! "end of directory": `find` walked 893 of 2,000 directories of a big tree and exited 0. The
//! mount no longer asks for that cache, and a handle snapshots on its first read at any offset;
//! these tests keep listings complete while the kernel drops its caches and readers overlap.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::TestMount;
use tiercache_fuse::MountOptions;

#[test]
fn listings_stay_complete_while_the_kernel_drops_its_caches() {
    let t = TestMount::new(MountOptions::default());
    const DIRS: usize = 8;
    const FILES: usize = 1500;
    for d in 0..DIRS {
        let dir = t.backing.join(format!("d{d}"));
        std::fs::create_dir(&dir).unwrap();
        for f in 0..FILES {
            std::fs::write(dir.join(format!("a-rather-long-file-name-{f:05}")), b"").unwrap();
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let dropper = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::fs::write("/proc/sys/vm/drop_caches", b"3")
                    .expect("the tests run as root (drop_caches)");
                std::thread::sleep(std::time::Duration::from_millis(3));
            }
        })
    };
    let mut short = Vec::new();
    for round in 0..20 {
        for d in 0..DIRS {
            // a slow reader: the kernel serves it from its cache page by page, and pages go
            // missing between its getdents calls
            let mut n = 0;
            for e in std::fs::read_dir(t.mnt.join(format!("d{d}"))).unwrap() {
                e.unwrap();
                n += 1;
                if n % 64 == 0 {
                    std::thread::sleep(std::time::Duration::from_micros(300));
                }
            }
            if n != FILES {
                short.push((round, d, n));
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    dropper.join().unwrap();
    assert!(
        short.is_empty(),
        "short listings (round, dir, entries): {short:?}"
    );
}

#[test]
fn a_new_handle_continues_where_a_partial_kernel_cache_ends() {
    let t = TestMount::new(MountOptions::default());
    const FILES: usize = 5000;
    let dir = t.backing.join("big");
    std::fs::create_dir(&dir).unwrap();
    for f in 0..FILES {
        std::fs::write(dir.join(format!("a-rather-long-file-name-{f:05}")), b"").unwrap();
    }
    for round in 0..5 {
        // one reader stops after its first batch, leaving the kernel's cache partly filled
        let mut first = std::fs::read_dir(t.mnt.join("big")).unwrap();
        first.next().unwrap().unwrap();
        let n = std::fs::read_dir(t.mnt.join("big")).unwrap().count();
        assert_eq!(
            n, FILES,
            "round {round}: a second reader saw a short listing"
        );
        drop(first);
        std::fs::write("/proc/sys/vm/drop_caches", b"3").unwrap();
    }
}
