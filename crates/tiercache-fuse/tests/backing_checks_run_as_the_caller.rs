//! Issue #10 (item 2): BACKING was accessed with root's rights, so on root-squashed storage files that are not world-readable could not be opened and files created through the mount belonged to whoever root maps to.
//!
//! BACKING here is a FUSE file system that checks permissions itself and treats root as
//! nobody (`common/squash.rs`), mounted over a plain directory; tiercache is mounted over it.
//! Unprivileged callers (run with `setpriv`) must get BACKING's answer for their own identity:
//! the owner reads its mode-0600 file and works in its mode-0700 directory, new files belong
//! to their creator on BACKING, supplementary groups count, a file a caller may write but not
//! read takes its writes, and a caller BACKING refuses gets
//! nothing, also not the blocks a permitted caller brought into the data path's cache. The
//! same mount acting as the daemon (`BackingIdentity::Daemon`) fails, which shows the backing
//! really refuses root.
#![allow(clippy::unwrap_used)]

mod common;
#[path = "common/squash.rs"]
mod squash;

use std::collections::HashMap;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tiercache_fuse::{mount, BackingIdentity, DataPath, FileHandleInfo, MountOptions};

const A: u32 = 2001;
const B: u32 = 2002;
const C: u32 = 2003;
const TEAM: u32 = 3000;

/// A whole-file read cache shared by all handles of a file, counting where reads came from.
#[derive(Default)]
struct ReadCache {
    files: Mutex<HashMap<u64, Arc<Vec<u8>>>>,
    hits: AtomicU64,
    fills: AtomicU64,
}

impl DataPath for ReadCache {
    fn read(&self, fh: &FileHandleInfo, offset: u64, size: u32) -> io::Result<Vec<u8>> {
        let cached = self.files.lock().unwrap().get(&fh.ino).cloned();
        let data = match cached {
            Some(d) => {
                self.hits.fetch_add(1, Ordering::Relaxed);
                d
            }
            None => {
                let mut all = Vec::new();
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let n = fh.file.read_at(&mut buf, all.len() as u64)?;
                    if n == 0 {
                        break;
                    }
                    all.extend_from_slice(&buf[..n]);
                }
                self.fills.fetch_add(1, Ordering::Relaxed);
                let d = Arc::new(all);
                self.files.lock().unwrap().insert(fh.ino, Arc::clone(&d));
                d
            }
        };
        let start = (offset as usize).min(data.len());
        let end = (start + size as usize).min(data.len());
        Ok(data[start..end].to_vec())
    }

    fn write(&self, fh: &FileHandleInfo, offset: u64, data: &[u8]) -> io::Result<u32> {
        self.files.lock().unwrap().remove(&fh.ino);
        fh.file.write_all_at(data, offset)?;
        Ok(data.len() as u32)
    }

    fn fsync(&self, fh: &FileHandleInfo, _datasync: bool) -> io::Result<()> {
        fh.file.sync_all()
    }

    fn truncate(&self, ino: u64, file: &std::fs::File, new_size: u64) -> io::Result<()> {
        self.files.lock().unwrap().remove(&ino);
        file.set_len(new_size)
    }

    fn fallocate(&self, _fh: &FileHandleInfo, _mode: i32, _off: u64, _len: u64) -> io::Result<()> {
        Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP))
    }

    fn evict(&self, ino: u64) {
        self.files.lock().unwrap().remove(&ino);
    }
}

#[track_caller]
fn ok(uid: u32, gid: u32, groups: &[u32], script: &str) -> String {
    let (success, out) = squash::run_as(uid, gid, groups, script);
    assert!(
        success,
        "as {uid}:{gid} {groups:?}: `{script}` failed: {out}"
    );
    out
}

#[track_caller]
fn denied(uid: u32, gid: u32, groups: &[u32], script: &str) {
    let (success, out) = squash::run_as(uid, gid, groups, script);
    assert!(
        !success && out.contains("Permission denied"),
        "as {uid}:{gid} {groups:?}: `{script}` should be refused: {out}"
    );
}

fn owner(p: &Path) -> (u32, u32) {
    let m = std::fs::symlink_metadata(p).unwrap();
    (m.uid(), m.gid())
}

fn setup(lower: &Path) {
    let put = |rel: &str, data: &str, uid: u32, gid: u32, mode: u32| {
        let p = lower.join(rel);
        std::fs::write(&p, data).unwrap();
        std::os::unix::fs::chown(&p, Some(uid), Some(gid)).unwrap();
        std::fs::set_permissions(&p, PermissionsExt::from_mode(mode)).unwrap();
    };
    let dir = |rel: &str, uid: u32, gid: u32, mode: u32| {
        let p = lower.join(rel);
        std::fs::create_dir(&p).unwrap();
        std::os::unix::fs::chown(&p, Some(uid), Some(gid)).unwrap();
        std::fs::set_permissions(&p, PermissionsExt::from_mode(mode)).unwrap();
    };
    std::fs::set_permissions(lower, PermissionsExt::from_mode(0o755)).unwrap();
    put("a_secret", "only for a\n", A, A, 0o600);
    dir("a_home", A, A, 0o700);
    put("team_file", "for the team\n", A, TEAM, 0o640);
    dir("team_dir", A, TEAM, 0o770);
    put("team_drop", "x", A, TEAM, 0o620);
}

#[test]
fn backing_checks_run_as_the_caller() {
    assert_eq!(
        // SAFETY: geteuid has no preconditions and cannot fail.
        unsafe { libc::geteuid() },
        0,
        "this test mounts FUSE file systems and acts as other users: run it as root"
    );
    let tmp = tempfile::Builder::new()
        .prefix("tcsquash")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(tmp.path(), PermissionsExt::from_mode(0o755)).unwrap();
    let (lower, backing, mnt) = (
        tmp.path().join("lower"),
        tmp.path().join("backing"),
        tmp.path().join("mnt"),
    );
    for d in [&lower, &backing, &mnt] {
        std::fs::create_dir(d).unwrap();
    }
    setup(&lower);
    let squash = squash::SquashMount::new(&lower, &backing);

    // the backing really refuses root: it is nobody there
    let e = std::fs::read(backing.join("a_secret")).unwrap_err();
    assert_eq!(
        e.raw_os_error(),
        Some(libc::EACCES),
        "root read a 0600 file"
    );
    let e = std::fs::read_dir(backing.join("a_home")).unwrap_err();
    assert_eq!(
        e.raw_os_error(),
        Some(libc::EACCES),
        "root listed a 0700 dir"
    );

    // acting as the daemon, the owner's own file cannot be read through the mount
    {
        let mut opts = MountOptions::default();
        opts.allow_other = true;
        opts.backing_identity = BackingIdentity::Daemon;
        let h = mount(&backing, &mnt, opts, Arc::new(ReadCache::default())).unwrap();
        denied(A, A, &[], &format!("cat {}/a_secret", mnt.display()));
        h.unmount().unwrap();
    }

    let cache = Arc::new(ReadCache::default());
    let mut opts = MountOptions::default();
    opts.allow_other = true;
    assert_eq!(opts.backing_identity, BackingIdentity::Auto, "default");
    let h = mount(
        &backing,
        &mnt,
        opts,
        Arc::clone(&cache) as Arc<dyn DataPath>,
    )
    .unwrap();
    let m = mnt.display();

    // the owner reads its 0600 file; the data is now cached
    assert_eq!(ok(A, A, &[], &format!("cat {m}/a_secret")), "only for a\n");
    assert_eq!(ok(A, A, &[], &format!("cat {m}/a_secret")), "only for a\n");
    let (fills, hits) = (
        cache.fills.load(Ordering::Relaxed),
        cache.hits.load(Ordering::Relaxed),
    );
    assert!(fills >= 1 && hits >= 1, "fills {fills} hits {hits}");
    // another user is refused, although the blocks are cached, and reads nothing
    denied(B, B, &[], &format!("cat {m}/a_secret"));
    denied(B, B, &[TEAM], &format!("cat {m}/a_secret"));
    assert_eq!(cache.hits.load(Ordering::Relaxed), hits, "B was served");
    assert_eq!(cache.fills.load(Ordering::Relaxed), fills, "B filled");

    // the owner works in its 0700 directory; what it creates is its own on BACKING
    ok(
        A,
        A,
        &[],
        &format!(
            "set -e; cd {m}/a_home; echo new > f; mkdir d; mv f d/g; ln -s g d/l; \
             cat d/g; chmod 0640 d/g; touch -d 2001-01-01 d/g; ls d"
        ),
    );
    let lower_home = lower.join("a_home");
    assert_eq!(owner(&lower_home.join("d")), (A, A));
    assert_eq!(owner(&lower_home.join("d/g")), (A, A));
    assert_eq!(owner(&lower_home.join("d/l")), (A, A));
    assert_eq!(
        std::fs::metadata(lower_home.join("d/g")).unwrap().mode() & 0o7777,
        0o640
    );
    denied(B, B, &[], &format!("ls {m}/a_home"));
    ok(
        A,
        A,
        &[],
        &format!("set -e; cd {m}/a_home; rm d/l d/g; rmdir d; truncate -s 0 ../a_secret"),
    );
    assert!(!lower_home.join("d").exists());
    assert_eq!(std::fs::metadata(lower.join("a_secret")).unwrap().len(), 0);

    // supplementary groups reach BACKING: a team member reads the team file and creates in
    // the team directory (owned by itself); someone outside the team is refused
    assert_eq!(
        ok(B, B, &[TEAM], &format!("cat {m}/team_file")),
        "for the team\n"
    );
    ok(B, B, &[TEAM], &format!("echo b > {m}/team_dir/b_file"));
    assert_eq!(owner(&lower.join("team_dir/b_file")), (B, B));
    denied(C, C, &[], &format!("cat {m}/team_file"));
    denied(C, C, &[], &format!("touch {m}/team_dir/c_file"));
    // write but not read: the write-only open is checked as the caller, the read-write one
    // for the cache is refused to the (squashed) daemon too, and the write goes through
    ok(B, B, &[TEAM], &format!("printf y >> {m}/team_drop"));
    assert_eq!(std::fs::read(lower.join("team_drop")).unwrap(), b"xy");
    denied(B, B, &[TEAM], &format!("cat {m}/team_drop"));
    // a creation by a member whose primary group is the team's
    ok(C, TEAM, &[], &format!("mkdir {m}/team_dir/c_dir"));
    assert_eq!(owner(&lower.join("team_dir/c_dir")), (C, TEAM));

    h.unmount().unwrap();
    drop(squash);
}
