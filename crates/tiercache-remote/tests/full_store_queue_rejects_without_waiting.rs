//! When the background store queue is full (the servers are slower than the fills), a fill
//! is turned down at once instead of waiting; what was accepted still lands and reads back.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use std::time::{Duration, Instant};
use tiercache_core::Class;
use tiercache_remote::{RemoteKey, RemoteTier};
use tiercache_tier::StoreExt as _;
use tiercache_tier::{Admit, DataTier, Lookup};

#[test]
fn fills_beyond_the_queue_are_rejected_immediately() {
    let m = Memcached::start();
    let proxy = SlowProxy::start(m.addr());
    let mut cfg = config(vec![proxy.addr()], "t", RemoteKey::random());
    cfg.queue_depth = 4;
    cfg.timeout = Duration::from_secs(2);
    let t = RemoteTier::connect(cfg).unwrap();
    proxy.set_delay(Duration::from_millis(100));
    let (mut stored, mut rejected) = (Vec::new(), 0);
    let start = Instant::now();
    for i in 0..50 {
        let k = key(1, i);
        match t.fill(&k, 1, Class::NORMAL, &block(&k, 1), &yes).unwrap() {
            Admit::Stored => stored.push(k),
            Admit::Rejected => rejected += 1,
        }
    }
    let took = start.elapsed();
    // Waiting for the queue would take seconds (100 ms per delayed reply, 2 s timeout).
    assert!(took < Duration::from_millis(1000), "fills waited: {took:?}");
    assert!(rejected >= 40, "only {rejected} of 50 rejected");
    assert_eq!(t.remote_stats().rejected, rejected);
    assert!(t.flush(Duration::from_secs(10)));
    proxy.set_delay(Duration::ZERO);
    let mut buf = vec![0u8; BS];
    for k in &stored {
        assert_eq!(
            t.read(k, 1, &mut buf).unwrap(),
            Lookup::Hit { dirty: false }
        );
        assert!(buf == block(k, 1));
    }
    for i in 0..50 {
        if !stored.contains(&key(1, i)) {
            assert!(!t.contains(&key(1, i)), "a rejected fill left an entry");
        }
    }
}
