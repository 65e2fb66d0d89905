//! Regression: getattr reported a size older than both BACKING's and the data path's when the
//! data path wrote back between the backing `fstat` and its `size_override` answer (an appended
//! file "shrank" under a concurrent reader on the cached mount). The FUSE layer now takes size
//! and times without override from a stat made after the query.
//!
//! `LateWriteBack` holds writes in memory and writes them back exactly inside `size_override`
//! (then answering `None`, as BACKING is complete), which makes that interleaving deterministic.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use common::TestMount;
use tiercache_fuse::{DataPath, FileHandleInfo, MountOptions, PassThrough, TimesOverride};

/// Pending writes per node: the backing file and (offset, bytes) in order.
type Pending = HashMap<u64, (Arc<File>, Vec<(u64, Vec<u8>)>)>;

#[derive(Default)]
struct LateWriteBack {
    pending: Mutex<Pending>,
    /// Backing mtimes after each write-back, per node.
    written_back: Mutex<HashMap<u64, SystemTime>>,
}

impl LateWriteBack {
    fn write_back(&self, ino: u64) {
        if let Some((file, writes)) = self.pending.lock().unwrap().remove(&ino) {
            for (off, data) in writes {
                file.write_all_at(&data, off).unwrap();
            }
            let mtime = file.metadata().unwrap().modified().unwrap();
            self.written_back.lock().unwrap().insert(ino, mtime);
        }
    }
}

impl DataPath for LateWriteBack {
    fn read(&self, fh: &FileHandleInfo, offset: u64, size: u32) -> io::Result<Vec<u8>> {
        self.write_back(fh.ino);
        PassThrough.read(fh, offset, size)
    }
    fn write(&self, fh: &FileHandleInfo, offset: u64, data: &[u8]) -> io::Result<u32> {
        let mut p = self.pending.lock().unwrap();
        let e = p
            .entry(fh.ino)
            .or_insert_with(|| (Arc::clone(&fh.file), Vec::new()));
        e.1.push((offset, data.to_vec()));
        Ok(data.len() as u32)
    }
    fn fsync(&self, fh: &FileHandleInfo, datasync: bool) -> io::Result<()> {
        self.write_back(fh.ino);
        PassThrough.fsync(fh, datasync)
    }
    fn truncate(&self, ino: u64, file: &File, new_size: u64) -> io::Result<()> {
        self.write_back(ino);
        file.set_len(new_size)
    }
    fn fallocate(&self, fh: &FileHandleInfo, mode: i32, offset: u64, len: u64) -> io::Result<()> {
        self.write_back(fh.ino);
        PassThrough.fallocate(fh, mode, offset, len)
    }
    fn size_override(&self, ino: u64) -> Option<u64> {
        // The write-back "completes" right now, after the caller's fstat: BACKING has it all.
        self.write_back(ino);
        None
    }
    fn times_override(&self, _ino: u64, _backing_ctime: SystemTime) -> TimesOverride {
        TimesOverride::default()
    }
    fn release(&self, fh: &FileHandleInfo) {
        self.write_back(fh.ino);
    }
}

#[test]
fn size_and_mtime_are_not_older_than_a_write_back_during_getattr() {
    let data = Arc::new(LateWriteBack::default());
    let m = TestMount::with_data(MountOptions::default(), data.clone());
    let path = m.mnt.join("f");
    let f = File::create(&path).unwrap();
    for round in 1..=5u64 {
        f.write_all_at(&[7u8; 1000], (round - 1) * 1000).unwrap();
        // the fstat inside getattr sees BACKING before this round's write-back
        let md = f.metadata().unwrap();
        assert_eq!(md.len(), round * 1000, "round {round}: stale size");
        let ino = std::os::unix::fs::MetadataExt::ino(&md);
        let wb_mtime = data.written_back.lock().unwrap()[&ino];
        assert_eq!(
            md.modified().unwrap(),
            wb_mtime,
            "round {round}: mtime from before the write-back"
        );
    }
    drop(f);
    assert_eq!(std::fs::read(m.backing.join("f")).unwrap(), vec![7u8; 5000]);
}
