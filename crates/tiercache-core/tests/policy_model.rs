#![allow(clippy::unwrap_used)]
//! The `EvictionPolicy` contract, checked for every `PolicyKind` against a plain model (the set of
//! resident slots and their keys) on random operation sequences, plus exact hand-worked sequences
//! for each policy.

use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use tiercache_core::policy::{
    new_policy, ArcPolicy, Clock, EvictionPolicy, Fifo, Lru, PolicyKind, S3Fifo, Sieve,
};
use tiercache_core::{BlockKey, SlotId};

fn key(k: u64) -> BlockKey {
    BlockKey::new(7, k)
}

#[derive(Debug, Clone)]
enum Op {
    /// Access key k like a cache: touch if resident, else insert (evicting first when full).
    Access(u64),
    /// Touch the i-th resident slot.
    Touch(usize),
    /// `victim(None)` then `remove(.., evicted = true)`.
    Evict,
    /// `victim(Some(k))`, then the caller declines and touches the victim instead.
    VictimDeclined(u64),
    /// Remove the i-th resident slot without eviction (a move elsewhere).
    Remove(usize),
    /// New capacity, as a fraction of the slots (in 1/8ths).
    SetCapacity(usize),
}

fn op(keys: u64) -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..keys).prop_map(Op::Access),
        2 => any::<usize>().prop_map(Op::Touch),
        2 => Just(Op::Evict),
        1 => (0..keys).prop_map(Op::VictimDeclined),
        1 => any::<usize>().prop_map(Op::Remove),
        1 => (0..=8usize).prop_map(Op::SetCapacity),
    ]
}

/// The model: which slots are resident with which key, and the free slots.
struct Model {
    resident: BTreeMap<u32, u64>,
    free: Vec<u32>,
    /// Slots removed and not inserted again: `victim` must never name one.
    gone: BTreeSet<u32>,
}

impl Model {
    fn nth(&self, i: usize) -> Option<(u32, u64)> {
        let n = self.resident.len();
        (n > 0).then(|| {
            let (&s, &k) = self.resident.iter().nth(i % n).unwrap();
            (s, k)
        })
    }
    fn slot_of(&self, k: u64) -> Option<u32> {
        self.resident.iter().find(|(_, &v)| v == k).map(|(&s, _)| s)
    }
}

fn check_victim(
    kind: PolicyKind,
    p: &mut dyn EvictionPolicy,
    m: &Model,
    incoming: Option<BlockKey>,
) -> Result<Option<u32>, TestCaseError> {
    let v = p.victim(incoming);
    prop_assert_eq!(
        v.is_some(),
        !m.resident.is_empty(),
        "{}: victim vs len",
        kind
    );
    if let Some(SlotId(s)) = v {
        prop_assert!(
            m.resident.contains_key(&s),
            "{}: victim {} not resident",
            kind,
            s
        );
        prop_assert!(!m.gone.contains(&s), "{}: victim {} was removed", kind, s);
    }
    Ok(v.map(|s| s.0))
}

fn run(kind: PolicyKind, slots: usize, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut p = new_policy(kind, slots);
    prop_assert_eq!(p.kind(), kind);
    let mut m = Model {
        resident: BTreeMap::new(),
        free: (0..slots as u32).rev().collect(),
        gone: BTreeSet::new(),
    };
    for op in ops {
        match *op {
            Op::Access(k) => {
                if let Some(s) = m.slot_of(k) {
                    p.touch(SlotId(s));
                    continue;
                }
                if m.free.is_empty() {
                    let v = check_victim(kind, p.as_mut(), &m, Some(key(k)))?.unwrap();
                    let old = m.resident.remove(&v).unwrap();
                    p.remove(SlotId(v), key(old), true);
                    m.gone.insert(v);
                    m.free.push(v);
                }
                let s = m.free.pop().unwrap();
                p.insert(SlotId(s), key(k));
                m.resident.insert(s, k);
                m.gone.remove(&s);
            }
            Op::Touch(i) => {
                if let Some((s, _)) = m.nth(i) {
                    p.touch(SlotId(s));
                }
            }
            Op::Evict => {
                if let Some(v) = check_victim(kind, p.as_mut(), &m, None)? {
                    let old = m.resident.remove(&v).unwrap();
                    p.remove(SlotId(v), key(old), true);
                    m.gone.insert(v);
                    m.free.push(v);
                }
            }
            Op::VictimDeclined(k) => {
                if let Some(v) = check_victim(kind, p.as_mut(), &m, Some(key(k)))? {
                    p.touch(SlotId(v));
                }
            }
            Op::Remove(i) => {
                if let Some((s, k)) = m.nth(i) {
                    m.resident.remove(&s);
                    p.remove(SlotId(s), key(k), false);
                    m.gone.insert(s);
                    m.free.push(s);
                }
            }
            Op::SetCapacity(eighths) => p.set_capacity(slots * eighths / 8),
        }
        prop_assert_eq!(p.len(), m.resident.len(), "{}: len after {:?}", kind, op);
        prop_assert_eq!(p.is_empty(), m.resident.is_empty());
    }
    // Draining by eviction visits every resident slot exactly once.
    while !m.resident.is_empty() {
        let v = check_victim(kind, p.as_mut(), &m, None)?.unwrap();
        let old = m.resident.remove(&v).unwrap();
        p.remove(SlotId(v), key(old), true);
        m.gone.insert(v);
    }
    prop_assert_eq!(p.victim(None), None);
    prop_assert_eq!(p.len(), 0);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_policy_honours_the_contract(
        slots in 1usize..12,
        ops in prop::collection::vec(op(30), 0..300),
    ) {
        for kind in PolicyKind::ALL {
            run(kind, slots, &ops)?;
        }
    }

    /// ARC keeps the paper's directory bounds: |T1|+|B1| <= c and |T1|+|T2|+|B1|+|B2| <= 2c
    /// whenever the pool is within its capacity.
    #[test]
    fn arc_directory_bounds(ops in prop::collection::vec(0u64..40, 0..400)) {
        let c = 8;
        let mut p = ArcPolicy::new(c);
        let mut resident: BTreeMap<u64, u32> = BTreeMap::new();
        let mut keys = vec![0u64; c];
        for k in ops {
            if let Some(&s) = resident.get(&k) {
                p.touch(SlotId(s));
            } else {
                let s = if resident.len() == c {
                    let v = p.victim(Some(key(k))).unwrap();
                    resident.remove(&keys[v.index()]);
                    p.remove(v, key(keys[v.index()]), true);
                    v.0
                } else {
                    resident.len() as u32
                };
                keys[s as usize] = k;
                resident.insert(k, s);
                p.insert(SlotId(s), key(k));
            }
            let (t1, t2, b1, b2) = p.list_lens();
            prop_assert!(t1 + b1 <= c, "|T1|+|B1| = {} > {}", t1 + b1, c);
            prop_assert!(t1 + t2 + b1 + b2 <= 2 * c);
            prop_assert!((0.0..=c as f64).contains(&p.target_t1()));
        }
    }

    /// S3-FIFO's ghost never outgrows M's share of the capacity.
    #[test]
    fn s3fifo_ghost_bound(ops in prop::collection::vec(0u64..60, 0..400)) {
        let c = 10;
        let mut p = S3Fifo::new(c);
        let mut resident: BTreeMap<u64, u32> = BTreeMap::new();
        let mut keys = vec![0u64; c];
        for k in ops {
            if let Some(&s) = resident.get(&k) {
                p.touch(SlotId(s));
            } else {
                let s = if resident.len() == c {
                    let v = p.victim(Some(key(k))).unwrap();
                    resident.remove(&keys[v.index()]);
                    p.remove(v, key(keys[v.index()]), true);
                    v.0
                } else {
                    resident.len() as u32
                };
                keys[s as usize] = k;
                resident.insert(k, s);
                p.insert(SlotId(s), key(k));
            }
            prop_assert!(p.ghost_len() <= c - c / 10);
            prop_assert_eq!(p.small_len() + p.main_len(), resident.len());
        }
    }
}

/// Insert `keys` into slots 0, 1, 2, ... in order.
fn filled(p: &mut dyn EvictionPolicy, keys: &[u64]) {
    for (s, &k) in keys.iter().enumerate() {
        p.insert(SlotId(s as u32), key(k));
    }
}

/// Evict `n` blocks; returns the victims' slots in order.
fn evict_n(p: &mut dyn EvictionPolicy, keys: &[u64], n: usize) -> Vec<u32> {
    (0..n)
        .map(|_| {
            let v = p.victim(None).unwrap();
            p.remove(v, key(keys[v.index()]), true);
            v.0
        })
        .collect()
}

#[test]
fn fifo_ignores_touch() {
    let mut p = Fifo::new(3);
    filled(&mut p, &[10, 11, 12]);
    p.touch(SlotId(0));
    assert_eq!(evict_n(&mut p, &[10, 11, 12], 3), [0, 1, 2]);
}

#[test]
fn lru_respects_touch() {
    let mut p = Lru::new(3);
    filled(&mut p, &[10, 11, 12]);
    p.touch(SlotId(0));
    assert_eq!(evict_n(&mut p, &[10, 11, 12], 3), [1, 2, 0]);
}

#[test]
fn clock_gives_a_second_chance_behind_the_hand() {
    let keys = [10, 11, 12, 13];
    let mut p = Clock::new(4);
    filled(&mut p, &keys[..3]);
    p.touch(SlotId(0));
    // 0 is referenced: its bit clears and the hand moves on to 1.
    assert_eq!(evict_n(&mut p, &keys, 1), [1]);
    // 0 now sits just behind the hand, after 2; the new block 3 enters behind 0, bit 0.
    p.insert(SlotId(3), key(13));
    assert_eq!(evict_n(&mut p, &keys, 3), [2, 0, 3]);
}

#[test]
fn clock_victim_does_not_remove_and_declining_keeps_it() {
    let mut p = Clock::new(2);
    filled(&mut p, &[10, 11]);
    assert_eq!(p.victim(None), Some(SlotId(0)));
    assert_eq!(p.victim(None), Some(SlotId(0)));
    p.touch(SlotId(0)); // the caller could not evict it
    assert_eq!(p.victim(None), Some(SlotId(1)));
    assert_eq!(p.len(), 2);
}

#[test]
fn sieve_keeps_a_visited_block_in_place() {
    let keys = [10, 11, 12, 13];
    let mut p = Sieve::new(4);
    filled(&mut p, &keys[..3]);
    p.touch(SlotId(0));
    assert_eq!(evict_n(&mut p, &keys, 1), [1]);
    // Unlike CLOCK, 0 stays at the tail; the hand continues towards the head from 2.
    p.insert(SlotId(3), key(13));
    assert_eq!(evict_n(&mut p, &keys, 3), [2, 3, 0]);
}

#[test]
fn sieve_hand_survives_removal_of_its_block() {
    let keys = [10, 11, 12, 13];
    let mut p = Sieve::new(4);
    filled(&mut p, &keys);
    p.touch(SlotId(0));
    assert_eq!(p.victim(None), Some(SlotId(1))); // hand on 1
    p.remove(SlotId(1), key(11), false); // hand moves to 2
    p.touch(SlotId(2));
    p.insert(SlotId(1), key(21)); // new head
    assert_eq!(
        p.victim(None),
        Some(SlotId(3)),
        "from 2 (visited, cleared) on to 3"
    );
}

#[test]
fn s3fifo_promotes_a_reaccessed_small_block_and_ghost_hits_go_to_main() {
    let mut p = S3Fifo::new(10); // |S| target 1, M 9, ghost 9
    p.insert(SlotId(0), key(10));
    p.insert(SlotId(1), key(11));
    assert_eq!((p.small_len(), p.main_len()), (2, 0));
    p.touch(SlotId(0));
    p.touch(SlotId(0)); // freq 2 > 1: promoted on eviction (paper's Algorithm 1)
                        // S's tail (0) was accessed: it moves to M; 1 is the victim.
    assert_eq!(p.victim(None), Some(SlotId(1)));
    assert!(p.in_main(SlotId(0)));
    p.remove(SlotId(1), key(11), true);
    assert_eq!(p.ghost_len(), 1);
    // 11 comes back: a ghost hit goes straight to M.
    p.insert(SlotId(1), key(11));
    assert!(p.in_main(SlotId(1)));
    assert_eq!(p.ghost_len(), 0);
    // A new key goes to S.
    p.insert(SlotId(2), key(12));
    assert!(!p.in_main(SlotId(2)));
}

#[test]
fn s3fifo_main_is_a_clock_and_only_small_evictions_feed_the_ghost() {
    let mut p = S3Fifo::with_move_to_main(10, 1);
    p.insert(SlotId(0), key(10));
    p.insert(SlotId(1), key(11));
    p.touch(SlotId(0));
    p.touch(SlotId(1));
    // Both accessed: both move to M and S runs dry, so M evicts: its tail 0 has counter 0.
    assert_eq!(p.victim(None), Some(SlotId(0)));
    assert_eq!(p.main_len(), 2);
    p.touch(SlotId(0));
    p.touch(SlotId(0)); // counter 2
    let v = p.victim(None);
    assert_eq!(
        v,
        Some(SlotId(1)),
        "0 is reinserted with counter 1; 1 (counter 0) goes"
    );
    p.remove(SlotId(1), key(11), true);
    assert_eq!(p.ghost_len(), 0, "main evictions leave no ghost");
}

#[test]
fn s3fifo_threshold_two_needs_two_hits() {
    let mut p = S3Fifo::with_move_to_main(10, 2);
    p.insert(SlotId(0), key(10));
    p.insert(SlotId(1), key(11));
    p.touch(SlotId(0));
    assert_eq!(p.victim(None), Some(SlotId(0)));
    p.touch(SlotId(0));
    assert_eq!(p.victim(None), Some(SlotId(1)));
    assert!(p.in_main(SlotId(0)));
}

#[test]
fn arc_ghost_hits_adapt_p() {
    let mut p = ArcPolicy::new(2); // c = 2
    p.insert(SlotId(0), key(10)); // A -> T1
    p.touch(SlotId(0)); // A -> T2
    p.insert(SlotId(1), key(11)); // B -> T1

    // Miss on C: REPLACE with |T1| = 1 > p = 0 evicts T1's LRU (B) into B1.
    assert_eq!(p.victim(Some(key(12))), Some(SlotId(1)));
    p.remove(SlotId(1), key(11), true);
    p.insert(SlotId(1), key(12)); // C -> T1
    assert_eq!(p.list_lens(), (1, 1, 1, 0));
    // Miss on B, a B1 ghost: p grows by max(|B2|/|B1|, 1) = 1, then |T1| = p evicts T2's LRU.
    assert_eq!(p.victim(Some(key(11))), Some(SlotId(0)));
    assert_eq!(p.target_t1(), 1.0);
    // Asking again for the same incoming key does not adapt twice.
    assert_eq!(p.victim(Some(key(11))), Some(SlotId(0)));
    assert_eq!(p.target_t1(), 1.0);
    p.remove(SlotId(0), key(10), true); // A -> B2
    p.insert(SlotId(0), key(11)); // B -> T2, no second adaptation
    assert_eq!(p.target_t1(), 1.0);
    assert_eq!(p.list_lens(), (1, 1, 0, 1));
    // With free space, insert adapts by itself: C leaves to B1 and comes back.
    p.remove(SlotId(1), key(12), true);
    p.insert(SlotId(1), key(12));
    assert_eq!(p.target_t1(), 2.0); // + max(|B2|/|B1|, 1) = 1, capped at c
    assert_eq!(p.list_lens(), (0, 2, 0, 1));
    // A B2 hit shrinks p by max(|B1|/|B2|, 1) = 1.
    p.remove(SlotId(1), key(12), false);
    p.insert(SlotId(1), key(10));
    assert_eq!(p.target_t1(), 1.0);
    assert_eq!(p.list_lens(), (0, 2, 0, 0));
}

#[test]
fn arc_full_t1_drops_its_lru_without_a_ghost() {
    let mut p = ArcPolicy::new(2);
    p.insert(SlotId(0), key(10));
    p.insert(SlotId(1), key(11));
    // Case IV(A) with |T1| = c: T1's LRU leaves and is not remembered.
    assert_eq!(p.victim(Some(key(12))), Some(SlotId(0)));
    p.remove(SlotId(0), key(10), true);
    assert_eq!(p.list_lens(), (1, 0, 0, 0));
}

#[test]
fn arc_not_evicted_leaves_no_ghost() {
    let mut p = ArcPolicy::new(4);
    p.insert(SlotId(0), key(10));
    p.remove(SlotId(0), key(10), false);
    assert_eq!(p.list_lens(), (0, 0, 0, 0));
}
