//! Another version, an invalidated block, a truncated file's tail, a store whose `current`
//! check fails: all misses, never old bytes.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use std::time::Duration;
use tiercache_core::Class;
use tiercache_tier::StoreExt as _;
use tiercache_tier::{Admit, DataTier, Lookup};

#[test]
fn version_mismatch_is_a_miss_and_drops_the_old_copy() {
    let m = Memcached::start();
    let t = tier(vec![m.addr()]);
    let k = key(1, 0);
    t.fill(&k, 1, Class::NORMAL, &block(&k, 1), &yes).unwrap();
    assert!(t.flush(Duration::from_secs(5)));
    let mut buf = vec![0u8; BS];
    assert_eq!(t.read(&k, 2, &mut buf).unwrap(), Lookup::Miss);
    assert!(!t.contains(&k), "the stale clean copy is dropped");
    assert_eq!(t.read(&k, 1, &mut buf).unwrap(), Lookup::Miss);
    // A new version stores and reads back.
    t.fill(&k, 2, Class::NORMAL, &block(&k, 2), &yes).unwrap();
    assert!(t.flush(Duration::from_secs(5)));
    assert_eq!(
        t.read(&k, 2, &mut buf).unwrap(),
        Lookup::Hit { dirty: false }
    );
    assert_eq!(buf, block(&k, 2));
}

#[test]
fn invalidate_discard_and_invalidate_file_make_misses() {
    let m = Memcached::start();
    let t = tier(vec![m.addr()]);
    for b in 0..10 {
        let k = key(1, b);
        t.fill(&k, 1, Class::NORMAL, &block(&k, 1), &yes).unwrap();
        let k2 = key(2, b);
        t.fill(&k2, 1, Class::NORMAL, &block(&k2, 1), &yes).unwrap();
    }
    assert!(t.flush(Duration::from_secs(5)));
    let mut buf = vec![0u8; BS];
    t.invalidate(&key(1, 0));
    t.discard(&key(1, 1));
    assert!(t.try_invalidate(&key(1, 7)), "never has to wait");
    t.invalidate_file(&file(1), 5);
    for b in 0..10 {
        let want = if (2..5).contains(&b) {
            Lookup::Hit { dirty: false }
        } else {
            Lookup::Miss
        };
        assert_eq!(t.read(&key(1, b), 1, &mut buf).unwrap(), want, "block {b}");
        assert_eq!(
            t.read(&key(2, b), 1, &mut buf).unwrap(),
            Lookup::Hit { dirty: false },
            "other file untouched"
        );
    }
    assert_eq!(t.remote_stats().invalidations, 7);
    assert_eq!(t.remote_stats().used_blocks, 13);
}

#[test]
fn invalidate_before_the_store_lands_keeps_it_invisible() {
    let m = Memcached::start();
    let t = tier(vec![m.addr()]);
    let mut buf = vec![0u8; BS];
    for b in 0..200 {
        let k = key(3, b);
        t.fill(&k, 1, Class::NORMAL, &block(&k, 1), &yes).unwrap();
        // Usually still queued here; either way the invalidation wins.
        t.invalidate(&k);
    }
    assert!(t.flush(Duration::from_secs(5)));
    for b in 0..200 {
        assert_eq!(t.read(&key(3, b), 1, &mut buf).unwrap(), Lookup::Miss);
    }
    assert_eq!(t.remote_stats().used_blocks, 0);
}

#[test]
fn current_false_makes_nothing_visible() {
    let m = Memcached::start();
    let t = tier(vec![m.addr()]);
    let k = key(4, 0);
    let no = || false;
    assert_eq!(
        t.fill(&k, 1, Class::NORMAL, &block(&k, 1), &no).unwrap(),
        Admit::Rejected
    );
    assert_eq!(
        t.demote(&k, 1, Class::NORMAL, &block(&k, 1), &no).unwrap(),
        Admit::Rejected
    );
    assert!(t.flush(Duration::from_secs(5)));
    assert!(!t.contains(&k));
    let mut buf = vec![0u8; BS];
    assert_eq!(t.read(&k, 1, &mut buf).unwrap(), Lookup::Miss);
    let s = t.remote_stats();
    assert_eq!((s.rejected, s.stores), (2, 0));
    // And nothing was sent.
    let raw = tiercache_remote::ServerClient::new(
        m.addr(),
        m.addr().parse().unwrap(),
        Duration::from_secs(1),
        BS * 2,
    );
    assert_eq!(raw.get(&t.key_name(&k, 1)).unwrap(), None);
}

#[test]
fn a_full_index_evicts_oldest_first() {
    let m = Memcached::start();
    let mut cfg = config(vec![m.addr()], "t", tiercache_remote::RemoteKey::random());
    cfg.capacity_blocks = Some(8);
    let t = tiercache_remote::RemoteTier::connect(cfg).unwrap();
    for b in 0..20 {
        let k = key(5, b);
        t.fill(&k, 1, Class::NORMAL, &block(&k, 1), &yes).unwrap();
    }
    assert!(t.flush(Duration::from_secs(5)));
    assert_eq!(t.remote_stats().used_blocks, 8);
    let mut buf = vec![0u8; BS];
    for b in 0..20 {
        let want = if b >= 12 {
            Lookup::Hit { dirty: false }
        } else {
            Lookup::Miss
        };
        assert_eq!(t.read(&key(5, b), 1, &mut buf).unwrap(), want, "block {b}");
    }
}
