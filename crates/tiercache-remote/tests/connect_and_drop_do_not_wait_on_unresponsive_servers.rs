//! Bug: connect probed servers one after the other and Drop waited for the worker to probe
//! every due ejected server, each with the full timeout: both blocked for servers × timeout.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use std::net::TcpListener;
use std::time::{Duration, Instant};
use tiercache_remote::{RemoteKey, RemoteTier};

/// Listeners that never accept: the kernel completes the handshake, nothing ever answers.
fn black_holes(n: usize) -> (Vec<TcpListener>, Vec<String>) {
    let ls: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let addrs = ls
        .iter()
        .map(|l| l.local_addr().unwrap().to_string())
        .collect();
    (ls, addrs)
}

#[test]
fn four_unresponsive_servers_cost_about_one_timeout_to_connect_and_to_drop() {
    let timeout = Duration::from_millis(200);
    let bound = 3 * timeout; // a bound on blocking (4 × timeout would be serial), not a speed
    for capacity in [Some(100_000), None] {
        let (_ls, addrs) = black_holes(4);
        let mut cfg = config(addrs, "slow", RemoteKey::random());
        cfg.capacity_blocks = capacity;
        cfg.timeout = timeout;
        cfg.retry_after = Duration::from_millis(10);
        let t0 = Instant::now();
        let t = RemoteTier::connect(cfg).unwrap();
        let connect = t0.elapsed();
        assert!(connect < bound, "connect took {connect:?}");
        assert_eq!(t.remote_stats().servers_up, 0);
        // Let the worker start probing the ejected servers.
        std::thread::sleep(Duration::from_millis(100));
        let t1 = Instant::now();
        drop(t);
        let dropped = t1.elapsed();
        assert!(dropped < bound, "drop took {dropped:?}");
    }
}
