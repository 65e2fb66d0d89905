//! Bug (issue 17, `bench flash` idle `rand_write` slower than before the hardening): the first
//! tick that found the cache file quiet dropped its head too (superblock, set records and
//! checksum tables), so the first burst after every pause — paper 001's workload: bursts
//! between idle gaps of seconds — read each set's table and record page from the disk again,
//! under the tier's lock, and write hits found the lock held and went to the I/O workers.
//!
//! Now quiet ticks drop the data blocks' pages at once and the head's only after
//! [`HEAD_LINGER`] quiet ticks in a row; any I/O starts the count again.
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use std::path::Path;
use std::sync::Arc;
use tiercache_flash::{FlashDevice, FlashTier, IoMode, HEAD_LINGER};
use tiercache_tier::Cleaning;
use tiercache_tier::DataTier;

const LEN: u64 = 64 << 20;
/// Sets written to (block 0 of each of these files' first set).
const FILES: u64 = 16;

fn resident(path: &Path, range: std::ops::Range<u64>) -> usize {
    resident_pages(path, range).iter().filter(|&&b| b).count()
}

fn ticks(t: &FlashTier, n: u32) {
    for _ in 0..n {
        t.on_tick();
    }
}

fn run(mode: IoMode) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flash.cache");
    let dev = open_file_device(&path, LEN, mode);
    let d: Arc<dyn FlashDevice> = Arc::new(dev);
    let t = FlashTier::create(d, config()).unwrap();
    let geo = t.geometry();
    let (head, blocks) = (0..geo.data_off, geo.data_off..LEN);
    let burst = |v: u64| {
        for f in 1..=FILES {
            write(&t, &key(f, 0), v);
        }
        t.sync().unwrap();
    };
    burst(1);
    let after_sync = resident(&path, head.clone());
    assert!(
        after_sync >= 2,
        "{mode}: {after_sync} head pages after the burst"
    );
    // A pause: the data blocks' pages go at the first quiet tick, the head's stay.
    ticks(&t, 2);
    assert_eq!(
        resident(&path, blocks.clone()),
        0,
        "{mode}: data pages kept"
    );
    assert!(
        resident(&path, head.clone()) >= after_sync,
        "{mode}: the head went at the first quiet ticks"
    );
    ticks(&t, HEAD_LINGER - 3);
    assert!(
        resident(&path, head.clone()) >= after_sync,
        "{mode}: the head went before {HEAD_LINGER} quiet ticks"
    );
    // I/O starts the count again: another burst, then almost as long a pause.
    burst(2);
    ticks(&t, HEAD_LINGER - 1);
    assert!(
        resident(&path, head.clone()) >= after_sync,
        "{mode}: the quiet count was not reset by the burst"
    );
    // Quiet long enough: nothing is left, head included.
    ticks(&t, 2);
    let left = resident(&path, 0..LEN);
    assert_eq!(
        left, 0,
        "{mode}: {left} pages cached after {HEAD_LINGER} quiet ticks"
    );
    for f in 1..=FILES {
        let (_, got) = read(&t, &key(f, 0));
        assert!(got == data(&key(f, 0), 2, 4096), "{mode}: file {f}");
    }
    t.close().unwrap();
}

#[test]
fn a_pause_keeps_the_cache_files_head_and_a_long_one_drops_it() {
    run(IoMode::Fadvise);
    run(IoMode::Dontcache);
}
