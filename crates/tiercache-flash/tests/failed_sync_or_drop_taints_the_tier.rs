//! Bug: a failed device sync or a drop whose record could not be written was forgotten — a later `sync()` said "durable" (Linux drops the pages on an fdatasync EIO) and a discarded dirty block could come back after a crash unnoticed. Both now taint the tier for good.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use std::sync::Arc;
use tiercache_core::Class;
use tiercache_flash::{FlashDevice, FlashTier, MemDevice};
use tiercache_tier::StoreExt as _;
use tiercache_tier::{Admit, DataTier, Lookup};

/// Linux fsync semantics after a writeback error: the failed sync reports EIO once, the dirty
/// pages are dropped (marked clean), and the next sync succeeds.
#[derive(Debug)]
struct FsyncGate {
    inner: Arc<MemDevice>,
    pending: std::sync::Mutex<Vec<(u64, Vec<u8>)>>,
    fail_next_sync: std::sync::atomic::AtomicBool,
}

impl FlashDevice for FsyncGate {
    fn read_at(&self, buf: &mut [u8], off: u64) -> std::io::Result<()> {
        self.inner.read_at(buf, off)?;
        for (p, d) in self.pending.lock().unwrap().iter() {
            let (s, e) = (*p, *p + d.len() as u64);
            let end = off + buf.len() as u64;
            if s < end && e > off {
                let lo = s.max(off);
                let hi = e.min(end);
                buf[(lo - off) as usize..(hi - off) as usize]
                    .copy_from_slice(&d[(lo - s) as usize..(hi - s) as usize]);
            }
        }
        Ok(())
    }
    fn write_at(&self, buf: &[u8], off: u64) -> std::io::Result<()> {
        self.pending.lock().unwrap().push((off, buf.to_vec()));
        Ok(())
    }
    fn sync(&self) -> std::io::Result<()> {
        let p = std::mem::take(&mut *self.pending.lock().unwrap());
        if self
            .fail_next_sync
            .swap(false, std::sync::atomic::Ordering::SeqCst)
        {
            return Err(std::io::Error::other(
                "EIO (writeback error; pages dropped)",
            ));
        }
        for (off, d) in p {
            self.inner.write_at(&d, off)?;
        }
        Ok(())
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn sector_size(&self) -> usize {
        512
    }
}

/// After one failed device sync every later `sync()` fails (never "durable" for lost data),
/// stores are turned down, and `close()` does not write the clean-shutdown flag.
#[test]
fn after_a_failed_device_sync_every_later_sync_fails() {
    let len = 8 * ((1 << 20) + 1024) + 8192;
    let m = mem(len);
    let g = Arc::new(FsyncGate {
        inner: m.clone(),
        pending: std::sync::Mutex::new(Vec::new()),
        fail_next_sync: false.into(),
    });
    let d: Arc<dyn FlashDevice> = g.clone();
    let t = FlashTier::create(d.clone(), config()).unwrap();
    let k = key(1, 0);
    assert_eq!(write(&t, &k, 1), Admit::Stored);
    g.fail_next_sync
        .store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(t.sync().is_err());
    // The manager retries: the tier must not claim durability now.
    assert!(t.sync().is_err(), "a sync after a failed one returned Ok");
    assert!(t.sync().is_err());
    let fs = t.flash_stats();
    assert!(fs.degraded && fs.tainted);
    assert_eq!(write(&t, &key(2, 0), 1), Admit::Rejected);
    assert!(t.close().is_err(), "close of a tainted tier succeeded");
    drop(t);
    g.pending.lock().unwrap().clear();
    let t = FlashTier::open(d, config()).unwrap();
    assert!(
        !t.flash_stats().opened_clean,
        "clean flag written after a failed sync"
    );
    let (l, buf) = read(&t, &k);
    assert!(l == Lookup::Miss || buf == data(&k, 1, 4096));
}

/// A `discard` whose record cannot be made durable (one write error) taints the tier: from
/// then on `sync()` fails (the manager learns at its next fsync/flush), stores are turned down
/// and `close()` never claims a clean shutdown.
#[test]
fn a_discard_that_failed_to_persist_taints_the_tier() {
    let len = 8 * ((1 << 20) + 1024) + 8192;
    let dev = faulty(len, 11);
    let d: Arc<dyn FlashDevice> = dev.clone();
    let t = FlashTier::create(d.clone(), config()).unwrap();
    dev.set_volatile(true).unwrap();
    let k = key(1, 3);
    assert_eq!(write(&t, &k, 1), Admit::Stored);
    t.sync().unwrap();
    dev.fail_writes_after(Some(0));
    t.discard(&k);
    assert!(!t.contains(&k));
    dev.fail_writes_after(None);
    let fs = t.flash_stats();
    assert!(fs.degraded && fs.tainted, "{fs:?}");
    assert_eq!(
        t.write_dirty(&key(5, 0), V, Class::NORMAL, &data(&key(5, 0), 1, 4096))
            .unwrap(),
        Admit::Rejected
    );
    assert!(
        t.sync().is_err(),
        "sync after an unpersisted discard returned Ok"
    );
    assert!(t.close().is_err());
    drop(t);
    let t = FlashTier::open(d, config()).unwrap();
    assert!(!t.flash_stats().opened_clean);
}

/// `invalidate_file` whose record cannot be written taints the tier the same way.
#[test]
fn an_invalidate_file_that_failed_to_persist_taints_the_tier() {
    let len = 8 * ((1 << 20) + 1024) + 8192;
    let dev = faulty(len, 12);
    let d: Arc<dyn FlashDevice> = dev.clone();
    let t = FlashTier::create(d, config()).unwrap();
    assert_eq!(write(&t, &key(1, 3), 1), Admit::Stored);
    t.sync().unwrap();
    dev.fail_writes_after(Some(0));
    t.invalidate_file(&file(1), 0);
    dev.fail_writes_after(None);
    assert!(t.flash_stats().tainted);
    assert!(t.sync().is_err());
    t.abandon();
}
