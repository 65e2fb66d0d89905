//! Regression (issue 17, review item 7): after `fork()` the child's copy of a zero-copy
//! client's socket was replaced with `dup2`, which cleared close-on-exec (the child's programs
//! inherited the descriptor), and the child kept the parent's entries in the per-process socket
//! table, so a later fork in the child replaced whatever the child had opened under those
//! descriptor numbers since. Shown here on a real mount: the child's copy is gone and stays
//! close-on-exec, its reuse of the number survives a fork, a new session in the child works,
//! and the parent's session is untouched (the child never wrote into it).
#![allow(clippy::unwrap_used)]

mod support;

use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;
use support::Mount;
use tiercache_client::{Client, Error};

fn content(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed) ^ (i >> 11) as u8)
        .collect()
}

/// The descriptor of this process connected to `mnt`'s zero-copy service (its peer is the
/// service's abstract socket).
fn service_socket(mnt: &Path) -> RawFd {
    let want = tiercache_client::wire::socket_name(mnt);
    for e in std::fs::read_dir("/proc/self/fd").unwrap() {
        let Ok(fd) = e.unwrap().file_name().to_string_lossy().parse::<RawFd>() else {
            continue;
        };
        // SAFETY: an all-zero sockaddr_un is valid; `len` says how much the kernel may write.
        let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
        // SAFETY: valid out pointers of the right size; a non-socket just fails.
        let r = unsafe {
            libc::getpeername(fd, (&mut addr as *mut libc::sockaddr_un).cast(), &mut len)
        };
        let path_off = std::mem::offset_of!(libc::sockaddr_un, sun_path);
        if r != 0
            || addr.sun_family != libc::AF_UNIX as libc::sa_family_t
            || len as usize <= path_off
        {
            continue;
        }
        let name: Vec<u8> = addr.sun_path[..len as usize - path_off]
            .iter()
            .map(|&c| c as u8)
            .collect();
        if name.first() == Some(&0) && name[1..] == *want.as_bytes() {
            return fd;
        }
    }
    panic!("no descriptor connected to {want}");
}

fn link_of(fd: RawFd) -> Option<std::path::PathBuf> {
    std::fs::read_link(format!("/proc/self/fd/{fd}")).ok()
}

/// Waits for `pid`; whether it exited with 0.
fn exited_ok(pid: libc::pid_t) -> bool {
    let mut status = 0;
    // SAFETY: waits for a child this process made.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
}

/// What the child checks (the parent's client was moved in; `old` is its socket's number).
fn in_child(m: &Mount, old: RawFd, c: Client, data: &[u8]) -> Result<(), String> {
    if link_of(old).as_deref() != Some(Path::new("/dev/null")) {
        return Err(format!(
            "the parent's socket is still here: {:?}",
            link_of(old)
        ));
    }
    // SAFETY: F_GETFD on a descriptor number; no memory involved.
    let flags = unsafe { libc::fcntl(old, libc::F_GETFD) };
    if flags < 0 || flags & libc::FD_CLOEXEC == 0 {
        return Err(format!(
            "the replaced socket is not close-on-exec (flags {flags})"
        ));
    }
    {
        let f = c.open(m.mnt.join("f"));
        if !matches!(f, Err(Error::Protocol(_))) {
            return Err(format!("the parent's client worked in the child: {f:?}"));
        }
    }
    // Going, the old client closes the child's copy: the number is free, and reused here.
    drop(c);
    if link_of(old).is_some() {
        return Err("the old client left its descriptor open".into());
    }
    let mine = std::fs::File::create(m.backing.join("child-file")).map_err(|e| e.to_string())?;
    // The lowest free number may be it already; else it is put there.
    // SAFETY: both descriptors are this process's; the result is checked.
    if mine.as_raw_fd() != old
        && unsafe { libc::dup3(mine.as_raw_fd(), old, libc::O_CLOEXEC) } != old
    {
        return Err("dup3 failed".into());
    }
    // A fork of the child must leave the child's own descriptor alone.
    // SAFETY: the grandchild only reads a link and `_exit`s.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let kept = link_of(old).is_some_and(|l| l.ends_with("child-file"));
        // SAFETY: ends the grandchild at once.
        unsafe { libc::_exit(if kept { 0 } else { 1 }) };
    }
    if pid < 0 || !exited_ok(pid) {
        return Err(format!(
            "a fork in the child replaced the child's descriptor {old} (the parent's old number)"
        ));
    }
    // A session of its own works: reads, and an update.
    let c = Client::connect(&m.mnt).map_err(|e| e.to_string())?;
    let f = c.open_rw(m.mnt.join("f")).map_err(|e| e.to_string())?;
    let bs = c.block_size();
    let blocks = f.read_blocks(0, 3).map_err(|e| e.to_string())?;
    for (i, b) in blocks.iter().enumerate() {
        let mut got = vec![0; bs];
        b.copy_to(&mut got);
        if got[..] != data[i * bs..(i + 1) * bs] {
            return Err(format!("block {i} read other bytes in the child"));
        }
    }
    drop(blocks);
    let mut u = f.write_block(2).map_err(|e| e.to_string())?;
    u[..5].copy_from_slice(b"child");
    u.commit().map_err(|e| e.to_string())?;
    drop(u);
    f.sync(0, 0, false).map_err(|e| e.to_string())?;
    Ok(())
}

#[test]
fn a_forked_child_never_touches_the_parents_connection_and_connects_anew() {
    let m = Mount::new(&["--zero-copy"]);
    let data = content(40_000, 9);
    std::fs::write(m.mnt.join("f"), &data).unwrap();
    let c = Client::connect(&m.mnt).unwrap();
    let bs = c.block_size();
    let old = service_socket(&m.mnt);
    // The parent holds pins across the fork (a file of its own, opened through the same
    // client, before the child takes a copy of everything).
    let parent = Client::connect(&m.mnt).unwrap();
    let pf = parent.open_rw(m.mnt.join("f")).unwrap();
    let held = pf.read_blocks(0, 2).unwrap();
    // SAFETY: the child runs single-threaded code and ends with `_exit`.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        std::mem::forget(held); // the parent's pins: not the child's to drop
        let r = in_child(&m, old, c, &data);
        if let Err(e) = &r {
            eprintln!("child: {e}");
        }
        // SAFETY: ends the child at once, running no destructors of the parent's state.
        unsafe { libc::_exit(if r.is_ok() { 0 } else { 1 }) };
    }
    assert!(pid > 0);
    assert!(exited_ok(pid), "the child failed (its stderr says why)");

    // The parent's sessions are as they were: in step (a request and its answer), pins kept.
    assert_eq!(parent.pinned_slots(), 2);
    let mut got = vec![0; bs];
    held[1].copy_to(&mut got);
    assert_eq!(got, &data[bs..2 * bs]);
    let mut u = pf.write_block(3).unwrap();
    u[..6].copy_from_slice(b"parent");
    u.commit().unwrap();
    drop(u);
    assert_eq!(pf.sync(0, 0, false).unwrap(), data.len() as u64);
    drop(held);
    let f = c.open(m.mnt.join("f")).unwrap();
    assert_eq!(f.read_blocks(4, 1).unwrap().len(), 1);
    drop(f);

    let mut want = data.clone();
    want[2 * bs..2 * bs + 5].copy_from_slice(b"child");
    want[3 * bs..3 * bs + 6].copy_from_slice(b"parent");
    assert_eq!(std::fs::read(m.mnt.join("f")).unwrap(), want);
    drop(pf);
    drop(parent);
    drop(c);
}
