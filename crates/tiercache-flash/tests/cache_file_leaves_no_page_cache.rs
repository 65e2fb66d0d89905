//! Bug (issue 23, item 2): the SSD tier read and wrote its cache file with buffered I/O, so
//! every block it held also sat in the kernel's page cache — a second RAM copy of the SSD
//! tier, taking memory from every other program.
//!
//! Each I/O mode that keeps the file out of the page cache (`auto` and the three it picks
//! from) fills, overwrites (the case `RWF_DONTCACHE` alone leaves cached on the kernels
//! measured), syncs and reads back 32 MiB through a tier on a cache file of this machine's
//! disk, with the right bytes, and the file holds at most [`DROP_EVERY`] plus the disk's
//! read-ahead window plus 1 MiB of page cache meanwhile (read-ahead and pages still being
//! written out), nothing but its head (records and checksum tables) once the tier's ticks find
//! it quiet and nothing at all after [`HEAD_LINGER`] quiet ticks; `buffered` (the old
//! behaviour) holds the 32 MiB. Unsynced writes followed by a quiet second leave nothing but
//! the head either.
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tiercache_flash::{
    FileDevice, FlashDevice, FlashTier, IoChoice, IoMode, DROP_EVERY, HEAD_LINGER,
};
use tiercache_tier::Cleaning;
use tiercache_tier::{DataTier, Lookup};

const LEN: u64 = 128 << 20;
/// 32 MiB of 4 KiB blocks.
const BLOCKS: u64 = 8192;
const MIB: u64 = 1 << 20;

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

/// The kernel's read-ahead window for files on the file system holding `path` (its backing
/// device's `read_ahead_kb`), in bytes.
fn read_ahead(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(path).unwrap().dev();
    let (maj, min) = (libc::major(dev), libc::minor(dev));
    let places = [
        format!("/sys/class/bdi/{maj}:{min}/read_ahead_kb"),
        // A partition: its disk's.
        format!("/sys/dev/block/{maj}:{min}/../queue/read_ahead_kb"),
    ];
    let kb = places
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .unwrap_or_else(|| panic!("no read_ahead_kb for {} in {places:?}", path.display()));
    kb.trim().parse::<u64>().unwrap() << 10
}

/// What the cache file held in the page cache: at the end of the reads, after two quiet
/// ticks, a second after unsynced writes, and after [`HEAD_LINGER`] more quiet ticks; and
/// the size of its head (superblock, records, checksum tables).
struct Held {
    busy: u64,
    quiet: u64,
    after_writes: u64,
    long_quiet: u64,
    head: u64,
}

/// Fills, overwrites (dirty), syncs and reads back [`BLOCKS`] blocks, then writes 1 MiB more
/// without a sync and lets the tier tick for a second.
fn run(io: IoChoice, want: IoMode) -> Held {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flash.cache");
    let dev = match FileDevice::open(&path, Some(LEN), io) {
        Ok(d) => d,
        Err(e) => panic!(
            "{io}: {e} (this test needs the cache file on a disk file system with direct I/O \
             and RWF_DONTCACHE: Linux 6.14 or later, e.g. ext4 or xfs)"
        ),
    };
    assert_eq!(dev.io_mode(), want, "{io}: skipped {:?}", dev.io_skipped());
    let d: Arc<dyn FlashDevice> = Arc::new(dev);
    let t = FlashTier::create(d, config()).unwrap();
    for b in 0..BLOCKS {
        fill(&t, &key(1, b), 1);
    }
    t.sync().unwrap();
    for b in 0..BLOCKS {
        write(&t, &key(1, b), 2);
    }
    t.sync().unwrap();
    // Not a whole number of drops' worth: some pages are left to the ticks.
    for b in 0..BLOCKS - 100 {
        let (l, got) = read(&t, &key(1, b));
        assert_eq!(l, Lookup::Hit { dirty: true }, "{io}: block {b}");
        assert!(got == data(&key(1, b), 2, 4096), "{io}: block {b}");
    }
    let busy = cached_bytes(&path);
    t.on_tick();
    t.on_tick();
    let quiet = cached_bytes(&path);
    // Unsynced writes leave dirty pages, which a drop only starts writing out: the quiet
    // ticks after it take them once clean.
    for b in 0..256 {
        write(&t, &key(2, b), 3);
    }
    for _ in 0..50 {
        t.on_tick();
        std::thread::sleep(Duration::from_millis(20));
    }
    let after_writes = cached_bytes(&path);
    for _ in 0..HEAD_LINGER {
        t.on_tick();
    }
    let long_quiet = cached_bytes(&path);
    let head = t.geometry().data_off;
    t.close().unwrap();
    Held {
        busy,
        quiet,
        after_writes,
        long_quiet,
        head,
    }
}

#[test]
fn every_uncached_mode_keeps_the_cache_file_out_of_the_page_cache() {
    let dir = tempfile::tempdir().unwrap();
    let bound = DROP_EVERY + read_ahead(dir.path()) + MIB;
    assert!(
        bound <= BLOCKS * 4096 / 2,
        "read-ahead too large for this test: {bound}"
    );
    for (io, want) in [
        (IoChoice::Auto, tiercache_flash::AUTO_ORDER[0]),
        (IoChoice::Only(IoMode::Fadvise), IoMode::Fadvise),
        (IoChoice::Only(IoMode::Dontcache), IoMode::Dontcache),
        (IoChoice::Only(IoMode::Direct), IoMode::Direct),
    ] {
        let h = run(io, want);
        eprintln!(
            "{io}: {} bytes cached after the reads, {} once quiet, {} after unsynced writes, \
             {} once quiet long (head {})",
            h.busy, h.quiet, h.after_writes, h.long_quiet, h.head
        );
        assert!(
            h.busy <= bound,
            "{io}: {} bytes cached (bound {bound})",
            h.busy
        );
        let head = h.head + (64 << 10);
        assert!(h.quiet <= head, "{io}: {} bytes once quiet", h.quiet);
        assert!(
            h.after_writes <= head,
            "{io}: {} bytes after unsynced writes",
            h.after_writes
        );
        assert!(
            h.long_quiet <= 64 << 10,
            "{io}: {} bytes once quiet long",
            h.long_quiet
        );
    }
}

#[test]
fn buffered_io_keeps_what_it_wrote_in_the_page_cache() {
    let h = run(IoChoice::Only(IoMode::Buffered), IoMode::Buffered);
    eprintln!(
        "buffered: {} bytes cached after the reads, {} once quiet, {} after unsynced writes, \
         {} once quiet long",
        h.busy, h.quiet, h.after_writes, h.long_quiet
    );
    // The 32 MiB (and their metadata), tick or not: the difference the other modes make.
    assert!(h.busy.min(h.quiet).min(h.after_writes).min(h.long_quiet) >= 31 * MIB);
}
