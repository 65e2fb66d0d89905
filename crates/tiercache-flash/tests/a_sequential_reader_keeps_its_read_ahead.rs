//! Bug (issue 17, `bench flash` idle `seq_read` slower than before the hardening): every busy
//! drop (each 4 MiB of I/O on the cache file) dropped all of the file's clean pages past its
//! head, the read-ahead the kernel had just read for a sequential reader included, so the
//! kernel read it again: a sequential pass over the cache file read up to twice its bytes from
//! the disk (8 MiB read-ahead windows). Now the busy drops spare [`READ_AHEAD_SPARE`] bytes past
//! the latest read; what the reader has passed still goes, and the quiet drops take the rest.
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use std::path::Path;
use tiercache_flash::{FlashDevice, IoMode, DROP_EVERY};

const LEN: u64 = 64 << 20;
const CHUNK: usize = 64 << 10;

fn resident(path: &Path, range: std::ops::Range<u64>) -> usize {
    resident_pages(path, range).iter().filter(|&&b| b).count()
}

fn run(mode: IoMode) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flash.cache");
    let dev = open_file_device(&path, LEN, mode);
    let data = vec![0x5au8; CHUNK];
    for off in (0..LEN).step_by(CHUNK) {
        dev.write_at(&data, off).unwrap();
    }
    dev.sync().unwrap();
    let mut buf = vec![0u8; CHUNK];
    // Read sequentially up to the third busy drop (they come every DROP_EVERY bytes of I/O;
    // the sync above started the count afresh), but for the last chunk.
    let end = 3 * DROP_EVERY;
    for off in (0..end - CHUNK as u64).step_by(CHUNK) {
        dev.read_at(&mut buf, off).unwrap();
    }
    // The read-ahead past the reader, made certain: the kernel's own is asynchronous, so the
    // test brings 1 MiB past `end` in by another descriptor (not counted by the device).
    let other = std::fs::File::open(&path).unwrap();
    // SAFETY: posix_fadvise on a descriptor `other` owns; no memory is passed. RANDOM: no
    // read-ahead of its own beyond the stand-in.
    let rc = unsafe {
        libc::posix_fadvise(
            std::os::fd::AsRawFd::as_raw_fd(&other),
            0,
            0,
            libc::POSIX_FADV_RANDOM,
        )
    };
    assert_eq!(rc, 0);
    let mut mib = vec![0u8; 1 << 20];
    std::os::unix::fs::FileExt::read_exact_at(&other, &mut mib, end).unwrap();
    let before = resident(&path, end..end + (1 << 20));
    assert_eq!(before, 256, "{mode}: the read-ahead stand-in is not cached");
    // The last chunk: the third busy drop comes right after it.
    dev.read_at(&mut buf, end - CHUNK as u64).unwrap();
    assert_eq!(
        resident(&path, end..end + (1 << 20)),
        before,
        "{mode}: the drop at {end} took the read-ahead past the reader"
    );
    assert!(
        resident(&path, 0..end) <= (DROP_EVERY / 4096) as usize,
        "{mode}: what the reader passed was not dropped"
    );
}

#[test]
fn fadvise_mode_keeps_a_sequential_readers_read_ahead() {
    run(IoMode::Fadvise);
}
