//! A server killed mid-run costs hits, never an error or a wrong byte; restarted on the same
//! port it is probed and used again.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use std::time::{Duration, Instant};
use tiercache_core::Class;
use tiercache_tier::StoreExt as _;
use tiercache_tier::{Admit, DataTier, Lookup};

#[test]
fn killing_a_server_turns_its_blocks_into_misses_and_restarting_it_brings_it_back() {
    let mut a = Memcached::start();
    let b = Memcached::start();
    let (addr_a, addr_b) = (a.addr(), b.addr());
    let t = tier(vec![addr_a.clone(), addr_b.clone()]);
    let n = 300u64;
    for i in 0..n {
        let k = key(1, i);
        assert_eq!(
            t.fill(&k, 1, Class::NORMAL, &block(&k, 1), &yes).unwrap(),
            Admit::Stored
        );
    }
    assert!(t.flush(Duration::from_secs(5)));
    let on_a = (0..n)
        .filter(|&i| t.server_of(&key(1, i)).as_deref() == Some(addr_a.as_str()))
        .count();
    assert!(
        on_a > n as usize / 4 && on_a < 3 * n as usize / 4,
        "rendezvous spreads blocks over both servers ({on_a} of {n} on A)"
    );

    a.kill();
    let mut buf = vec![0u8; BS];
    let start = Instant::now();
    let (mut hits, mut misses) = (0, 0);
    for i in 0..n {
        let k = key(1, i);
        let t0 = Instant::now();
        match t
            .read(&k, 1, &mut buf)
            .expect("a lost server is never an error")
        {
            Lookup::Hit { .. } => {
                assert!(buf == block(&k, 1), "wrong bytes for block {i}");
                hits += 1;
            }
            Lookup::Miss => misses += 1,
        }
        // A killed server refuses at once: no read waits out the (1 s) timeout.
        assert!(t0.elapsed() < Duration::from_millis(900), "read {i} waited");
    }
    eprintln!(
        "after kill: {hits} hits, {misses} misses in {:?}",
        start.elapsed()
    );
    assert_eq!(hits, n as usize - on_a, "B's blocks still hit");
    assert_eq!(misses, on_a, "A's blocks are misses");
    let s = t.remote_stats();
    assert_eq!(s.servers_up, 1, "A ejected");
    assert!(
        s.errors >= 1 && s.errors <= 2,
        "ejected after eject_after failures: {s:?}"
    );

    // New stores go to B only while A is down.
    for i in 0..50 {
        let k = key(2, i);
        t.fill(&k, 1, Class::NORMAL, &block(&k, 1), &yes).unwrap();
        assert_eq!(t.server_of(&k).as_deref(), Some(addr_b.as_str()));
    }
    assert!(t.flush(Duration::from_secs(5)));

    // Restart A on the same port: probed after retry_after and used again.
    let _a2 = Memcached::start_on(a.port);
    assert!(
        wait_until(Duration::from_secs(5), || t.remote_stats().servers_up == 2),
        "A not probed back: {:?}",
        t.remote_stats()
    );
    let mut to_a = 0;
    for i in 0..100 {
        let k = key(3, i);
        t.fill(&k, 1, Class::NORMAL, &block(&k, 1), &yes).unwrap();
        if t.server_of(&k).as_deref() == Some(addr_a.as_str()) {
            to_a += 1;
        }
    }
    assert!(to_a > 20, "A gets its share again ({to_a} of 100)");
    assert!(t.flush(Duration::from_secs(5)));
    for i in 0..100 {
        let k = key(3, i);
        assert_eq!(
            t.read(&k, 1, &mut buf).unwrap(),
            Lookup::Hit { dirty: false }
        );
        assert!(buf == block(&k, 1));
    }
    // A's old blocks are gone with the old process: misses (EN), never errors.
    for i in 0..n {
        let k = key(1, i);
        if let Lookup::Hit { .. } = t.read(&k, 1, &mut buf).unwrap() {
            assert!(buf == block(&k, 1));
        }
    }
}

#[test]
fn all_servers_down_at_connect_is_not_an_error() {
    let port = free_port();
    let t = tier(vec![format!("127.0.0.1:{port}")]);
    assert_eq!(t.remote_stats().servers_up, 0);
    let k = key(1, 0);
    assert_eq!(
        t.fill(&k, 1, Class::NORMAL, &block(&k, 1), &yes).unwrap(),
        Admit::Rejected,
        "no server up: the store is declined"
    );
    let _m = Memcached::start_on(port);
    assert!(wait_until(Duration::from_secs(5), || t
        .remote_stats()
        .servers_up
        == 1));
    assert_eq!(
        t.fill(&k, 1, Class::NORMAL, &block(&k, 1), &yes).unwrap(),
        Admit::Stored
    );
    assert!(t.flush(Duration::from_secs(5)));
    let mut buf = vec![0u8; BS];
    assert_eq!(
        t.read(&k, 1, &mut buf).unwrap(),
        Lookup::Hit { dirty: false }
    );
}

#[test]
fn a_malformed_address_is_an_error_naming_it() {
    let cfg = config(
        vec!["127.0.0.1:11211".into(), "nonsense".into()],
        "t",
        tiercache_remote::RemoteKey::random(),
    );
    let e = tiercache_remote::RemoteTier::connect(cfg).unwrap_err();
    assert!(e.to_string().contains("nonsense"), "{e}");
}

#[test]
fn a_quick_restart_between_requests_is_not_a_failure() {
    let mut a = Memcached::start();
    let t = tier(vec![a.addr()]);
    let mut buf = vec![0u8; BS];
    for i in 0..8 {
        let k = key(9, i);
        t.fill(&k, 1, Class::NORMAL, &block(&k, 1), &yes).unwrap();
    }
    assert!(t.flush(Duration::from_secs(5)));
    for i in 0..8 {
        assert_eq!(
            t.read(&key(9, i), 1, &mut buf).unwrap(),
            Lookup::Hit { dirty: false }
        );
    }
    // Restart on the same port while the tier holds idle connections to the old process.
    let port = a.port;
    a.kill();
    let _a2 = Memcached::start_on(port);
    for i in 0..8 {
        // The values went with the old process: plain misses.
        assert_eq!(t.read(&key(9, i), 1, &mut buf).unwrap(), Lookup::Miss);
    }
    let k = key(9, 100);
    t.fill(&k, 1, Class::NORMAL, &block(&k, 1), &yes).unwrap();
    assert!(t.flush(Duration::from_secs(5)));
    assert_eq!(
        t.read(&k, 1, &mut buf).unwrap(),
        Lookup::Hit { dirty: false }
    );
    let s = t.remote_stats();
    assert_eq!((s.servers_up, s.errors), (1, 0), "{s:?}");
}

#[test]
fn capacity_defaults_to_the_servers_memory() {
    let a = Memcached::start();
    let b = Memcached::start();
    let mut cfg = config(
        vec![a.addr(), b.addr()],
        "t",
        tiercache_remote::RemoteKey::random(),
    );
    cfg.capacity_blocks = None;
    let t = tiercache_remote::RemoteTier::connect(cfg).unwrap();
    let cap = t.info().capacity_blocks;
    // Two servers of 64 MiB, 4 KiB blocks plus value and item overheads.
    assert!((20_000..32_768).contains(&cap), "capacity {cap}");
    assert_eq!(t.remote_stats().capacity_blocks, cap);
}
