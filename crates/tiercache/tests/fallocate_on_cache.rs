//! Regression: `fallocate` through the cached mount (`CacheDataPath::fallocate`) changed BACKING
//! but not the memory tier's logical size, so after `posix_fallocate` grew a file, `stat` showed
//! the new size while reads past the old end of file returned EOF instead of zeros. The tier now
//! applies the change with the file written back and quiesced and takes the size from BACKING.
#![allow(clippy::unwrap_used)]

mod support;

use support::{mounted, s, tc, Mount};

use std::fs::OpenOptions;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

fn fallocate(f: &std::fs::File, mode: i32, offset: i64, len: i64) {
    // SAFETY: plain integer arguments on a descriptor we own.
    let rc = unsafe { libc::fallocate(f.as_raw_fd(), mode, offset, len) };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
}

fn pread(f: &std::fs::File, len: usize, offset: u64) -> Vec<u8> {
    let mut buf = vec![0xAAu8; len];
    let n = f.read_at(&mut buf, offset).unwrap();
    buf.truncate(n);
    buf
}

#[test]
fn reads_past_the_old_eof_see_the_allocated_zeros() {
    let m = Mount::new(&["--memory", "1M"]);
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(m.mnt.join("o"))
        .unwrap();
    f.write_all_at(b"xyz", 0).unwrap(); // cached, dirty: the tier knows the file
    fallocate(&f, 0, 0, 100_000);
    assert_eq!(f.metadata().unwrap().len(), 100_000);
    assert_eq!(pread(&f, 3, 0), b"xyz");
    assert_eq!(pread(&f, 10, 50_000), vec![0u8; 10], "EOF at the old size");
    assert_eq!(pread(&f, 10, 99_996), vec![0u8; 4]);
    // keep-size allocation past EOF changes nothing visible
    fallocate(&f, libc::FALLOC_FL_KEEP_SIZE, 0, 200_000);
    assert_eq!(f.metadata().unwrap().len(), 100_000);
    assert!(pread(&f, 10, 100_000).is_empty());
    // cached dirty bytes, then a hole punched into them
    f.write_all_at(&[1u8; 8192], 0).unwrap();
    fallocate(
        &f,
        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
        0,
        4096,
    );
    assert_eq!(pread(&f, 8, 4090), [0, 0, 0, 0, 0, 0, 1, 1]);
    // appending after the allocation lands after it
    f.write_all_at(b"end", 100_000).unwrap();
    assert_eq!(f.metadata().unwrap().len(), 100_003);
    drop(f);
    let out = tc(&["unmount", s(&m.mnt)]);
    assert!(out.status.success());
    assert!(!mounted(&m.mnt));
    let data = std::fs::read(m.backing.join("o")).unwrap();
    assert_eq!(data.len(), 100_003);
    assert!(data[..4096].iter().all(|&b| b == 0));
    assert!(data[4096..8192].iter().all(|&b| b == 1));
    assert!(data[8192..100_000].iter().all(|&b| b == 0));
    assert_eq!(&data[100_000..], b"end");
}
