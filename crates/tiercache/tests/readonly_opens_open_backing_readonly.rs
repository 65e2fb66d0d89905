//! Bug: read-only opens reopened BACKING read-write (write-intent opens show in inotify, break leases, cost an NFS RPC), and a read-only descriptor could replace the writable one while dirty blocks were pending (EBADF at write-back).
#![allow(clippy::unwrap_used)]

mod support;

use support::Mount;

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Access modes (`O_ACCMODE` bits of `flags:` in fdinfo) of the daemon's descriptors of `target`.
fn access_modes_of(pid: i32, target: &Path) -> Vec<i32> {
    let target = std::fs::canonicalize(target).unwrap();
    let mut modes = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap() {
        let e = e.unwrap();
        if std::fs::read_link(e.path()).ok().as_deref() != Some(target.as_path()) {
            continue;
        }
        let info = std::fs::read_to_string(format!(
            "/proc/{pid}/fdinfo/{}",
            e.file_name().to_str().unwrap()
        ))
        .unwrap_or_default();
        let flags = info
            .lines()
            .find_map(|l| l.strip_prefix("flags:"))
            .map(|v| i32::from_str_radix(v.trim(), 8).unwrap())
            .unwrap();
        if flags & libc::O_PATH == 0 {
            modes.push(flags & libc::O_ACCMODE);
        }
    }
    modes
}

#[test]
fn a_read_only_open_opens_backing_read_only() {
    let m = Mount::new(&["--memory", "8M"]);
    std::fs::write(m.backing.join("f"), b"some bytes").unwrap();
    let mut f = File::open(m.mnt.join("f")).unwrap();
    let mut got = String::new();
    f.read_to_string(&mut got).unwrap();
    assert_eq!(got, "some bytes");
    let modes = access_modes_of(m.pid(), &m.backing.join("f"));
    assert!(!modes.is_empty(), "the open handle's descriptor is there");
    assert!(
        modes.iter().all(|&a| a == libc::O_RDONLY),
        "write-intent descriptor for a read-only open: {modes:?}"
    );
}

#[test]
fn a_read_only_open_does_not_strand_dirty_data_of_a_closed_writer() {
    let m = Mount::new(&["--memory", "8M"]);
    std::fs::write(m.backing.join("f"), [b'0'; 10_000]).unwrap();
    let path = m.mnt.join("f");
    let rw = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    rw.write_all_at(b"dirty", 100).unwrap();
    let ro = File::open(&path).unwrap();
    drop(rw);
    // Write-back now, with the read-only handle the only one open.
    ro.sync_all().unwrap();
    let on_backing = std::fs::read(m.backing.join("f")).unwrap();
    assert_eq!(&on_backing[98..107], b"00dirty00");
    // And a write after that (another writer) is written back too.
    let rw = OpenOptions::new().write(true).open(&path).unwrap();
    rw.write_all_at(b"again", 0).unwrap();
    rw.sync_all().unwrap();
    drop(rw);
    drop(ro);
    assert_eq!(&std::fs::read(m.backing.join("f")).unwrap()[..5], b"again");
}
