//! File handles (`name_to_handle_at`/`open_by_handle_at`) and the descriptor limit.
//!
//! A file handle names an inode of a file system persistently and without holding it open
//! (for ext4: inode number and generation), so the inode table can remember any number of
//! inodes the kernel holds and open a descriptor only while a request needs one. Opening by
//! handle needs `CAP_DAC_READ_SEARCH`; [`probe`] tells whether it works for BACKING.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Largest handle the kernel produces (`MAX_HANDLE_SZ`).
const MAX_HANDLE_SZ: usize = 128;

/// `struct file_handle` with room for the largest handle.
#[repr(C)]
struct RawHandle {
    handle_bytes: u32,
    handle_type: i32,
    f_handle: [u8; MAX_HANDLE_SZ],
}

/// An opaque, persistent name of one inode on one mounted file system.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Handle {
    htype: i32,
    bytes: Box<[u8]>,
}

impl Handle {
    /// Heap bytes this handle owns (for the per-inode cost in stats).
    pub(crate) fn heap_bytes(&self) -> usize {
        self.bytes.len()
    }
}

/// The handle of the inode behind `fd` (any descriptor, `O_PATH` included) and the id of the
/// mount it was found on.
pub(crate) fn name_to_handle(fd: RawFd) -> io::Result<(Handle, i32)> {
    let mut raw = RawHandle {
        handle_bytes: MAX_HANDLE_SZ as u32,
        handle_type: 0,
        f_handle: [0; MAX_HANDLE_SZ],
    };
    let mut mount_id: libc::c_int = 0;
    // SAFETY: `raw` is a `struct file_handle` whose `handle_bytes` states the room after the
    // header; `mount_id` is a valid out pointer; the empty path with AT_EMPTY_PATH selects `fd`.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_name_to_handle_at,
            fd,
            c"".as_ptr(),
            &mut raw as *mut RawHandle,
            &mut mount_id as *mut libc::c_int,
            libc::AT_EMPTY_PATH,
        )
    };
    if ret != 0 {
        return Err(io::Error::last_os_error());
    }
    let n = (raw.handle_bytes as usize).min(MAX_HANDLE_SZ);
    Ok((
        Handle {
            htype: raw.handle_type,
            bytes: raw.f_handle[..n].into(),
        },
        mount_id,
    ))
}

/// Opens the inode named by `handle` on the file system of `mount_fd` with `flags`
/// (`O_PATH` allowed; a symlink is opened itself, never followed).
pub(crate) fn open_by_handle(mount_fd: RawFd, handle: &Handle, flags: i32) -> io::Result<OwnedFd> {
    let mut raw = RawHandle {
        handle_bytes: u32::try_from(handle.bytes.len())
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?,
        handle_type: handle.htype,
        f_handle: [0; MAX_HANDLE_SZ],
    };
    let n = handle.bytes.len().min(MAX_HANDLE_SZ);
    raw.f_handle[..n].copy_from_slice(&handle.bytes[..n]);
    // SAFETY: `raw` is a valid `struct file_handle`; the call returns a new descriptor or -1.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_open_by_handle_at,
            mount_fd,
            &mut raw as *mut RawHandle,
            flags | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = RawFd::try_from(fd).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    // SAFETY: `fd` was just returned by the kernel, is valid and owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Whether BACKING (open as `root_fd`, may be `O_PATH`) can be served by handles: a handle of
/// the root can be made and opened again. Returns the descriptor to open handles with (the
/// kernel wants a real open file there, not `O_PATH`) and the root's mount id, else why not.
pub(crate) fn probe(root_fd: RawFd) -> Result<(OwnedFd, i32), io::Error> {
    let (h, mount_id) = name_to_handle(root_fd)?;
    let mount_fd: OwnedFd = crate::sys::reopen(root_fd, libc::O_RDONLY | libc::O_DIRECTORY)?.into();
    open_by_handle(mount_fd.as_raw_fd(), &h, libc::O_PATH)?;
    Ok((mount_fd, mount_id))
}

/// Whether an error means the process (or system) ran out of descriptors.
pub(crate) fn is_fd_exhaustion(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

/// `RLIMIT_NOFILE` as `(soft, hard)`.
pub(crate) fn nofile_limit() -> io::Result<(u64, u64)> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid out pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((lim.rlim_cur, lim.rlim_max))
}

/// Raises the soft `RLIMIT_NOFILE` to the hard one; returns `(soft before, soft now)`.
pub fn raise_nofile_limit() -> io::Result<(u64, u64)> {
    let (soft, hard) = nofile_limit()?;
    if soft >= hard {
        return Ok((soft, soft));
    }
    let lim = libc::rlimit {
        rlim_cur: hard,
        rlim_max: hard,
    };
    // SAFETY: `lim` is a valid rlimit value; raising the soft limit up to the hard one is
    // always permitted.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((soft, hard))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn handle_round_trip_names_the_same_inode() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), b"x").unwrap();
        let root = crate::sys::open_dir_path(dir.path()).unwrap();
        let (mount_fd, _) = probe(root.as_raw_fd())
            .expect("file handles work for root on the test file system (ext4)");
        let root = mount_fd;
        let fd = crate::sys::open_path_at(root.as_raw_fd(), c"a").unwrap();
        let (h, _) = name_to_handle(fd.as_raw_fd()).unwrap();
        let again = open_by_handle(root.as_raw_fd(), &h, libc::O_PATH).unwrap();
        let a = crate::sys::fstat(fd.as_raw_fd()).unwrap();
        let b = crate::sys::fstat(again.as_raw_fd()).unwrap();
        assert_eq!((a.st_dev, a.st_ino), (b.st_dev, b.st_ino));
        // the inode is gone: its handle no longer opens (and never names another file)
        drop((fd, again));
        std::fs::remove_file(dir.path().join("a")).unwrap();
        std::fs::write(dir.path().join("b"), b"y").unwrap();
        match open_by_handle(root.as_raw_fd(), &h, libc::O_PATH) {
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::ESTALE)),
            Ok(fd) => {
                let st = crate::sys::fstat(fd.as_raw_fd()).unwrap();
                panic!("stale handle opened inode {}", st.st_ino);
            }
        }
    }
}
