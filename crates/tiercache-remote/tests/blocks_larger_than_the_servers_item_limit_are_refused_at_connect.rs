//! Bug: a block size whose stored item exceeds the servers' `item_size_max` (`-I`) was
//! accepted at connect; every store then failed. Connect now refuses it, naming `-I`.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use std::time::Duration;
use tiercache_core::Class;
use tiercache_remote::local::LocalMemcached;
use tiercache_remote::{RemoteError, RemoteKey, RemoteTier};
use tiercache_tier::StoreExt as _;
use tiercache_tier::{Admit, DataTier, Lookup};

const MIB: usize = 1 << 20;

#[test]
fn one_mib_blocks_against_a_default_memcached_are_refused_naming_dash_i() {
    let m = Memcached::start();
    let mut cfg = config(vec![m.addr()], "big", RemoteKey::random());
    cfg.block_size = MIB;
    cfg.timeout = Duration::from_secs(2);
    let e = RemoteTier::connect(cfg).unwrap_err();
    assert!(matches!(e, RemoteError::Config(_)), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains(&m.addr()), "names the server: {msg}");
    assert!(msg.contains("-I 2m"), "says how to start memcached: {msg}");
    assert!(msg.contains("1048576"), "names the limit: {msg}");
    assert!(!msg.contains('\n'), "one line: {msg}");
}

#[test]
fn one_mib_blocks_work_with_a_larger_item_size() {
    let m = LocalMemcached::start_with_args(64, &["-I", "2m"]).unwrap();
    let mut cfg = config(vec![m.addr()], "big", RemoteKey::random());
    cfg.block_size = MIB;
    cfg.timeout = Duration::from_secs(2);
    let t = RemoteTier::connect(cfg).unwrap();
    let data: Vec<u8> = (0..MIB).map(|i| (i * 7 % 251) as u8).collect();
    let k = key(1, 0);
    assert_eq!(
        t.fill(&k, 1, Class::NORMAL, &data, &yes).unwrap(),
        Admit::Stored
    );
    assert!(t.flush(Duration::from_secs(10)));
    let mut buf = vec![0u8; MIB];
    assert_eq!(
        t.read(&k, 1, &mut buf).unwrap(),
        Lookup::Hit { dirty: false }
    );
    assert!(buf == data);
    let s = t.remote_stats();
    assert_eq!(
        (s.stores, s.store_failures, s.servers_up),
        (1, 0, 1),
        "{s:?}"
    );
}

#[test]
fn a_silent_server_does_not_block_the_check_of_the_others() {
    // One server answers (and is too small), one never does: the answer still refuses.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let m = Memcached::start();
    let mut cfg = config(
        vec![silent.local_addr().unwrap().to_string(), m.addr()],
        "big",
        RemoteKey::random(),
    );
    cfg.block_size = MIB;
    cfg.timeout = Duration::from_millis(200);
    let e = RemoteTier::connect(cfg).unwrap_err();
    assert!(e.to_string().contains(&m.addr()), "{e}");
}
