//! Bug: at `open` a second record naming an already-seen backing set was dropped even when it held the only dirty copy, and `check` did not verify dirty ⊆ valid nor bits past the set's end.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use std::sync::Arc;
use tiercache_flash::format::{block_sum, Record, Superblock};
use tiercache_flash::{FlashConfig, FlashDevice, FlashTier, MemDevice};
use tiercache_tier::Cleaning;
use tiercache_tier::{Admit, DataTier, Lookup};

const LEN: u64 = 8 * ((1 << 20) + 2048) + 8192;

/// The newest valid superblock of a closed device.
fn superblock(m: &MemDevice) -> Superblock {
    let img = m.snapshot();
    let a = Superblock::decode(&img[..512]).ok();
    let b = Superblock::decode(&img[512..1024]).ok();
    match (a, b) {
        (Some(a), Some(b)) => {
            if b.gen > a.gen {
                b
            } else {
                a
            }
        }
        (Some(x), None) | (None, Some(x)) => x,
        (None, None) => panic!("no superblock"),
    }
}

/// Writes a record for `set` (seq 100, slot 0) with the given bitmaps (one word each).
fn craft(m: &MemDevice, set: u32, tag_ino: u64, valid: u64, dirty: u64) {
    let sb = superblock(m);
    let g = sb.geo;
    let words = g.bitmap_bytes() / 8;
    let mut v = vec![0; words];
    let mut d = vec![0; words];
    v[0] = valid;
    d[0] = dirty;
    let rec = Record {
        set,
        seq: 100,
        tag: Some((file(tag_ino), 0)),
        version: V,
        valid: v,
        dirty: d,
        in_place: vec![0; words],
        meta: None,
    };
    m.poke(g.rec_off(set, 0), &rec.encode(&g, sb.instance));
}

fn closed_tier(m: &Arc<MemDevice>, cfg: FlashConfig, dirty: bool) {
    let d: Arc<dyn FlashDevice> = m.clone();
    let t = FlashTier::create(d, cfg).unwrap();
    let k = key(1, 0);
    let stored = if dirty {
        write(&t, &k, 1)
    } else {
        fill(&t, &k, 1)
    };
    assert_eq!(stored, Admit::Stored);
    t.close().unwrap();
}

#[test]
fn a_duplicate_tag_keeps_the_set_holding_dirty_blocks() {
    let m = mem(LEN);
    closed_tier(&m, config(), false); // set 0: key(1,0) clean
    let sb = superblock(&m);
    let k1 = key(1, 1);
    let bytes = data(&k1, 5, 4096);
    m.poke(sb.geo.block_off(1, 1), &bytes);
    let sum = block_sum(sb.instance, 1, 1, (file(1), 0), V, &bytes);
    m.poke(sb.geo.sums_at(1) + 4, &sum.to_le_bytes());
    craft(&m, 1, 1, 0b10, 0b10); // set 1: the same backing set, key(1,1) dirty
    assert_eq!(FlashTier::check(&*m).unwrap().duplicate_tags, 1);
    let d: Arc<dyn FlashDevice> = m.clone();
    let t = FlashTier::open(d, config()).unwrap();
    let (l, buf) = read(&t, &k1);
    assert_eq!(
        l,
        Lookup::Hit { dirty: true },
        "the dirty duplicate was dropped"
    );
    assert_eq!(buf, data(&k1, 5, 4096));
    assert_eq!(read(&t, &key(1, 0)).0, Lookup::Miss);
    assert_eq!(t.dirty_blocks(10).len(), 1);
    t.close().unwrap();
    drop(t);
    assert_eq!(FlashTier::check(&*m).unwrap().duplicate_tags, 0);
}

#[test]
fn two_sets_dirty_for_one_backing_set_are_refused() {
    let m = mem(LEN);
    closed_tier(&m, config(), true); // set 0: key(1,0) dirty
    craft(&m, 1, 1, 0b10, 0b10);
    let d: Arc<dyn FlashDevice> = m.clone();
    assert!(FlashTier::open(d, config()).is_err());
}

#[test]
fn check_counts_dirty_not_valid_and_stray_bits_and_open_repairs_them() {
    let m = mem(64 * 1024);
    closed_tier(&m, small_config(), false);
    // 4-block sets: bit 6 is past the end; block 2 dirty but not valid.
    craft(&m, 1, 2, 0b100_0000, 0b100);
    let r = FlashTier::check(&*m).unwrap();
    assert_eq!((r.dirty_not_valid, r.stray_bits), (1, 1), "{r:?}");
    let d: Arc<dyn FlashDevice> = m.clone();
    let t = FlashTier::open(d, small_config()).unwrap();
    assert!(t.contains(&key(2, 2)), "a dirty bit is never dropped");
    assert_eq!(t.flash_stats().valid_blocks, 2);
    t.discard(&key(2, 2));
    t.close().unwrap();
    drop(t);
    let r = FlashTier::check(&*m).unwrap();
    assert_eq!((r.dirty_not_valid, r.stray_bits), (0, 0), "{r:?}");
}
