//! Bug: the index capacity was taken unchecked from the memory a server reports, so one
//! server claiming 2^64-1 bytes made the client-side index unbounded. It is now capped at
//! what 1/16 of the host's memory can index.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use std::io::{Read, Write};
use std::net::TcpListener;
use tiercache_remote::{RemoteKey, RemoteTier};
use tiercache_tier::DataTier;

/// Answers `stats settings` with a huge `maxbytes` and every `mn` with `MN`.
fn boastful_server() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 {
                        return;
                    }
                    let reply: &[u8] = if buf[..n].starts_with(b"stats") {
                        b"STAT pid 1\r\nSTAT maxbytes 18446744073709551615\r\n\
                          STAT item_size_max 1048576\r\nEND\r\n"
                    } else {
                        b"MN\r\n"
                    };
                    if s.write_all(reply).is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

fn mem_total_bytes() -> u64 {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap();
    let line = text.lines().find(|l| l.starts_with("MemTotal:")).unwrap();
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

#[test]
fn a_huge_reported_memory_is_capped_by_the_hosts_memory() {
    let mut cfg = config(vec![boastful_server()], "cap", RemoteKey::random());
    cfg.capacity_blocks = None;
    let t = RemoteTier::connect(cfg).unwrap();
    let cap = t.info().capacity_blocks;
    assert_eq!(t.remote_stats().servers_up, 1);
    // At least ~40 B per entry within 1/16 of RAM (MemTotal is a little below physical RAM).
    assert!(cap > 1000, "{cap}");
    assert!(
        cap.saturating_mul(40) <= mem_total_bytes() / 16 * 11 / 10,
        "capacity {cap} blocks is more than 1/16 of this host's memory can index"
    );
}

#[test]
fn an_honest_report_is_used_as_is() {
    let m = Memcached::start();
    let mut cfg = config(vec![m.addr()], "cap", RemoteKey::random());
    cfg.capacity_blocks = None;
    let t = RemoteTier::connect(cfg).unwrap();
    let cap = t.info().capacity_blocks;
    // 64 MiB of 4 KiB items (+ overheads and slab waste): a little under 16384.
    assert!((12_000..16_384).contains(&cap), "{cap}");
}
