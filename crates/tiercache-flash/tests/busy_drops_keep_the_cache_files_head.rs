//! Bug (issue 17, `bench flash` `rand_write` slower): the page-cache drop after every device
//! sync took the cache file's head too — superblock, set records and checksum tables, which
//! every store reads and rewrites a part of — so after each sync of a burst every store read
//! its set's checksum table and record page from the disk again, under the tier's lock.
//!
//! With the modes that drop pages (`fadvise`, `dontcache`), a sync now drops the data blocks'
//! pages but leaves the head's; once the tier's ticks have found the file quiet
//! [`HEAD_LINGER`] times in a row, nothing is left, head included.
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

fn resident(path: &Path, range: std::ops::Range<u64>) -> Vec<bool> {
    resident_pages(path, range)
}

fn count(v: &[bool]) -> usize {
    v.iter().filter(|&&b| b).count()
}

fn run(mode: IoMode) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flash.cache");
    let dev = open_file_device(&path, LEN, mode);
    let d: Arc<dyn FlashDevice> = Arc::new(dev);
    let t = FlashTier::create(d, config()).unwrap();
    let geo = t.geometry();
    let head = 0..geo.data_off;
    let blocks = geo.data_off..LEN;
    // A burst: dirty stores in many sets, a sync, and more stores in the same sets.
    for f in 1..=FILES {
        write(&t, &key(f, 0), 1);
    }
    t.sync().unwrap();
    let after_sync = resident(&path, head.clone());
    assert!(
        count(&resident(&path, blocks.clone())) == 0,
        "{mode}: the sync drops the data blocks' pages"
    );
    // Every set written has its record and checksum table in a page that stays.
    let first_sets = count(&after_sync);
    assert!(
        first_sets >= 2,
        "{mode}: {first_sets} pages of the head cached after the sync (records and tables of \
         {FILES} sets were just written: they must stay cached while the file is busy)"
    );
    for f in 1..=FILES {
        write(&t, &key(f, 1), 2);
    }
    t.sync().unwrap();
    assert!(
        count(&resident(&path, head.clone())) >= first_sets,
        "{mode}: the second sync dropped the head's pages"
    );
    // Quiet long enough, and nothing is left, head included.
    for _ in 0..=HEAD_LINGER + 1 {
        t.on_tick();
    }
    let quiet = count(&resident(&path, 0..LEN));
    assert_eq!(quiet, 0, "{mode}: {quiet} pages cached once quiet");
    // The bytes are right.
    for f in 1..=FILES {
        let (_, got) = read(&t, &key(f, 1));
        assert!(got == common::data(&key(f, 1), 2, 4096), "{mode}: file {f}");
    }
    t.close().unwrap();
}

#[test]
fn a_sync_keeps_the_head_cached_and_quiet_ticks_drop_it() {
    run(IoMode::Fadvise);
    run(IoMode::Dontcache);
}
