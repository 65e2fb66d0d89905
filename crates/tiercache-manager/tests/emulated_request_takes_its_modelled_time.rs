#![allow(clippy::unwrap_used)]
//! Bug: the device model slept its full modelled time *after* the real I/O, so a request took
//! the model's time plus the real device's, and the same model charged more whenever BACKING's
//! pages were not in the host's page cache. A request must take its modelled time in all.
//!
//! Not a timing test: the inner device below sleeps a fixed time, so what the model still has
//! to sleep is decided by the order of the two durations, not by how fast this machine is.

mod common;

use common::*;
use std::fs::File;
use std::io;
use std::sync::Arc;
use std::time::Duration;
use tiercache_manager::{BackingIo, DeviceModel, EmulatedBacking, FileId, RealBacking};

/// A real device that takes at least `delay` for every read.
#[derive(Debug)]
struct Slow {
    delay: Duration,
}

impl BackingIo for Slow {
    fn read_at(&self, file: FileId, fd: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        std::thread::sleep(self.delay);
        RealBacking.read_at(file, fd, buf, offset)
    }
    fn write_at(&self, file: FileId, fd: &File, buf: &[u8], offset: u64) -> io::Result<()> {
        RealBacking.write_at(file, fd, buf, offset)
    }
    fn sync(&self, file: FileId, fd: &File, datasync: bool) -> io::Result<()> {
        RealBacking.sync(file, fd, datasync)
    }
    fn set_len(&self, file: FileId, fd: &File, len: u64) -> io::Result<()> {
        RealBacking.set_len(file, fd, len)
    }
}

fn model(seek_ms: u64) -> DeviceModel {
    DeviceModel {
        name: "test".into(),
        seek: Duration::from_millis(seek_ms),
        rotation: Duration::ZERO,
        bandwidth: 0,
    }
}

#[test]
fn a_device_slower_than_the_model_adds_no_modelled_sleep() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_file(dir.path(), "f", &pattern(0, 1 << 16, 0));
    let fd = file_handle(&path);
    let slow = Arc::new(Slow {
        delay: Duration::from_millis(30),
    });
    let dev = EmulatedBacking::new(slow, model(10));
    let mut buf = vec![0u8; 4096];
    for i in 0..3u64 {
        // Stride 2 blocks: every request seeks (10 ms modelled), the device takes ≥ 30 ms.
        dev.read_at(FileId(1), &fd, &mut buf, i * 8192).unwrap();
    }
    let s = dev.stats();
    assert_eq!((s.requests, s.seeks), (3, 3));
    assert!(
        (s.modelled_secs - 0.030).abs() < 1e-9,
        "{}",
        s.modelled_secs
    );
    assert_eq!(
        s.slept_secs, 0.0,
        "the model slept on top of a device already slower than it"
    );
}

#[test]
fn a_device_faster_than_the_model_is_topped_up_to_the_modelled_time() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_file(dir.path(), "f", &pattern(0, 1 << 16, 0));
    let fd = file_handle(&path);
    let dev = EmulatedBacking::new(Arc::new(RealBacking), model(20));
    let mut buf = vec![0u8; 4096];
    let t0 = std::time::Instant::now();
    dev.read_at(FileId(1), &fd, &mut buf, 0).unwrap();
    assert!(
        t0.elapsed() >= Duration::from_millis(20),
        "shorter than modelled"
    );
    let s = dev.stats();
    assert!(
        s.slept_secs > 0.0 && s.slept_secs <= s.modelled_secs,
        "slept {} of {} modelled",
        s.slept_secs,
        s.modelled_secs
    );
}
