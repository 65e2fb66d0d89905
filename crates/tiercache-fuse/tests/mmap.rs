//! (d) Shared writable mmap through the mount: stores are visible to read(2)
//! through another descriptor, in the backing file, and writes through
//! write(2) are visible in the mapping. Runs with direct I/O (needs
//! `FUSE_DIRECT_IO_ALLOW_MMAP`) and with the kernel page cache.
#![allow(clippy::unwrap_used)]

mod common;

use std::process::Command;

use common::{run_in, text, TestMount};
use tiercache_fuse::MountOptions;

const MMAP_PY: &str = include_str!("mmap.py");

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
    opts.kernel_cache = tiercache_fuse::KernelCacheMode::All;
    mmap_roundtrip(opts);
}
