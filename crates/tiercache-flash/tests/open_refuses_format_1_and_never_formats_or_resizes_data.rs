//! Format 2 changed the record; a cache of format 1 is refused by `open` (and `check`) with
//! one clear line, never formatted over by `open_or_create`; a new file is formatted, an
//! existing cache file is never resized by `open_path` (it may hold the only dirty copies).
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use std::sync::Arc;
use tiercache_flash::{
    is_formatted, FileDevice, FlashDevice, FlashError, FlashTier, IoChoice, MemDevice,
};
use tiercache_tier::DataTier;
use tiercache_tier::{Cleaning, Persistence};

const LEN: u64 = 8 * ((1 << 20) + 2048) + 8192;

/// Rewrites both superblock copies as format version `v` (checksums kept right).
fn as_version(dev: &MemDevice, v: u32) {
    for slot in 0..2u64 {
        let mut b = vec![0u8; 512];
        dev.read_at(&mut b, slot * 512).unwrap();
        if b[..8] != *b"TCFLASH\0" {
            continue;
        }
        b[8..12].copy_from_slice(&v.to_le_bytes());
        let crc = crc32c::crc32c(&b[..72]);
        b[72..76].copy_from_slice(&crc.to_le_bytes());
        dev.poke(slot * 512, &b);
    }
}

#[test]
fn a_format_1_cache_is_refused_naming_the_older_version_and_the_way_out() {
    let dev = mem(LEN);
    let d: Arc<dyn FlashDevice> = dev.clone();
    let t = FlashTier::create(d.clone(), config()).unwrap();
    write(&t, &key(1, 0), 1);
    t.close().unwrap();
    drop(t);
    as_version(&dev, 1);
    let e = FlashTier::open(d.clone(), config()).unwrap_err();
    assert!(matches!(e, FlashError::FormatVersion { found: 1 }), "{e:?}");
    let msg = e.to_string();
    assert!(!msg.contains('\n'), "{msg}");
    assert!(msg.contains("older tiercache"), "{msg}");
    assert!(msg.contains("format version 1"), "{msg}");
    assert!(msg.contains("remove the file"), "{msg}");
    assert!(is_formatted(d.as_ref()), "open, not create, is chosen");
    assert!(matches!(
        FlashTier::open_or_create(d.clone(), config()),
        Err(FlashError::FormatVersion { found: 1 })
    ));
    assert!(matches!(
        FlashTier::check(d.as_ref()),
        Err(FlashError::FormatVersion { found: 1 })
    ));
}

#[test]
fn open_or_create_formats_a_new_file_and_reopens_it_later() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cache");
    let d: Arc<dyn FlashDevice> =
        Arc::new(FileDevice::open(&path, Some(LEN), IoChoice::Auto).unwrap());
    let (t, created) = FlashTier::open_or_create(d, config()).unwrap();
    assert!(created);
    write(&t, &key(1, 0), 1);
    t.close().unwrap();
    drop(t);
    let d: Arc<dyn FlashDevice> =
        Arc::new(FileDevice::open(&path, Some(LEN), IoChoice::Auto).unwrap());
    let (t, created) = FlashTier::open_or_create(d, config()).unwrap();
    assert!(!created);
    assert_eq!(t.recovered_files().len(), 1);
}

#[test]
fn open_path_creates_a_missing_file_and_never_resizes_an_existing_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cache");
    let (t, created) = FlashTier::open_path(&path, LEN, IoChoice::Auto, config()).unwrap();
    assert!(created);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), LEN);
    write(&t, &key(1, 0), 1);
    t.sync().unwrap();
    t.abandon();
    // Asked smaller: a resize would cut the dirty block off; the file is kept as it is.
    let (t, created) = FlashTier::open_path(&path, LEN / 2, IoChoice::Auto, config()).unwrap();
    assert!(!created);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), LEN);
    assert_eq!(t.recovered_files().len(), 1);
    assert_eq!(t.dirty_blocks(10).len(), 1);
}

#[test]
fn open_or_create_does_not_format_a_device_holding_other_data() {
    let dev = mem(LEN);
    dev.poke(4096, b"someone else's file system");
    let d: Arc<dyn FlashDevice> = dev;
    assert!(matches!(
        FlashTier::open_or_create(d, config()),
        Err(FlashError::NotFormatted(_))
    ));
}
