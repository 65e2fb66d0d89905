//! Bug: close() never reported write-back errors: the FUSE data path had no `flush`, so close() returned 0 even after the file's background write-back had failed (ENOSPC on a full BACKING).
//!
//! BACKING is a 256 KiB tmpfs.
#![allow(clippy::unwrap_used)]

mod support;

use support::{mount_tmpfs, OwnBacking};

use std::fs::OpenOptions;
use std::io::Write;
use std::os::fd::IntoRawFd;
use std::time::Duration;

fn small_backing() -> OwnBacking {
    let dir = tempfile::tempdir().unwrap();
    let (backing, mnt) = (dir.path().join("slow"), dir.path().join("fast"));
    std::fs::create_dir_all(&backing).unwrap();
    std::fs::create_dir_all(&mnt).unwrap();
    mount_tmpfs(&backing, "256k");
    OwnBacking::serve(dir, backing, mnt, "16M", 50)
}

/// `close(2)` of `fd`, with its result.
fn close(fd: i32) -> std::io::Result<()> {
    // SAFETY: `fd` was taken out of its owner with into_raw_fd and is closed once.
    if unsafe { libc::close(fd) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[test]
fn close_reports_a_failed_background_write_back() {
    let b = small_backing();
    let path = b.mnt.join("big");
    let mut w = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    // Cached at once; BACKING has room for a quarter of it.
    w.write_all(&vec![7u8; 1 << 20]).unwrap();
    let reader = std::fs::File::open(&path).unwrap();
    // The flusher tries (and fails) every 50 ms.
    std::thread::sleep(Duration::from_millis(1000));
    assert!(
        close(reader.into_raw_fd()).is_ok(),
        "a reader's close reports nothing"
    );
    let err = close(w.into_raw_fd()).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
}
