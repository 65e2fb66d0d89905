//! A clean store that reuses a set (`fill_spilling` / `demote_spilling`) hands the set's clean
//! blocks to the tier's spill hook with the bytes they were stored with, before they are overwritten; a
//! victim that cannot be read back, and blocks of an older version dropped for a version
//! change, are not handed over.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use std::sync::Arc;
use tiercache_core::Class;
use tiercache_flash::{FlashDevice, FlashTier};
use tiercache_tier::StoreExt as _;
use tiercache_tier::{Admit, DataTier, SpillLog, TierKey};

/// 2 KiB blocks in 4-block sets; a few sets.
const LEN: u64 = 64 << 10;

/// Fills every set of `t`: file `i + 1`'s first backing set in set `i`; file 1 gets blocks 0,
/// 1 and 3 (not 2), the others block 0. Returns the keys of file 1 (the least recently used).
fn fill_every_set(t: &FlashTier) -> Vec<TierKey> {
    let sets = u64::from(t.geometry().sets);
    assert!(sets >= 2, "{sets} sets");
    let first: Vec<TierKey> = [0, 1, 3].iter().map(|&b| key(1, b)).collect();
    for k in &first {
        assert_eq!(fill(t, k, 1), Admit::Stored);
    }
    for ino in 2..=sets {
        assert_eq!(fill(t, &key(ino, 0), 1), Admit::Stored);
    }
    first
}

type Got = Vec<(TierKey, u64, Class, Vec<u8>)>;

/// `t` with a [`SpillLog`] as its spill hook.
fn hooked(t: FlashTier) -> (FlashTier, Arc<SpillLog>) {
    let log = SpillLog::new();
    t.set_spill_hook(log.clone()).unwrap();
    (t, log)
}

fn fill_spilling(t: &FlashTier, log: &SpillLog, k: &TierKey, version: u64) -> (Admit, Got) {
    let bs = t.info().block_size;
    let r = t
        .fill_spilling(k, version, Class::NORMAL, &data(k, 2, bs), &yes)
        .unwrap();
    let got = log.take();
    (
        r,
        got.into_iter()
            .map(|s| (s.key, s.version, s.class, s.data))
            .collect(),
    )
}

#[test]
fn a_reused_set_spills_each_clean_block_with_its_bytes() {
    let (t, log) = hooked(FlashTier::create(mem(LEN), small_config()).unwrap());
    let bs = t.info().block_size;
    let victims = fill_every_set(&t);
    // A backing set nobody holds: the least recently used set (file 1's) is reused.
    let newcomer = key(99, 0);
    let (r, got) = fill_spilling(&t, &log, &newcomer, V);
    assert_eq!(r, Admit::Stored);
    let keys: Vec<TierKey> = got.iter().map(|g| g.0).collect();
    assert_eq!(
        keys, victims,
        "the reused set's valid blocks, in block order"
    );
    for (k, version, class, bytes) in &got {
        assert_eq!(*version, V);
        assert_eq!(*class, Class::NORMAL);
        assert_eq!(bytes, &data(k, 1, bs), "bytes of {k:?}");
        assert!(!t.contains(k));
    }
    // The new block took the slot after the spill read it: it reads back as stored.
    assert_eq!(read(&t, &newcomer).1, data(&newcomer, 2, bs));
    // A store into a set already mapped evicts nothing.
    let (r, got) = fill_spilling(&t, &log, &key(99, 1), V);
    assert_eq!((r, got.len()), (Admit::Stored, 0));
}

#[test]
fn a_set_with_dirty_blocks_is_not_reused_and_nothing_of_it_spills() {
    let (t, log) = hooked(FlashTier::create(mem(LEN), small_config()).unwrap());
    let victims = fill_every_set(&t);
    // File 1's set becomes dirty: the next least recently used set (file 2's) is reused.
    assert_eq!(write(&t, &key(1, 2), 1), Admit::Stored);
    let (r, got) = fill_spilling(&t, &log, &key(99, 0), V);
    assert_eq!(r, Admit::Stored);
    let keys: Vec<TierKey> = got.iter().map(|g| g.0).collect();
    assert_eq!(keys, vec![key(2, 0)]);
    for k in victims {
        assert!(t.contains(&k), "{k:?} of the dirty set stays");
    }
}

#[test]
fn a_victim_that_cannot_be_read_is_dropped_unspilled() {
    let dev = faulty(LEN, 1);
    let d: Arc<dyn FlashDevice> = dev.clone();
    let (t, log) = hooked(FlashTier::create(d, small_config()).unwrap());
    let victims = fill_every_set(&t);
    let errors = t.stats().errors;
    dev.fail_reads_after(Some(0));
    let (r, got) = fill_spilling(&t, &log, &key(99, 0), V);
    assert_eq!(r, Admit::Stored);
    assert!(got.is_empty(), "spilled {} blocks", got.len());
    assert!(t.stats().errors > errors, "the failed read is counted");
    for k in victims {
        assert!(!t.contains(&k));
    }
}

#[test]
fn blocks_of_an_older_version_dropped_for_a_version_change_are_not_spilled() {
    let (t, log) = hooked(FlashTier::create(mem(LEN), small_config()).unwrap());
    let victims = fill_every_set(&t);
    // File 1 changed behind the cache: its set is kept for the new version, its old blocks
    // are stale and simply go.
    let (r, got) = fill_spilling(&t, &log, &key(1, 2), V + 1);
    assert_eq!((r, got.len()), (Admit::Stored, 0));
    for k in victims {
        assert!(!t.contains(&k));
    }
}
