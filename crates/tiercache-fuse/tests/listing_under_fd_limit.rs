//! Bug: with one descriptor per inode the kernel held, listings past the open-files limit came
//! back silently short (exit status 0) and lookups failed with "Too many open files".
//!
//! These tests lower the process's own `RLIMIT_NOFILE` (each test runs in its own process
//! under nextest) and serve more inodes than that through a real mount.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use common::TestMount;
use tiercache_fuse::MountOptions;

const LIMIT: u64 = 96;
const DIRS: usize = 4;
const FILES: usize = 300;

fn lower_fd_limit() {
    let lim = libc::rlimit {
        rlim_cur: LIMIT,
        rlim_max: LIMIT,
    };
    // SAFETY: `lim` is a valid rlimit; lowering both limits is always allowed.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) }, 0);
}

fn make_tree(backing: &Path) {
    for d in 0..DIRS {
        let dir = backing.join(format!("d{d}"));
        std::fs::create_dir(&dir).unwrap();
        for f in 0..FILES {
            std::fs::write(dir.join(format!("f{f}")), vec![b'x'; f % 7]).unwrap();
        }
    }
}

fn names(dir: &Path) -> std::io::Result<BTreeSet<String>> {
    std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.file_name().into_string().unwrap()))
        .collect()
}

#[test]
fn listings_are_complete_with_more_inodes_than_descriptors() {
    lower_fd_limit();
    let mut opts = MountOptions::default();
    opts.threads = 2;
    let t = TestMount::new(opts);
    make_tree(&t.backing);
    // `ls -l` of every directory: the kernel holds every inode afterwards
    for d in 0..DIRS {
        let dir = t.mnt.join(format!("d{d}"));
        let got = names(&dir).unwrap();
        assert_eq!(got, names(&t.backing.join(format!("d{d}"))).unwrap());
        for name in &got {
            let m = std::fs::symlink_metadata(dir.join(name)).unwrap();
            let want = std::fs::symlink_metadata(t.backing.join(format!("d{d}")).join(name));
            assert_eq!(m.len(), want.unwrap().len());
        }
    }
    // the root listing after that, and reading files through the mount
    assert_eq!(names(&t.mnt).unwrap().len(), DIRS);
    for f in 0..FILES {
        let data = std::fs::read(t.mnt.join("d0").join(format!("f{f}"))).unwrap();
        assert_eq!(data.len(), f % 7);
    }
    let stats = t.handle.as_ref().unwrap().inode_stats().stats();
    assert_eq!(stats.mode, "handles");
    assert!(stats.known > (DIRS * FILES) as u64, "{stats:?}");
    assert!(stats.cached_fds <= LIMIT / 4, "{stats:?}");
    // new files too (tar x into the mount)
    for f in 0..FILES {
        std::fs::write(t.mnt.join("d1").join(format!("new{f}")), b"n").unwrap();
    }
    assert_eq!(names(&t.mnt.join("d1")).unwrap().len(), 2 * FILES);
}

#[test]
fn without_handles_a_listing_is_complete_or_fails() {
    lower_fd_limit();
    let mut opts = MountOptions::default();
    opts.threads = 2;
    opts.inode_handles = false;
    let t = TestMount::new(opts);
    make_tree(&t.backing);
    assert_eq!(
        t.handle.as_ref().unwrap().inode_stats().stats().mode,
        "descriptors"
    );
    let mut failures = 0;
    for d in 0..DIRS {
        let dir = t.mnt.join(format!("d{d}"));
        match names(&dir) {
            Ok(got) => assert_eq!(
                got.len(),
                FILES,
                "a listing of {} succeeded short",
                dir.display()
            ),
            Err(e) => {
                failures += 1;
                assert!(
                    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)),
                    "{e}"
                );
            }
        }
    }
    assert!(
        failures > 0,
        "{} descriptors cannot pin {} inodes",
        LIMIT,
        DIRS * FILES
    );
}
