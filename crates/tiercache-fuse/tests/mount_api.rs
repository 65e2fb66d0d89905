//! Mount API: validation errors (nothing mounted), unmount behaviour, and a
//! custom `DataPath` proving that one stalled backing read does not block
//! other requests (several session threads).
#![allow(clippy::unwrap_used)]

mod common;

use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use common::TestMount;
use tiercache_fuse::{mount, DataPath, FileHandleInfo, FuseError, MountOptions, PassThrough};

fn try_mount(backing: &Path, mnt: &Path) -> Result<(), FuseError> {
    mount(backing, mnt, MountOptions::default(), Arc::new(PassThrough)).map(drop)
}

fn mounted(p: &Path) -> bool {
    let p = p.canonicalize().unwrap();
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    info.lines()
        .any(|l| l.split(' ').nth(4) == Some(p.to_str().unwrap()))
}

#[test]
fn validation_errors_mount_nothing() {
    let t = tempfile::tempdir().unwrap();
    let (b, m) = (t.path().join("b"), t.path().join("m"));
    std::fs::create_dir(&b).unwrap();
    std::fs::create_dir(&m).unwrap();
    let file = t.path().join("file");
    std::fs::write(&file, b"x").unwrap();

    let e = try_mount(&t.path().join("nope"), &m).unwrap_err();
    assert!(matches!(e, FuseError::BackingMissing(_)), "{e}");
    let e = try_mount(&file, &m).unwrap_err();
    assert!(matches!(e, FuseError::BackingNotDir(_)), "{e}");
    let e = try_mount(&b, &t.path().join("nope")).unwrap_err();
    assert!(matches!(e, FuseError::MountpointMissing(_)), "{e}");
    let e = try_mount(&b, &file).unwrap_err();
    assert!(matches!(e, FuseError::MountpointNotDir(_)), "{e}");
    let inner = b.join("inner");
    std::fs::create_dir(&inner).unwrap();
    let e = try_mount(&b, &inner).unwrap_err();
    assert!(matches!(e, FuseError::Overlap { .. }), "{e}");
    let e = try_mount(&inner, &b).unwrap_err();
    assert!(
        matches!(
            e,
            FuseError::MountpointNotEmpty(_) | FuseError::Overlap { .. }
        ),
        "{e}"
    );
    let e = try_mount(&m, &t.path().join("b/../m")).unwrap_err();
    assert!(matches!(e, FuseError::Overlap { .. }), "{e}");
    let e = try_mount(&m, &b).unwrap_err();
    assert!(matches!(e, FuseError::MountpointNotEmpty(_)), "{e}");
    let mut opts = MountOptions::default();
    opts.threads = 0;
    let e = mount(&b, &m, opts, Arc::new(PassThrough)).unwrap_err();
    assert!(matches!(e, FuseError::InvalidOption(_)), "{e}");
    let mut opts = MountOptions::default();
    opts.fs_name = "a,allow_other".into();
    let e = mount(&b, &m, opts, Arc::new(PassThrough)).unwrap_err();
    assert!(matches!(e, FuseError::InvalidOption(_)), "{e}");
    assert!(!mounted(&m));
    // messages are single lines
    assert!(!e.to_string().contains('\n'));
}

#[test]
fn already_mounted_and_unmount() {
    let tm = TestMount::new(MountOptions::default());
    assert!(mounted(&tm.mnt));
    let other = tempfile::tempdir().unwrap();
    let e = try_mount(other.path(), &tm.mnt).unwrap_err();
    assert!(matches!(e, FuseError::AlreadyMounted(_)), "{e}");

    // busy: an open file keeps the mount alive; unmount detaches lazily
    let mut tm = tm;
    std::fs::write(tm.mnt.join("f"), b"data").unwrap();
    let f = File::open(tm.mnt.join("f")).unwrap();
    let h = tm.handle.take().unwrap();
    let e = h.unmount().unwrap_err();
    assert!(matches!(e, FuseError::Busy(_)), "{e}");
    assert!(!mounted(&tm.mnt));
    // the detached file system still serves the open file
    let mut buf = [0u8; 4];
    std::os::unix::fs::FileExt::read_exact_at(&f, &mut buf, 0).unwrap();
    assert_eq!(&buf, b"data");
    drop(f);

    // a clean unmount joins the session
    let mut tm2 = TestMount::new(MountOptions::default());
    let h = tm2.handle.take().unwrap();
    let mp = h.mountpoint().to_path_buf();
    h.unmount().unwrap();
    assert!(!mounted(&mp));
}

/// Pass-through whose reads of one node block until released.
struct GatedData {
    slow_ino: AtomicU64,
    state: Mutex<(bool, bool)>, // (a slow read is waiting, released)
    cv: Condvar,
}

impl DataPath for GatedData {
    fn read(&self, fh: &FileHandleInfo, offset: u64, size: u32) -> io::Result<Vec<u8>> {
        if fh.ino == self.slow_ino.load(Ordering::SeqCst) {
            let mut s = self.state.lock().unwrap();
            s.0 = true;
            self.cv.notify_all();
            // bounded wait so that a broken implementation fails instead of hanging
            let (s, _) = self
                .cv
                .wait_timeout_while(s, Duration::from_secs(120), |s| !s.1)
                .unwrap();
            drop(s);
        }
        PassThrough.read(fh, offset, size)
    }
    pass_through!(write, fsync, truncate, fallocate);
}

#[test]
fn stalled_read_does_not_block_other_requests() {
    let data = Arc::new(GatedData {
        slow_ino: AtomicU64::new(u64::MAX),
        state: Mutex::new((false, false)),
        cv: Condvar::new(),
    });
    let mut opts = MountOptions::default();
    opts.threads = 4;
    let m = TestMount::with_data(opts, data.clone());
    std::fs::write(m.mnt.join("slow"), b"slow data").unwrap();
    std::fs::write(m.mnt.join("fast"), b"fast data").unwrap();
    let ino = std::fs::metadata(m.mnt.join("slow")).unwrap().ino();
    data.slow_ino.store(ino, Ordering::SeqCst);

    let slow_path = m.mnt.join("slow");
    let reader = std::thread::spawn(move || std::fs::read(slow_path).unwrap());
    {
        let s = data.state.lock().unwrap();
        let (s, _) = data
            .cv
            .wait_timeout_while(s, Duration::from_secs(120), |s| !s.0)
            .unwrap();
        assert!(s.0, "slow read never reached the data path");
    }
    // the slow read is parked inside the data path: other requests proceed
    let progressed = AtomicBool::new(false);
    assert_eq!(std::fs::read(m.mnt.join("fast")).unwrap(), b"fast data");
    std::fs::write(m.mnt.join("new"), b"n").unwrap();
    assert_eq!(std::fs::read_dir(&m.mnt).unwrap().count(), 3);
    progressed.store(true, Ordering::SeqCst);
    let released_early = {
        let s = data.state.lock().unwrap();
        s.1
    };
    assert!(!released_early && progressed.load(Ordering::SeqCst));
    {
        let mut s = data.state.lock().unwrap();
        s.1 = true;
        data.cv.notify_all();
    }
    assert_eq!(reader.join().unwrap(), b"slow data");
}
