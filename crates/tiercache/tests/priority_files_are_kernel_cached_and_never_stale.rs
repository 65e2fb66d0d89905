//! The fast path for hot data: by default the kernel page cache serves the hits of priority
//! files (no round trip to the daemon) while other files stay direct I/O, and what the kernel
//! holds is never stale — not after an edit behind the mount that restores size and mtime, not
//! after a write through another handle (direct or cached, pwrite or mmap), not after a
//! zero-copy client's update.
#![allow(clippy::unwrap_used)]

mod support;

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use support::{s, tc, Mount};
use tiercache_client::Client;

fn content(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed) ^ (i >> 11) as u8)
        .collect()
}

/// Requests the daemon saw for a class (hits + misses).
fn seen(m: &Mount, class: &str) -> u64 {
    let v = m.stats();
    let c = &v["classes"][class];
    c["hits"].as_u64().unwrap() + c["misses"].as_u64().unwrap()
}

fn read_at(f: &File, off: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    f.read_exact_at(&mut b, off).unwrap();
    b
}

fn hot_mount(extra: &[&str]) -> Mount {
    let mut args = vec!["--memory", "16M", "--priority", "hot"];
    args.extend_from_slice(extra);
    let m = Mount::new(&args);
    std::fs::create_dir(m.mnt.join("hot")).unwrap();
    m
}

#[test]
fn priority_hits_are_served_by_the_kernel_and_normal_ones_by_the_daemon() {
    let m = hot_mount(&[]);
    let data = content(1 << 20, 1);
    std::fs::write(m.backing.join("hot/a"), &data).unwrap();
    std::fs::write(m.backing.join("cold"), &data).unwrap();
    assert_eq!(std::fs::read(m.mnt.join("hot/a")).unwrap(), data);
    assert_eq!(std::fs::read(m.mnt.join("cold")).unwrap(), data);
    let (p, n) = (seen(&m, "priority"), seen(&m, "normal"));
    assert!(p > 0 && n > 0, "both files went through the daemon once");
    for _ in 0..3 {
        assert_eq!(std::fs::read(m.mnt.join("hot/a")).unwrap(), data);
        assert_eq!(std::fs::read(m.mnt.join("cold")).unwrap(), data);
    }
    assert_eq!(
        seen(&m, "priority"),
        p,
        "the kernel served the priority file"
    );
    assert!(
        seen(&m, "normal") >= n + 3 * 256,
        "normal reads reach the daemon"
    );
    let k = &m.stats()["kernel_cache"];
    assert_eq!(k["mode"], "priority");
    assert_eq!(k["files"], 1);
    assert_eq!(k["bytes_at_most"], 1 << 20);
    assert_eq!(k["cached_opens"], 4);
    assert_eq!(k["stale_drops"], 0);
}

#[test]
fn a_bad_mode_mounts_nothing_and_names_the_flag_or_key() {
    let dir = tempfile::tempdir().unwrap();
    let (b, mnt) = (dir.path().join("b"), dir.path().join("m"));
    std::fs::create_dir_all(&b).unwrap();
    std::fs::create_dir_all(&mnt).unwrap();
    support::fails_naming(
        &["mount", s(&b), s(&mnt), "--kernel-cache", "sometimes"],
        "--kernel-cache",
        "priority, all or off",
    );
    let cfg = dir.path().join("tc.toml");
    std::fs::write(&cfg, "kernel_cache = \"sometimes\"\n").unwrap();
    support::fails_naming(
        &["mount", s(&b), s(&mnt), "--config", s(&cfg)],
        "kernel_cache",
        "priority, all or off",
    );
    assert!(!support::mounted(&mnt));
}

#[test]
fn off_mode_sends_every_read_to_the_daemon() {
    let m = hot_mount(&["--kernel-cache", "off"]);
    let data = content(64 << 10, 2);
    std::fs::write(m.backing.join("hot/a"), &data).unwrap();
    assert_eq!(std::fs::read(m.mnt.join("hot/a")).unwrap(), data);
    let p = seen(&m, "priority");
    assert_eq!(std::fs::read(m.mnt.join("hot/a")).unwrap(), data);
    assert!(seen(&m, "priority") > p);
    assert_eq!(m.stats()["kernel_cache"]["files"], 0);
}

/// An edit on BACKING that puts size and mtime back is seen at the next open.
#[test]
fn an_edit_behind_the_mount_is_seen_at_the_next_open() {
    let m = hot_mount(&[]);
    let data = content(100_000, 3);
    let on_backing = m.backing.join("hot/a");
    std::fs::write(&on_backing, &data).unwrap();
    assert_eq!(std::fs::read(m.mnt.join("hot/a")).unwrap(), data);
    let before = std::fs::metadata(&on_backing).unwrap();
    let edited = OpenOptions::new().write(true).open(&on_backing).unwrap();
    edited.write_all_at(b"EDITED ON BACKING", 5000).unwrap();
    edited
        .set_times(std::fs::FileTimes::new().set_modified(before.modified().unwrap()))
        .unwrap();
    drop(edited);
    let mut want = data.clone();
    want[5000..5017].copy_from_slice(b"EDITED ON BACKING");
    assert_eq!(std::fs::read(m.mnt.join("hot/a")).unwrap(), want);
    assert!(m.stats()["kernel_cache"]["stale_drops"].as_u64().unwrap() >= 1);
}

/// Writes through other handles reach a reader that keeps its cached handle open: a cached
/// write, a direct-I/O (O_DIRECT) write, a shared mmap store, a truncate, a punched hole.
#[test]
fn writes_through_any_handle_reach_a_reader_holding_the_file_open() {
    let m = hot_mount(&[]);
    let data = content(256 << 10, 4);
    let path = m.mnt.join("hot/a");
    std::fs::write(&path, &data).unwrap();
    let reader = File::open(&path).unwrap();
    let mut want = data.clone();
    assert_eq!(read_at(&reader, 0, want.len()), want);

    let w = OpenOptions::new().write(true).open(&path).unwrap();
    w.write_all_at(b"cached write", 10).unwrap();
    want[10..22].copy_from_slice(b"cached write");
    assert_eq!(read_at(&reader, 0, want.len()), want, "cached write");

    let d = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path)
        .unwrap();
    let mut buf = vec![b'D'; 8192];
    let block = aligned_block(&mut buf);
    d.write_all_at(block, 8192).unwrap();
    want[8192..12288].copy_from_slice(block);
    assert_eq!(read_at(&reader, 0, want.len()), want, "O_DIRECT write");

    mmap_store(&path, 20_000, b"stored by mmap");
    want[20_000..20_014].copy_from_slice(b"stored by mmap");
    assert_eq!(read_at(&reader, 0, want.len()), want, "mmap store");

    // SAFETY: a valid descriptor; punching a hole in it.
    let r = unsafe {
        libc::fallocate(
            std::os::fd::AsRawFd::as_raw_fd(&w),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            65536,
            8192,
        )
    };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
    want[65536..73728].fill(0);
    assert_eq!(read_at(&reader, 0, want.len()), want, "punched hole");

    w.set_len(100_000).unwrap();
    want.truncate(100_000);
    let mut all = Vec::new();
    std::io::Read::read_to_end(&mut File::open(&path).unwrap(), &mut all).unwrap();
    assert_eq!(all, want, "truncate");
    drop((reader, w, d));
    let out = tc(&["unmount", s(&m.mnt)]);
    assert!(out.status.success());
    assert_eq!(std::fs::read(m.backing.join("hot/a")).unwrap(), want);
}

/// A zero-copy client's update is made by the daemon, which the kernel cannot see: the daemon
/// drops the range from the kernel's cache before the commit returns.
#[test]
fn a_zero_copy_update_reaches_a_reader_holding_the_file_open() {
    let m = hot_mount(&["--zero-copy"]);
    let data = content(40_000, 5);
    let path = m.mnt.join("hot/a");
    std::fs::write(&path, &data).unwrap();
    let reader = File::open(&path).unwrap();
    assert_eq!(read_at(&reader, 0, data.len()), data);
    let c = Client::connect(&m.mnt).unwrap();
    let f = c.open_rw(&path).unwrap();
    let bs = c.block_size();
    {
        let mut b = f.write_block(1).unwrap();
        b[7..24].copy_from_slice(b"zero-copy update!");
        b.commit().unwrap();
    }
    let mut want = data.clone();
    want[bs + 7..bs + 24].copy_from_slice(b"zero-copy update!");
    assert_eq!(read_at(&reader, 0, want.len()), want);
    assert!(m.stats()["kernel_cache"]["invalidations"].as_u64().unwrap() >= 1);
}

/// The 4 KiB of `buf` (8 KiB) that start at a 4 KiB boundary in memory, for O_DIRECT.
fn aligned_block(buf: &mut [u8]) -> &mut [u8] {
    let skip = (4096 - buf.as_ptr() as usize % 4096) % 4096;
    &mut buf[skip..skip + 4096]
}

/// Stores `bytes` at `off` of `path` through a shared mapping, in a child process, and syncs.
fn mmap_store(path: &Path, off: usize, bytes: &[u8]) {
    let script = format!(
        "import mmap,os\nfd=os.open({:?},os.O_RDWR)\nm=mmap.mmap(fd,0)\n\
         m[{off}:{}]=bytes({:?})\nm.flush()\nm.close()\nos.close(fd)\n",
        s(path),
        off + bytes.len(),
        bytes
    );
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
