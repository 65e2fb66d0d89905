//! Bug: a freed set whose record carried a file's newest meta was reused by another file and its new record written in the same round as the first file's new carrier, so a crash between them brought back the older meta (after recovery, a recovered file's size went back).
//!
//! File 1 has dirty blocks in sets A and B; its newest meta, acknowledged by a sync, is carried
//! only by A's record, which holds no dirty block any more (cleaned lazily; B's record still
//! has the meta before). A is freed — by a crash (recovery reports that meta) or by dropping
//! its clean block — and file 2 takes it. The next sync (or close) must make a new carrier of
//! file 1's meta (B) durable before A's record, which names file 2, can land: whatever part of
//! that sync's writes reaches the device (writes fail after any count, then a power cut keeps
//! a random subset of the unsynced ones), recovery never reports file 1's older meta.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use std::sync::Arc;
use tiercache_flash::{FaultyDevice, FlashDevice, FlashTier, SetId};
use tiercache_tier::{Admit, DataTier, FileHandle, FileMeta};
use tiercache_tier::{Cleaning, Persistence};

/// 64 KiB with the small geometry: a few 4-block sets.
const LEN: u64 = 64 << 10;

fn meta(size: u64) -> FileMeta {
    FileMeta {
        size,
        mtime_ns: 1_700_000_000_000_000_000 + size as i64,
        handle: FileHandle {
            kind: 1,
            bytes: vec![size as u8; 8],
        },
    }
}

fn meta_of(t: &FlashTier, ino: u64) -> Option<FileMeta> {
    let r = t.recovered_files();
    let f = r.iter().find(|r| r.file == file(ino));
    f.unwrap_or_else(|| panic!("file {ino} not recovered: {r:?}"))
        .meta
        .clone()
}

fn open(dev: &Arc<FaultyDevice>) -> FlashTier {
    let d: Arc<dyn FlashDevice> = dev.clone();
    FlashTier::open(d, small_config()).unwrap()
}

/// How set A comes to be free while its record is file 1's only carrier of its newest meta.
#[derive(Debug, Clone, Copy)]
enum Freed {
    /// A crash: recovery reports that meta and frees A (its block is clean).
    ByRecovery,
    /// No crash: A's clean block is invalidated, which frees it.
    ByInvalidate,
}

/// File 1's newest meta (2) is carried only by the record of set A (set 0), which is free;
/// set B (set 1) holds file 1's dirty block with meta 1 in its record. From then on the
/// device is in power-cut mode (a crash keeps a random part of what was written since the
/// last device sync, in any order).
fn with_a_freed_carrier(seed: u64, how: Freed) -> (Arc<FaultyDevice>, FlashTier) {
    let dev = faulty(LEN, seed);
    let d: Arc<dyn FlashDevice> = dev.clone();
    let t = FlashTier::create(d, small_config()).unwrap();
    let mut buf = vec![0u8; t.info().block_size];
    let mut clean = |k| {
        let seq = t.read_dirty(&k, V, &mut buf).unwrap().unwrap();
        assert!(t.mark_clean(&k, seq));
    };
    t.set_file_meta(&file(1), &meta(1));
    assert_eq!(write(&t, &key(1, 0), 1), Admit::Stored, "set A");
    assert_eq!(write(&t, &key(1, 4), 1), Admit::Stored, "set B");
    t.sync().unwrap();
    // A leaves the dirty sets and comes back: the tier now picks A to carry file 1's meta.
    clean(key(1, 0));
    t.sync().unwrap();
    assert_eq!(write(&t, &key(1, 0), 2), Admit::Stored);
    t.sync().unwrap();
    t.set_file_meta(&file(1), &meta(2));
    clean(key(1, 0));
    // A's record: no dirty block, meta 2. B's record still carries meta 1.
    t.sync().unwrap();
    let t = match how {
        Freed::ByRecovery => {
            t.abandon();
            dev.crash().unwrap();
            let t = open(&dev);
            assert_eq!(
                meta_of(&t, 1),
                Some(meta(2)),
                "the synced meta, from A's record"
            );
            t
        }
        Freed::ByInvalidate => {
            t.invalidate(&key(1, 0));
            t
        }
    };
    dev.set_volatile(true).unwrap();
    (dev, t)
}

/// File 2 takes set A; `end` ends the tier after `n` more device writes, then power is cut.
fn reuse_then_cut(how: Freed, end: impl Fn(&FlashTier) -> bool) {
    for seed in 0..16 {
        // n: how many writes the device takes before every write fails.
        for n in 0..10 {
            let (dev, t) = with_a_freed_carrier(seed, how);
            t.set_file_meta(&file(2), &meta(100));
            assert_eq!(write(&t, &key(2, 0), 1), Admit::Stored);
            let in_a: Vec<_> = t.set_dirty_blocks(SetId(0)).iter().map(|d| d.key).collect();
            assert_eq!(in_a, [key(2, 0)], "file 2 took set A");
            dev.fail_writes_after(Some(n));
            let ok = end(&t);
            t.abandon();
            dev.crash().unwrap();
            let t = open(&dev);
            assert_eq!(
                meta_of(&t, 1),
                Some(meta(2)),
                "{how:?}, seed {seed}, {n} writes taken (sync or close ok: {ok}): file 1's older meta \
                 came back"
            );
        }
    }
}

#[test]
fn a_set_freed_by_recovery_that_carried_a_files_meta_is_reused_only_after_a_new_carrier() {
    reuse_then_cut(Freed::ByRecovery, |t| t.sync().is_ok());
}

/// The same with a clean close: the close's sync keeps the order too.
#[test]
fn a_close_after_recovery_keeps_the_order_too() {
    reuse_then_cut(Freed::ByRecovery, |t| t.close().is_ok());
}

/// Not only after recovery: a carrier freed while running is reused the same way.
#[test]
fn a_set_freed_while_running_that_carried_a_files_meta_is_reused_only_after_a_new_carrier() {
    reuse_then_cut(Freed::ByInvalidate, |t| t.sync().is_ok());
}
