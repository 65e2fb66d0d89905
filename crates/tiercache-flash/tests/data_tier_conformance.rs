//! The shared `DataTier` conformance checks on the SSD tier (a cache file in a temporary
//! directory) and on a format-2 cache opened for its upgrade (`LegacyTier`).
#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;
use tiercache_flash::format::{Geometry, Record, Superblock};
use tiercache_flash::{
    FileDevice, FlashConfig, FlashDevice, FlashTier, IoChoice, LegacyTier, MemDevice,
};
use tiercache_tier::conformance::{self, Subject};
use tiercache_tier::{conformance_tests, DataTier, TierKey};

/// Four 1 MiB sets of 4 KiB blocks, plus metadata.
const LEN: u64 = 4 * ((1 << 20) + 2048) + 8192;

fn open(path: &Path) -> FlashTier {
    FlashTier::open_path(path, LEN, IoChoice::Auto, FlashConfig::new("flash-c"))
        .unwrap()
        .0
}

fn flash() -> Subject {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cache");
    let t = open(&path);
    let i = t.info();
    assert!(i.accepts_dirty && i.persistent && t.can_spill(), "{i:?}");
    Subject::new(Arc::new(t))
        .without_class()
        .reopen_with(move || Arc::new(open(&path)))
        .keep(dir)
}

/// A format-2 cache file whose set 0 holds blocks 0..8 of one file dirty.
fn legacy() -> Subject {
    let m = MemDevice::new(LEN);
    let geo = Geometry::compute_for(2, LEN, 512, 12, 8).unwrap();
    let instance = 0x55;
    let sb = Superblock {
        flags: 0,
        gen: 1,
        geo,
        device_len: LEN,
        instance,
    };
    m.poke(geo.sb_off(1), &sb.encode());
    let words = geo.bitmap_bytes() / 8;
    let mut bits = vec![0u64; words];
    bits[0] = 0xFF;
    let version = 5;
    let held: Vec<(TierKey, u64, Vec<u8>)> = (0..8)
        .map(|b| {
            let k = conformance::key(60, b);
            (k, version, conformance::bytes(&k, version, 0, 4096))
        })
        .collect();
    let rec = Record {
        set: 0,
        seq: 1,
        tag: Some((conformance::file(60), 0)),
        version,
        valid: bits.clone(),
        dirty: bits,
        in_place: vec![0; words],
        meta: None,
    };
    m.poke(geo.rec_off(0, 1), &rec.encode(&geo, instance));
    for (k, _, d) in &held {
        m.poke(geo.block_off(0, k.block.0 as usize), d);
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cache");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .unwrap();
    f.write_all(&m.snapshot()).unwrap();
    drop(f);
    let dev: Arc<dyn FlashDevice> =
        Arc::new(FileDevice::open(&path, None, IoChoice::Auto).unwrap());
    let t = LegacyTier::open(dev, "legacy-c").unwrap();
    let i = t.info();
    assert!(!i.accepts_dirty && i.persistent && !t.can_spill(), "{i:?}");
    Subject::new(Arc::new(t)).draining(held).keep(dir)
}

mod flash_tier {
    use super::*;
    conformance_tests!(flash;
        another_version_misses_and_drops_a_clean_copy,
        a_store_no_longer_current_is_rejected_and_invisible,
        reads_are_whole_or_a_miss,
        take_removes_clean_and_keeps_dirty,
        dirty_blocks_stay_until_mark_clean,
        mark_clean_with_an_old_seq_after_a_rewrite_fails,
        invalidate_keeps_dirty_and_discard_drops_it,
        invalidate_file_drops_from_a_block_on,
        spills_hand_over_clean_victims_exactly,
        a_dirty_rewrite_of_the_same_version_is_never_rejected,
        stats_counters_move_as_documented,
        roles_are_offered_as_info_says,
        dirty_blocks_and_file_meta_survive_a_reopen,
    );
}

mod legacy_tier {
    use super::*;
    conformance_tests!(legacy;
        another_version_misses_and_drops_a_clean_copy,
        a_store_no_longer_current_is_rejected_and_invisible,
        a_tier_taking_no_store_rejects_every_store,
        reads_are_whole_or_a_miss,
        take_removes_clean_and_keeps_dirty,
        dirty_blocks_stay_until_mark_clean,
        invalidate_keeps_dirty_and_discard_drops_it,
        invalidate_file_drops_from_a_block_on,
        stats_counters_move_as_documented,
        roles_are_offered_as_info_says,
    );
}
