//! Every `close()` through the mount cost a FLUSH round trip to the daemon, also for readers, whose
//! close has nothing to report; now a handle whose data path says so (`OpenAdvice::no_flush`) is
//! opened with `FOPEN_NOFLUSH`, and the kernel sends none for it (Linux 5.16 or later).
#![allow(clippy::unwrap_used)]

mod common;

use std::fs::File;
use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tiercache_fuse::{DataPath, FileHandleInfo, MountOptions, OpenAdvice};

/// Pass-through that wants the closes of writable handles only, and counts the FLUSHes it
/// gets per access mode.
#[derive(Default)]
struct WritersFlush {
    reader_flushes: AtomicU64,
    writer_flushes: AtomicU64,
}

fn writable(fh: &FileHandleInfo) -> bool {
    fh.flags & libc::O_ACCMODE != libc::O_RDONLY
}

impl DataPath for WritersFlush {
    fn open(&self, fh: &FileHandleInfo) -> io::Result<OpenAdvice> {
        Ok(OpenAdvice {
            no_flush: !writable(fh),
            ..OpenAdvice::default()
        })
    }
    fn flush(&self, fh: &FileHandleInfo) -> io::Result<()> {
        let n = if writable(fh) {
            &self.writer_flushes
        } else {
            &self.reader_flushes
        };
        n.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    pass_through!(read, write, fsync, truncate, fallocate);
}

#[test]
fn only_closes_the_data_path_asks_for_reach_it() {
    let data = Arc::new(WritersFlush::default());
    let m = common::TestMount::with_data(MountOptions::default(), data.clone());
    let path = m.mnt.join("f");

    // A writer's handle, closed through two descriptors: one FLUSH per close.
    let mut w = File::create(&path).unwrap();
    w.write_all(b"some bytes").unwrap();
    let dup = w.try_clone().unwrap();
    drop(dup);
    drop(w);
    assert_eq!(data.writer_flushes.load(Ordering::SeqCst), 2);

    // Readers: opened, read, closed (also through a second descriptor) — no FLUSH at all.
    for _ in 0..20 {
        let mut r = File::open(&path).unwrap();
        let mut s = String::new();
        r.read_to_string(&mut s).unwrap();
        assert_eq!(s, "some bytes");
        drop(r.try_clone().unwrap());
    }
    assert_eq!(data.reader_flushes.load(Ordering::SeqCst), 0);

    // A read-write open of the same file still gets its FLUSH.
    drop(File::options().read(true).write(true).open(&path).unwrap());
    assert_eq!(data.writer_flushes.load(Ordering::SeqCst), 3);
    assert_eq!(data.reader_flushes.load(Ordering::SeqCst), 0);
}
