//! Bug: a fill or demote rejected because the store queue was full had already replaced the
//! key's index entry and evicted FIFO victims: good entries were lost. The queue is now
//! checked before the index is touched.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use std::time::Duration;
use tiercache_core::Class;
use tiercache_remote::{RemoteKey, RemoteTier};
use tiercache_tier::StoreExt as _;
use tiercache_tier::{Admit, DataTier, Lookup};

#[test]
fn a_full_queue_rejects_without_replacing_or_evicting() {
    let m = Memcached::start();
    let proxy = SlowProxy::start(m.addr());
    let mut cfg = config(vec![proxy.addr()], "q", RemoteKey::random());
    cfg.capacity_blocks = Some(3);
    cfg.queue_depth = 1;
    cfg.timeout = Duration::from_secs(2);
    let t = RemoteTier::connect(cfg).unwrap();
    let (a, b, c, d) = (key(1, 0), key(1, 1), key(1, 2), key(1, 3));
    for k in [a, b] {
        assert_eq!(
            t.fill(&k, 1, Class::NORMAL, &block(&k, 1), &yes).unwrap(),
            Admit::Stored
        );
        assert!(t.flush(Duration::from_secs(5)));
    }
    // The worker is now slow: C occupies the only place in the queue for a while.
    proxy.set_delay(Duration::from_millis(400));
    assert_eq!(
        t.fill(&c, 1, Class::NORMAL, &block(&c, 1), &yes).unwrap(),
        Admit::Stored
    );
    // D would evict A (the index is full); B v2 would replace B v1. Both are rejected.
    assert_eq!(
        t.fill(&d, 1, Class::NORMAL, &block(&d, 1), &yes).unwrap(),
        Admit::Rejected
    );
    assert_eq!(
        t.demote(&b, 2, Class::NORMAL, &block(&b, 2), &yes).unwrap(),
        Admit::Rejected
    );
    assert!(t.contains(&a), "a rejected store evicted A");
    assert!(t.contains(&b) && t.contains(&c) && !t.contains(&d));
    let s = t.remote_stats();
    assert_eq!((s.rejected, s.used_blocks), (2, 3), "{s:?}");

    proxy.set_delay(Duration::ZERO);
    assert!(t.flush(Duration::from_secs(5)));
    let mut buf = vec![0u8; BS];
    for k in [a, b, c] {
        assert_eq!(
            t.read(&k, 1, &mut buf).unwrap(),
            Lookup::Hit { dirty: false }
        );
        assert!(buf == block(&k, 1));
    }
}
