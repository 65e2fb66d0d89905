//! Bug (found in review): a request handler that panicked on a ring queue's thread ended that
//! thread, and every later request made on that CPU waited forever for a queue nobody served.
//!
//! Now the queue's thread catches the panic: the request fails (EIO) and the queue goes on.
#![allow(clippy::unwrap_used)]

mod common;

use std::io;
use std::os::unix::fs::FileExt;
use std::sync::mpsc;
use std::time::Duration;

use tiercache_fuse::{DataPath, FileHandleInfo, MountOptions, Transport};

/// A read at this offset panics in the data path.
const BOOM: u64 = 7 * 4096;

struct PanicsAtBoom;

impl DataPath for PanicsAtBoom {
    fn read(&self, fh: &FileHandleInfo, offset: u64, size: u32) -> io::Result<Vec<u8>> {
        assert_ne!(offset, BOOM, "the data path panics here on purpose");
        tiercache_fuse::DataPath::read(&tiercache_fuse::PassThrough, fh, offset, size)
    }
    pass_through!(write, fsync, truncate, fallocate);
}

/// Runs `f` on a thread pinned to `cpu`; fails the test if it does not return within 10 s.
fn on_cpu<T: Send + 'static>(cpu: usize, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        // SAFETY: a zeroed cpu_set_t is empty; the calls act on this thread only.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            assert_eq!(
                libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set),
                0
            );
        }
        let _ = tx.send(f());
    });
    match rx.recv_timeout(Duration::from_secs(10)) {
        Ok(v) => v,
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("a request made on CPU {cpu} hangs"),
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("the probe on CPU {cpu} failed"),
    }
}

/// The CPUs this test may run on (its cpuset may be smaller than the machine).
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is a valid buffer for sched_getaffinity of this thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        assert_eq!(
            libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set),
            0
        );
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

#[test]
fn a_panicking_handler_fails_its_request_and_the_queue_goes_on() {
    let _on = common::ring::RingSwitch::set(true);
    let mut opts = MountOptions::default();
    opts.transport = Transport::IoUring;
    // Everything on the queues' own threads: that is where the panic must be caught.
    opts.io_workers = 0;
    let m = common::TestMount::with_data(opts, std::sync::Arc::new(PanicsAtBoom));
    let t = m.handle.as_ref().unwrap().transport().stats();
    assert_eq!(t.kind, "io_uring", "{t:?}");
    let path = m.mnt.join("f");
    std::fs::write(&path, vec![5u8; 16 * 4096]).unwrap();

    for cpu in allowed_cpus() {
        // More panics than a queue has entries: none of them may be lost.
        for _ in 0..12 {
            let p = path.clone();
            let err = on_cpu(cpu, move || {
                let f = std::fs::File::open(&p).unwrap();
                f.read_at(&mut [0u8; 4096], BOOM).unwrap_err()
            });
            assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
        }
        let p = path.clone();
        let got = on_cpu(cpu, move || {
            let f = std::fs::File::open(&p).unwrap();
            let mut buf = [0u8; 4096];
            f.read_exact_at(&mut buf, 0).unwrap();
            buf
        });
        assert_eq!(got, [5u8; 4096]);
    }
    let t = m.handle.as_ref().unwrap().transport().stats();
    assert!(t.ring_requests > 0, "{t:?}");
}
