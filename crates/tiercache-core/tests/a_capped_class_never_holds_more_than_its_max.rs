//! A class with a `max` could fill a tier that still had free slots: its cap bound only its
//! pool's target, which counts when the tier is full. Now a class at its cap replaces one of its
//! own blocks (or, when none can go, is not cached), so a scan of a capped class never holds
//! more than its max.
#![allow(clippy::unwrap_used)]

use tiercache_core::partition::{
    Amount, ClassParams, ClassSpec, ClassTable, PartitionConfig, PartitionKind,
};
use tiercache_core::policy::PolicyKind;
use tiercache_core::tier::{Tier, TierConfig};
use tiercache_core::{BlockIndex, BlockKey, FileId};

#[test]
fn a_capped_class_scans_within_its_max_while_slots_are_free() {
    let backup = ClassSpec {
        max: Some(Amount::Blocks(8)),
        ..ClassSpec::named("backup")
    };
    let web = ClassSpec {
        target: Some(0.9),
        ..ClassSpec::named("web")
    };
    let classes = ClassTable::new(vec![web, backup]).unwrap();
    let (web, backup) = (
        classes.by_name("web").unwrap(),
        classes.by_name("backup").unwrap(),
    );
    for kind in [PartitionKind::Dirprio, PartitionKind::Mrc] {
        let mut cfg = TierConfig::new("m", 64, PolicyKind::Lru);
        cfg.partition = PartitionConfig {
            kind,
            params: ClassParams {
                omega: None,
                classes: classes.clone(),
            },
        };
        let mut t = Tier::new(&cfg).unwrap();
        let key = |f: u64, b: u64| BlockKey {
            file: FileId(f),
            block: BlockIndex(b),
        };
        for b in 0..16 {
            t.insert(key(1, b), web).unwrap();
        }
        for b in 0..200 {
            t.insert(key(2, b), backup).unwrap();
            assert!(
                t.class_blocks(backup) <= 8,
                "{kind}: {}",
                t.class_blocks(backup)
            );
        }
        assert_eq!(t.class_blocks(backup), 8, "{kind}: the cap, not less");
        assert_eq!(
            t.class_blocks(web),
            16,
            "{kind}: the scan took nothing of web's"
        );
        assert_eq!(t.len(), 24, "{kind}: the other slots stay free");
        t.check_invariants().unwrap();
    }
}

#[test]
fn a_class_capped_at_nothing_is_never_cached() {
    let none = ClassSpec {
        max: Some(Amount::Blocks(0)),
        ..ClassSpec::named("scratch")
    };
    let classes = ClassTable::new(vec![none]).unwrap();
    let scratch = classes.by_name("scratch").unwrap();
    let mut cfg = TierConfig::new("m", 64, PolicyKind::Lru);
    cfg.partition = PartitionConfig {
        kind: PartitionKind::Dirprio,
        params: ClassParams {
            omega: None,
            classes,
        },
    };
    let mut t = Tier::new(&cfg).unwrap();
    for b in 0..10 {
        let key = BlockKey {
            file: FileId(1),
            block: BlockIndex(b),
        };
        assert!(
            t.insert(key, scratch).is_err(),
            "not cached: the caller bypasses"
        );
    }
    assert_eq!(t.len(), 0);
    t.check_invariants().unwrap();
}
