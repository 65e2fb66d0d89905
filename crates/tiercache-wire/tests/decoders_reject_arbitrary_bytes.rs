//! The zero-copy wire protocol's readers (`wire::recv`, `wire::recv_payload`: what the daemon
//! reads from any client that connects, and a client from the daemon) fed arbitrary bytes,
//! damaged frames and hostile length fields: no panic, no allocation sized by a length field
//! past the frame limit, an error for what is not a frame — and every message round trips.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use std::io::Write;
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use tiercache_wire::{self as wire, Request, Response, MAX_FRAME};

#[path = "../../tiercache-fuse/tests/common/largest_alloc.rs"]
mod largest_alloc;
use largest_alloc::largest_alloc;

/// A frame body is at most [`MAX_FRAME`] bytes; decoding one may take a few times that (a
/// JSON list grows by doubling), never what a length field asks beyond it.
const ALLOC_BOUND: usize = 4 * MAX_FRAME;

/// The reading end of a socket whose peer wrote `bytes` and hung up (written from a thread:
/// more than the socket buffer may be sent).
fn peer_sent(bytes: Vec<u8>) -> UnixStream {
    let (a, b) = UnixStream::pair().unwrap();
    std::thread::spawn(move || {
        let _ = (&a).write_all(&bytes);
        let _ = a.shutdown(Shutdown::Write);
    });
    b
}

fn request() -> impl Strategy<Value = Request> {
    prop_oneof![
        any::<u32>().prop_map(|version| Request::Hello { version }),
        Just(Request::Open),
        any::<(u64, u64, u64)>().prop_map(|(handle, first, count)| Request::Pin {
            handle,
            first,
            count
        }),
        (
            any::<u64>(),
            any::<u64>(),
            prop::collection::vec(any::<[u32; 2]>(), 0..40)
        )
            .prop_map(|(handle, offset, runs)| Request::Write {
                handle,
                offset,
                runs
            }),
        any::<(u64, u64, u64, bool)>().prop_map(|(handle, offset, len, extend)| {
            Request::Sync {
                handle,
                offset,
                len,
                extend,
            }
        }),
        any::<u64>().prop_map(|handle| Request::Close { handle }),
    ]
}

fn response() -> impl Strategy<Value = Response> {
    prop_oneof![
        any::<(u32, u32, u64, u32)>().prop_map(|(version, client, epoch, block_size)| {
            Response::Welcome {
                version,
                client,
                epoch,
                block_size,
            }
        }),
        any::<(u64, u64, u64)>().prop_map(|(handle, file, size)| Response::Opened {
            handle,
            file,
            size
        }),
        (
            prop::collection::vec(prop::option::of(any::<u32>()), 0..40),
            any::<u64>()
        )
            .prop_map(|(slots, size)| Response::Pinned { slots, size }),
        any::<u64>().prop_map(|size| Response::Written { size }),
        any::<u64>().prop_map(|size| Response::Synced { size }),
        Just(Response::Closed),
        (".{0,40}", any::<i32>()).prop_map(|(message, errno)| Response::Error { message, errno }),
    ]
}

/// The bytes `wire::send` puts on the socket for `body`.
fn frame(body: &impl serde::Serialize) -> Vec<u8> {
    let (a, b) = UnixStream::pair().unwrap();
    wire::send(&a, body, &[]).unwrap();
    drop(a);
    let mut out = Vec::new();
    std::io::Read::read_to_end(&mut &b, &mut out).unwrap();
    out
}

/// Length fields a hostile peer may send.
fn hostile_len() -> impl Strategy<Value = u32> {
    prop_oneof![
        Just(0u32),
        Just(1),
        Just(MAX_FRAME as u32),
        Just(MAX_FRAME as u32 + 1),
        Just(u32::MAX),
        Just(u32::MAX / 2 + 1),
        any::<u32>(),
    ]
}

/// Damage to a valid frame.
#[derive(Debug, Clone)]
enum Damage {
    Flip { at: prop::sample::Index, bit: u8 },
    Cut { at: prop::sample::Index },
    Length { len: u32 },
    Append { bytes: Vec<u8> },
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        (any::<prop::sample::Index>(), 0u8..8).prop_map(|(at, bit)| Damage::Flip { at, bit }),
        any::<prop::sample::Index>().prop_map(|at| Damage::Cut { at }),
        hostile_len().prop_map(|len| Damage::Length { len }),
        prop::collection::vec(any::<u8>(), 1..16).prop_map(|bytes| Damage::Append { bytes }),
    ]
}

/// Reads frames off `sock` as the daemon's loop does (a `Write`'s payload after it) until an
/// error; returns the requests read. No read may allocate past [`ALLOC_BOUND`].
fn read_like_the_daemon(sock: &UnixStream) -> Result<Vec<Request>, TestCaseError> {
    let mut got = Vec::new();
    loop {
        let (r, largest) = largest_alloc(|| wire::recv::<Request>(sock));
        prop_assert!(largest <= ALLOC_BOUND, "one allocation of {largest} bytes");
        let Ok((req, _fds)) = r else { return Ok(got) };
        if let Request::Write { .. } = req {
            let (p, largest) = largest_alloc(|| wire::recv_payload(sock));
            prop_assert!(largest <= ALLOC_BOUND, "one allocation of {largest} bytes");
            if p.is_err() {
                return Ok(got);
            }
        }
        got.push(req);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Arbitrary bytes, and arbitrary bytes after a hostile length field.
    #[test]
    fn readers_take_arbitrary_bytes(
        bytes in prop::collection::vec(any::<u8>(), 0..4096),
        len in hostile_len(),
    ) {
        read_like_the_daemon(&peer_sent(bytes.clone()))?;
        let mut framed = len.to_le_bytes().to_vec();
        framed.extend_from_slice(&bytes);
        read_like_the_daemon(&peer_sent(framed.clone()))?;
        let (r, largest) = largest_alloc(|| wire::recv_payload(&peer_sent(framed)));
        prop_assert!(largest <= ALLOC_BOUND, "one allocation of {largest} bytes");
        if let Ok(p) = r {
            prop_assert!(len as usize <= MAX_FRAME && p.len() == len as usize);
        }
        let _ = wire::recv::<Response>(&peer_sent(bytes));
    }

    /// Every request and response reads back as sent (a write with its payload); a frame
    /// cut short is an error.
    #[test]
    fn messages_round_trip(
        reqs in prop::collection::vec(request(), 1..5),
        resp in response(),
        payload in prop::collection::vec(any::<u8>(), 0..600),
        cut in any::<prop::sample::Index>(),
    ) {
        let (a, b) = UnixStream::pair().unwrap();
        for r in &reqs {
            match r {
                Request::Write { .. } => wire::send_with_payload(&a, r, &payload).unwrap(),
                _ => wire::send(&a, r, &[]).unwrap(),
            }
        }
        wire::send(&a, &resp, &[]).unwrap();
        for r in &reqs {
            let (got, fds) = wire::recv::<Request>(&b).unwrap();
            prop_assert_eq!(&got, r);
            prop_assert!(fds.is_empty());
            if let Request::Write { .. } = r {
                prop_assert_eq!(wire::recv_payload(&b).unwrap(), payload.clone());
            }
        }
        prop_assert_eq!(wire::recv::<Response>(&b).unwrap().0, resp.clone());
        let f = frame(&resp);
        let short = f[..cut.index(f.len())].to_vec();
        prop_assert!(wire::recv::<Response>(&peer_sent(short)).is_err());
    }

    /// Valid request streams with damage (a flipped bit, a cut, a length field set to an
    /// extreme, bytes after): read until an error, with no panic and no allocation past the
    /// bound.
    #[test]
    fn damaged_request_streams_end_in_an_error(
        reqs in prop::collection::vec(request(), 1..5),
        payload in prop::collection::vec(any::<u8>(), 0..200),
        damage in damage(),
        which in any::<prop::sample::Index>(),
    ) {
        let (a, b) = UnixStream::pair().unwrap();
        for r in &reqs {
            match r {
                Request::Write { .. } => wire::send_with_payload(&a, r, &payload).unwrap(),
                _ => wire::send(&a, r, &[]).unwrap(),
            }
        }
        drop(a);
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut &b, &mut bytes).unwrap();
        match &damage {
            Damage::Flip { at, bit } => {
                let i = at.index(bytes.len());
                bytes[i] ^= 1 << bit;
            }
            Damage::Cut { at } => bytes.truncate(at.index(bytes.len())),
            Damage::Length { len } => {
                // The length field of one of the frames (a request's, or a payload's).
                let mut starts = Vec::new();
                let mut o = 0;
                while o + 4 <= bytes.len() {
                    starts.push(o);
                    let n = u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap());
                    o += 4 + n as usize;
                }
                let at = starts[which.index(starts.len())];
                bytes[at..at + 4].copy_from_slice(&len.to_le_bytes());
            }
            Damage::Append { bytes: extra } => bytes.extend_from_slice(extra),
        }
        read_like_the_daemon(&peer_sent(bytes))?;
    }
}
