//! Issue #24: a hit waited behind misses. Every FUSE request thread of the daemon sat in a slow BACKING read of a backup's file, so a read of a page already in memory, and a priority file's miss, waited until BACKING answered them.
//!
//! BACKING is a FUSE pass-through served by this test over a plain directory, whose reads of
//! files named `slow*` are held until the test lets them go (the gate): a BACKING as slow as
//! the test wants, deterministically. `tiercache mount` runs over it with 2 request threads
//! and 4 I/O workers (one reserved for the priority class). While several `slow*` misses are
//! held, a hit must be answered, and so must a priority file's miss (its own BACKING read is
//! not held) — both before the gate opens. Then every held read completes with its bytes.
#![allow(clippy::unwrap_used)]

mod support;

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    Config, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    LockOwner, MountOption, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, Request,
};
use support::{s, OwnBacking};

/// Reads of `slow*` files held while the gate is closed.
#[derive(Default)]
struct Gate {
    open: bool,
    held: Vec<(ReplyData, Arc<File>, u64, u32)>,
}

fn answer(reply: ReplyData, f: &File, offset: u64, size: u32) {
    let mut buf = vec![0u8; size as usize];
    match f.read_at(&mut buf, offset) {
        Ok(n) => reply.data(&buf[..n]),
        Err(e) => reply.error(Errno::from(e)),
    }
}

/// A read-only pass-through over `lower` whose `slow*` reads wait for the gate.
struct GatedFs {
    paths: Mutex<HashMap<u64, PathBuf>>,
    files: Mutex<HashMap<u64, (Arc<File>, bool)>>,
    next_fh: AtomicU64,
    gate: Arc<Mutex<Gate>>,
}

fn attr(ino: u64, m: &std::fs::Metadata) -> FileAttr {
    let t = |s: i64, n: i64| UNIX_EPOCH + Duration::new(s.max(0) as u64, n as u32);
    FileAttr {
        ino: INodeNo(ino),
        size: m.size(),
        blocks: m.blocks(),
        atime: t(m.atime(), m.atime_nsec()),
        mtime: t(m.mtime(), m.mtime_nsec()),
        ctime: t(m.ctime(), m.ctime_nsec()),
        crtime: SystemTime::UNIX_EPOCH,
        kind: if m.is_dir() {
            FileType::Directory
        } else {
            FileType::RegularFile
        },
        perm: (m.mode() & 0o7777) as u16,
        nlink: m.nlink() as u32,
        uid: m.uid(),
        gid: m.gid(),
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

impl GatedFs {
    fn path(&self, ino: INodeNo) -> Result<PathBuf, Errno> {
        let p = self.paths.lock().unwrap();
        p.get(&ino.0).cloned().ok_or(Errno::ESTALE)
    }

    fn node(&self, p: PathBuf) -> Result<FileAttr, Errno> {
        let m = std::fs::symlink_metadata(&p).map_err(Errno::from)?;
        let ino = if p == self.path(INodeNo(1))? {
            1
        } else {
            m.ino()
        };
        self.paths.lock().unwrap().insert(ino, p);
        Ok(attr(ino, &m))
    }
}

const TTL: Duration = Duration::from_secs(1);

impl Filesystem for GatedFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.path(parent).and_then(|d| self.node(d.join(name))) {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.path(ino).and_then(|p| self.node(p)) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let r = self.path(ino).and_then(|p| {
            let slow = p
                .file_name()
                .is_some_and(|n| n.as_bytes().starts_with(b"slow"));
            File::open(&p)
                .map(|f| (Arc::new(f), slow))
                .map_err(Errno::from)
        });
        match r {
            Ok(f) => {
                let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
                self.files.lock().unwrap().insert(fh, f);
                reply.opened(FileHandle(fh), FopenFlags::FOPEN_DIRECT_IO);
            }
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let Some((f, slow)) = self.files.lock().unwrap().get(&fh.0).cloned() else {
            return reply.error(Errno::EBADF);
        };
        if slow {
            let mut g = self.gate.lock().unwrap();
            if !g.open {
                // Answered when the gate opens, from the test's thread.
                g.held.push((reply, f, offset, size));
                return;
            }
        }
        answer(reply, &f, offset, size);
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.files.lock().unwrap().remove(&fh.0);
        reply.ok();
    }

    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.opened(FileHandle(0), FopenFlags::empty());
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let p = match self.path(ino) {
            Ok(p) => p,
            Err(e) => return reply.error(e),
        };
        let mut names: Vec<_> = std::fs::read_dir(&p)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        for (i, n) in names.iter().enumerate().skip(offset as usize) {
            let a = match self.node(p.join(n)) {
                Ok(a) => a,
                Err(e) => return reply.error(e),
            };
            if reply.add(a.ino, i as u64 + 1, a.kind, n) {
                break;
            }
        }
        reply.ok();
    }
}

/// The gated file system on `backing`; dropping it opens the gate (so nothing stays held)
/// and unmounts.
struct GatedMount {
    gate: Arc<Mutex<Gate>>,
    session: Option<fuser::BackgroundSession>,
    backing: PathBuf,
}

impl GatedMount {
    fn new(lower: &Path, backing: &Path) -> Self {
        let gate = Arc::new(Mutex::new(Gate::default()));
        let fs = GatedFs {
            paths: Mutex::new(HashMap::from([(1, lower.to_path_buf())])),
            files: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            gate: Arc::clone(&gate),
        };
        let mut config = Config::default();
        config.mount_options = vec![MountOption::FSName("gatedtest".to_owned())];
        config.n_threads = Some(2);
        let session = fuser::spawn_mount(fs, backing, &config)
            .unwrap_or_else(|e| panic!("cannot mount the gated file system ({e}); needs root"));
        GatedMount {
            gate,
            session: Some(session),
            backing: backing.to_path_buf(),
        }
    }

    fn held(&self) -> usize {
        self.gate.lock().unwrap().held.len()
    }

    /// Waits until at least `n` reads are held (20 s at most).
    fn wait_held(&self, n: usize) {
        for _ in 0..2000 {
            if self.held() >= n {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("only {} BACKING reads reached the gate", self.held());
    }

    fn open(&self) {
        let held = {
            let mut g = self.gate.lock().unwrap();
            g.open = true;
            std::mem::take(&mut g.held)
        };
        for (reply, f, offset, size) in held {
            answer(reply, &f, offset, size);
        }
    }
}

impl Drop for GatedMount {
    fn drop(&mut self) {
        self.open();
        if let Some(s) = self.session.take() {
            if s.umount_and_join().is_err() {
                let _ = std::process::Command::new("fusermount3")
                    .arg("-uz")
                    .arg(&self.backing)
                    .status();
            }
        }
    }
}

fn content(name: &str, len: usize) -> Vec<u8> {
    let seed = name
        .bytes()
        .fold(7u8, |a, b| a.wrapping_mul(31).wrapping_add(b));
    (0..len).map(|i| seed.wrapping_add((i / 7) as u8)).collect()
}

const SIZE: usize = 64 << 10;

/// The mount over the gated BACKING. Dropping it opens the gate first, so that a failing test
/// fails instead of hanging: the daemon's threads held at the gate are let go before the
/// daemon is stopped (then the gated file system is unmounted, then the directory goes).
struct Rig {
    m: OwnBacking,
    gated: GatedMount,
    _dir: tempfile::TempDir,
}

impl Drop for Rig {
    fn drop(&mut self) {
        self.gated.open();
    }
}

/// The lower directory: `www/page`, `www/cold` and `www/cold2` (priority), `slow0`..`slow7` (normal).
fn setup() -> Rig {
    assert_eq!(
        // SAFETY: geteuid has no preconditions and cannot fail.
        unsafe { libc::geteuid() },
        0,
        "this test mounts FUSE file systems: run it as root"
    );
    let dir = tempfile::Builder::new().prefix("tcgate").tempdir().unwrap();
    let (lower, backing, mnt) = (
        dir.path().join("lower"),
        dir.path().join("backing"),
        dir.path().join("mnt"),
    );
    for d in [&lower, &backing, &mnt, &lower.join("www")] {
        std::fs::create_dir(d).unwrap();
    }
    for name in ["www/page", "www/cold", "www/cold2"] {
        std::fs::write(lower.join(name), content(name, SIZE)).unwrap();
    }
    for i in 0..8 {
        let name = format!("slow{i}");
        std::fs::write(lower.join(&name), content(&name, SIZE)).unwrap();
    }
    let gated = GatedMount::new(&lower, &backing);
    let m = OwnBacking::serve_with(
        tempfile::tempdir().unwrap(),
        backing,
        mnt,
        "8M",
        100_000,
        &["--threads", "2", "--io-workers", "4", "--priority", "www"],
    );
    Rig {
        m,
        gated,
        _dir: dir,
    }
}

/// Reads `name` through the mount on a thread of its own; its bytes come on the channel.
fn read_in_background(mnt: &Path, name: &str) -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel();
    let p = mnt.join(name);
    std::thread::spawn(move || {
        let _ = tx.send(std::fs::read(p).unwrap());
    });
    rx
}

/// Starts readers of `slow0`..`slow{n-1}` (all misses, held at the gate).
fn slow_readers(mnt: &Path, n: usize) -> Vec<(String, mpsc::Receiver<Vec<u8>>)> {
    (0..n)
        .map(|i| {
            let name = format!("slow{i}");
            let rx = read_in_background(mnt, &name);
            (name, rx)
        })
        .collect()
}

fn finish(gated: &GatedMount, readers: Vec<(String, mpsc::Receiver<Vec<u8>>)>) {
    gated.open();
    for (name, rx) in readers {
        let got = rx.recv_timeout(Duration::from_secs(60)).unwrap();
        assert!(got == content(&name, SIZE), "{name}: wrong bytes");
    }
}

#[test]
fn a_cached_page_is_served_while_every_request_thread_would_wait_for_backing() {
    let rig = setup();
    let (gated, m) = (&rig.gated, &rig.m);
    // The page in memory, read once through the mount.
    assert_eq!(std::fs::read(m.mnt.join("www/page")).unwrap().len(), SIZE);
    let readers = slow_readers(&m.mnt, 4);
    gated.wait_held(2);
    std::thread::sleep(Duration::from_millis(200));
    let hit = read_in_background(&m.mnt, "www/page");
    let got = hit
        .recv_timeout(Duration::from_secs(20))
        .unwrap_or_else(|_| {
            panic!(
                "the cached page was not served while {} BACKING reads were held",
                gated.held()
            )
        });
    assert!(got == content("www/page", SIZE), "the page's bytes differ");
    assert!(gated.held() >= 2, "the held reads were answered");
    finish(gated, readers);
}

/// Reads the priority file `name` (not in memory; its own BACKING read is not held) and
/// checks its bytes: it needs a free worker.
fn priority_miss(gated: &GatedMount, m: &OwnBacking, name: &str) {
    let miss = read_in_background(&m.mnt, name);
    let got = miss
        .recv_timeout(Duration::from_secs(20))
        .unwrap_or_else(|_| {
            panic!(
                "the priority file {name}'s miss waited behind {} held normal misses",
                gated.held()
            )
        });
    assert!(got == content(name, SIZE), "{name}: wrong bytes");
}

/// Polls the mount's `io` stats until `ok` holds (20 s at most); returns them.
fn wait_io(m: &OwnBacking, ok: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    for _ in 0..400 {
        let io = m_stats(m)["io"].clone();
        if ok(&io) {
            return io;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("io stats never got there: {}", m_stats(m)["io"]);
}

#[test]
fn a_priority_miss_is_served_while_a_backup_fills_every_normal_worker() {
    let rig = setup();
    let (gated, m) = (&rig.gated, &rig.m);
    let readers = slow_readers(&m.mnt, 6);
    gated.wait_held(2);
    std::thread::sleep(Duration::from_millis(300));
    priority_miss(gated, m, "www/cold");
    // The normal class holds every worker it may have (4 less the reserved one), no more;
    // the other backup reads wait in its queue. A priority miss still gets the reserved one.
    let io = wait_io(m, |io| io["normal"]["queued"] == 3);
    assert_eq!(io["workers"], 4, "{io}");
    assert_eq!(io["reserved"], 1, "{io}");
    assert_eq!(io["normal"]["in_flight"], 3, "{io}");
    priority_miss(gated, m, "www/cold2");
    assert_eq!(gated.held(), 3, "held BACKING reads");
    let io = m_stats(m)["io"].clone();
    assert!(io["priority"]["completed"].as_u64() >= Some(2), "{io}");
    finish(gated, readers);
    // A worker counts its request done just after replying.
    wait_io(m, |io| {
        io["normal"]["in_flight"] == 0 && io["normal"]["queued"] == 0
    });
}

fn m_stats(m: &OwnBacking) -> serde_json::Value {
    let out = support::tc(&["stats", s(&m.mnt), "--json"]);
    assert!(out.status.success());
    serde_json::from_slice(&out.stdout).unwrap()
}
