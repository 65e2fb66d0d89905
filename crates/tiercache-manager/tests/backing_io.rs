#![allow(clippy::unwrap_used)]
//! The emulated device MODEL's accounting (seeks for sequential vs random patterns, computed,
//! never timed), read coalescing seen through it, and the CSV access trace.

mod common;

use common::*;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tiercache_manager::{
    BackingIo, Class, DeviceModel, EmulatedBacking, FileId, MemCache, RealBacking, TRACE_HEADER,
};

fn hdd() -> EmulatedBacking {
    EmulatedBacking::new(Arc::new(RealBacking), DeviceModel::hdd()).without_sleep()
}

#[test]
fn model_counts_seeks_for_sequential_and_random_patterns() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_file(dir.path(), "m", &pattern(0, 1 << 20, 0));
    let fd = file_handle(&path);
    let file = FileId(1);
    let mut buf = vec![0u8; 4096];

    let seq = hdd();
    for i in 0..100u64 {
        seq.read_at(file, &fd, &mut buf, i * 4096).unwrap();
    }
    let s = seq.stats();
    assert_eq!((s.requests, s.seeks, s.bytes), (100, 1, 100 * 4096));
    let want = 0.012 + (100.0 * 4096.0) / 150e6;
    assert!((s.modelled_secs - want).abs() < 1e-6, "{}", s.modelled_secs);

    let random = hdd();
    for i in 0..100u64 {
        // Stride 3 blocks backwards: never contiguous.
        let off = (99 - i) * 3 * 4096;
        random.read_at(file, &fd, &mut buf, off).unwrap();
    }
    assert_eq!(random.stats().seeks, 100);

    // A write continuing a read is contiguous; another file is not.
    let mixed = hdd();
    mixed.read_at(file, &fd, &mut buf, 0).unwrap();
    mixed.write_at(file, &fd, &buf, 4096).unwrap();
    mixed.read_at(FileId(2), &fd, &mut buf, 8192).unwrap();
    assert_eq!(mixed.stats().seeks, 2);
    assert_eq!(
        "ssd".parse::<DeviceModel>().unwrap().seek,
        Duration::from_micros(80)
    );
}

#[test]
fn sequential_reads_are_coalesced_with_read_ahead() {
    let dir = tempfile::tempdir().unwrap();
    let content = pattern(0, 256 * 512, 3);
    let path = make_file(dir.path(), "s", &content);
    let dev = Arc::new(hdd());
    let cfg = tiercache_manager::MemConfig {
        readahead_max_blocks: 32,
        ..small_config(512)
    };
    let cache = MemCache::new(cfg, dev.clone() as Arc<dyn BackingIo>).unwrap();
    let id = open(&cache, &path, Class::NORMAL);
    for i in 0..256u64 {
        assert_eq!(
            cache.read(id, i * 512, 512).unwrap(),
            pattern(i * 512, 512, 3)
        );
    }
    let s = cache.stats();
    assert!(s.backing.reads < 20, "{} backing reads", s.backing.reads);
    assert!(s.paths.readahead_blocks > 200);
    let e = s.emulation.unwrap();
    assert_eq!(e.model, "hdd");
    assert_eq!(e.seeks, 1, "one sequential stream = one seek");

    // A random pattern on a cold cache: about one seek per read.
    cache.invalidate(id);
    let before = dev.stats().seeks;
    for i in 0..50u64 {
        let b = (i * 97) % 256;
        cache.read(id, b * 512, 10).unwrap();
    }
    let seeks = dev.stats().seeks - before;
    assert!(seeks >= 40, "{seeks} seeks for 50 random reads");
}

/// A `Write` into shared memory, to look at the trace after the writer thread is done.
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl Write for Shared {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn trace_records_every_block_access_as_csv() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_file(dir.path(), "t", &pattern(0, 4096, 0));
    let cache = MemCache::with_real_device(small_config(16)).unwrap();
    let id = open(&cache, &path, Class::PRIORITY);
    let out = Shared::default();
    cache.set_trace(Some(Box::new(out.clone()))).unwrap();
    cache.read(id, 0, 1024).unwrap(); // blocks 0, 1
    cache.write(id, 1000, &[1u8; 100]).unwrap(); // block 1, 2
    cache.set_trace(None).unwrap();
    cache.read(id, 0, 10).unwrap(); // not traced
    let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], TRACE_HEADER);
    assert_eq!(TRACE_HEADER, "time,file,obj_id,op,class");
    let rows: Vec<Vec<&str>> = lines[1..].iter().map(|l| l.split(',').collect()).collect();
    let f = id.0.to_string();
    let got: Vec<(&str, &str, &str)> = rows.iter().map(|r| (r[2], r[3], r[4])).collect();
    assert_eq!(
        got,
        [
            ("0", "r", "priority"),
            ("1", "r", "priority"),
            ("1", "w", "priority"),
            ("2", "w", "priority")
        ]
    );
    assert!(rows
        .iter()
        .all(|r| r.len() == 5 && r[1] == f && r[0].parse::<u64>().is_ok()));
    assert_eq!(cache.stats().trace_dropped, 0);
}
