//! Bug: with 4 idle connections kept per server, more concurrent readers (FUSE runs several
//! request threads) opened and closed a TCP connection for most reads.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;
use tiercache_core::Class;
use tiercache_tier::StoreExt as _;
use tiercache_tier::{DataTier, Lookup};

/// memcached's `total_connections` (connections ever accepted).
fn total_connections(addr: &str) -> u64 {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"stats\r\n").unwrap();
    let mut text = String::new();
    let mut buf = [0u8; 8192];
    while !text.ends_with("END\r\n") {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0);
        text.push_str(std::str::from_utf8(&buf[..n]).unwrap());
    }
    let line = text
        .lines()
        .find(|l| l.starts_with("STAT total_connections "))
        .unwrap();
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

#[test]
fn eight_reader_threads_keep_their_connections() {
    let m = Memcached::start();
    let mut cfg = config(
        vec![m.addr()],
        "pool",
        tiercache_remote::RemoteKey::random(),
    );
    cfg.timeout = Duration::from_secs(1);
    let t = tiercache_remote::RemoteTier::connect(cfg).unwrap();
    for b in 0..8 {
        let k = key(1, b);
        t.fill(&k, 1, Class::NORMAL, &block(&k, 1), &yes).unwrap();
    }
    assert!(t.flush(Duration::from_secs(5)));
    let before = total_connections(&m.addr());
    std::thread::scope(|s| {
        for b in 0..8 {
            let t = &t;
            s.spawn(move || {
                let k = key(1, b);
                let mut buf = vec![0u8; BS];
                for _ in 0..50 {
                    assert_eq!(
                        t.read(&k, 1, &mut buf).unwrap(),
                        Lookup::Hit { dirty: false }
                    );
                }
            });
        }
    });
    // Each of the 8 threads needs at most one connection of its own, plus this query's.
    let opened = total_connections(&m.addr()) - before;
    assert!(opened <= 9 + 1, "{opened} connections opened for 400 reads");
}
