//! Randomized op sequences against simple models, for every policy, partitioner and placement:
//! capacity is never exceeded, a block sits in exactly one pool, exclusive tiers never hold a
//! block that a tier above holds, pinned tiers hold only their range, and single-tier LRU gives
//! exactly the hits of a naive LRU list.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use std::collections::VecDeque;
use tiercache_core::hierarchy::{Hierarchy, LevelConfig, Placement};
use tiercache_core::partition::{Amount, DirprioParams, PartitionConfig, PartitionKind};
use tiercache_core::policy::PolicyKind;
use tiercache_core::tier::{Tier, TierConfig};
use tiercache_core::{Access, BlockKey, Class};

fn partition(kind: PartitionKind) -> PartitionConfig {
    PartitionConfig {
        kind,
        params: DirprioParams {
            omega: Some(7),
            t_protected: 0.9,
            t_normal: 0.6,
            b_pmin: Amount::Blocks(2),
            b_nmin: 2,
        }
        .into(),
    }
}

fn access_strategy() -> impl Strategy<Value = Vec<(u64, bool)>> {
    prop::collection::vec((0u64..40, any::<bool>()), 1..400)
}

fn class_of(block: u64) -> Class {
    // A block's class is a property of its file: derive it from the block, not the op.
    if block.is_multiple_of(3) {
        Class::PRIORITY
    } else {
        Class::NORMAL
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn single_tier_invariants(ops in access_strategy(), cap in 1usize..20) {
        for policy in PolicyKind::ALL {
            for kind in PartitionKind::ALL {
                let mut cfg = TierConfig::new("t", cap, policy);
                cfg.partition = partition(kind);
                let Ok(mut t) = Tier::new(&cfg) else {
                    // Only tiers too small for b-pmin + b-nmin may be refused.
                    prop_assert!(cap < 4);
                    continue;
                };
                for &(b, _) in &ops {
                    let key = BlockKey::new(0, b);
                    let class = class_of(b);
                    if t.lookup(key, class).is_none() {
                        t.insert(key, class).unwrap();
                    }
                    prop_assert!(t.len() <= cap);
                    prop_assert!(t.contains(&key), "{policy} {kind}: just-filled block missing");
                    if let Err(e) = t.check_invariants() {
                        prop_assert!(false, "{policy} {kind}: {e}");
                    }
                }
            }
        }
    }

    #[test]
    fn basic_protected_pool_only_grows(ops in access_strategy(), cap in 4usize..20) {
        let mut cfg = TierConfig::new("t", cap, PolicyKind::Lru);
        cfg.partition = partition(PartitionKind::Basic);
        let mut t = Tier::new(&cfg).unwrap();
        let mut last = 0;
        for &(b, _) in &ops {
            let key = BlockKey::new(0, b);
            let class = class_of(b);
            let normal_before = t.pool_sizes().normal();
            if t.lookup(key, class).is_none() {
                t.insert(key, class).unwrap();
            }
            let now = t.s_cur();
            // It may only shrink when the normal pool was empty.
            prop_assert!(now >= last || normal_before == 0);
            last = now;
        }
    }

    #[test]
    fn lru_matches_naive_model(ops in access_strategy(), cap in 1usize..20) {
        let mut t = Tier::new(&TierConfig::new("t", cap, PolicyKind::Lru)).unwrap();
        let mut model: VecDeque<u64> = VecDeque::new();
        for &(b, _) in &ops {
            let key = BlockKey::new(0, b);
            let hit = t.lookup(key, Class::NORMAL).is_some();
            let model_hit = if let Some(pos) = model.iter().position(|&x| x == b) {
                model.remove(pos);
                true
            } else {
                if model.len() == cap {
                    model.pop_back();
                }
                false
            };
            model.push_front(b);
            prop_assert_eq!(hit, model_hit);
            if !hit {
                t.insert(key, Class::NORMAL).unwrap();
            }
        }
    }

    #[test]
    fn hierarchy_placements_hold(ops in access_strategy(), c1 in 1usize..10, c2 in 1usize..20, c3 in 1usize..20) {
        let placements = [Placement::Inclusive, Placement::Exclusive, Placement::Pinned { first: 5 }];
        for policy in PolicyKind::ALL {
            for &p2 in &placements {
                for &p3 in &placements {
                    let mut levels = vec![
                        LevelConfig { tier: TierConfig::new("l1", c1, policy), placement: Placement::Inclusive },
                        LevelConfig { tier: TierConfig::new("l2", c2, policy), placement: p2 },
                        LevelConfig { tier: TierConfig::new("l3", c3, policy), placement: p3 },
                    ];
                    levels[0].tier.partition = partition(PartitionKind::None);
                    let mut h = Hierarchy::new(&levels).unwrap();
                    for &(b, _) in &ops {
                        let key = BlockKey::new(0, b);
                        h.access(Access::read(key, class_of(b)));
                        prop_assert!(h.tiers()[0].contains(&key), "top tier must hold the block just read");
                        for (i, t) in h.tiers().iter().enumerate() {
                            prop_assert!(t.len() <= t.capacity());
                            if let Err(e) = t.check_invariants() {
                                prop_assert!(false, "{policy} tier {i}: {e}");
                            }
                            match h.placement(i) {
                                Placement::Exclusive => {
                                    for (k, _) in t.resident() {
                                        prop_assert!(
                                            !h.tiers()[..i].iter().any(|u| u.contains(&k)),
                                            "{policy} {p2}/{p3}: exclusive tier {i} duplicates {k:?}"
                                        );
                                    }
                                }
                                Placement::Pinned { first } if i > 0 => {
                                    for (k, _) in t.resident() {
                                        prop_assert!(k.block.0 >= first && k.block.0 < first + t.capacity() as u64);
                                    }
                                }
                                _ => {}
                            }
                        }
                    }
                    let total: u64 = h.class(Class::PRIORITY).requests() + h.class(Class::NORMAL).requests();
                    prop_assert_eq!(total, ops.len() as u64);
                }
            }
        }
    }
}

#[test]
fn pinned_and_dirty_blocks_are_never_evicted() {
    let mut t = Tier::new(&TierConfig::new("t", 4, PolicyKind::Lru)).unwrap();
    let slots: Vec<_> = (0..4)
        .map(|b| t.insert(BlockKey::new(0, b), Class::NORMAL).unwrap().slot)
        .collect();
    t.pin(slots[0]);
    t.set_dirty(slots[1], true);
    let ins = t.insert(BlockKey::new(0, 10), Class::NORMAL).unwrap();
    assert_eq!(
        ins.evicted.unwrap().key,
        BlockKey::new(0, 2),
        "LRU victim after skipping 0 and 1"
    );
    t.pin(slots[3]);
    t.pin(ins.slot);
    // Everything is pinned or dirty now: the tier says retry instead of evicting.
    assert!(matches!(
        t.insert(BlockKey::new(0, 11), Class::NORMAL),
        Err(tiercache_core::CoreError::Retry { .. })
    ));
    t.set_dirty(slots[1], false);
    assert_eq!(
        t.insert(BlockKey::new(0, 11), Class::NORMAL)
            .unwrap()
            .evicted
            .unwrap()
            .key,
        BlockKey::new(0, 1)
    );
}

#[test]
fn reclassification_moves_blocks_between_pools() {
    let mut cfg = TierConfig::new("t", 8, PolicyKind::Lru);
    cfg.partition = partition(PartitionKind::Dirprio);
    let mut t = Tier::new(&cfg).unwrap();
    let s = t.insert(BlockKey::new(1, 0), Class::NORMAL).unwrap().slot;
    assert_eq!(t.s_cur(), 0);
    t.set_class(s, Class::PRIORITY);
    assert_eq!(t.s_cur(), 1);
    t.check_invariants().unwrap();
    t.set_class(s, Class::NORMAL);
    assert_eq!(t.s_cur(), 0);
    t.check_invariants().unwrap();
}
