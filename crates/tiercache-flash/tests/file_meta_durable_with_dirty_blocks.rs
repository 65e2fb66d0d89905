//! Format 2: a file's meta (logical size, mtime, BACKING handle) is kept durable with its dirty
//! blocks — the newest meta of the last completed `sync()` comes back from `recovered_files()`
//! after a power cut, a torn record falls back to the previous meta, reusing the set that
//! carried it does not lose it, and RAM keeps it only while it may be needed.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use std::sync::Arc;
use tiercache_flash::format::{Geometry, Record, Slot};
use tiercache_flash::{FlashDevice, FlashTier};
use tiercache_tier::{Admit, DataTier, FileHandle, FileMeta, RecoveredFile, MAX_HANDLE_BYTES};
use tiercache_tier::{Cleaning, Persistence};

const LEN: u64 = 8 * ((1 << 20) + 2048) + 8192;

fn meta(size: u64, handle_len: usize) -> FileMeta {
    FileMeta {
        size,
        mtime_ns: 1_700_000_000_000_000_000 + size as i64,
        handle: FileHandle {
            kind: 0x81,
            bytes: (0..handle_len).map(|i| i as u8 ^ 0x5a).collect(),
        },
    }
}

fn recovered(t: &FlashTier, ino: u64) -> RecoveredFile {
    t.recovered_files()
        .into_iter()
        .find(|r| r.file == file(ino))
        .unwrap()
}

#[test]
fn the_record_size_stays_512_bytes_with_the_default_geometry() {
    let g = Geometry::compute(256 << 20, 512, 12, 8).unwrap();
    assert_eq!((g.rec_size, g.sets), (512, 255));
}

#[test]
fn a_record_round_trips_its_meta_and_a_checksummed_handle_longer_than_128_is_not_trusted() {
    let g = Geometry::compute(256 << 20, 512, 12, 8).unwrap();
    let rec = Record {
        set: 3,
        seq: 9,
        tag: Some((file(1), 2)),
        version: V,
        valid: vec![1, 0, 0, 0],
        dirty: vec![1, 0, 0, 0],
        in_place: vec![1, 0, 0, 0],
        meta: Some((meta(77, MAX_HANDLE_BYTES), 41)),
    };
    let mut b = rec.encode(&g, 5);
    assert_eq!(Record::decode(&b, &g, 3, 5), Slot::Good(rec));
    // Handle length 129 (at 100 + 3W) with a checksum that matches.
    let o = 72 + 3 * 32;
    b[o + 28..o + 32].copy_from_slice(&129u32.to_le_bytes());
    let end = o + 160;
    let crc = crc32c::crc32c(&b[..end]);
    b[end..end + 4].copy_from_slice(&crc.to_le_bytes());
    assert_eq!(Record::decode(&b, &g, 3, 5), Slot::Bad);
}

#[test]
fn after_a_power_cut_each_dirty_file_comes_back_with_the_meta_of_the_last_sync() {
    let d: Arc<dyn FlashDevice> = mem(LEN);
    let t = FlashTier::create(d.clone(), config()).unwrap();
    t.set_file_meta(&file(1), &meta(4096, MAX_HANDLE_BYTES));
    write(&t, &key(1, 0), 1);
    t.set_file_meta(&file(2), &meta(10, 8));
    write(&t, &key(2, 300), 1);
    write(&t, &key(2, 900), 1);
    t.sync().unwrap();
    // Appended: only the meta changes for file 1 (no store), then synced.
    t.set_file_meta(&file(1), &meta(8192, MAX_HANDLE_BYTES));
    t.sync().unwrap();
    // Set after the last sync: may or may not be durable; here nothing is written at all.
    t.set_file_meta(&file(2), &meta(20, 8));
    t.abandon();
    let t = FlashTier::open(d, config()).unwrap();
    let files = t.recovered_files();
    assert_eq!(files.len(), 2, "{files:?}");
    let f1 = recovered(&t, 1);
    assert_eq!((f1.version, f1.dirty_blocks), (V, 1));
    assert_eq!(f1.meta, Some(meta(8192, MAX_HANDLE_BYTES)));
    let f2 = recovered(&t, 2);
    assert_eq!(f2.dirty_blocks, 2);
    assert_eq!(f2.meta, Some(meta(10, 8)));
    assert_eq!(t.flash_stats().recovered_files, 2);
    assert_eq!(t.flash_stats().files_with_meta, 2, "metas are back in RAM");
}

#[test]
fn a_torn_record_of_the_meta_carrying_set_falls_back_to_the_meta_before_it() {
    let dev = mem(LEN);
    let d: Arc<dyn FlashDevice> = dev.clone();
    let t = FlashTier::create(d.clone(), config()).unwrap();
    let g = t.geometry();
    t.set_file_meta(&file(1), &meta(100, 16));
    write(&t, &key(1, 0), 1);
    t.sync().unwrap(); // set 0, record seq 1 in slot 1
    t.set_file_meta(&file(1), &meta(200, 16));
    t.sync().unwrap(); // set 0, record seq 2 in slot 0: the carrier of meta 200
    t.abandon();
    let mut b = [0u8; 1];
    let off = g.rec_off(0, 0) + 200;
    d.read_at(&mut b, off).unwrap();
    dev.poke(off, &[b[0] ^ 0xff]);
    let t = FlashTier::open(d, config()).unwrap();
    assert_eq!(t.flash_stats().torn_records, 1);
    let f = recovered(&t, 1);
    assert_eq!(f.dirty_blocks, 1);
    assert_eq!(
        f.meta,
        Some(meta(100, 16)),
        "the other slot's meta, not garbage"
    );
}

/// Whichever of a file's two dirty sets carries its newest meta, cleaning that set and
/// reusing it for another file must not leave only the older meta on the device.
#[test]
fn reusing_the_set_that_carried_a_files_meta_keeps_the_newest_meta_durable() {
    for cleaned in [0u64, 4] {
        let len = 43008;
        let d: Arc<dyn FlashDevice> = mem(len);
        let t = FlashTier::create(d.clone(), small_config()).unwrap();
        assert_eq!(t.geometry().sets, 4);
        t.set_file_meta(&file(1), &meta(1, 0));
        write(&t, &key(1, 0), 1);
        write(&t, &key(1, 4), 1);
        t.sync().unwrap();
        t.set_file_meta(&file(1), &meta(2, 0));
        t.sync().unwrap();
        // Clean one set of file 1 (durably), then make the tier reuse it.
        let mut buf = vec![0u8; 2048];
        let seq = t
            .read_dirty(&key(1, cleaned), V, &mut buf)
            .unwrap()
            .unwrap();
        assert!(t.mark_clean(&key(1, cleaned), seq));
        t.sync().unwrap();
        assert_eq!(fill(&t, &key(2, 0), 1), Admit::Stored);
        assert_eq!(fill(&t, &key(3, 0), 1), Admit::Stored);
        assert_eq!(
            fill(&t, &key(4, 0), 1),
            Admit::Stored,
            "reuses the cleaned set"
        );
        assert!(!t.contains(&key(1, cleaned)));
        t.sync().unwrap();
        t.abandon();
        let t = FlashTier::open(d, small_config()).unwrap();
        let f = recovered(&t, 1);
        assert_eq!(f.dirty_blocks, 1);
        assert_eq!(f.meta, Some(meta(2, 0)), "cleaned block {cleaned}");
    }
}

#[test]
fn a_files_meta_leaves_ram_once_its_dirty_blocks_are_durably_clean() {
    let d: Arc<dyn FlashDevice> = mem(LEN);
    let t = FlashTier::create(d, config()).unwrap();
    t.set_file_meta(&file(1), &meta(1, 4));
    write(&t, &key(1, 0), 1);
    t.sync().unwrap();
    assert_eq!(t.flash_stats().files_with_meta, 1);
    for db in t.dirty_blocks(10) {
        let mut buf = vec![0u8; 4096];
        let seq = t
            .read_dirty(&db.key, db.version, &mut buf)
            .unwrap()
            .unwrap();
        assert!(t.mark_clean(&db.key, seq));
    }
    // Clean in RAM only: a crash now brings the block back dirty, and it needs the meta.
    assert_eq!(t.flash_stats().files_with_meta, 1);
    t.sync().unwrap();
    assert_eq!(t.flash_stats().files_with_meta, 0);
    // A meta set before the file's first store survives one sync without any block.
    t.set_file_meta(&file(2), &meta(5, 4));
    t.sync().unwrap();
    assert_eq!(t.flash_stats().files_with_meta, 1);
    t.sync().unwrap();
    assert_eq!(t.flash_stats().files_with_meta, 0);
}

#[test]
fn a_warm_restart_lists_the_dirty_files_with_their_meta() {
    let d: Arc<dyn FlashDevice> = mem(LEN);
    let t = FlashTier::create(d.clone(), config()).unwrap();
    t.set_file_meta(&file(1), &meta(3, 3));
    write(&t, &key(1, 7), 1);
    fill(&t, &key(2, 0), 1);
    t.set_file_meta(&file(1), &meta(4, 3));
    t.close().unwrap();
    drop(t);
    let t = FlashTier::open(d, config()).unwrap();
    assert!(t.flash_stats().opened_clean);
    let files = t.recovered_files();
    assert_eq!(files.len(), 1);
    assert_eq!(files[0].meta, Some(meta(4, 3)));
    assert_eq!(files[0].dirty_blocks, 1);
}

#[test]
fn a_dirty_file_whose_meta_was_never_set_comes_back_without_meta() {
    let d: Arc<dyn FlashDevice> = mem(LEN);
    let t = FlashTier::create(d.clone(), config()).unwrap();
    write(&t, &key(1, 0), 1);
    t.sync().unwrap();
    t.abandon();
    let t = FlashTier::open(d, config()).unwrap();
    assert_eq!(recovered(&t, 1).meta, None);
}
