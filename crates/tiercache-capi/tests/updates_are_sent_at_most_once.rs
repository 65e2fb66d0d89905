//! Regression (issue 17, review item 8): `tc_block_release` of an update committed it again
//! after `tc_block_commit` (and the update's drop tried a third time): after a failed commit
//! the same bytes were sent again later — bytes that may already have reached the file, and
//! that could undo another writer's bytes written meanwhile — and the failure was reported
//! twice. Now each changed byte is sent at most once; `tc_block_release` commits only what
//! changed since the last commit (everything when never committed, as `tiercache.h` promises),
//! and `tc_block_discard` sends nothing. Against a scripted zero-copy service that counts the
//! `Write` requests and fails the ones it is told to.
#![allow(clippy::unwrap_used)]

use std::ffi::CString;
use std::os::fd::AsRawFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use tiercache_capi::*;
use tiercache_client::wire::{self, Request, Response};
use tiercache_memtier::shm::{ClientId, Region};

const BS: usize = 4096;

/// One `Write` the service saw: its offset, runs and bytes.
type Written = (u64, Vec<[u32; 2]>, Vec<u8>);

/// What the service saw and is told to do.
#[derive(Default)]
struct Script {
    writes: Mutex<Vec<Written>>,
    /// `Write`s still to refuse.
    fail: AtomicUsize,
}

/// Serves one client as the daemon would, for a file that stays empty (writes are only
/// recorded): every block is past EOF, a copy of it zeros.
fn serve(listener: UnixListener, script: Arc<Script>) {
    let (sock, _) = listener.accept().unwrap();
    let region = Region::create(16, BS, 7).unwrap();
    let pins = region.add_client(ClientId(0)).unwrap();
    let size = 0;
    while let Ok((req, _fds)) = wire::recv::<Request>(&sock) {
        let resp = match req {
            Request::Hello { .. } => {
                let welcome = Response::Welcome {
                    version: wire::VERSION,
                    client: 0,
                    epoch: 7,
                    block_size: BS as u32,
                };
                let fds = [region.file().as_raw_fd(), pins.as_raw_fd()];
                wire::send(&sock, &welcome, &fds).unwrap();
                continue;
            }
            Request::Open => Response::Opened {
                handle: 1,
                file: 42,
                size,
            },
            Request::Pin { count, .. } => Response::Pinned {
                slots: vec![None; count as usize],
                size,
            },
            Request::Write { offset, runs, .. } => {
                let bytes = wire::recv_payload(&sock).unwrap();
                script.writes.lock().unwrap().push((offset, runs, bytes));
                let refuse = script
                    .fail
                    .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
                    .is_ok();
                if refuse {
                    Response::Error {
                        message: "refused by the script".into(),
                        errno: libc::EIO,
                    }
                } else {
                    Response::Written { size }
                }
            }
            Request::Sync { .. } => Response::Synced { size },
            Request::Close { .. } => Response::Closed,
        };
        wire::send(&sock, &resp, &[]).unwrap();
    }
}

/// A scripted service for a "mount point" (a directory) and a file in it to open.
struct Fixture {
    dir: tempfile::TempDir,
    script: Arc<Script>,
    server: Option<std::thread::JoinHandle<()>>,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), b"").unwrap();
        let name = wire::socket_name(dir.path());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let listener = UnixListener::bind_addr(&addr).unwrap();
        let script = Arc::new(Script::default());
        let s = Arc::clone(&script);
        let server = Some(std::thread::spawn(move || serve(listener, s)));
        Self {
            dir,
            script,
            server,
        }
    }

    fn writes(&self) -> Vec<Written> {
        self.script.writes.lock().unwrap().clone()
    }

    fn c(&self, p: &Path) -> CString {
        CString::new(p.to_str().unwrap()).unwrap()
    }

    /// Connects, opens `f` read-write, runs `body`, closes and disconnects.
    fn with_file(&self, body: impl FnOnce(*const TcFile)) {
        let mount = self.c(self.dir.path());
        let path = self.c(&self.dir.path().join("f"));
        // SAFETY: NUL-terminated strings; the handles are used as the header says and freed.
        unsafe {
            let c = tc_connect(mount.as_ptr());
            assert!(!c.is_null(), "connect");
            let f = tc_open(c, path.as_ptr(), 1);
            assert!(!f.is_null(), "open");
            body(f);
            tc_close(f);
            tc_disconnect(c);
        }
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if let Some(h) = self.server.take() {
            h.join().unwrap();
        }
    }
}

/// An update of block `block` of `f` with `bytes` stored at `at`.
///
/// # Safety
/// `f` is a live file handle.
unsafe fn update(f: *const TcFile, block: u64, at: usize, bytes: &[u8]) -> *mut TcBlock {
    // SAFETY: forwarded; the copy is `BS` bytes of private memory.
    unsafe {
        let b = tc_write_block(f, block);
        assert!(!b.is_null(), "write_block");
        change(b, at, bytes);
        b
    }
}

/// # Safety
/// `b` is a live update handle.
unsafe fn change(b: *mut TcBlock, at: usize, bytes: &[u8]) {
    // SAFETY: the private copy is BS bytes; `at + len` stays inside (the tests' values).
    unsafe {
        let p = tc_block_data_mut(b);
        assert!(!p.is_null() && at + bytes.len() <= BS);
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), p.add(at), bytes.len());
    }
}

#[test]
fn a_failed_commit_is_not_sent_again_by_release_nor_reported_twice() {
    let fx = Fixture::new();
    fx.with_file(|f| {
        // SAFETY: `f` is live for the closure; each block handle is used once, then freed.
        unsafe {
            let b = update(f, 0, 10, b"abc");
            fx.script.fail.store(1, SeqCst);
            assert_eq!(tc_block_commit(b), -1, "the scripted failure");
            assert_eq!(
                tc_block_release(b),
                0,
                "release sent the failed bytes again"
            );
            assert!(
                tc_sync(f, 0, 0, 0) >= 0,
                "the failure was reported again by tc_sync"
            );
        }
    });
    let w = fx.writes();
    assert_eq!(w.len(), 1, "{w:?}");
}

#[test]
fn release_without_a_commit_commits_once_even_when_it_fails() {
    let fx = Fixture::new();
    fx.with_file(|f| {
        // SAFETY: `f` is live for the closure; each block handle is used once, then freed.
        unsafe {
            let b = update(f, 1, 0, b"xyz");
            fx.script.fail.store(1, SeqCst);
            assert_eq!(tc_block_release(b), -1, "the scripted failure, reported");
            assert!(
                tc_sync(f, 0, 0, 0) >= 0,
                "the failure was reported again by tc_sync"
            );
            // Succeeding: the header's promise, release commits.
            let b = update(f, 2, 5, b"ok");
            assert_eq!(tc_block_release(b), 0);
        }
    });
    let w = fx.writes();
    assert_eq!(w.len(), 2, "{w:?}");
    assert_eq!(w[0], (BS as u64, vec![[0, 3]], b"xyz".to_vec()));
    assert_eq!(w[1], (2 * BS as u64, vec![[5, 2]], b"ok".to_vec()));
}

#[test]
fn release_after_a_commit_sends_only_what_changed_since() {
    let fx = Fixture::new();
    fx.with_file(|f| {
        // SAFETY: `f` is live for the closure; each block handle is used once, then freed.
        unsafe {
            let b = update(f, 0, 0, b"first");
            assert_eq!(tc_block_commit(b), 0);
            assert_eq!(tc_block_release(b), 0);
            let b = update(f, 0, 100, b"second");
            assert_eq!(tc_block_commit(b), 0);
            change(b, 200, b"third");
            assert_eq!(tc_block_release(b), 0);
        }
    });
    let w = fx.writes();
    assert_eq!(
        w,
        vec![
            (0, vec![[0, 5]], b"first".to_vec()),
            (0, vec![[100, 6]], b"second".to_vec()),
            (0, vec![[200, 5]], b"third".to_vec()),
        ]
    );
}

#[test]
fn discard_sends_nothing() {
    let fx = Fixture::new();
    fx.with_file(|f| {
        // SAFETY: `f` is live for the closure; each block handle is used once, then freed.
        unsafe {
            let b = update(f, 0, 0, b"kept");
            assert_eq!(tc_block_commit(b), 0);
            change(b, 50, b"dropped");
            tc_block_discard(b);
            tc_block_discard(std::ptr::null_mut());
        }
    });
    assert_eq!(fx.writes(), vec![(0, vec![[0, 4]], b"kept".to_vec())]);
}

#[test]
fn the_rust_api_drops_a_failed_update_without_sending_it_again() {
    let fx = Fixture::new();
    let c = tiercache_client::Client::connect(fx.dir.path()).unwrap();
    let f = c.open_rw(fx.dir.path().join("f")).unwrap();
    let mut b = f.write_block(0).unwrap();
    b[..4].copy_from_slice(b"once");
    fx.script.fail.store(1, SeqCst);
    assert!(b.commit().is_err());
    assert!(b.commit().is_ok(), "nothing left to send");
    drop(b);
    f.sync(0, 0, false).unwrap();
    let mut b = f.write_block(0).unwrap();
    b[8..12].copy_from_slice(b"drop");
    b.discard();
    let mut b = f.write_block(0).unwrap();
    b[16..20].copy_from_slice(b"sent");
    drop(b);
    drop(f);
    drop(c);
    assert_eq!(
        fx.writes(),
        vec![
            (0, vec![[0, 4]], b"once".to_vec()),
            (0, vec![[16, 4]], b"sent".to_vec()),
        ]
    );
}
