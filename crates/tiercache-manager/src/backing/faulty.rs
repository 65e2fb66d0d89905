//! [`FaultyBacking`]: a device for tests that fails (EIO) or silently drops writes after a
//! countdown, and fails reads after another countdown.
//!
//! Invariant: a countdown of `n` lets exactly `n` more requests of that kind through untouched;
//! every later one is faulted until [`FaultyBacking::heal`]. `sync` fails with EIO while writes
//! are being failed (a real disk reports the lost write at fsync too).

use super::{BackingIo, EmulationStats};
use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use tiercache_core::FileId;

const UNLIMITED: i64 = i64::MAX;

/// Fault injection around another device. See the module docs.
#[derive(Debug)]
pub struct FaultyBacking {
    inner: Arc<dyn BackingIo>,
    writes_left: AtomicI64,
    /// When the write budget is spent: drop silently (true) or fail with EIO (false).
    drop_writes: AtomicBool,
    reads_left: AtomicI64,
    failed_writes: AtomicU64,
    dropped_writes: AtomicU64,
    failed_reads: AtomicU64,
    writes: AtomicU64,
    /// `set_len` fails with EIO (a truncate BACKING refuses).
    fail_set_len: AtomicBool,
    /// `sync` and `sync_fs` fail with EIO though writes succeed (BACKING's own write-back of
    /// its page cache failed).
    fail_syncs: AtomicBool,
    failed_syncs: AtomicU64,
}

impl FaultyBacking {
    /// Passes everything through until told otherwise.
    pub fn new(inner: Arc<dyn BackingIo>) -> Self {
        Self {
            inner,
            writes_left: AtomicI64::new(UNLIMITED),
            drop_writes: AtomicBool::new(false),
            reads_left: AtomicI64::new(UNLIMITED),
            failed_writes: AtomicU64::new(0),
            dropped_writes: AtomicU64::new(0),
            failed_reads: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            fail_set_len: AtomicBool::new(false),
            fail_syncs: AtomicBool::new(false),
            failed_syncs: AtomicU64::new(0),
        }
    }

    /// From now on `set_len` fails with EIO (until `heal`).
    pub fn fail_set_len(&self) {
        self.fail_set_len.store(true, SeqCst);
    }

    /// From now on `sync` and `sync_fs` fail with EIO while writes succeed (until `heal`).
    pub fn fail_syncs(&self) {
        self.fail_syncs.store(true, SeqCst);
    }

    /// Syncs (`sync` and `sync_fs`) failed so far.
    pub fn failed_syncs(&self) -> u64 {
        self.failed_syncs.load(SeqCst)
    }

    /// After `n` more successful writes, writes (and syncs) fail with EIO.
    pub fn fail_writes_after(&self, n: u64) {
        self.drop_writes.store(false, SeqCst);
        self.writes_left.store(budget(n), SeqCst);
    }

    /// After `n` more writes, writes report success but write nothing.
    pub fn drop_writes_after(&self, n: u64) {
        self.drop_writes.store(true, SeqCst);
        self.writes_left.store(budget(n), SeqCst);
    }

    /// After `n` more reads, reads fail with EIO.
    pub fn fail_reads_after(&self, n: u64) {
        self.reads_left.store(budget(n), SeqCst);
    }

    /// Stops injecting faults.
    pub fn heal(&self) {
        self.fail_set_len.store(false, SeqCst);
        self.fail_syncs.store(false, SeqCst);
        self.writes_left.store(UNLIMITED, SeqCst);
        self.reads_left.store(UNLIMITED, SeqCst);
        self.drop_writes.store(false, SeqCst);
    }

    pub fn failed_writes(&self) -> u64 {
        self.failed_writes.load(SeqCst)
    }
    pub fn dropped_writes(&self) -> u64 {
        self.dropped_writes.load(SeqCst)
    }
    pub fn failed_reads(&self) -> u64 {
        self.failed_reads.load(SeqCst)
    }
    /// Write requests seen (whatever happened to them).
    pub fn writes(&self) -> u64 {
        self.writes.load(SeqCst)
    }

    fn writes_faulted(&self) -> bool {
        self.writes_left.load(SeqCst) <= 0
    }
}

fn budget(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(UNLIMITED)
}

/// Takes one unit of `left`; true when the budget was already spent (this request is faulted).
fn spend(left: &AtomicI64) -> bool {
    let prev = left
        .fetch_update(SeqCst, SeqCst, |v| {
            if v == UNLIMITED {
                None
            } else {
                Some(v.saturating_sub(1).max(-1))
            }
        })
        .unwrap_or(UNLIMITED);
    prev <= 0
}

fn eio() -> io::Error {
    io::Error::from_raw_os_error(libc::EIO)
}

impl BackingIo for FaultyBacking {
    fn read_at(&self, file: FileId, fd: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        if spend(&self.reads_left) {
            self.failed_reads.fetch_add(1, SeqCst);
            return Err(eio());
        }
        self.inner.read_at(file, fd, buf, offset)
    }

    fn write_at(&self, file: FileId, fd: &File, buf: &[u8], offset: u64) -> io::Result<()> {
        self.writes.fetch_add(1, SeqCst);
        if spend(&self.writes_left) {
            if self.drop_writes.load(SeqCst) {
                self.dropped_writes.fetch_add(1, SeqCst);
                return Ok(());
            }
            self.failed_writes.fetch_add(1, SeqCst);
            return Err(eio());
        }
        self.inner.write_at(file, fd, buf, offset)
    }

    fn sync(&self, file: FileId, fd: &File, datasync: bool) -> io::Result<()> {
        if self.fail_syncs.load(SeqCst) {
            self.failed_syncs.fetch_add(1, SeqCst);
            return Err(eio());
        }
        if self.writes_faulted() && !self.drop_writes.load(SeqCst) {
            return Err(eio());
        }
        self.inner.sync(file, fd, datasync)
    }

    fn set_len(&self, file: FileId, fd: &File, len: u64) -> io::Result<()> {
        if self.fail_set_len.load(SeqCst) {
            return Err(eio());
        }
        self.inner.set_len(file, fd, len)
    }

    fn emulation(&self) -> Option<EmulationStats> {
        self.inner.emulation()
    }

    fn io_mode(&self) -> super::IoMode {
        self.inner.io_mode()
    }

    fn sync_fs(&self, fd: &File) -> io::Result<()> {
        if self.fail_syncs.load(SeqCst) {
            self.failed_syncs.fetch_add(1, SeqCst);
            return Err(eio());
        }
        if self.writes_faulted() && !self.drop_writes.load(SeqCst) {
            return Err(eio());
        }
        self.inner.sync_fs(fd)
    }

    fn settle(&self) {
        self.inner.settle();
    }
}
