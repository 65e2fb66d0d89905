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

/// Bytes of `path` in the page cache (`mincore`; nothing is read).
pub(crate) fn resident_bytes(path: &Path) -> Result<u64, BenchError> {
    let f = File::open(path).map_err(at(path, "open"))?;
    let len = f.metadata().map_err(at(path, "stat"))?.len();
    let pages = tiercache_flash::resident_pages(&f, 0..len).map_err(at(path, "mincore"))?;
    Ok(pages.iter().filter(|&&p| p).count() as u64 * 4096)
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
