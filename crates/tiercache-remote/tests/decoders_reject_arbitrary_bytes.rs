//! What the remote tier reads from the network — memcached replies (the parser and the client
//! reading them off a socket) and the sealed values it fetched — fed arbitrary bytes, damaged
//! and cut replies, hostile lengths and altered values: no panic, no buffer sized by a length
//! field, an error or a miss (never other bytes), and valid replies parsed back exactly.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener};
use std::time::Duration;
use tiercache_core::Class;
use tiercache_remote::proto::{parse_line, parse_reply, Reply, MAX_LINE};
use tiercache_remote::{RemoteError, ServerClient};
use tiercache_tier::StoreExt as _;
use tiercache_tier::{DataTier, Lookup};

#[path = "../../tiercache-fuse/tests/common/largest_alloc.rs"]
mod largest_alloc;
use largest_alloc::largest_alloc;

/// A reply as memcached sends it (the parser's input; the crate has no reply encoder).
fn to_wire(r: &Reply) -> Vec<u8> {
    let o = |op: &Option<u32>| op.map(|v| format!(" O{v}")).unwrap_or_default();
    let line = |s: String| format!("{s}\r\n").into_bytes();
    match r {
        Reply::Value { data, opaque } => {
            let mut out = line(format!("VA {}{}", data.len(), o(opaque)));
            out.extend_from_slice(data);
            out.extend_from_slice(b"\r\n");
            out
        }
        Reply::Done { opaque } => line(format!("HD{}", o(opaque))),
        Reply::Miss { opaque } => line(format!("EN{}", o(opaque))),
        Reply::NotFound { opaque } => line(format!("NF{}", o(opaque))),
        Reply::NotStored { opaque } => line(format!("NS{}", o(opaque))),
        Reply::Exists { opaque } => line(format!("EX{}", o(opaque))),
        Reply::NoOp => line("MN".into()),
        Reply::Version(v) => line(format!("VERSION {v}")),
        Reply::ServerError(m) => line(format!("SERVER_ERROR {m}")),
        Reply::ClientError(m) => line(format!("CLIENT_ERROR {m}")),
        Reply::Error => line("ERROR".into()),
    }
}

/// Any reply a server may send (texts printable, without leading or trailing spaces).
fn reply() -> impl Strategy<Value = Reply> {
    let op = prop::option::of(any::<u32>());
    let text = "([!-~]([ -~]{0,40}[!-~])?)?";
    prop_oneof![
        (prop::collection::vec(any::<u8>(), 0..300), op.clone())
            .prop_map(|(data, opaque)| Reply::Value { data, opaque }),
        (0u8..5, op).prop_map(|(kind, opaque)| match kind {
            0 => Reply::Done { opaque },
            1 => Reply::Miss { opaque },
            2 => Reply::NotFound { opaque },
            3 => Reply::NotStored { opaque },
            _ => Reply::Exists { opaque },
        }),
        Just(Reply::NoOp),
        text.prop_map(Reply::Version),
        text.prop_map(Reply::ServerError),
        text.prop_map(Reply::ClientError),
        Just(Reply::Error),
    ]
}

/// `VA` lengths a hostile server may send.
fn hostile_len() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(usize::MAX.to_string()),
        Just((usize::MAX - 1).to_string()),
        Just((usize::MAX - 2).to_string()),
        Just((usize::MAX / 2 + 1).to_string()),
        Just("18446744073709551616".to_string()),
        Just("99999999999999999999999999".to_string()),
        Just(u32::MAX.to_string()),
        Just("0".to_string()),
        Just("-1".to_string()),
        Just("+5".to_string()),
        any::<u64>().prop_map(|v| v.to_string()),
        (0usize..400).prop_map(|v| v.to_string()),
    ]
}

/// Bounds a parse may be given: small, the tier's, and "anything".
fn max_value() -> impl Strategy<Value = usize> {
    prop_oneof![
        Just(0usize),
        Just(4096 + 48),
        Just(usize::MAX - 1),
        Just(usize::MAX),
        any::<usize>(),
    ]
}

/// Parses `buf` as a stream: every reply consumed is within the buffer, every value within
/// `max_value`; stops at the first incomplete or malformed reply.
fn parse_all(mut buf: &[u8], max_value: usize) -> Result<Vec<Reply>, String> {
    let mut out = Vec::new();
    while !buf.is_empty() {
        match parse_reply(buf, max_value).map_err(|e| e.to_string())? {
            None => break,
            Some((r, n)) => {
                assert!(n > 0 && n <= buf.len(), "took {n} of {} bytes", buf.len());
                if let Reply::Value { data, .. } = &r {
                    assert!(data.len() <= max_value);
                }
                out.push(r);
                buf = &buf[n..];
            }
        }
    }
    Ok(out)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Arbitrary bytes, and lines made of reply-like tokens.
    #[test]
    fn reply_parser_takes_arbitrary_bytes(
        bytes in prop::collection::vec(any::<u8>(), 0..3000),
        tokens in prop::collection::vec(
            prop_oneof![
                Just("VA".to_string()), Just("HD".into()), Just("MN".into()),
                Just("EN".into()), Just("VERSION".into()), Just("O".into()),
                Just("\r\n".into()), Just(" ".into()), hostile_len(), "[ -~]{0,6}",
            ],
            0..12,
        ),
        max in max_value(),
    ) {
        let _ = parse_all(&bytes, max);
        let text = tokens.concat();
        let _ = parse_all(text.as_bytes(), max);
        if let Ok(Some((line, n))) = parse_line(&bytes) {
            prop_assert_eq!(n, line.len() + 2);
            prop_assert!(line.len() <= MAX_LINE);
        }
    }

    /// A `VA` of any length, with any bound, followed by any bytes: an error, "need more",
    /// or a value of exactly that length within the bound.
    #[test]
    fn value_lengths_of_any_size_are_refused_or_honoured(
        len in hostile_len(),
        flags in "( [A-Za-z][0-9]{0,3}){0,2}",
        tail in prop::collection::vec(any::<u8>(), 0..64),
        max in max_value(),
    ) {
        let mut buf = format!("VA {len}{flags}\r\n").into_bytes();
        buf.extend_from_slice(&tail);
        buf.extend_from_slice(b"\r\n");
        if let Ok(Some((Reply::Value { data, .. }, n))) = parse_reply(&buf, max) {
            prop_assert_eq!(len.parse::<usize>().ok(), Some(data.len()));
            prop_assert!(data.len() <= max && n <= buf.len());
        }
    }

    /// Valid replies parse back exactly, one after another; every cut is "need more"; a
    /// flipped bit or a cut never panics nor yields a reply past the buffer.
    #[test]
    fn valid_replies_round_trip_and_damage_is_refused_or_partial(
        replies in prop::collection::vec(reply(), 1..6),
        cut in any::<prop::sample::Index>(),
        flip in any::<prop::sample::Index>(),
        bit in 0u8..8,
    ) {
        let wire: Vec<u8> = replies.iter().flat_map(to_wire).collect();
        prop_assert_eq!(parse_all(&wire, 1 << 20), Ok(replies.clone()));
        let first = to_wire(&replies[0]);
        prop_assert_eq!(parse_reply(&first[..cut.index(first.len())], 1 << 20), Ok(None));
        let mut bad = wire.clone();
        bad[flip.index(wire.len())] ^= 1 << bit;
        let _ = parse_all(&bad, 1 << 20);
        let _ = parse_all(&wire[..cut.index(wire.len())], 1 << 20);
    }
}

/// A one-connection server that answers the first request with `bytes` and hangs up.
fn answering(bytes: Vec<u8>) -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        let Ok((mut s, _)) = l.accept() else { return };
        let mut buf = [0u8; 4096];
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        if matches!(s.read(&mut buf), Ok(n) if n > 0) {
            let _ = s.write_all(&bytes);
        }
        let _ = s.shutdown(Shutdown::Write);
        // Drain what the client still sends, so the hang-up is an end of stream, not a reset.
        while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
    });
    addr
}

/// The client's largest buffer: a value of `max_value` with its line, or a stats reply.
const CLIENT_ALLOC_BOUND: usize = 80 << 10;

/// Whatever a server answers, every client request ends in a reply or an error in time,
/// without a panic and without a buffer beyond its bound.
#[test]
fn client_requests_survive_arbitrary_server_bytes() {
    let mut runner = TestRunner::new(Config::with_cases(48));
    let answers = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..20_000),
        (hostile_len(), prop::collection::vec(any::<u8>(), 0..20_000)).prop_map(|(len, b)| {
            let mut v = format!("VA {len}\r\n").into_bytes();
            v.extend_from_slice(&b);
            v
        }),
        prop::collection::vec(reply(), 1..4)
            .prop_map(|rs| rs.iter().flat_map(to_wire).collect::<Vec<u8>>()),
        prop::collection::vec("STAT [a-z_]{1,14} [0-9a-z]{0,24}|END|[ -~]{0,30}", 0..40).prop_map(
            |ls| ls
                .iter()
                .flat_map(|l| format!("{l}\r\n").into_bytes())
                .collect()
        ),
    ];
    runner
        .run(&(answers, 0usize..9), |(answer, op)| {
            let addr = answering(answer);
            let c = ServerClient::new(
                addr.clone(),
                addr.parse().unwrap(),
                Duration::from_millis(500),
                8192,
            );
            let t0 = std::time::Instant::now();
            let (r, largest): (Result<(), RemoteError>, usize) = largest_alloc(|| match op {
                0 => c.get("k").map(drop),
                1 => c.set("k", b"abc").map(drop),
                2 => c.delete("k").map(drop),
                3 => c.noop(),
                4 => c.version().map(drop),
                5 => c.settings().map(drop),
                6 => c.limit_maxbytes().map(drop),
                7 => c.set_batch(&[("a", &b"1"[..]), ("b", &b"2"[..])]).map(drop),
                _ => c.delete_batch(&["a", "b"]),
            });
            let _ = r;
            prop_assert!(
                largest <= CLIENT_ALLOC_BOUND,
                "one allocation of {largest} bytes"
            );
            prop_assert!(t0.elapsed() < Duration::from_secs(2));
            Ok(())
        })
        .unwrap();
}

/// How a sealed value fetched from memcached is altered.
#[derive(Debug, Clone)]
enum Alter {
    Flip {
        at: prop::sample::Index,
        bit: u8,
    },
    Cut {
        len: prop::sample::Index,
    },
    Extend {
        bytes: Vec<u8>,
    },
    Replace {
        bytes: Vec<u8>,
    },
    /// The nonce, the sequence number or the tag taken from another block's value.
    Splice {
        from: usize,
        len: usize,
    },
}

fn alter() -> impl Strategy<Value = Alter> {
    prop_oneof![
        (any::<prop::sample::Index>(), 0u8..8).prop_map(|(at, bit)| Alter::Flip { at, bit }),
        any::<prop::sample::Index>().prop_map(|len| Alter::Cut { len }),
        prop::collection::vec(any::<u8>(), 1..64).prop_map(|bytes| Alter::Extend { bytes }),
        prop::collection::vec(any::<u8>(), 0..(BS + 200))
            .prop_map(|bytes| Alter::Replace { bytes }),
        prop_oneof![Just((0, 24)), Just((24, 8)), Just((BS + 32, 16))]
            .prop_map(|(from, len)| Alter::Splice { from, len }),
    ]
}

/// A sealed value altered in any way (bit flips, cuts, extra bytes, other bytes, parts of
/// another sealing of the same block) is a miss, never other bytes and never a panic.
#[test]
fn altered_sealed_values_are_misses() {
    let m = Memcached::start();
    let t = tier(vec![m.addr()]);
    let raw = ServerClient::new(
        m.addr(),
        m.addr().parse().unwrap(),
        Duration::from_secs(1),
        1 << 20,
    );
    let mut runner = TestRunner::new(Config::with_cases(48));
    let round = std::cell::Cell::new(0u64);
    runner
        .run(&alter(), |a| {
            round.set(round.get() + 1);
            // The block, and another one sealed with the same key (parts to splice in).
            let (k, k2) = (key(1, round.get()), key(2, round.get()));
            let name = t.key_name(&k, 1);
            for k in [k, k2] {
                t.fill(&k, 1, Class::NORMAL, &block(&k, 1), &yes).unwrap();
            }
            prop_assert!(t.flush(Duration::from_secs(5)));
            let other = raw.get(&t.key_name(&k2, 1)).unwrap().expect("stored");
            let good = raw.get(&name).unwrap().expect("stored");
            let mut v = good.clone();
            match &a {
                Alter::Flip { at, bit } => {
                    let i = at.index(v.len());
                    v[i] ^= 1 << bit;
                }
                Alter::Cut { len } => v.truncate(len.index(v.len())),
                Alter::Extend { bytes } => v.extend_from_slice(bytes),
                Alter::Replace { bytes } => v = bytes.clone(),
                Alter::Splice { from, len } => {
                    v[*from..from + len].copy_from_slice(&other[*from..from + len])
                }
            }
            prop_assert!(raw.set(&name, &v).unwrap());
            let mut buf = vec![0u8; BS];
            match t.read(&k, 1, &mut buf) {
                Ok(Lookup::Hit { .. }) => {
                    prop_assert!(v == good, "an altered value was served");
                    prop_assert!(buf == block(&k, 1));
                }
                Ok(Lookup::Miss) => prop_assert!(v != good, "the unaltered value was a miss"),
                Err(e) => prop_assert!(false, "read error {e}"),
            }
            Ok(())
        })
        .unwrap();
}
