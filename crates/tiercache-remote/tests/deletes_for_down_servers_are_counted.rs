//! Bug: deletes queued for an ejected server were skipped without a trace; they now count in
//! `deletes_dropped`.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use std::time::Duration;
use tiercache_core::Class;
use tiercache_tier::StoreExt as _;
use tiercache_tier::{DataTier, Lookup};

#[test]
fn a_delete_for_an_ejected_server_counts_as_dropped() {
    let mut m = Memcached::start();
    let t = tier(vec![m.addr()]);
    let k = key(5, 0);
    t.fill(&k, 1, Class::NORMAL, &block(&k, 1), &yes).unwrap();
    assert!(t.flush(Duration::from_secs(5)));
    m.kill();
    let mut buf = vec![0u8; BS];
    // Two failed reads eject the server (eject_after 2).
    for _ in 0..2 {
        assert_eq!(t.read(&k, 1, &mut buf).unwrap(), Lookup::Miss);
    }
    assert_eq!(t.remote_stats().servers_up, 0);
    assert_eq!(t.remote_stats().deletes_dropped, 0);
    t.invalidate(&k);
    assert!(t.flush(Duration::from_secs(5)));
    let s = t.remote_stats();
    assert_eq!((s.deletes_dropped, s.invalidations), (1, 1), "{s:?}");
}
