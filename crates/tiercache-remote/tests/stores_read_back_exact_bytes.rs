//! A stored block reads back byte for byte; `take` removes it; dirty data is refused.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use std::time::{Duration, Instant};
use tiercache_core::Class;
use tiercache_tier::StoreExt as _;
use tiercache_tier::{Admit, DataTier, Lookup, TierKind};

#[test]
fn fill_then_read_returns_the_exact_bytes() {
    let m = Memcached::start();
    let t = tier(vec![m.addr()]);
    assert_eq!(t.info().kind, TierKind::Remote);
    assert!(!t.info().accepts_dirty && !t.info().persistent);
    let mut buf = vec![0u8; BS];
    // Nothing indexed: a miss without I/O.
    assert_eq!(t.read(&key(1, 0), 1, &mut buf).unwrap(), Lookup::Miss);
    for b in 0..64 {
        let k = key(1, b);
        let a = if b % 2 == 0 {
            t.fill(&k, 3, Class::NORMAL, &block(&k, 3), &yes).unwrap()
        } else {
            t.demote(&k, 3, Class::NORMAL, &block(&k, 3), &yes).unwrap()
        };
        assert_eq!(a, Admit::Stored);
        assert!(t.contains(&k));
    }
    assert!(t.flush(Duration::from_secs(5)));
    for b in 0..64 {
        let k = key(1, b);
        buf.fill(0);
        assert_eq!(
            t.read(&k, 3, &mut buf).unwrap(),
            Lookup::Hit { dirty: false }
        );
        assert!(buf == block(&k, 3), "block {b} came back different");
    }
    let s = t.remote_stats();
    assert_eq!((s.hits, s.stores, s.servers_up, s.servers), (64, 64, 1, 1));
    assert_eq!(s.used_blocks, 64);
    assert!(
        s.ram_bytes_per_block > 0.0 && s.ram_bytes_per_block < 200.0,
        "{s:?}"
    );
    let snap = t.stats();
    assert_eq!(snap.kind, "remote");
    assert_eq!((snap.fills, snap.demotions_in), (32, 32));
    let json = serde_json::to_value(&s).unwrap();
    for field in [
        "hits",
        "misses",
        "stores",
        "invalidations",
        "auth_failures",
        "errors",
        "servers_up",
        "servers",
        "rejected",
        "ram_bytes_per_block",
        "used_blocks",
        "capacity_blocks",
    ] {
        assert!(json.get(field).is_some(), "stats JSON lacks {field}");
    }
}

#[test]
fn take_removes_the_block_and_dirty_data_is_refused() {
    let m = Memcached::start();
    let t = tier(vec![m.addr()]);
    let k = key(2, 5);
    let mut buf = vec![0u8; BS];
    assert_eq!(
        t.write_dirty(&k, 1, Class::NORMAL, &block(&k, 1)).unwrap(),
        Admit::Rejected
    );
    assert!(
        t.cleaning().is_none(),
        "holds no dirty block: nothing to clean"
    );
    t.sync().unwrap();
    t.fill(&k, 1, Class::NORMAL, &block(&k, 1), &yes).unwrap();
    assert!(t.flush(Duration::from_secs(5)));
    assert_eq!(
        t.take(&k, 1, &mut buf).unwrap(),
        Lookup::Hit { dirty: false }
    );
    assert_eq!(buf, block(&k, 1));
    assert!(!t.contains(&k));
    assert_eq!(t.read(&k, 1, &mut buf).unwrap(), Lookup::Miss);
    assert_eq!(t.stats().promotions_out, 1);
    // The queued delete reaches the server.
    assert!(t.flush(Duration::from_secs(5)));
    let raw = tiercache_remote::ServerClient::new(
        m.addr(),
        m.addr().parse().unwrap(),
        Duration::from_secs(1),
        BS * 2,
    );
    assert_eq!(raw.get(&t.key_name(&k, 1)).unwrap(), None);
}

#[test]
fn two_thousand_stored_blocks_all_read_back_as_hits() {
    let m = Memcached::start();
    let t = tier(vec![m.addr()]);
    let n = 2000u64;
    for b in 0..n {
        let k = key(3, b);
        t.fill(&k, 1, Class::NORMAL, &block(&k, 1), &yes).unwrap();
    }
    assert!(t.flush(Duration::from_secs(10)));
    let mut buf = vec![0u8; BS];
    let start = Instant::now();
    for b in 0..n {
        assert_eq!(
            t.read(&key(3, b), 1, &mut buf).unwrap(),
            Lookup::Hit { dirty: false }
        );
    }
    let per = start.elapsed() / n as u32;
    eprintln!(
        "loopback remote read: {per:?} per 4 KiB block (this build profile); index RAM {:.1} B/block",
        t.remote_stats().ram_bytes_per_block
    );
}
