//! Zero-copy clients on a real `--zero-copy` mount (paper 003): a client reads what the mount
//! holds with no copy, hits without asking the daemon, sees writes made through the mount at
//! once; a uid that is not admitted is refused; a client killed while holding pins leaves
//! none behind; a daemon that stops gives connected clients an error, not a crash.
#![allow(clippy::unwrap_used)]

mod support;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering::Relaxed;
use support::{s, tc, Mount};
use tiercache_client::{BlockRef, Client, Error};

/// A pinned block's bytes, copied out (the safe way to look at them).
fn bytes(b: &BlockRef) -> Vec<u8> {
    let mut v = vec![0; b.len()];
    b.copy_to(&mut v);
    v
}

fn content(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 9) as u8)
        .collect()
}

#[test]
fn a_client_reads_in_place_hits_without_the_daemon_and_sees_mount_writes() {
    let m = Mount::new(&["--zero-copy", "--memory", "8M"]);
    let data = content(300_000, 1);
    std::fs::write(m.mnt.join("f"), &data).unwrap();
    let c = Client::connect(&m.mnt).unwrap();
    let f = c.open(m.mnt.join("f")).unwrap();
    assert_eq!(f.size(), data.len() as u64);
    let bs = c.block_size();
    let n = data.len().div_ceil(bs) as u64;
    // The whole file, block by block, in place.
    let blocks = f.read_blocks(0, n).unwrap();
    assert_eq!(blocks.len() as u64, n);
    for (i, b) in blocks.iter().enumerate() {
        let want = &data[i * bs..((i + 1) * bs).min(data.len())];
        let b = bytes(b);
        assert_eq!(&b[..want.len()], want, "block {i}");
        assert!(b[want.len()..].iter().all(|&x| x == 0), "past EOF: zeros");
    }
    drop(blocks);
    // Everything is cached now: a second pass is all hits, no request to the daemon.
    let misses = c.stats.misses.load(Relaxed);
    let v = f.read_bytes(1000, 200_000).unwrap();
    let mut got = vec![0u8; v.len()];
    v.copy_to(&mut got);
    assert_eq!(got, &data[1000..201_000]);
    assert_eq!(v.get(0), Some(data[1000]));
    assert_eq!(
        c.stats.misses.load(Relaxed),
        misses,
        "a cached range asked the daemon"
    );
    assert!(c.stats.hits.load(Relaxed) >= 49);
    drop(v);
    // A write through the mount lands in the same slot: the pinned view sees it at once.
    let pinned = f.read_blocks(1, 1).unwrap();
    let mut w = std::fs::OpenOptions::new()
        .write(true)
        .open(m.mnt.join("f"))
        .unwrap();
    std::io::Seek::seek(&mut w, std::io::SeekFrom::Start(bs as u64 + 10)).unwrap();
    w.write_all(b"written through FUSE").unwrap();
    drop(w);
    assert_eq!(&bytes(&pinned[0])[10..30], b"written through FUSE");
    let st = m.stats();
    assert_eq!(st["zerocopy"]["enabled"], true);
    assert_eq!(st["zerocopy"]["clients"], 1);
    assert!(st["zerocopy"]["pinned_slots"].as_u64().unwrap() >= 1);
    let (hits, misses) = (
        st["zerocopy"]["hits"].as_u64().unwrap(),
        st["zerocopy"]["misses"].as_u64().unwrap(),
    );
    assert!(
        hits >= 49 && hits + misses >= n + 49,
        "{hits} hits, {misses} misses"
    );
    drop(pinned);
    drop(f);
    drop(c);
    // The daemon notices the client is gone and its pins with it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while m.stats()["zerocopy"]["clients"] != 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let z = &m.stats()["zerocopy"];
    assert_eq!(
        (z["clients"].as_u64(), z["pinned_slots"].as_u64()),
        (Some(0), Some(0))
    );
}

#[test]
fn a_uid_that_is_not_admitted_is_refused_and_maps_nothing() {
    let m = Mount::new(&["--zero-copy"]);
    std::fs::write(m.mnt.join("f"), b"secret").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tiercache"))
        .args(["zerocopy", "read", s(&m.mnt), s(&m.mnt.join("f"))])
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(out.stdout.is_empty(), "bytes leaked to a refused uid");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("uid 65534 may not map"), "{err}");
    assert_eq!(m.stats()["zerocopy"]["refused"], 1);
    // The same uid in --zero-copy-group is admitted (the file itself is readable to all).
    drop(m);
    let m = Mount::new(&["--zero-copy", "--zero-copy-group", "4242", "--allow-other"]);
    std::fs::write(m.mnt.join("f"), b"shared").unwrap();
    // The test's directory is private (0700): open it so that uid 65534 may reach the file.
    use std::os::unix::fs::PermissionsExt;
    let top = m.mnt.parent().unwrap();
    std::fs::set_permissions(top, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tiercache"))
        .args(["zerocopy", "read", s(&m.mnt), s(&m.mnt.join("f"))])
        .uid(65534)
        .gid(4242)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, b"shared");
}

#[test]
fn a_client_killed_while_holding_pins_leaves_none() {
    let m = Mount::new(&["--zero-copy"]);
    std::fs::write(m.mnt.join("f"), content(100_000, 7)).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tiercache"))
        .args(["zerocopy", "read", "--hold", s(&m.mnt), s(&m.mnt.join("f"))])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("pinned "), "{line}");
    let held: u64 = line["pinned ".len()..].trim().parse().unwrap();
    assert!(held >= 24, "{line}");
    assert!(m.stats()["zerocopy"]["pinned_slots"].as_u64().unwrap() >= held);
    child.kill().unwrap();
    child.wait().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while m.stats()["zerocopy"]["pinned_slots"] != 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(m.stats()["zerocopy"]["pinned_slots"], 0);
    assert_eq!(m.stats()["zerocopy"]["clients"], 0);
}

#[test]
fn clients_of_a_daemon_that_stops_get_an_error_not_a_crash() {
    let m = Mount::new(&["--zero-copy"]);
    std::fs::write(m.mnt.join("f"), content(50_000, 3)).unwrap();
    let c = Client::connect(&m.mnt).unwrap();
    let f = c.open(m.mnt.join("f")).unwrap();
    assert_eq!(f.read_blocks(0, 2).unwrap().len(), 2);
    let w = c.open_rw(m.mnt.join("f")).unwrap();
    let mut update = w.write_block(1).unwrap();
    update[0] = update[0].wrapping_add(1);
    let out = tc(&["unmount", s(&m.mnt)]);
    assert!(out.status.success(), "{out:?}");
    match f.read_blocks(0, 2) {
        Err(Error::Gone(_)) => {}
        other => panic!("expected Gone, got {other:?}"),
    }
    // An update dropped uncommitted whose commit fails is reported by the next sync, once.
    drop(update);
    match w.sync(0, 0, false) {
        Err(Error::Refused { message, .. }) => {
            assert!(
                message.contains("earlier update was not written"),
                "{message}"
            )
        }
        other => panic!("expected the dropped update's error, got {other:?}"),
    }
    assert!(matches!(w.sync(0, 0, false), Err(Error::Gone(_))));
    drop(w);
    // Connecting again says there is no service.
    match Client::connect(&m.mnt) {
        Err(Error::NoService { .. }) => {}
        other => panic!("expected NoService, got {other:?}"),
    }
    // A restarted daemon serves new clients; the old one keeps failing cleanly.
    let out = tc(&["mount", s(&m.backing), s(&m.mnt), "--zero-copy"]);
    assert!(out.status.success(), "{out:?}");
    let c2 = Client::connect(&m.mnt).unwrap();
    let f2 = c2.open(m.mnt.join("f")).unwrap();
    let b = f2.read_blocks(0, 1).unwrap();
    assert_eq!(&bytes(&b[0])[..4096], &content(50_000, 3)[..4096]);
    assert!(matches!(f.read_blocks(0, 1), Err(Error::Gone(_))));
}

#[test]
fn concurrent_clients_writers_and_evictions_never_show_another_blocks_bytes() {
    // 1 MiB of memory (256 blocks) under 512 blocks read at random by two client processes'
    // worth of connections while a writer rewrites block payloads through the mount.
    let m = Mount::new(&["--zero-copy", "--memory", "1M"]);
    const BLOCKS: usize = 512;
    let block = |b: usize, v: u32| -> Vec<u8> {
        let mut x = vec![(v % 251) as u8; 4096];
        x[..8].copy_from_slice(&(b as u64).to_le_bytes());
        x[8..12].copy_from_slice(&v.to_le_bytes());
        x
    };
    let all: Vec<u8> = (0..BLOCKS).flat_map(|b| block(b, 0)).collect();
    std::fs::write(m.mnt.join("f"), &all).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (path, stop) = (m.mnt.join("f"), stop.clone());
        std::thread::spawn(move || {
            use std::os::unix::fs::FileExt;
            let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
            let mut v = 1u32;
            while !stop.load(Relaxed) {
                let b = (v as usize * 7919) % BLOCKS;
                f.write_all_at(&block(b, v), (b * 4096) as u64).unwrap();
                v += 1;
            }
            v
        })
    };
    let readers: Vec<_> = (0..2)
        .map(|t| {
            let mnt = m.mnt.clone();
            std::thread::spawn(move || {
                let c = Client::connect(&mnt).unwrap();
                let f = c.open(mnt.join("f")).unwrap();
                let mut x = 12345u64 + t;
                for _ in 0..3000 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let first = x % (BLOCKS as u64 - 3);
                    let blocks = match f.read_blocks(first, 4) {
                        Ok(b) => b,
                        // Every slot pinned or busy for a moment: a real outcome, not an error.
                        Err(Error::Refused { errno, .. }) if errno == libc::EAGAIN => continue,
                        Err(e) => panic!("{e}"),
                    };
                    for (i, b) in blocks.iter().enumerate() {
                        let id = b.words().next().unwrap();
                        assert_eq!(id, first + i as u64, "another block's bytes");
                    }
                }
                (c.stats.hits.load(Relaxed), c.stats.misses.load(Relaxed))
            })
        })
        .collect();
    let counts: Vec<_> = readers.into_iter().map(|r| r.join().unwrap()).collect();
    stop.store(true, Relaxed);
    let versions = writer.join().unwrap();
    assert!(versions > 10, "the writer hardly ran ({versions})");
    let (hits, misses): (u64, u64) = counts.iter().fold((0, 0), |a, c| (a.0 + c.0, a.1 + c.1));
    assert!(hits > 0 && misses > 0, "{hits} hits, {misses} misses");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while m.stats()["zerocopy"]["clients"] != 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let z = &m.stats()["zerocopy"];
    assert_eq!(
        (z["pinned_slots"].as_u64(), z["held_slots"].as_u64()),
        (Some(0), Some(0))
    );
    // Whatever the races, the file is whole: every block is its own.
    let now = std::fs::read(m.mnt.join("f")).unwrap();
    for b in 0..BLOCKS {
        let id = u64::from_le_bytes(now[b * 4096..b * 4096 + 8].try_into().unwrap());
        assert_eq!(id, b as u64);
    }
}

#[test]
fn updates_are_committed_as_writes_seen_on_the_mount_and_sync_makes_them_durable() {
    let m = Mount::new(&["--zero-copy"]);
    let data = content(10_000, 9);
    std::fs::write(m.mnt.join("f"), &data).unwrap();
    std::fs::File::open(m.mnt.join("f"))
        .unwrap()
        .sync_all()
        .unwrap();
    let c = Client::connect(&m.mnt).unwrap();
    let f = c.open_rw(m.mnt.join("f")).unwrap();
    let bs = c.block_size();
    {
        let mut b = f.write_block(1).unwrap();
        assert_eq!(&b[..], &data[bs..2 * bs], "the copy starts as the block");
        b[5..16].copy_from_slice(b"an update!!");
        // Not the file's before the commit (a private copy).
        assert_eq!(
            &std::fs::read(m.mnt.join("f")).unwrap()[bs..2 * bs],
            &data[bs..2 * bs]
        );
        b.commit().unwrap();
    }
    // Readers on the mount see it from the commit on.
    let on_mount = std::fs::read(m.mnt.join("f")).unwrap();
    assert_eq!(&on_mount[bs + 5..bs + 16], b"an update!!");
    assert_eq!(&on_mount[..bs + 5], &data[..bs + 5]);
    // Past EOF, in the last block: the commit (at drop) extends the file as a write would.
    let last = (data.len() / bs) as u64;
    let tail = data.len() % bs;
    {
        let mut b = f.write_block(last).unwrap();
        b[tail..tail + 6].copy_from_slice(b"+more!");
    }
    assert_eq!(f.size(), data.len() as u64 + 6);
    let size = f.sync(data.len() as u64, 6, true).unwrap();
    assert_eq!(size, data.len() as u64 + 6);
    let mut want = data.clone();
    want[bs + 5..bs + 16].copy_from_slice(b"an update!!");
    want.extend_from_slice(b"+more!");
    assert_eq!(
        std::fs::read(m.backing.join("f")).unwrap(),
        want,
        "BACKING after sync"
    );
    assert_eq!(m.stats()["memory"]["dirty_blocks"], 0);
    // A whole block past EOF starts as zeros; sync with extend grows the file past it.
    let b1 = size.div_ceil(bs as u64) + 1;
    {
        let mut x = f.write_block(b1).unwrap();
        assert!(
            x.iter().all(|&v| v == 0),
            "a block past EOF starts as zeros"
        );
        x[..4].copy_from_slice(b"blk1");
    }
    let new_size = (b1 + 2) * bs as u64;
    assert_eq!(f.sync(0, new_size, true).unwrap(), new_size);
    want.resize(new_size as usize, 0);
    want[(b1 as usize) * bs..(b1 as usize) * bs + 4].copy_from_slice(b"blk1");
    assert_eq!(
        std::fs::read(m.backing.join("f")).unwrap(),
        want,
        "BACKING after extend"
    );
    assert_eq!(
        std::fs::read(m.mnt.join("f")).unwrap(),
        want,
        "the mount after extend"
    );
    // A read-only open may not update.
    let ro = c.open(m.mnt.join("f")).unwrap();
    let refused = matches!(
        ro.write_block(0),
        Err(Error::Refused { errno, .. }) if errno == libc::EBADF
    );
    assert!(refused, "a read-only file gave an update");
}

/// Two clients update different bytes of one block from copies made before either commit:
/// each commit writes only the bytes its client changed, so neither undoes the other.
#[test]
fn concurrent_updates_of_one_block_keep_every_clients_bytes() {
    let m = Mount::new(&["--zero-copy"]);
    std::fs::write(m.mnt.join("f"), vec![b'.'; 4096]).unwrap();
    let (c1, c2) = (
        Client::connect(&m.mnt).unwrap(),
        Client::connect(&m.mnt).unwrap(),
    );
    let (f1, f2) = (
        c1.open_rw(m.mnt.join("f")).unwrap(),
        c2.open_rw(m.mnt.join("f")).unwrap(),
    );
    let mut a = f1.write_block(0).unwrap();
    let mut b = f2.write_block(0).unwrap();
    a[10..13].copy_from_slice(b"one");
    b[20..23].copy_from_slice(b"two");
    a.commit().unwrap();
    b.commit().unwrap();
    a[30] = b'!';
    drop(a);
    drop(b);
    let got = std::fs::read(m.mnt.join("f")).unwrap();
    assert_eq!(&got[10..13], b"one");
    assert_eq!(&got[20..23], b"two");
    assert_eq!(got[30], b'!');
    assert_eq!(got.iter().filter(|&&x| x == b'.').count(), 4096 - 7);
    f1.sync(0, 0, false).unwrap();
    assert_eq!(std::fs::read(m.backing.join("f")).unwrap(), got);
}

/// Review: the daemon registered any descriptor, so an `O_PATH` one (which needs no read
/// permission) or an `O_WRONLY` one let a client read a file it may not read.
#[test]
fn descriptors_that_prove_no_read_right_are_refused() {
    use std::os::fd::AsRawFd;
    use tiercache_client::wire::{self, Request, Response};
    let m = Mount::new(&["--zero-copy"]);
    std::fs::write(m.mnt.join("f"), b"private").unwrap();
    let sock = wire::connect_abstract(&wire::socket_name(&m.mnt)).unwrap();
    wire::send(
        &sock,
        &Request::Hello {
            version: wire::VERSION,
        },
        &[],
    )
    .unwrap();
    let (r, _region) = wire::recv::<Response>(&sock).unwrap();
    assert!(matches!(r, Response::Welcome { .. }), "{r:?}");
    let path = std::ffi::CString::new(s(&m.mnt.join("f"))).unwrap();
    for (flags, what) in [(libc::O_PATH, "O_PATH"), (libc::O_WRONLY, "for reading")] {
        // SAFETY: a NUL-terminated path; the descriptor is closed below.
        let fd = unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC) };
        assert!(fd >= 0);
        wire::send(&sock, &Request::Open, &[fd]).unwrap();
        // SAFETY: ours, sent already.
        unsafe { libc::close(fd) };
        let (r, _) = wire::recv::<Response>(&sock).unwrap();
        match r {
            Response::Error { message, errno } => {
                assert!(message.contains(what), "{message}");
                assert_eq!(errno, libc::EACCES, "{message}");
            }
            other => panic!("{what}: registered: {other:?}"),
        }
    }
    // A descriptor of another file system is refused too.
    let other = std::fs::File::open("/proc/self/status").unwrap();
    wire::send(&sock, &Request::Open, &[other.as_raw_fd()]).unwrap();
    let (r, _) = wire::recv::<Response>(&sock).unwrap();
    assert!(matches!(r, Response::Error { .. }), "{r:?}");
}

#[test]
fn a_client_used_after_fork_refuses_and_leaves_the_parents_pins() {
    let m = Mount::new(&["--zero-copy"]);
    std::fs::write(m.mnt.join("f"), content(20_000, 5)).unwrap();
    let c = Client::connect(&m.mnt).unwrap();
    let f = c.open(m.mnt.join("f")).unwrap();
    let held = f.read_blocks(0, 2).unwrap();
    // SAFETY: the child only calls the client (atomics, a mutex nobody holds here), sleeps
    // and `_exit`s.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let ok = matches!(f.read_blocks(0, 1), Err(Error::Protocol(_)));
        drop(held); // must not unpin the parent's blocks
        std::thread::sleep(std::time::Duration::from_secs(3));
        // SAFETY: ends the child at once, running no destructors of the parent's state.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(c.pinned_slots(), 2);
    assert!(
        m.stats()["zerocopy"]["pinned_slots"].as_u64().unwrap() >= 2,
        "the child unpinned"
    );
    assert_eq!(&bytes(&held[0])[..100], &content(20_000, 5)[..100]);
    // The parent lets go while the child lives: the connection ends (the child's copy of the
    // socket was replaced at fork), so the daemon drops the parent's pins now.
    drop(held);
    drop(f);
    drop(c);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while m.stats()["zerocopy"]["clients"] != 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(
        m.stats()["zerocopy"]["clients"],
        0,
        "the child kept the connection alive"
    );
    let mut status = 0;
    // SAFETY: waits for the child made above.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child: {status}"
    );
}

#[test]
fn overlapping_references_hold_a_slot_until_the_last_goes() {
    let m = Mount::new(&["--zero-copy"]);
    let data = content(64 << 10, 9);
    std::fs::write(m.mnt.join("f"), &data).unwrap();
    let c = Client::connect(&m.mnt).unwrap();
    let f = c.open(m.mnt.join("f")).unwrap();
    let bs = c.block_size();
    let daemon_pins = || m.stats()["zerocopy"]["pinned_slots"].as_u64().unwrap();
    // Blocks 0..8 (read by the daemon), then 4..12: 4..8 are hits on the same slots (a second
    // reference each), 8..12 misses; then bytes over blocks 3..=6 (a third reference to 4..=6).
    let a = f.read_blocks(0, 8).unwrap();
    let b = f.read_blocks(4, 8).unwrap();
    let v = f.read_bytes(3 * bs as u64 + 10, 3 * bs).unwrap();
    for i in 0..4 {
        assert_eq!(a[4 + i].slot(), b[i].slot(), "block {} pinned twice", 4 + i);
    }
    assert_eq!((c.pinned_slots(), daemon_pins()), (12, 12));
    drop(a);
    assert_eq!(
        (c.pinned_slots(), daemon_pins()),
        (9, 9),
        "3..12 still held"
    );
    assert_eq!(bytes(&b[0]), &data[4 * bs..5 * bs]);
    drop(b);
    assert_eq!(
        (c.pinned_slots(), daemon_pins()),
        (4, 4),
        "3..=6 still held"
    );
    assert_eq!(v.to_vec(), &data[3 * bs + 10..6 * bs + 10]);
    // Threads pin and let go of the same blocks meanwhile, one lock of the counts per call:
    // none of their releases takes the pins `v` relies on.
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (f, data) = (&f, &data);
            s.spawn(move || {
                for i in 0..2000u64 {
                    let first = (i * 7 + t) % 12;
                    let blocks = f.read_blocks(first, 1 + (i + t) % 4).unwrap();
                    assert_eq!(blocks.len() as u64, 1 + (i + t) % 4);
                    assert_eq!(blocks[0].byte(0), Some(data[first as usize * bs]));
                }
            });
        }
    });
    assert_eq!((c.pinned_slots(), daemon_pins()), (4, 4));
    drop(v);
    assert_eq!((c.pinned_slots(), daemon_pins()), (0, 0));
}
