//! Bug (review of issue 17 item 8): `LegacyTier::read_dirty` (a format-2 cache read for its
//! upgrade) sliced the caller's buffer to the block size without checking it, so a short
//! buffer panicked the daemon instead of being an error, as it is for `FlashTier`.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use std::sync::Arc;
use tiercache_flash::format::{Geometry, Record, Superblock};
use tiercache_flash::{FlashDevice, LegacyTier};
use tiercache_tier::Cleaning;

const LEN: u64 = 4 * ((1 << 20) + 2048) + 8192;

/// A format-2 cache whose set 0 holds block 2 of file 1 dirty.
fn format_2_cache() -> Arc<dyn FlashDevice> {
    let m = mem(LEN);
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
    bits[0] = 1 << 2;
    let rec = Record {
        set: 0,
        seq: 1,
        tag: Some((file(1), 0)),
        version: V,
        valid: bits.clone(),
        dirty: bits,
        in_place: vec![0; words],
        meta: None,
    };
    m.poke(geo.rec_off(0, 1), &rec.encode(&geo, instance));
    m.poke(geo.block_off(0, 2), &data(&key(1, 2), 1, 4096));
    m
}

#[test]
fn a_short_buffer_is_an_error_and_a_whole_one_reads_the_block() {
    let t = LegacyTier::open(format_2_cache(), "old").unwrap();
    let k = key(1, 2);
    let mut short = vec![0u8; 100];
    let e = t.read_dirty(&k, V, &mut short).unwrap_err().to_string();
    assert!(e.contains("100 bytes"), "{e}");
    let mut buf = vec![0u8; 4096];
    assert!(t.read_dirty(&k, V, &mut buf).unwrap().is_some());
    assert_eq!(buf, data(&k, 1, 4096));
}
