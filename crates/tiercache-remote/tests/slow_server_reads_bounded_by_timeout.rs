//! A server that answers slowly (a proxy delaying its replies by 500 ms) costs at most about
//! the timeout per read, then is ejected so later reads do not wait at all.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use std::time::{Duration, Instant};
use tiercache_core::Class;
use tiercache_tier::StoreExt as _;
use tiercache_tier::{DataTier, Lookup};

#[test]
fn reads_from_a_slow_server_return_within_the_timeout() {
    let m = Memcached::start();
    let proxy = SlowProxy::start(m.addr());
    let mut cfg = config(
        vec![proxy.addr()],
        "t",
        tiercache_remote::RemoteKey::random(),
    );
    cfg.timeout = Duration::from_millis(50);
    let t = tiercache_remote::RemoteTier::connect(cfg).unwrap();
    for i in 0..20 {
        let k = key(1, i);
        t.fill(&k, 1, Class::NORMAL, &block(&k, 1), &yes).unwrap();
    }
    assert!(t.flush(Duration::from_secs(5)));
    let mut buf = vec![0u8; BS];
    assert_eq!(
        t.read(&key(1, 0), 1, &mut buf).unwrap(),
        Lookup::Hit { dirty: false }
    );

    proxy.set_delay(Duration::from_millis(500));
    let mut slowest = Duration::ZERO;
    for i in 0..20 {
        let k = key(1, i);
        let t0 = Instant::now();
        let r = t
            .read(&k, 1, &mut buf)
            .expect("a slow server is never an error");
        slowest = slowest.max(t0.elapsed());
        assert_eq!(r, Lookup::Miss, "block {i}");
    }
    eprintln!("slowest read with a 500 ms server and a 50 ms timeout: {slowest:?}");
    assert!(slowest < Duration::from_millis(400), "{slowest:?}");
    let s = t.remote_stats();
    assert_eq!(s.servers_up, 0, "the slow server is ejected");
    assert!(s.errors >= 1, "{s:?}");

    // Fast again: probed back, and reads of blocks stored since hit.
    proxy.set_delay(Duration::ZERO);
    assert!(wait_until(Duration::from_secs(5), || t
        .remote_stats()
        .servers_up
        == 1));
    let k = key(2, 0);
    t.fill(&k, 1, Class::NORMAL, &block(&k, 1), &yes).unwrap();
    assert!(t.flush(Duration::from_secs(5)));
    assert_eq!(
        t.read(&k, 1, &mut buf).unwrap(),
        Lookup::Hit { dirty: false }
    );
    assert_eq!(buf, block(&k, 1));
}
