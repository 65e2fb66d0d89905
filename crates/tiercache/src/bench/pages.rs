//! The kernel page cache of one file, for the scenarios that must start cold or report what a
//! configuration left cached: how many of its bytes are resident, and dropping them.

use super::BenchError;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

fn at(path: &Path, what: &str) -> impl Fn(io::Error) -> BenchError {
    let what = format!("{}: {what}", path.display());
    move |e| BenchError::io(what.clone(), e)
}

/// Bytes of `path` in the page cache (`mincore` over a mapping of it; nothing is read).
pub(crate) fn resident_bytes(path: &Path) -> Result<u64, BenchError> {
    let f = File::open(path).map_err(at(path, "open"))?;
    let len = f.metadata().map_err(at(path, "stat"))?.len() as usize;
    if len == 0 {
        return Ok(0);
    }
    // SAFETY: a new read-only shared mapping of a file we opened; no existing memory is
    // touched and the mapping is only given to mincore, never dereferenced.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        )
    };
    if map == libc::MAP_FAILED {
        return Err(at(path, "mmap")(io::Error::last_os_error()));
    }
    let page = 4096usize;
    let mut vec = vec![0u8; len.div_ceil(page)];
    // SAFETY: `map` is the start of a mapping of `len` bytes; `vec` has one byte per page.
    let rc = unsafe { libc::mincore(map, len, vec.as_mut_ptr()) };
    let err = io::Error::last_os_error();
    // SAFETY: unmaps exactly the mapping made above.
    unsafe { libc::munmap(map, len) };
    if rc != 0 {
        return Err(at(path, "mincore")(err));
    }
    Ok(vec.iter().filter(|&&b| b & 1 != 0).count() as u64 * page as u64)
}

/// Writes back and drops the page cache of `path` (its clean pages), so that the next reads
/// of it go to the device.
pub(crate) fn drop_cached(path: &Path) -> Result<(), BenchError> {
    let f = File::open(path).map_err(at(path, "open"))?;
    f.sync_data().map_err(at(path, "fdatasync"))?;
    // SAFETY: posix_fadvise passes no memory; `f` keeps the descriptor open.
    let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if r != 0 {
        return Err(at(path, "posix_fadvise")(io::Error::from_raw_os_error(r)));
    }
    Ok(())
}
