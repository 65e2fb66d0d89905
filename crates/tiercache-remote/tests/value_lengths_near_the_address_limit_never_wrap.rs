//! Bug: with a value bound near `usize::MAX` (a `ServerClient` told to take any value), a `VA` length near it wrapped `used + len + 2` — the reply parser panicked slicing (`slice index starts at 25 but ends at 23`) — and the client's buffer limit `max_value + MAX_LINE + 4` wrapped to a few KiB, refusing every value longer than its first read buffer.
#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Duration;
use tiercache_remote::proto::parse_reply;
use tiercache_remote::ServerClient;

#[test]
fn a_value_length_that_would_wrap_is_an_error_not_a_panic() {
    for max in [usize::MAX, usize::MAX - 1] {
        for len in [usize::MAX, usize::MAX - 1, usize::MAX - 2] {
            let mut buf = format!("VA {len}\r\n").into_bytes();
            buf.extend_from_slice(b"abc\r\n");
            let r = std::panic::catch_unwind(|| parse_reply(&buf, max));
            assert!(matches!(r, Ok(Err(_))), "VA {len} under bound {max}: {r:?}");
        }
    }
}

#[test]
fn a_client_without_a_value_bound_reads_a_long_value() {
    let data: Vec<u8> = (0..40_000u32).map(|i| (i * 7) as u8).collect();
    let mut reply = format!("VA {}\r\n", data.len()).into_bytes();
    reply.extend_from_slice(&data);
    reply.extend_from_slice(b"\r\n");
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut buf = [0u8; 256];
        let _ = s.read(&mut buf);
        s.write_all(&reply).unwrap();
        while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
    });
    let c = ServerClient::new(
        addr.clone(),
        addr.parse().unwrap(),
        Duration::from_secs(2),
        usize::MAX,
    );
    assert_eq!(c.get("k").unwrap(), Some(data));
}
