//! Bug: wrong bytes after inode reuse — a file unlinked while dirty kept its cached state after the kernel's FORGET, and a new BACKING file that got the same inode number, size and mtime was served the old file's bytes through the mount.
//!
//! BACKING is a fresh ext4 image on a loop device (ext4 hands a freed inode number to the next
//! file created in the same group). Needs root, `mkfs.ext4` (e2fsprogs) and a free loop device;
//! fails saying which is missing otherwise.
#![allow(clippy::unwrap_used)]

mod support;

use support::{s, OwnBacking};

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime};

/// An ext4 loop mount on `root/slow` served by `tiercache mount` on `root/fast`; panics naming
/// what is missing where that is impossible.
fn ext4_mount() -> OwnBacking {
    let dir = tempfile::tempdir().unwrap();
    let (img, backing, mnt) = (
        dir.path().join("backing.ext4"),
        dir.path().join("slow"),
        dir.path().join("fast"),
    );
    std::fs::create_dir_all(&backing).unwrap();
    std::fs::create_dir_all(&mnt).unwrap();
    std::fs::File::create(&img)
        .unwrap()
        .set_len(16 << 20)
        .unwrap();
    match Command::new("mkfs.ext4")
        .args(["-q", "-F", s(&img)])
        .output()
    {
        Ok(m) if m.status.success() => {}
        Ok(m) => panic!(
            "mkfs.ext4 {}: {}",
            img.display(),
            String::from_utf8_lossy(&m.stderr).trim()
        ),
        Err(e) => panic!("mkfs.ext4: {e} (install e2fsprogs: scripts/setup-deps.sh)"),
    }
    match Command::new("mount")
        .args(["-o", "loop", s(&img), s(&backing)])
        .output()
    {
        Ok(l) if l.status.success() => {}
        Ok(l) => panic!(
            "mount -o loop {}: {} (needs root and a free loop device: losetup -f)",
            img.display(),
            String::from_utf8_lossy(&l.stderr).trim()
        ),
        Err(e) => panic!("mount: {e}"),
    }
    OwnBacking::serve(dir, backing, mnt, "1M", 100)
}

fn set_mtime(path: &Path, t: SystemTime) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(t)
        .unwrap();
}

#[test]
fn a_new_file_reusing_an_unlinked_dirty_files_inode_reads_its_own_bytes() {
    let m = ext4_mount();
    let when = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    let old = m.mnt.join("old");
    std::fs::File::create(&old)
        .unwrap()
        .write_all(&[b'X'; 8192])
        .unwrap();
    set_mtime(&old, when); // touch -d @1000000000
    let ino = std::fs::metadata(m.backing.join("old")).unwrap().ino();
    std::fs::remove_file(&old).unwrap(); // before write-back
                                         // Time for the flusher to do whatever it does with the old file (write-back, sync, gc).
    std::thread::sleep(Duration::from_millis(1500));
    // A file created directly in BACKING (tar -x, cp -p): same size, same mtime.
    let new = m.backing.join("new");
    std::fs::write(&new, [b'Y'; 8192]).unwrap();
    set_mtime(&new, when);
    let reused = std::fs::metadata(&new).unwrap().ino();
    if reused != ino {
        // The old inode is still held (by the cache, before the fix) or ext4 picked another.
        eprintln!("inode {ino} not reused (new file got {reused})");
    }
    let got = std::fs::read(m.mnt.join("new")).unwrap();
    assert!(
        got == [b'Y'; 8192],
        "the new file (inode {reused}) served other bytes"
    );
    assert_eq!(
        reused, ino,
        "the unlinked file's inode must be let go at FORGET, not kept by the cache"
    );
}
