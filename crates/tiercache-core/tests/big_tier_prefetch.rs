#![allow(clippy::unwrap_used)]
//! Tiers large enough to prefetch (`Tier::wants_prefetch`: the replay loop's hints and the
//! eviction path's victim hints) serve exactly what a plain LRU / FIFO model serves, with the
//! hints given or not, and keep their invariants.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use tiercache_core::hierarchy::{Hierarchy, LevelConfig, Placement};
use tiercache_core::policy::PolicyKind;
use tiercache_core::tier::TierConfig;
use tiercache_core::{Access, BlockKey, Class};

const CAPACITY: usize = 40_000;

/// Skewed keys over three files: a few hot, most cold (xorshift, fixed seed).
fn requests(n: usize) -> Vec<BlockKey> {
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let r = x % 1000;
            let block = if r < 600 {
                (x >> 12) % 20_000
            } else {
                (x >> 12) % 150_000
            };
            BlockKey::new((x >> 40) % 3, block)
        })
        .collect()
}

fn lru_hits(reqs: &[BlockKey]) -> u64 {
    let mut stamp_of: HashMap<BlockKey, u64> = HashMap::new();
    let mut by_stamp: BTreeMap<u64, BlockKey> = BTreeMap::new();
    let mut hits = 0;
    for (t, &k) in reqs.iter().enumerate() {
        let t = t as u64;
        if let Some(old) = stamp_of.insert(k, t) {
            by_stamp.remove(&old);
            hits += 1;
        } else if stamp_of.len() > CAPACITY {
            let (_, victim) = by_stamp.pop_first().unwrap();
            stamp_of.remove(&victim);
        }
        by_stamp.insert(t, k);
    }
    hits
}

fn fifo_hits(reqs: &[BlockKey]) -> u64 {
    let mut queue: VecDeque<BlockKey> = VecDeque::new();
    let mut held: HashSet<BlockKey> = HashSet::new();
    let mut hits = 0;
    for &k in reqs {
        if held.contains(&k) {
            hits += 1;
            continue;
        }
        if queue.len() == CAPACITY {
            held.remove(&queue.pop_front().unwrap());
        }
        queue.push_back(k);
        held.insert(k);
    }
    hits
}

fn replay(policy: PolicyKind, reqs: &[BlockKey], hints: bool) -> Hierarchy {
    let mut h = Hierarchy::new(&[LevelConfig {
        tier: TierConfig::new("big", CAPACITY, policy),
        placement: Placement::Inclusive,
    }])
    .unwrap();
    assert!(h.tiers()[0].wants_prefetch());
    for (i, &k) in reqs.iter().enumerate() {
        if hints {
            let top = &h.tiers()[0];
            if let Some(f) = reqs.get(i + 16) {
                top.prefetch(f);
            }
            if let Some(f) = reqs.get(i + 8) {
                top.prefetch_resident(f);
            }
        }
        h.access(Access::read(k, Class::NORMAL));
    }
    h.tiers()[0].check_invariants().unwrap();
    h
}

#[test]
fn prefetching_tiers_match_the_models() {
    let reqs = requests(400_000);
    let expected = [
        (PolicyKind::Lru, lru_hits(&reqs)),
        (PolicyKind::Fifo, fifo_hits(&reqs)),
    ];
    for (policy, want) in expected {
        for hints in [false, true] {
            let h = replay(policy, &reqs, hints);
            assert_eq!(h.hits(), want, "{policy}, hints {hints}");
            assert_eq!(h.tiers()[0].len(), CAPACITY);
        }
    }
    // The other policies have no model here: hints must not change what they do.
    for policy in PolicyKind::ALL {
        let a = replay(policy, &reqs, false);
        let b = replay(policy, &reqs, true);
        assert_eq!(a.hits(), b.hits(), "{policy}");
    }
}
