//! BACKING I/O: every byte the memory tier moves to or from BACKING goes
//! through one [`BackingIo`].
//!
//! - [`UncachedBacking`]: the default: buffered I/O that leaves no pages in the kernel page
//!   cache (`RWF_DONTCACHE`, or `posix_fadvise(DONTNEED)` where a file system refuses it),
//!   probed per file system (`--backing-cache drop`);
//! - [`RealBacking`]: plain `pread`/`pwrite`/`fdatasync` on the backing files (std `FileExt`):
//!   BACKING's pages stay in the page cache (`--backing-cache keep`);
//! - [`EmulatedBacking`]: a latency MODEL of an HDD or SSD wrapped around another device (for
//!   `tiercache mount --emulate hdd|ssd`): modelled seek/rotation/transfer times are slept, not
//!   measured; it is labelled as a model in logs and stats;
//! - [`FaultyBacking`]: injects failures and silently dropped writes after a countdown (tests).
//!
//! Contract: `read_at` fills the buffer except at end of file (it returns the byte count, short
//! only at EOF); `write_at` writes the whole buffer or fails; errors keep their errno; `sync`
//! returns only when the file's data written so far is on BACKING and synced. A backing does
//! no caching of its own.

mod behind;
mod drop;
mod emulated;
mod faulty;
mod sys;
mod uncached;

pub use drop::FOLIO_WINDOW;
pub use emulated::{DeviceModel, EmulatedBacking, EmulationStats};
pub use faulty::FaultyBacking;
pub use uncached::{BackingCache, IoMode, UncachedBacking};

use std::fmt;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use tiercache_core::FileId;

/// Where BACKING data is read and written. Object safe: the tier holds `Arc<dyn BackingIo>`.
/// `file` identifies the backing file (its inode number) for models that track position.
pub trait BackingIo: Send + Sync + fmt::Debug {
    /// Reads into `buf` from `offset`; returns the bytes read, fewer than `buf.len()` only at
    /// end of file.
    fn read_at(&self, file: FileId, fd: &File, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// Writes all of `buf` at `offset`.
    fn write_at(&self, file: FileId, fd: &File, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Makes written data durable: `fdatasync` when `datasync`, else `fsync`.
    fn sync(&self, file: FileId, fd: &File, datasync: bool) -> io::Result<()>;
    /// Makes everything written on the file system of `fd` durable (`syncfs`): one call for
    /// many closed files written back together.
    fn sync_fs(&self, fd: &File) -> io::Result<()> {
        // SAFETY: syncfs only reads the descriptor `fd` keeps open.
        if unsafe { libc::syncfs(std::os::fd::AsRawFd::as_raw_fd(fd)) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
    /// Sets the file's length (`ftruncate`).
    fn set_len(&self, file: FileId, fd: &File, len: u64) -> io::Result<()>;
    /// Finishes what earlier requests left in progress (an uncached device waits for its
    /// recent writes' writeback and drops their pages). The flusher calls it after each round.
    fn settle(&self) {}
    /// The emulation model's counters, when this backing (or one it wraps) is a model.
    fn emulation(&self) -> Option<EmulationStats> {
        None
    }
    /// How this backing (or the one it wraps) treats the kernel page cache on BACKING's own
    /// file system (`stats` `backing.io_mode`).
    fn io_mode(&self) -> IoMode {
        IoMode::Buffered
    }
}

/// Plain positioned I/O on the backing file descriptors: pages stay in the page cache
/// (`--backing-cache keep`).
#[derive(Debug, Default, Clone, Copy)]
pub struct RealBacking;

impl BackingIo for RealBacking {
    fn read_at(&self, _file: FileId, fd: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let mut done = 0;
        while done < buf.len() {
            match fd.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(done)
    }

    fn write_at(&self, _file: FileId, fd: &File, buf: &[u8], offset: u64) -> io::Result<()> {
        fd.write_all_at(buf, offset)
    }

    fn sync(&self, _file: FileId, fd: &File, datasync: bool) -> io::Result<()> {
        if datasync {
            fd.sync_data()
        } else {
            fd.sync_all()
        }
    }

    fn set_len(&self, _file: FileId, fd: &File, len: u64) -> io::Result<()> {
        fd.set_len(len)
    }
}
