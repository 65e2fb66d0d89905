//! [`FlashDevice`]: the medium under a flash tier, and two implementations.
//!
//! - [`FileDevice`]: a regular file (created and preallocated) or a block device, read and
//!   written with `pread`/`pwrite`, synced with `fdatasync`; O_DIRECT optional (buffers are
//!   then bounced through an aligned buffer, so callers need not align theirs).
//! - [`MemDevice`]: the same in memory (tests; it survives a "crash" because the test keeps it).
//!
//! Contract: `write_at` returns once the bytes are handed to the device (they may sit in a
//! volatile cache); only `sync` makes every write that returned before it durable. Offsets and
//! lengths given by the tier are multiples of [`FlashDevice::sector_size`].

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{PoisonError, RwLock};

/// A byte-addressed device with a sector size. Object safe: the tier holds `Arc<dyn FlashDevice>`.
pub trait FlashDevice: Send + Sync + fmt::Debug {
    /// Fills `buf` from `off`; a short read is an error.
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()>;
    /// Writes all of `buf` at `off` (not durable until [`FlashDevice::sync`]).
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()>;
    /// Makes every write that returned before this call durable (a flush / FUA barrier).
    fn sync(&self) -> io::Result<()>;
    /// Size in bytes.
    fn len(&self) -> u64;
    /// Whether the device has no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Atomic write unit: writes are torn only at multiples of it.
    fn sector_size(&self) -> usize;
}

fn bounds(len: u64, off: u64, n: usize) -> io::Result<()> {
    match off.checked_add(n as u64) {
        Some(end) if end <= len => Ok(()),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("I/O of {n} bytes at {off} past the device end {len}"),
        )),
    }
}

/// A regular file or a block device.
#[derive(Debug)]
pub struct FileDevice {
    file: File,
    path: PathBuf,
    len: u64,
    sector: usize,
    direct: bool,
}

impl FileDevice {
    /// Opens `path`. A regular file is created when missing and, when `size` is given,
    /// sized and preallocated to it (`posix_fallocate`, falling back to `set_len`); a block
    /// device keeps its size. `direct`: open with O_DIRECT (sector size 4096).
    pub fn open(path: &Path, size: Option<u64>, direct: bool) -> io::Result<Self> {
        let mut opts = OpenOptions::new();
        opts.read(true).write(true).create(size.is_some());
        if direct {
            opts.custom_flags(libc::O_DIRECT);
        }
        let mut file = opts.open(path)?;
        let meta = file.metadata()?;
        if meta.is_file() {
            if let Some(size) = size {
                if meta.len() != size {
                    file.set_len(size)?;
                }
                preallocate(&file, size);
            }
        }
        // Works for regular files and block devices alike.
        let len = file.seek(SeekFrom::End(0))?;
        Ok(Self {
            file,
            path: path.to_path_buf(),
            len,
            sector: if direct { 4096 } else { 512 },
            direct,
        })
    }

    /// Opens `path` read-only (for `check`): writes fail with the OS's error.
    pub fn open_read_only(path: &Path) -> io::Result<Self> {
        let mut file = OpenOptions::new().read(true).open(path)?;
        let len = file.seek(SeekFrom::End(0))?;
        Ok(Self {
            file,
            path: path.to_path_buf(),
            len,
            sector: 512,
            direct: false,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// An aligned scratch buffer of `n` bytes inside a larger allocation (no unsafe needed).
    fn aligned(n: usize) -> (Vec<u8>, usize) {
        let v = vec![0u8; n + 4096];
        let start = v.as_ptr().align_offset(4096).min(4096);
        (v, start)
    }
}

/// Best effort: reserves the blocks so later writes do not fail for lack of space.
fn preallocate(file: &File, size: u64) {
    use std::os::fd::AsRawFd;
    let Ok(len) = libc::off_t::try_from(size) else {
        return;
    };
    // SAFETY: the descriptor is owned by `file`, open for writing, and outlives the call;
    // posix_fallocate takes no pointers.
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) };
    if rc != 0 {
        log::debug!("posix_fallocate: error {rc}; the file stays sparse");
    }
}

impl FlashDevice for FileDevice {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        bounds(self.len, off, buf.len())?;
        if self.direct {
            let (mut v, s) = Self::aligned(buf.len());
            self.file.read_exact_at(&mut v[s..s + buf.len()], off)?;
            buf.copy_from_slice(&v[s..s + buf.len()]);
            Ok(())
        } else {
            self.file.read_exact_at(buf, off)
        }
    }

    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        bounds(self.len, off, buf.len())?;
        if self.direct {
            let (mut v, s) = Self::aligned(buf.len());
            v[s..s + buf.len()].copy_from_slice(buf);
            self.file.write_all_at(&v[s..s + buf.len()], off)
        } else {
            self.file.write_all_at(buf, off)
        }
    }

    fn sync(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn sector_size(&self) -> usize {
        self.sector
    }
}

/// An in-memory device.
pub struct MemDevice {
    bytes: RwLock<Vec<u8>>,
    sector: usize,
}

impl fmt::Debug for MemDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemDevice")
            .field("len", &self.len())
            .field("sector", &self.sector)
            .finish()
    }
}

impl MemDevice {
    /// `len` zero bytes with 512-byte sectors.
    pub fn new(len: u64) -> Self {
        Self::with_sector(len, 512)
    }

    pub fn with_sector(len: u64, sector: usize) -> Self {
        Self {
            bytes: RwLock::new(vec![0; usize::try_from(len).unwrap_or(usize::MAX)]),
            sector,
        }
    }

    /// A copy of the whole content (tests).
    pub fn snapshot(&self) -> Vec<u8> {
        self.bytes
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Overwrites bytes directly (tests: corrupt the medium).
    pub fn poke(&self, off: u64, data: &[u8]) {
        let mut b = self.bytes.write().unwrap_or_else(PoisonError::into_inner);
        let o = off as usize;
        b[o..o + data.len()].copy_from_slice(data);
    }
}

impl FlashDevice for MemDevice {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        bounds(self.len(), off, buf.len())?;
        let b = self.bytes.read().unwrap_or_else(PoisonError::into_inner);
        let o = off as usize;
        buf.copy_from_slice(&b[o..o + buf.len()]);
        Ok(())
    }

    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        bounds(self.len(), off, buf.len())?;
        let mut b = self.bytes.write().unwrap_or_else(PoisonError::into_inner);
        let o = off as usize;
        b[o..o + buf.len()].copy_from_slice(buf);
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        Ok(())
    }

    fn len(&self) -> u64 {
        self.bytes
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len() as u64
    }

    fn sector_size(&self) -> usize {
        self.sector
    }
}
