//! Bug: a store that landed after its index entry was replaced (another version, or another
//! server) was left on the server as unreachable garbage; only a key that was entirely gone
//! got its late store deleted.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use std::time::Duration;
use tiercache_core::Class;
use tiercache_remote::{RemoteKey, RemoteTier, ServerClient};
use tiercache_tier::StoreExt as _;
use tiercache_tier::{Admit, DataTier, Lookup};

#[test]
fn a_store_overtaken_by_a_newer_version_is_deleted_after_it_lands() {
    let m = Memcached::start();
    let proxy = SlowProxy::start(m.addr());
    let mut cfg = config(vec![proxy.addr()], "late", RemoteKey::random());
    cfg.timeout = Duration::from_secs(2);
    let t = RemoteTier::connect(cfg).unwrap();
    let direct = ServerClient::new(
        m.addr(),
        m.addr().parse().unwrap(),
        Duration::from_secs(1),
        1 << 20,
    );
    let k = key(3, 7);
    proxy.set_delay(Duration::from_millis(150));
    // Keep the worker busy so that what follows is taken in one round: the delete of
    // version 1 (queued when version 2 replaces it) runs before version 1's store lands.
    let busy = key(3, 0);
    t.fill(&busy, 1, Class::NORMAL, &block(&busy, 1), &yes)
        .unwrap();
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(
        t.fill(&k, 1, Class::NORMAL, &block(&k, 1), &yes).unwrap(),
        Admit::Stored
    );
    assert_eq!(
        t.fill(&k, 2, Class::NORMAL, &block(&k, 2), &yes).unwrap(),
        Admit::Stored
    );
    assert!(t.flush(Duration::from_secs(10)));
    proxy.set_delay(Duration::ZERO);
    assert_eq!(
        direct.get(&t.key_name(&k, 1)).unwrap(),
        None,
        "version 1's landed value is garbage and must be deleted"
    );
    assert!(direct.get(&t.key_name(&k, 2)).unwrap().is_some());
    let mut buf = vec![0u8; BS];
    assert_eq!(
        t.read(&k, 2, &mut buf).unwrap(),
        Lookup::Hit { dirty: false }
    );
    assert!(buf == block(&k, 2));
}
