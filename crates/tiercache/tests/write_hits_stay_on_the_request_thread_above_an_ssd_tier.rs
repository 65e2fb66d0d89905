//! Issue #17 (`bench flash` rand_write twice as slow): with an SSD tier below memory, every write was handed to an I/O worker, because dropping the tier's stale copy of a block might wait for the tier's own I/O; a write hit now drops it at once when the tier's lock is free and is answered on the request thread.
//!
//! The I/O workers count what they run (`io.normal.completed`). 256 block-aligned 4 KiB
//! overwrites of a cached file, through one open handle (a writer's `release` always runs on a
//! worker), may reach the workers only now and then (the tier's lock held by its own
//! background I/O at that moment): fewer than a quarter of them. Then every byte reads back,
//! through the mount and on BACKING after `flush`.
#![allow(clippy::unwrap_used)]

mod support;

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use support::{s, tc, Mount};

const BS: usize = 4096;
const BLOCKS: usize = 256;

fn completed(m: &Mount) -> u64 {
    m.stats()["io"]["normal"]["completed"].as_u64().unwrap()
}

fn block(i: usize, round: u8) -> Vec<u8> {
    (0..BS)
        .map(|j| (i as u8).wrapping_mul(31) ^ (j as u8) ^ round)
        .collect()
}

#[test]
fn write_hits_above_an_ssd_tier_are_not_handed_to_io_workers() {
    let cache_dir = tempfile::tempdir().unwrap();
    let dev = format!("{}:64M", s(&cache_dir.path().join("ssd.cache")));
    let m = Mount::new(&["--memory", "16M", "--flash", &dev, "--io-workers", "2"]);
    let path = m.mnt.join("f");
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    for i in 0..BLOCKS {
        f.write_all_at(&block(i, 0), (i * BS) as u64).unwrap();
    }
    let before = completed(&m);
    // A scattered order, as `bench flash` rand_write does.
    for k in 0..BLOCKS {
        let i = (k * 97) % BLOCKS;
        f.write_all_at(&block(i, 1), (i * BS) as u64).unwrap();
    }
    let on_workers = completed(&m) - before;
    assert!(
        on_workers < (BLOCKS / 4) as u64,
        "{on_workers} of {BLOCKS} write hits ran on I/O workers"
    );
    drop(f);

    let want: Vec<u8> = (0..BLOCKS).flat_map(|i| block(i, 1)).collect();
    assert!(std::fs::read(&path).unwrap() == want, "mount: wrong bytes");
    let out = tc(&["flush", s(&m.mnt)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        std::fs::read(m.backing.join("f")).unwrap() == want,
        "BACKING: wrong bytes after flush"
    );
}
