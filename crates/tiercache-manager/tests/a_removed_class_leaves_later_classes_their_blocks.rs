#![allow(clippy::unwrap_used)]
//! Removing a class renumbers the classes after it (`ClassTable::remove`): `set_classes` moves
//! every file, cached block and hit count of a later class to its new index, and the removed
//! class's to `normal`, so no block or count is left under an index that names another class.

mod common;

use common::*;
use tiercache_core::partition::{
    Amount, ClassParams, ClassSpec, ClassTable, PartitionConfig, PartitionKind,
};
use tiercache_manager::{Class, MemCache, MemConfig};

fn spec(name: &str, max: u64) -> ClassSpec {
    ClassSpec {
        max: Some(Amount::Blocks(max)),
        ..ClassSpec::named(name)
    }
}

#[test]
fn later_classes_keep_their_blocks_files_and_counts() {
    let dir = tempfile::tempdir().unwrap();
    let a = make_file(dir.path(), "a", &pattern(0, 8 * 512, 1));
    let b = make_file(dir.path(), "b", &pattern(0, 4 * 512, 2));
    let table = ClassTable::new(vec![spec("web", 32), spec("logs", 32)]).unwrap();
    let (web, logs) = (
        table.by_name("web").unwrap(),
        table.by_name("logs").unwrap(),
    );
    let params = ClassParams {
        omega: None,
        classes: table.clone(),
    };
    let cfg = MemConfig {
        partition: PartitionConfig {
            kind: PartitionKind::Dirprio,
            params: params.clone(),
        },
        ..small_config(64)
    };
    let cache = MemCache::with_real_device(cfg).unwrap();
    let fa = open(&cache, &a, web);
    let fb = open(&cache, &b, logs);
    cache.read(fa, 0, 8 * 512).unwrap();
    cache.read(fb, 0, 4 * 512).unwrap();
    cache.read(fb, 0, 512).unwrap();
    let before = cache.stats();
    let logs_before = before.class(logs);
    assert_eq!((logs_before.blocks, logs_before.hits), (4, 1));

    let mut next = params;
    next.classes.remove("web").unwrap();
    let new_logs = next.classes.by_name("logs").unwrap();
    assert_eq!(new_logs, web, "logs moved down to web's index");
    let remap: Vec<Class> = table
        .iter()
        .map(|(_, s)| next.classes.by_name(&s.name).unwrap_or(Class::NORMAL))
        .collect();
    cache.set_classes(&next, &remap).unwrap();

    let s = cache.stats();
    let moved = s.class(new_logs);
    assert_eq!(
        (moved.blocks, moved.hits, moved.misses),
        (4, 1, logs_before.misses)
    );
    assert_eq!(
        s.class(Class::NORMAL).blocks,
        8,
        "web's blocks are normal's"
    );
    assert_eq!(s.class_table.len(), 3);
    assert_eq!(s.class_named("logs"), Some(new_logs));
    assert_eq!(cache.class_of(fb), Some(new_logs));
    assert_eq!(cache.class_of(fa), Some(Class::NORMAL));
    // Later hits count for the class under its new index.
    cache.read(fb, 0, 512).unwrap();
    assert_eq!(cache.stats().class(new_logs).hits, 2);
    cache.check_invariants().unwrap();
}
