//! Random class tables (up to eight classes with targets, floors and caps) and random accesses,
//! for every policy and partitioner: the tier keeps its invariants (map, slots, pools and per-
//! class counts agree; a block is in its class's pool), a class never holds more than its cap,
//! the pools' targets stay within their floors, caps and the tier, and a table changed live
//! (a class added, changed or removed) moves blocks to their new pools without losing one.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use tiercache_core::class::{Class, PoolId, MAX_CLASSES};
use tiercache_core::partition::{
    Amount, ClassParams, ClassSpec, ClassTable, PartitionConfig, PartitionKind,
};
use tiercache_core::policy::PolicyKind;
use tiercache_core::tier::{Tier, TierConfig};
use tiercache_core::BlockKey;

/// A class as the strategy draws it: target, floor and cap (in blocks, or none).
type Drawn = (Option<f64>, Option<u64>, Option<u64>);

fn drawn() -> impl Strategy<Value = Drawn> {
    (
        prop::option::of(0.0f64..=1.0),
        prop::option::of(0u64..6),
        prop::option::of(0u64..12),
    )
}

fn table(classes: &[Drawn]) -> ClassTable {
    let specs = classes
        .iter()
        .enumerate()
        .map(|(i, &(target, min, max))| ClassSpec {
            name: format!("c{i}"),
            target,
            min: min.map(Amount::Blocks),
            max: max.map(|m| Amount::Blocks(m.max(min.unwrap_or(0)))),
        })
        .collect();
    ClassTable::new(specs).unwrap()
}

/// The class of block `b` among `n` classes (fixed per block, as a file's class is).
fn class_of(b: u64, n: usize) -> Class {
    Class::new((b as usize * 7 + 3) % n).unwrap()
}

/// `caps`: whether every class must be within its cap (not right after a cap was lowered live:
/// the class then gives blocks back as others come in, as a pool above its target does).
fn check(t: &Tier, cap: usize, caps: bool) -> Result<(), TestCaseError> {
    if let Err(e) = t.check_invariants() {
        return Err(TestCaseError::fail(e.to_string()));
    }
    let mut own = 0;
    for (c, spec) in t.classes().iter() {
        if let (true, Some(Amount::Blocks(m))) = (caps, spec.max) {
            prop_assert!(t.class_blocks(c) as u64 <= m, "{c}: over its cap {m}");
        }
        let pool = PoolId::own(c);
        if t.classes().pool_of(c) == pool && c != Class::NORMAL {
            if let Some(target) = t.target(pool) {
                let floor = spec.min.map_or(0, |m| m.of(cap as u64));
                prop_assert!(
                    target >= floor.min(cap as u64),
                    "{c}: target under its floor"
                );
                own += target;
            }
        }
    }
    prop_assert!(own <= cap as u64, "own targets {own} exceed the tier");
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn n_class_tiers_keep_their_invariants_and_caps(
        classes in prop::collection::vec(drawn(), 1..(MAX_CLASSES - 1)),
        changed in prop::collection::vec(drawn(), 1..(MAX_CLASSES - 1)),
        ops in prop::collection::vec(0u64..60, 1..300),
        cap in 8usize..40,
    ) {
        for policy in [PolicyKind::Lru, PolicyKind::Arc, PolicyKind::S3Fifo] {
            for kind in PartitionKind::ALL {
                let mut cfg = TierConfig::new("t", cap, policy);
                cfg.partition = PartitionConfig {
                    kind,
                    params: ClassParams { omega: Some(5), classes: table(&classes) },
                };
                let Ok(mut t) = Tier::new(&cfg) else {
                    continue; // floors that do not fit the tier are refused
                };
                let n = t.classes().len();
                // `none` keeps one pool: classes are counted there, not bounded.
                let mut caps = kind != PartitionKind::None;
                for (i, &b) in ops.iter().enumerate() {
                    let key = BlockKey::new(b % 5, b);
                    let class = class_of(b, n);
                    if t.lookup(key, class).is_none() {
                        // A class at its cap with nothing evictable is not cached: fine.
                        let _ = t.insert(key, class);
                    }
                    check(&t, cap, caps)?;
                    if i == ops.len() / 2 {
                        caps = false;
                        let before = t.len();
                        let params = ClassParams { omega: Some(5), classes: table(&changed) };
                        if t.set_partition_params(&params).is_ok() {
                            prop_assert_eq!(t.len(), before, "a table change dropped blocks");
                        }
                        check(&t, cap, caps)?;
                    }
                }
            }
        }
    }
}
