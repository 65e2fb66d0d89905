//! Bug: a flusher round started because dirty blocks passed the background ratio stopped as soon as they were back at the ratio, so in a `tar x` every further write kicked another round, and each round scanned and sorted every dirty file (most of the daemon's CPU on 20,000 files).
//!
//! One write past the ratio must bring dirty blocks a quarter below it, in one round.
#![allow(clippy::unwrap_used)]

mod common;

use common::{make_file, open, read_file, small_config};
use std::time::{Duration, Instant};
use tiercache_manager::{Class, MemCache, RealBacking};

const CAPACITY: usize = 1000;

#[test]
fn one_write_past_the_background_ratio_writes_back_a_quarter_below_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = small_config(CAPACITY);
    cfg.flusher_threads = 1;
    // Only the kick of a write past the ratio starts a round; nothing expires meanwhile.
    cfg.flush_interval = Duration::from_secs(600);
    cfg.dirty_expire = Duration::from_secs(600);
    cfg.dirty_background_ratio = 0.10;
    cfg.dirty_ratio = 0.40;
    let limit = CAPACITY / 10;
    let block = vec![7u8; 512];
    let c = MemCache::new(cfg, std::sync::Arc::new(RealBacking)).unwrap();
    // One whole block per closed file: `limit + 1` of them, so only the last write kicks.
    let files: Vec<_> = (0..=limit)
        .map(|i| {
            let p = make_file(dir.path(), &format!("f{i:03}"), b"");
            let id = open(&c, &p, Class::NORMAL);
            c.write(id, 0, &block).unwrap();
            c.release(id);
            p
        })
        .collect();
    let target = (limit - limit / 4) as u64;
    let t = Instant::now();
    let mut dirty = c.stats().dirty_blocks;
    while dirty > target && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
        dirty = c.stats().dirty_blocks;
    }
    // The round is over when nothing moves any more.
    std::thread::sleep(Duration::from_millis(200));
    let dirty = c.stats().dirty_blocks;
    assert!(
        dirty <= target,
        "{dirty} dirty blocks after a round past the background limit of {limit} (want <= {target})"
    );
    assert!(
        dirty >= target - 1,
        "{dirty}: more written back than needed"
    );
    // Oldest first: the first files written are on BACKING.
    assert_eq!(read_file(&files[0]), block);
}
