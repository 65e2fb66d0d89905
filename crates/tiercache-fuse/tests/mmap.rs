//! (d) Shared writable mmap through the mount: stores are visible to read(2)
//! through another descriptor, in the backing file, and writes through
//! write(2) are visible in the mapping. Runs with direct I/O (needs
//! `FUSE_DIRECT_IO_ALLOW_MMAP`) and with the kernel page cache.
#![allow(clippy::unwrap_used)]

mod common;

use std::process::Command;

use common::{run_in, text, TestMount};
use tiercache_fuse::MountOptions;

const MMAP_PY: &str = r#"
import mmap, os
size = 3 * 4096 + 100
with open("m", "wb") as f:
    f.write(b"\0" * size)
fd = os.open("m", os.O_RDWR)
mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
mm[100:105] = b"hello"
mm[size - 5:size] = b"world"
mm.flush()
r = os.open("m", os.O_RDONLY)
data = os.pread(r, size, 0)
assert data[100:105] == b"hello", data[100:105]
assert data[size - 5:] == b"world", data[size - 5:]
os.pwrite(fd, b"XYZ", 4096 + 7)
assert mm[4096 + 7:4096 + 10] == b"XYZ", mm[4096 + 7:4096 + 10]
mm[8192:8195] = b"abc"
mm.close()
os.close(fd)
assert os.pread(r, 3, 8192) == b"abc"
os.close(r)
# private mappings never write back
fd = os.open("m", os.O_RDWR)
pm = mmap.mmap(fd, size, mmap.MAP_PRIVATE, mmap.PROT_READ | mmap.PROT_WRITE)
pm[0:4] = b"priv"
pm.close()
assert os.pread(fd, 4, 0) == b"\0\0\0\0"
os.close(fd)
print("ok")
"#;

fn mmap_roundtrip(opts: MountOptions) {
    let m = TestMount::new(opts);
    let out = run_in(&m.mnt, Command::new("python3").arg("-c").arg(MMAP_PY));
    assert!(out.status.success(), "{}", text(&out, &m.mnt));
    let data = std::fs::read(m.backing.join("m")).unwrap();
    assert_eq!(&data[100..105], b"hello");
    assert_eq!(&data[8192..8195], b"abc");
    assert_eq!(&data[data.len() - 5..], b"world");
}

#[test]
fn shared_mmap_direct_io() {
    let m = TestMount::new(MountOptions::default());
    assert!(
        m.handle.as_ref().unwrap().direct_io_allow_mmap(),
        "kernel did not accept FUSE_DIRECT_IO_ALLOW_MMAP"
    );
    drop(m);
    mmap_roundtrip(MountOptions::default());
}

#[test]
fn shared_mmap_kernel_cache() {
    let mut opts = MountOptions::default();
    opts.kernel_cache = true;
    mmap_roundtrip(opts);
}
