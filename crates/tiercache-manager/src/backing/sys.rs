//! Thin wrappers of the system calls uncached BACKING I/O needs (`pwritev2` with flags,
//! `posix_fadvise`, `sync_file_range`, `fstat`, `fstatfs`, `syncfs`). Each does one call and keeps
//! its errno; the loops and the choices are in `uncached` and `behind`.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// `RWF_DONTCACHE` (Linux 6.14): a buffered write whose pages the kernel drops once their
/// writeback (which the write starts) has finished.
pub(super) const RWF_DONTCACHE: libc::c_int = libc::RWF_DONTCACHE;

/// `statfs.f_type` of file systems that keep their files in memory (the page cache is their
/// storage: there is nothing to drop).
const TMPFS_MAGIC: i64 = 0x0102_1994;
const RAMFS_MAGIC: i64 = 0x8584_58f6;

fn offset(off: u64) -> io::Result<libc::off_t> {
    libc::off_t::try_from(off).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))
}

fn result(n: isize) -> io::Result<usize> {
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// One `pwritev2` of `buf` at `off` with `flags`: the bytes written.
pub(super) fn pwritev2(fd: &File, buf: &[u8], off: u64, flags: libc::c_int) -> io::Result<usize> {
    let iov = libc::iovec {
        iov_base: buf.as_ptr().cast_mut().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: `iov` describes `buf`, readable for its whole length while the call runs (the
    // kernel only reads through it for a write); `fd` keeps the descriptor open.
    result(unsafe { libc::pwritev2(fd.as_raw_fd(), &iov, 1, offset(off)?, flags) })
}

/// `posix_fadvise(POSIX_FADV_DONTNEED)` of `len` bytes at `off` (`len` 0: to the end of the
/// file): the kernel starts writeback of dirty pages there and drops the clean, unmapped ones.
pub(super) fn drop_pages(fd: &File, off: u64, len: u64) -> io::Result<()> {
    let len = offset(len)?;
    // SAFETY: posix_fadvise passes no memory; `fd` keeps the descriptor open.
    let rc = unsafe {
        libc::posix_fadvise(fd.as_raw_fd(), offset(off)?, len, libc::POSIX_FADV_DONTNEED)
    };
    match rc {
        0 => Ok(()),
        e => Err(io::Error::from_raw_os_error(e)),
    }
}

/// Starts writeback of `len` bytes at `off` and waits until it has finished (the pages are
/// clean then). Not a durability point: no metadata, no device cache flush.
pub(super) fn write_out(fd: &File, off: u64, len: u64) -> io::Result<()> {
    let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE
        | libc::SYNC_FILE_RANGE_WRITE
        | libc::SYNC_FILE_RANGE_WAIT_AFTER;
    // SAFETY: sync_file_range passes no memory; `fd` keeps the descriptor open.
    let rc = unsafe { libc::sync_file_range(fd.as_raw_fd(), offset(off)?, offset(len)?, flags) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Starts writeback of `len` bytes at `off` without waiting for it.
pub(super) fn start_writeback(fd: &File, off: u64, len: u64) -> io::Result<()> {
    // SAFETY: sync_file_range passes no memory; `fd` keeps the descriptor open.
    let rc = unsafe {
        libc::sync_file_range(
            fd.as_raw_fd(),
            offset(off)?,
            offset(len)?,
            libc::SYNC_FILE_RANGE_WRITE,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// (`st_dev`, `st_ino`) of the inode `fd` is open on.
pub(super) fn inode_of(fd: BorrowedFd<'_>) -> io::Result<(u64, u64)> {
    // SAFETY: all-zero is a valid `stat` (plain integers), overwritten by fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid out pointer; the descriptor is open for the borrow.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((st.st_dev, st.st_ino))
}

/// `st_dev` of the file system holding `fd`.
pub(super) fn device_of(fd: BorrowedFd<'_>) -> io::Result<u64> {
    inode_of(fd).map(|(dev, _)| dev)
}

/// `syncfs` of the file system holding `fd`.
pub(super) fn syncfs(fd: &File) -> io::Result<()> {
    // SAFETY: syncfs passes no memory; `fd` keeps the descriptor open.
    if unsafe { libc::syncfs(fd.as_raw_fd()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether the file system holding `fd` keeps its files in memory (tmpfs, ramfs).
pub(super) fn in_memory(fd: BorrowedFd<'_>) -> io::Result<bool> {
    // SAFETY: all-zero is a valid `statfs` (plain integers), overwritten by fstatfs.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid out pointer; the descriptor is open for the borrow.
    if unsafe { libc::fstatfs(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // `f_type`'s integer type differs between targets.
    #[allow(clippy::useless_conversion)]
    let magic = i64::from(st.f_type);
    Ok(magic == TMPFS_MAGIC || magic == RAMFS_MAGIC)
}
