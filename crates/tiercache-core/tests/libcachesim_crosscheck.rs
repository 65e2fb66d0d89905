#![allow(clippy::unwrap_used)]
//! Cross-check against libCacheSim: replay the CloudPhysics sample trace (object-count mode)
//! through every policy with a plain cache loop and compare miss ratios with the values
//! libCacheSim publishes for it (see `testdata/traces/README.md`).
//!
//! LRU and FIFO are fully determined by the trace and must match to 4 decimals. ARC, S3-FIFO,
//! SIEVE and CLOCK are only required to land within 0.02 (their results depend on parameter
//! choices); in fact ARC and CLOCK match exactly, and so does S3-FIFO with libCacheSim's
//! move-to-main threshold of 2, which are asserted too. SIEVE differs by 0.0004 at 4897 objects
//! and matches at the other sizes.
//!
//! The trace is the repository's `testdata/traces/cloudPhysicsIO.txt.zst` (libCacheSim's
//! `data/cloudPhysicsIO.txt`, compressed).

use rustc_hash::FxHashMap;
use std::sync::OnceLock;
use tiercache_core::policy::{new_policy, EvictionPolicy, PolicyKind, S3Fifo};
use tiercache_core::{BlockKey, SlotId};

/// libCacheSim's `data/cloudPhysicsIO.txt`, zstd-compressed, inside this repository.
const TXT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../testdata/traces/cloudPhysicsIO.txt.zst"
);

const SIZES: [usize; 4] = [489, 2448, 4897, 9794];

/// libCacheSim's miss ratios at `SIZES` (commit aa0fc40914b2, object-count mode).
fn reference(kind: PolicyKind) -> [f64; 4] {
    match kind {
        PolicyKind::Lru => [0.8380, 0.8246, 0.8049, 0.7249],
        PolicyKind::Fifo => [0.8476, 0.8266, 0.8054, 0.7128],
        PolicyKind::Arc => [0.8275, 0.8114, 0.7728, 0.7026],
        PolicyKind::S3Fifo => [0.8304, 0.8026, 0.7525, 0.6780],
        PolicyKind::Sieve => [0.8292, 0.8172, 0.7903, 0.7162],
        PolicyKind::Clock => [0.8372, 0.8240, 0.8044, 0.7483],
        other => panic!("no reference for {other}"),
    }
}

/// The object ids of the trace (one decimal id per line).
fn trace() -> &'static [u64] {
    static IDS: OnceLock<Vec<u64>> = OnceLock::new();
    IDS.get_or_init(load_trace)
}

fn load_trace() -> Vec<u64> {
    let packed = std::fs::read(TXT).unwrap_or_else(|e| {
        panic!("testdata/traces/cloudPhysicsIO.txt.zst: {e} (part of the repository)")
    });
    let text = zstd::decode_all(&packed[..]).unwrap();
    String::from_utf8(text)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.trim().parse().unwrap())
        .collect()
}

/// A plain demand-fill cache of `size` objects: key map + free slots + the policy. On a miss
/// with the cache full: `victim`, then `remove(.., evicted = true)`, then `insert`.
fn miss_ratio_of(mut policy: Box<dyn EvictionPolicy>, size: usize, ids: &[u64]) -> f64 {
    let kind = policy.kind();
    policy.set_capacity(size);
    let mut map: FxHashMap<u64, SlotId> = FxHashMap::default();
    let mut slot_id = vec![0u64; size];
    let mut free: Vec<u32> = (0..size as u32).rev().collect();
    let mut misses = 0u64;
    for &id in ids {
        let key = BlockKey::new(0, id);
        if let Some(&slot) = map.get(&id) {
            policy.touch(slot);
            continue;
        }
        misses += 1;
        if map.len() == size {
            let v = policy.victim(Some(key)).unwrap();
            let old = slot_id[v.index()];
            assert_eq!(map.remove(&old), Some(v), "{kind}: victim not resident");
            policy.remove(v, BlockKey::new(0, old), true);
            free.push(v.0);
        }
        let slot = SlotId(free.pop().unwrap());
        slot_id[slot.index()] = id;
        map.insert(id, slot);
        policy.insert(slot, key);
        assert_eq!(policy.len(), map.len(), "{kind}: len drifted");
    }
    misses as f64 / ids.len() as f64
}

fn check(kind: PolicyKind, tolerance: f64) {
    check_with(kind, tolerance, |size| new_policy(kind, size));
}

fn check_with(kind: PolicyKind, tolerance: f64, make: impl Fn(usize) -> Box<dyn EvictionPolicy>) {
    let ids = trace();
    assert_eq!(ids.len(), 113_872, "unexpected trace length");
    let want = reference(kind);
    let got: Vec<f64> = SIZES
        .iter()
        .map(|&s| miss_ratio_of(make(s), s, ids))
        .collect();
    for ((size, got), want) in SIZES.iter().zip(&got).zip(want) {
        println!(
            "{kind:>6} @ {size:>5}: {got:.4}  libCacheSim {want:.4}  diff {:+.4}",
            got - want
        );
    }
    for ((size, got), want) in SIZES.iter().zip(&got).zip(want) {
        assert!(
            (got - want).abs() <= tolerance,
            "{kind} at {size} objects: miss ratio {got:.4}, libCacheSim {want:.4}"
        );
    }
}

/// Exact to 4 decimals: compare rounded values.
fn check_exact(kind: PolicyKind) {
    check(kind, 0.000_05);
}

#[test]
fn lru_matches_libcachesim_exactly() {
    check_exact(PolicyKind::Lru);
}

#[test]
fn fifo_matches_libcachesim_exactly() {
    check_exact(PolicyKind::Fifo);
}

/// Within 0.02 is what is asked of ARC; with a real-valued `p` (as in the paper and in
/// libCacheSim) it is in fact exact.
#[test]
fn arc_matches_libcachesim_exactly() {
    check_exact(PolicyKind::Arc);
}

#[test]
fn s3fifo_matches_libcachesim_exactly() {
    check_exact(PolicyKind::S3Fifo);
}

/// libCacheSim's S3-FIFO moves a small-queue block to main only after 2 accesses
/// (`move-to-main-threshold=2`); with that threshold the results are exact.
#[test]
fn s3fifo_threshold_2_matches_libcachesim_exactly() {
    check_with(PolicyKind::S3Fifo, 0.000_05, |size| {
        Box::new(S3Fifo::with_move_to_main(size, 2))
    });
}

#[test]
fn sieve_close_to_libcachesim() {
    check(PolicyKind::Sieve, 0.02);
}

/// Within 0.02 is what is asked of CLOCK; as FIFO-with-reinsertion with a 1-bit counter it is
/// libCacheSim's `Clock`, so it is in fact exact.
#[test]
fn clock_matches_libcachesim_exactly() {
    check_exact(PolicyKind::Clock);
}
