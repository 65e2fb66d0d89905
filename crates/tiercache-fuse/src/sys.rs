//! Thin, safe wrappers around the Linux syscalls the pass-through needs.
//!
//! Every backing object is addressed through a file descriptor, never through
//! a path below BACKING: inodes hold an `O_PATH` descriptor, names are resolved
//! one component at a time with `*at()` calls relative to a parent directory
//! descriptor (always with `O_NOFOLLOW`), and operations that have no
//! `O_PATH`-capable variant go through the `/proc/self/fd/N` magic link, which
//! resolves to the very inode the descriptor refers to (for a symlink: the link
//! itself, not its target). Renames of open files therefore never break a
//! handle, and no request can escape BACKING through a symlink.
//!
//! All functions return `io::Result` with the raw OS error preserved, so the
//! caller can hand the errno back to the kernel unchanged.

use std::cell::Cell;
use std::ffi::{CStr, CString, OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

/// Converts a `-1`-on-error return value into an `io::Result`.
fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Same as [`cvt`] for `ssize_t` returning calls.
fn cvt_size(ret: libc::ssize_t) -> io::Result<usize> {
    usize::try_from(ret).map_err(|_| io::Error::last_os_error())
}

/// Wraps a freshly returned descriptor into an `OwnedFd`.
fn owned(fd: libc::c_int) -> io::Result<OwnedFd> {
    let fd = cvt(fd)?;
    // SAFETY: `fd` was just returned by the kernel, is valid and owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Converts a single path component into a C string, rejecting names the kernel
/// never sends (empty, containing `/` or NUL) so that a component can never be
/// interpreted as a multi-component path.
pub(crate) fn name_cstr(name: &OsStr) -> io::Result<CString> {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.contains(&b'/') {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    CString::new(bytes).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// Converts an arbitrary byte string (symlink target, xattr name) to a C string.
pub(crate) fn bytes_cstr(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// `/proc/self/fd/N` for `fd`.
pub(crate) fn proc_path(fd: RawFd) -> CString {
    // A formatted integer never contains a NUL byte.
    CString::new(format!("/proc/self/fd/{fd}")).unwrap_or_default()
}

/// Opens `name` below `dirfd` as an `O_PATH` descriptor without following a
/// final symlink.
pub(crate) fn open_path_at(dirfd: RawFd, name: &CStr) -> io::Result<OwnedFd> {
    // SAFETY: `name` is a valid NUL-terminated string; the flags request a new fd.
    owned(unsafe {
        libc::openat(
            dirfd,
            name.as_ptr(),
            libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    })
}

/// Opens a path (used for BACKING itself) as an `O_PATH` directory descriptor.
pub(crate) fn open_dir_path(path: &std::path::Path) -> io::Result<OwnedFd> {
    let c = bytes_cstr(path.as_os_str().as_bytes())?;
    // SAFETY: `c` is a valid NUL-terminated string.
    owned(unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    })
}

/// Re-opens the inode behind `fd` (usually `O_PATH`) with real open `flags`.
pub(crate) fn reopen(fd: RawFd, flags: libc::c_int) -> io::Result<File> {
    let path = proc_path(fd);
    // SAFETY: `path` is a valid NUL-terminated string.
    let fd = owned(unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC) })?;
    Ok(File::from(fd))
}

/// Returns a new `O_PATH` descriptor for the inode behind `fd`.
pub(crate) fn path_fd_of(fd: RawFd) -> io::Result<OwnedFd> {
    let path = proc_path(fd);
    // SAFETY: `path` is a valid NUL-terminated string.
    owned(unsafe { libc::open(path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) })
}

/// Opens `name` below `dirfd` with `flags` (which may include `O_CREAT`).
pub(crate) fn open_at(
    dirfd: RawFd,
    name: &CStr,
    flags: libc::c_int,
    mode: u32,
) -> io::Result<File> {
    // SAFETY: `name` is a valid NUL-terminated string; mode is passed by value.
    let fd = owned(unsafe {
        libc::openat(
            dirfd,
            name.as_ptr(),
            flags | libc::O_CLOEXEC,
            mode as libc::c_uint,
        )
    })?;
    Ok(File::from(fd))
}

/// `fstatat(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW)`: works on `O_PATH` fds.
pub(crate) fn fstat(fd: RawFd) -> io::Result<libc::stat> {
    // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: the empty string is NUL-terminated and `st` is a valid out pointer.
    cvt(unsafe {
        libc::fstatat(
            fd,
            c"".as_ptr(),
            &mut st,
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
        )
    })?;
    Ok(st)
}

/// `fstatat(dirfd, name, AT_SYMLINK_NOFOLLOW)`: no descriptor needed.
pub(crate) fn fstat_at(dirfd: RawFd, name: &CStr) -> io::Result<libc::stat> {
    // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `name` is NUL-terminated and `st` is a valid out pointer.
    cvt(unsafe { libc::fstatat(dirfd, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) })?;
    Ok(st)
}

/// `fstatfs`-based statvfs of the file system holding `fd`.
pub(crate) fn fstatvfs(fd: RawFd) -> io::Result<libc::statvfs> {
    // SAFETY: an all-zero `statvfs` is a valid value of this plain C struct.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid out pointer; fstatvfs accepts O_PATH descriptors.
    cvt(unsafe { libc::fstatvfs(fd, &mut st) })?;
    Ok(st)
}

pub(crate) fn mkdir_at(dirfd: RawFd, name: &CStr, mode: u32) -> io::Result<()> {
    // SAFETY: `name` is a valid NUL-terminated string.
    cvt(unsafe { libc::mkdirat(dirfd, name.as_ptr(), mode as libc::mode_t) }).map(drop)
}

pub(crate) fn mknod_at(dirfd: RawFd, name: &CStr, mode: u32, rdev: u64) -> io::Result<()> {
    // SAFETY: `name` is a valid NUL-terminated string.
    cvt(unsafe { libc::mknodat(dirfd, name.as_ptr(), mode as libc::mode_t, rdev) }).map(drop)
}

pub(crate) fn symlink_at(target: &CStr, dirfd: RawFd, name: &CStr) -> io::Result<()> {
    // SAFETY: both strings are valid and NUL-terminated.
    cvt(unsafe { libc::symlinkat(target.as_ptr(), dirfd, name.as_ptr()) }).map(drop)
}

/// Hard-links the inode behind `fd` as `newdir/newname`.
pub(crate) fn link_fd(fd: RawFd, newdir: RawFd, newname: &CStr) -> io::Result<()> {
    let path = proc_path(fd);
    // SAFETY: both strings are valid and NUL-terminated. AT_SYMLINK_FOLLOW follows
    // only the /proc magic link, which resolves to the inode itself.
    cvt(unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            path.as_ptr(),
            newdir,
            newname.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    })
    .map(drop)
}

pub(crate) fn unlink_at(dirfd: RawFd, name: &CStr, flags: libc::c_int) -> io::Result<()> {
    // SAFETY: `name` is a valid NUL-terminated string.
    cvt(unsafe { libc::unlinkat(dirfd, name.as_ptr(), flags) }).map(drop)
}

pub(crate) fn rename_at2(
    olddir: RawFd,
    oldname: &CStr,
    newdir: RawFd,
    newname: &CStr,
    flags: u32,
) -> io::Result<()> {
    // SAFETY: both names are valid NUL-terminated strings.
    cvt(unsafe {
        libc::renameat2(
            olddir,
            oldname.as_ptr(),
            newdir,
            newname.as_ptr(),
            flags as libc::c_uint,
        )
    })
    .map(drop)
}

/// Reads the target of the symlink behind an `O_PATH` descriptor.
pub(crate) fn readlink_fd(fd: RawFd) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
    // SAFETY: `buf` is writable for `buf.len()` bytes; the empty path selects `fd`.
    let n = cvt_size(unsafe {
        libc::readlinkat(fd, c"".as_ptr(), buf.as_mut_ptr().cast(), buf.len())
    })?;
    buf.truncate(n);
    Ok(buf)
}

/// `fchownat(fd, "", uid, gid, AT_EMPTY_PATH)`; `u32::MAX` leaves an id unchanged.
pub(crate) fn chown_fd(fd: RawFd, uid: u32, gid: u32) -> io::Result<()> {
    // SAFETY: the empty string is NUL-terminated; AT_EMPTY_PATH selects `fd` itself
    // (for an O_PATH symlink fd, the link itself).
    cvt(unsafe { libc::fchownat(fd, c"".as_ptr(), uid, gid, libc::AT_EMPTY_PATH) }).map(drop)
}

/// `faccessat(2)` with `AT_EACCESS` of the inode behind `fd`: checks `mask` with the
/// thread's fsuid, fsgid and groups.
pub(crate) fn access_fd(fd: RawFd, mask: i32) -> io::Result<()> {
    let path = proc_path(fd);
    // SAFETY: `path` is a valid NUL-terminated string.
    cvt(unsafe { libc::faccessat(libc::AT_FDCWD, path.as_ptr(), mask, libc::AT_EACCESS) }).map(drop)
}

/// `chmod` through the /proc magic link (works for `O_PATH` descriptors).
pub(crate) fn chmod_fd(fd: RawFd, mode: u32) -> io::Result<()> {
    let path = proc_path(fd);
    // SAFETY: `path` is a valid NUL-terminated string.
    cvt(unsafe { libc::chmod(path.as_ptr(), mode as libc::mode_t) }).map(drop)
}

/// `utimensat(fd, "", times, AT_EMPTY_PATH)`; entries may be `UTIME_NOW`/`UTIME_OMIT`.
pub(crate) fn utimens_fd(fd: RawFd, times: &[libc::timespec; 2]) -> io::Result<()> {
    // SAFETY: `times` points to two valid timespec values; the path is empty.
    cvt(unsafe {
        libc::utimensat(
            fd,
            c"".as_ptr(),
            times.as_ptr(),
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
        )
    })
    .map(drop)
}

/// `fallocate(2)` on an open descriptor.
pub(crate) fn fallocate(fd: RawFd, mode: i32, offset: u64, len: u64) -> io::Result<()> {
    let off = i64::try_from(offset).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    let len = i64::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    // SAFETY: plain integer arguments on a descriptor we own.
    cvt(unsafe { libc::fallocate(fd, mode, off, len) }).map(drop)
}

/// Reads an xattr of the inode behind `fd`; `size == 0` only queries the length.
pub(crate) fn getxattr_fd(fd: RawFd, name: &CStr, size: usize) -> io::Result<Vec<u8>> {
    let path = proc_path(fd);
    let mut buf = vec![0u8; size];
    let ptr = if size == 0 {
        std::ptr::null_mut()
    } else {
        buf.as_mut_ptr().cast()
    };
    // SAFETY: `ptr` is null (size query) or valid for `size` bytes.
    let n = cvt_size(unsafe { libc::getxattr(path.as_ptr(), name.as_ptr(), ptr, size) })?;
    if size == 0 {
        buf.resize(n, 0);
        return Ok(buf);
    }
    buf.truncate(n);
    Ok(buf)
}

/// Lists xattr names of the inode behind `fd` (NUL separated, as the kernel wants).
pub(crate) fn listxattr_fd(fd: RawFd, size: usize) -> io::Result<Vec<u8>> {
    let path = proc_path(fd);
    let mut buf = vec![0u8; size];
    let ptr = if size == 0 {
        std::ptr::null_mut()
    } else {
        buf.as_mut_ptr().cast()
    };
    // SAFETY: `ptr` is null (size query) or valid for `size` bytes.
    let n = cvt_size(unsafe { libc::listxattr(path.as_ptr(), ptr, size) })?;
    if size == 0 {
        buf.resize(n, 0);
        return Ok(buf);
    }
    buf.truncate(n);
    Ok(buf)
}

pub(crate) fn setxattr_fd(fd: RawFd, name: &CStr, value: &[u8], flags: i32) -> io::Result<()> {
    let path = proc_path(fd);
    // SAFETY: `value` is valid for `value.len()` bytes; strings are NUL-terminated.
    cvt(unsafe {
        libc::setxattr(
            path.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            flags,
        )
    })
    .map(drop)
}

pub(crate) fn removexattr_fd(fd: RawFd, name: &CStr) -> io::Result<()> {
    let path = proc_path(fd);
    // SAFETY: both strings are valid and NUL-terminated.
    cvt(unsafe { libc::removexattr(path.as_ptr(), name.as_ptr()) }).map(drop)
}

/// One entry returned by [`read_dir`].
#[derive(Debug, Clone)]
pub(crate) struct RawDirEntry {
    pub(crate) ino: u64,
    pub(crate) dtype: u8,
    pub(crate) name: OsString,
}

/// Reads a whole directory (including `.` and `..`) from an open directory fd.
pub(crate) fn read_dir(dir: &File) -> io::Result<Vec<RawDirEntry>> {
    // SAFETY: plain lseek on a descriptor we own.
    if unsafe { libc::lseek(dir.as_raw_fd(), 0, libc::SEEK_SET) } < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        // SAFETY: `buf` is writable for `buf.len()` bytes.
        let n = unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                dir.as_raw_fd(),
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        let n = usize::try_from(n).map_err(|_| io::Error::last_os_error())?;
        if n == 0 {
            return Ok(out);
        }
        parse_dirents(&buf[..n.min(buf.len())], &mut out);
    }
}

/// Parses `struct linux_dirent64` records; stops at the first malformed record.
fn parse_dirents(mut buf: &[u8], out: &mut Vec<RawDirEntry>) {
    // d_ino: u64, d_off: i64, d_reclen: u16, d_type: u8, d_name: [u8]
    const HDR: usize = 19;
    while buf.len() >= HDR {
        let mut ino = [0u8; 8];
        ino.copy_from_slice(&buf[0..8]);
        let reclen = usize::from(u16::from_ne_bytes([buf[16], buf[17]]));
        if reclen < HDR || reclen > buf.len() {
            return;
        }
        let dtype = buf[18];
        let name = &buf[HDR..reclen];
        let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
        out.push(RawDirEntry {
            ino: u64::from_ne_bytes(ino),
            dtype,
            name: OsString::from_vec(name[..end].to_vec()),
        });
        buf = &buf[reclen..];
    }
}

thread_local! {
    /// Whether this thread has its own fs struct (own umask), see [`thread_umask`].
    static PRIVATE_FS: Cell<Option<bool>> = const { Cell::new(None) };
    /// The umask [`thread_umask`] last gave this thread's private fs struct.
    static UMASK: Cell<Option<u32>> = const { Cell::new(None) };
}

/// Sets the umask used by the next create call on this thread.
///
/// On first use the thread calls `unshare(CLONE_FS)` so that its umask is
/// private (the same technique virtiofsd uses); returns `false` when that is
/// not possible, in which case the caller must apply the umask by hand.
pub(crate) fn thread_umask(mask: u32) -> bool {
    let private = PRIVATE_FS.with(|p| match p.get() {
        Some(v) => v,
        None => {
            // SAFETY: unshare(CLONE_FS) only detaches this thread's cwd/root/umask.
            let ok = unsafe { libc::unshare(libc::CLONE_FS) } == 0;
            if !ok {
                log::warn!(
                    "unshare(CLONE_FS) failed ({}); applying umask by hand",
                    io::Error::last_os_error()
                );
            }
            p.set(Some(ok));
            ok
        }
    });
    if private {
        // Only this function changes the private umask: set it when it differs.
        let mask = mask & 0o777;
        UMASK.with(|u| {
            if u.get() != Some(mask) {
                // SAFETY: umask never fails; it only affects this thread's private fs struct.
                unsafe { libc::umask(mask as libc::mode_t) };
                u.set(Some(mask));
            }
        });
    }
    private
}

/// Effective uid of the daemon.
pub(crate) fn geteuid() -> u32 {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn names_are_single_components() {
        assert!(name_cstr(OsStr::new("a")).is_ok());
        assert!(name_cstr(OsStr::new("a/b")).is_err());
        assert!(name_cstr(OsStr::new("")).is_err());
        assert!(name_cstr(OsStr::from_bytes(b"a\0b")).is_err());
    }

    #[test]
    fn parse_dirents_handles_truncated_input() {
        let mut rec = vec![0u8; 24];
        rec[0..8].copy_from_slice(&7u64.to_ne_bytes());
        rec[16..18].copy_from_slice(&24u16.to_ne_bytes());
        rec[18] = libc::DT_REG;
        rec[19..22].copy_from_slice(b"abc");
        let mut out = Vec::new();
        parse_dirents(&rec, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].name, OsString::from("abc"));
        assert_eq!(out[0].ino, 7);
        out.clear();
        parse_dirents(&rec[..20], &mut out);
        assert!(out.is_empty());
        let mut bad = rec.clone();
        bad[16..18].copy_from_slice(&2u16.to_ne_bytes());
        parse_dirents(&bad, &mut out);
        assert!(out.is_empty());
    }
}
