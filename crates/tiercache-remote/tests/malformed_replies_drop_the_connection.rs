//! A fake server sends malformed or unexpected replies: each is an error, and the connection
//! it came on is never used again (its stream is out of sync); a good reply keeps it.
#![allow(clippy::unwrap_used)]
mod common;

use common::fake_server;
use std::net::TcpListener;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tiercache_remote::{RemoteError, ServerClient};

#[test]
fn every_bad_reply_costs_its_connection_and_good_ones_reuse_it() {
    let (addr, accepts) = fake_server(
        vec![
            b"VA 5\r\nhello\r\n",     // good: connection kept
            b"EN\r\n",                // good: kept
            b"VA 5\r\nhelloXX",       // value not ended by \r\n
            b"HD\r\n",                // unexpected for mg
            b"BOGUS\r\n",             // unknown reply
            b"SERVER_ERROR busy\r\n", // error reply
            b"VA 3\r\nabc\r\n",       // good again on a fresh connection
        ],
        |_| true,
    );
    let c = ServerClient::new(
        addr.clone(),
        addr.parse().unwrap(),
        Duration::from_millis(500),
        1024,
    );
    assert_eq!(c.get("k").unwrap(), Some(b"hello".to_vec()));
    assert_eq!(c.get("k").unwrap(), None);
    assert_eq!(
        accepts.load(Ordering::SeqCst),
        1,
        "good replies reuse the connection"
    );
    assert!(matches!(c.get("k"), Err(RemoteError::Protocol { .. })));
    assert!(matches!(c.get("k"), Err(RemoteError::Protocol { .. })));
    assert!(matches!(c.get("k"), Err(RemoteError::Protocol { .. })));
    let e = c.get("k").unwrap_err();
    assert!(matches!(e, RemoteError::Server { .. }), "{e:?}");
    assert_eq!(c.get("k").unwrap(), Some(b"abc".to_vec()));
    assert_eq!(
        accepts.load(Ordering::SeqCst),
        5,
        "one new connection after each of the four bad replies"
    );
}

#[test]
fn a_silent_server_times_out() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let c = ServerClient::new(
        addr.clone(),
        addr.parse().unwrap(),
        Duration::from_millis(50),
        1024,
    );
    let t0 = std::time::Instant::now();
    // The kernel completes the handshake (backlog) but nobody ever answers.
    let e = c.get("k").unwrap_err();
    let took = t0.elapsed();
    assert!(
        matches!(&e, RemoteError::Io { source, .. } if source.kind() == std::io::ErrorKind::TimedOut),
        "{e:?}"
    );
    assert!(took < Duration::from_millis(300), "{took:?}");
    drop(l);
}
