//! Registering a file for a zero-copy client from the descriptor the client opened itself on
//! the mount: the kernel and the mount's permission checks decided what it may do with it;
//! this checks the descriptor proves that much and finds the same file on BACKING.
//!
//! Checks: a regular file of this mount; opened for reading (`O_RDONLY` or `O_RDWR`, not
//! `O_PATH` or `O_WRONLY`, which need no read permission); the path the kernel gives for it,
//! opened on BACKING *beneath* BACKING with no symlink followed (`openat2`), must be the same
//! inode on BACKING's own device. Updates (`Write`) need `O_RDWR`.

use super::adapter::CacheDataPath;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;
use tiercache_fuse::{AttrSnapshot, DataPath, FileHandleInfo};

/// A file a client registered.
#[derive(Debug)]
pub struct Opened {
    pub fh: FileHandleInfo,
    /// The client's descriptor was opened read-write (its `Write`s are taken).
    pub writable: bool,
}

fn bad(why: String) -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, why)
}

/// The errno a client gets for `e`.
pub fn errno_of(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(match e.kind() {
        io::ErrorKind::PermissionDenied => libc::EACCES,
        io::ErrorKind::InvalidInput => libc::EINVAL,
        io::ErrorKind::NotFound => libc::ENOENT,
        _ => libc::EIO,
    })
}

/// Registers the file behind `client_fd` like a FUSE open; `handle` makes its FUSE-side handle
/// number unique.
pub fn register(
    data: &CacheDataPath,
    mountpoint: &Path,
    backing: &Path,
    client_fd: File,
    handle: u64,
) -> io::Result<Opened> {
    // SAFETY: F_GETFL on a descriptor we own; no memory is passed.
    let fl = unsafe { libc::fcntl(client_fd.as_raw_fd(), libc::F_GETFL) };
    if fl < 0 {
        return Err(io::Error::last_os_error());
    }
    if fl & libc::O_PATH != 0 {
        return Err(bad(
            "an O_PATH descriptor proves no right to read the file".into()
        ));
    }
    let writable = match fl & libc::O_ACCMODE {
        libc::O_RDONLY => false,
        libc::O_RDWR => true,
        _ => return Err(bad("open the file for reading (O_RDONLY or O_RDWR)".into())),
    };
    let cm = client_fd.metadata()?;
    if cm.dev() != std::fs::metadata(mountpoint)?.dev() {
        return Err(bad(format!(
            "the descriptor is not of a file on {}",
            mountpoint.display()
        )));
    }
    if !cm.file_type().is_file() {
        return Err(bad("not a regular file".into()));
    }
    let link = std::fs::read_link(format!("/proc/self/fd/{}", client_fd.as_raw_fd()))?;
    let rel = link.strip_prefix(mountpoint).map_err(|_| {
        bad(format!(
            "{} is not under {}",
            link.display(),
            mountpoint.display()
        ))
    })?;
    let root = File::open(backing)?;
    let file = open_beneath(&root, rel, writable)?;
    let bm = file.metadata()?;
    if bm.dev() != root.metadata()?.dev() || bm.ino() != cm.ino() {
        return Err(io::Error::other(format!(
            "{} changed while it was opened (renamed?), or is on another file system inside \
             BACKING; try again",
            rel.display()
        )));
    }
    let fh = FileHandleInfo {
        fh: u64::MAX - handle,
        ino: cm.ino(),
        file: Arc::new(file),
        flags: if writable {
            libc::O_RDWR
        } else {
            libc::O_RDONLY
        },
        snapshot: AttrSnapshot {
            size: bm.len(),
            mtime: bm.modified()?,
            dev: bm.dev(),
            ino: bm.ino(),
        },
    };
    data.open(&fh)?;
    Ok(Opened { fh, writable })
}

/// Opens `rel` beneath `root` with no symlink followed and no `..` out of it.
fn open_beneath(root: &File, rel: &Path, writable: bool) -> io::Result<File> {
    let path = std::ffi::CString::new(rel.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"))?;
    // `libc::open_how` is non-exhaustive: zeroed, then filled in.
    // SAFETY: `open_how` is three integers; all-zero is valid.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    // O_NONBLOCK: a FIFO renamed into place cannot block the service (it is then refused as
    // not the client's inode); no effect on a regular file.
    let access = if writable {
        libc::O_RDWR
    } else {
        libc::O_RDONLY
    };
    how.flags = (libc::O_CLOEXEC | libc::O_NONBLOCK | access) as u64;
    how.resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS;
    // SAFETY: a valid directory descriptor, a NUL-terminated path and an `open_how` of the
    // size passed; the result is checked.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root.as_raw_fd(),
            path.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor openat2 just returned, owned by nobody else.
    Ok(unsafe { File::from_raw_fd(fd as i32) })
}
