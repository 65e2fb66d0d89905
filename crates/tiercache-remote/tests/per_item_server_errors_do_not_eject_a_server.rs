//! Bug: a per-item `SERVER_ERROR` inside a quiet `ms` batch (`object too large for cache`,
//! `out of memory storing object`) failed the whole batch as a server failure and ejected a
//! healthy server. It is now a failed item (`store_failures`); the server stays up.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tiercache_core::Class;
use tiercache_remote::{RemoteKey, RemoteTier, ServerClient};
use tiercache_tier::StoreExt as _;
use tiercache_tier::{Admit, DataTier, Lookup};

#[test]
fn items_too_large_for_a_restarted_server_fail_without_ejecting_it() {
    let mut m = Memcached::start();
    let mut cfg = config(vec![m.addr()], "small", RemoteKey::random());
    cfg.timeout = Duration::from_secs(1);
    let t = RemoteTier::connect(cfg).unwrap();
    // The server comes back with 2 KiB items: every 4 KiB block is "object too large".
    m.restart_with_args(&["-I", "2k", "-o", "slab_chunk_max=1024"])
        .unwrap();
    for round in 0..3 {
        for b in 0..10 {
            let k = key(round, b);
            assert_eq!(
                t.fill(&k, 1, Class::NORMAL, &block(&k, 1), &yes).unwrap(),
                Admit::Stored
            );
        }
        assert!(t.flush(Duration::from_secs(10)));
    }
    let s = t.remote_stats();
    assert_eq!(s.stores, 0, "{s:?}");
    assert_eq!(s.store_failures, 30, "each item is a failed store: {s:?}");
    assert_eq!(s.errors, 0, "not a request failure: {s:?}");
    assert_eq!(s.servers_up, 1, "the server stays up: {s:?}");
    assert_eq!(s.used_blocks, 0, "failed stores leave no entry: {s:?}");

    // Back to normal items: stores land on the same (never ejected) server.
    m.restart_with_args::<&str>(&[]).unwrap();
    let k = key(9, 0);
    t.fill(&k, 1, Class::NORMAL, &block(&k, 1), &yes).unwrap();
    assert!(t.flush(Duration::from_secs(10)));
    let mut buf = vec![0u8; BS];
    assert_eq!(
        t.read(&k, 1, &mut buf).unwrap(),
        Lookup::Hit { dirty: false }
    );
    assert!(buf == block(&k, 1));
}

#[test]
fn a_server_error_fails_only_the_items_it_may_belong_to() {
    let (addr, accepts) = fake_server(
        vec![
            // After NS for item 1: the error is item 2's or item 3's.
            b"NS O1\r\nSERVER_ERROR out of memory storing object\r\nMN\r\n",
            // Before NS for item 2: the error is item 0's or item 1's.
            b"SERVER_ERROR object too large for cache\r\nNS O2\r\nMN\r\n",
            // Between tokens 0 and 3: items 1 and 2.
            b"HD O0\r\nSERVER_ERROR out of memory storing object\r\nHD O3\r\nMN\r\n",
        ],
        |got| got.ends_with(b"mn\r\n"),
    );
    let c = ServerClient::new(
        addr.clone(),
        addr.parse().unwrap(),
        Duration::from_millis(500),
        1024,
    );
    let items: Vec<(&str, &[u8])> = vec![("k0", b"a"), ("k1", b"b"), ("k2", b"c"), ("k3", b"d")];
    assert_eq!(
        c.set_batch(&items).unwrap(),
        vec![true, false, false, false]
    );
    assert_eq!(
        c.set_batch(&items).unwrap(),
        vec![false, false, false, true]
    );
    assert_eq!(c.set_batch(&items).unwrap(), vec![true, false, false, true]);
    assert_eq!(
        accepts.load(Ordering::SeqCst),
        1,
        "a SERVER_ERROR leaves the stream in sync: the connection is kept"
    );
}
