//! `sim`'s set-mapped index and the SSD tier chose different sets to reuse once a dirty set
//! had been passed over (the simulator moved it to the hot end, the mount left it in place):
//! the same accesses through both must leave the same blocks resident and evict the same ones.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use std::sync::Arc;
use tiercache_core::index::TierIndex;
use tiercache_core::policy::PolicyKind;
use tiercache_core::setindex::SetIndex;
use tiercache_core::{BlockKey, Class};
use tiercache_flash::FlashTier;
use tiercache_tier::Cleaning;
use tiercache_tier::StoreExt as _;
use tiercache_tier::{Admit, DataTier, Lookup, SpillLog, TierKey};

const LEN: u64 = 64 << 10;
const FILES: u64 = 4;
const BLOCKS: u64 = 12;

fn bk(k: &TierKey) -> BlockKey {
    BlockKey::new(k.file.ino, k.block.0)
}

/// One access: a read that fills on a miss, a write (dirty), or the cleaning of a dirty block.
#[derive(Debug, Clone, Copy)]
enum Op {
    Read(TierKey),
    Write(TierKey),
    Clean(TierKey),
}

/// Replays `op` through the simulator's index; returns the evicted keys (`None`: no room).
fn sim(s: &mut SetIndex, op: Op) -> Option<Vec<TierKey>> {
    let (k, dirty) = match op {
        Op::Read(k) => (k, false),
        Op::Write(k) => (k, true),
        Op::Clean(k) => {
            if let Some(slot) = s.peek(&bk(&k)) {
                s.set_dirty(slot, false);
            }
            return Some(Vec::new());
        }
    };
    let mut out = Vec::new();
    let slot = match s.lookup(bk(&k), Class::NORMAL) {
        Some(slot) => slot,
        None => {
            let ins = s.insert(bk(&k), Class::NORMAL).ok()?;
            let first = ins.evicted.map(|e| e.key);
            for e in first
                .into_iter()
                .chain(std::iter::from_fn(|| s.next_evicted().map(|e| e.key)))
            {
                out.push(key(e.file.0, e.block.0));
            }
            ins.slot
        }
    };
    if dirty {
        s.set_dirty(slot, true);
    }
    Some(out)
}

/// Replays `op` through the SSD tier; returns the evicted keys (`None`: no room).
fn flash(t: &FlashTier, log: &SpillLog, op: Op, before: &[TierKey]) -> Option<Vec<TierKey>> {
    let bs = t.info().block_size;
    match op {
        Op::Read(k) => {
            if read(t, &k).0 != Lookup::Miss {
                return Some(Vec::new());
            }
            let r = t
                .fill_spilling(&k, V, Class::NORMAL, &data(&k, 1, bs), &yes)
                .unwrap();
            let got = log.take().into_iter().map(|s| s.key).collect();
            (r == Admit::Stored).then_some(got)
        }
        Op::Write(k) => {
            if write(t, &k, 2) != Admit::Stored {
                return None;
            }
            // A dirty store spills nothing: what it evicted is what is no longer resident.
            Some(before.iter().filter(|b| !t.contains(b)).copied().collect())
        }
        Op::Clean(k) => {
            let mut buf = vec![0u8; bs];
            if let Some(seq) = t.read_dirty(&k, V, &mut buf).unwrap() {
                assert!(t.mark_clean(&k, seq));
            }
            Some(Vec::new())
        }
    }
}

/// An SSD tier on a memory device (with a [`SpillLog`] as its spill hook) and the
/// simulator's index of the same geometry.
fn twins() -> ((FlashTier, Arc<SpillLog>), SetIndex) {
    let t = FlashTier::create(mem(LEN), small_config()).unwrap();
    let log = SpillLog::new();
    t.set_spill_hook(log.clone()).unwrap();
    let sets = t.geometry().sets as usize;
    assert!(sets >= 3, "{sets} sets");
    let set_blocks = 1usize << small_config().set_shift;
    let s = SetIndex::new("flash", sets * set_blocks, set_blocks, PolicyKind::Lru).unwrap();
    ((t, log), s)
}

/// Runs `ops` through both, comparing evictions and residency over `universe` after each;
/// returns the blocks evicted.
fn replay(
    (t, log): (&FlashTier, &SpillLog),
    s: &mut SetIndex,
    ops: &[Op],
    universe: &[TierKey],
) -> usize {
    let mut evictions = 0;
    for (i, &op) in ops.iter().enumerate() {
        let before: Vec<TierKey> = universe.iter().filter(|k| t.contains(k)).copied().collect();
        let (a, b) = (sim(s, op), flash(t, log, op, &before));
        assert_eq!(a, b, "op {i}: {op:?}: evicted (sim, flash)");
        evictions += a.map_or(0, |v| v.len());
        for u in universe {
            assert_eq!(
                s.contains(&bk(u)),
                t.contains(u),
                "op {i}: {op:?}: {u:?} resident"
            );
        }
    }
    evictions
}

#[test]
fn a_passed_over_dirty_set_is_the_next_victim_once_clean_in_both() {
    let ((t, log), mut s) = twins();
    let sets = t.geometry().sets as u64;
    // File 1's set is the coldest and dirty; files 2.. fill the other sets.
    let mut ops = vec![Op::Write(key(1, 0))];
    ops.extend((2..=sets).map(|f| Op::Read(key(f, 0))));
    // A newcomer passes over file 1's set and reuses file 2's; file 1's set, cleaned, is
    // still the least recently used one: the next newcomer reuses it.
    ops.extend([
        Op::Read(key(100, 0)),
        Op::Clean(key(1, 0)),
        Op::Read(key(101, 0)),
    ]);
    let universe: Vec<TierKey> = (1..=sets).chain([100, 101]).map(|f| key(f, 0)).collect();
    assert_eq!(replay((&t, &log), &mut s, &ops, &universe), 2);
    assert!(!t.contains(&key(1, 0)) && t.contains(&key(3, 0)));
}

#[test]
fn the_same_accesses_evict_the_same_sets_in_sim_and_on_the_ssd_tier() {
    let ((t, log), mut s) = twins();
    let universe: Vec<TierKey> = (1..=FILES)
        .flat_map(|f| (0..BLOCKS).map(move |b| key(f, b)))
        .collect();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let ops: Vec<Op> = (0..4000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let k = universe[(x >> 8) as usize % universe.len()];
            match x % 10 {
                0..=5 => Op::Read(k),
                6 | 7 => Op::Write(k),
                _ => Op::Clean(k),
            }
        })
        .collect();
    let evictions = replay((&t, &log), &mut s, &ops, &universe);
    assert!(
        evictions > 100,
        "the sequence reused sets ({evictions} evictions)"
    );
}
