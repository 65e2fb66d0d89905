//! Test gap (review of issue 17 item 8): nothing checked that a block's checksum covers the
//! cache set and the block index it is stored at (its identity, `docs/design.md` §6). Without
//! them, a block's bytes *with* their checksum found at another block of the same set, or left
//! by an earlier mapping of the same backing set in another cache set, would check out there
//! and be served as that block's bytes.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use std::sync::Arc;
use tiercache_flash::format::block_sum;
use tiercache_flash::{FaultyDevice, FlashDevice, FlashTier};
use tiercache_tier::Cleaning;
use tiercache_tier::{DataTier, TierKey};

/// 16 sets: no checksum table is cached, each check reads it from the device.
const LEN: u64 = 16 * ((1 << 20) + 2048) + 8192;

fn tier() -> (Arc<FaultyDevice>, FlashTier) {
    let dev = faulty(LEN, 7);
    let d: Arc<dyn FlashDevice> = dev.clone();
    (dev, FlashTier::create(d, config()).unwrap())
}

fn read_at(dev: &FaultyDevice, off: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    dev.read_at(&mut b, off).unwrap();
    b
}

/// Reading dirty `k` fails (never serves other bytes).
fn fails(t: &FlashTier, k: &TierKey) {
    let mut buf = vec![0u8; 4096];
    let got = t.read_dirty(k, V, &mut buf);
    assert!(got.is_err(), "{k:?}: {got:?}");
    assert_eq!(t.flash_stats().checksum_errors, 1);
}

#[test]
fn every_identity_field_changes_the_checksum() {
    let d = data(&key(1, 0), 1, 4096);
    let base = (1u64, 2u32, 3usize, (file(4), 5u64), 6u64);
    let sum = |(i, s, b, tag, v): (u64, u32, usize, _, u64)| block_sum(i, s, b, tag, v, &d);
    let a = sum(base);
    let mut f = file(4);
    f.dev += 1;
    for other in [
        (9, 2, 3, (file(4), 5), 6),
        (1, 9, 3, (file(4), 5), 6),
        (1, 2, 9, (file(4), 5), 6),
        (1, 2, 3, (file(9), 5), 6),
        (1, 2, 3, (f, 5), 6),
        (1, 2, 3, (file(4), 9), 6),
        (1, 2, 3, (file(4), 5), 9),
    ] {
        assert_ne!(sum(other), a, "{other:?}");
    }
}

#[test]
fn a_blocks_bytes_and_checksum_found_at_another_block_of_its_set_do_not_check_out() {
    let (dev, t) = tier();
    let (a, b) = (key(1, 0), key(1, 1)); // set 0, blocks 0 and 1: same tag and version
    write(&t, &a, 1);
    write(&t, &b, 1);
    t.sync().unwrap();
    let g = t.geometry();
    // Block 0's bytes and its table entry land on block 1's (e.g. writes shifted by a block).
    dev.write_at(&read_at(&dev, g.block_off(0, 0), 4096), g.block_off(0, 1))
        .unwrap();
    let mut table = read_at(&dev, g.sums_at(0), 512);
    table.copy_within(0..4, 4);
    dev.write_at(&table, g.sums_at(0)).unwrap();
    fails(&t, &b);
}

#[test]
fn bytes_and_checksums_of_an_earlier_mapping_in_another_set_do_not_check_out() {
    let (dev, t) = tier();
    let f = key(1, 0);
    write(&t, &f, 1); // set 0
    t.sync().unwrap();
    let g = t.geometry();
    let old_table = read_at(&dev, g.sums_at(0), g.sums_size as usize);
    let old_block = read_at(&dev, g.block_off(0, 0), 4096);
    t.discard(&f); // set 0 is freed
    write(&t, &key(2, 0), 1); // and taken by another file
    write(&t, &f, 2); // f's backing set now lives in set 1
    t.sync().unwrap();
    // Set 1's table and block hold what set 0 held for the same backing set and version.
    dev.write_at(&old_table, g.sums_at(1)).unwrap();
    dev.write_at(&old_block, g.block_off(1, 0)).unwrap();
    fails(&t, &f);
}
