//! [`FlashDevice`]: the medium under a flash tier, and two implementations.
//!
//! - [`FileDevice`]: a regular file (created and preallocated) or a block device, synced with
//!   `fdatasync`, read and written in an [`IoMode`] that by default leaves (almost) nothing
//!   in the kernel's page cache (`crate::pagecache`: probed when it is opened; with O_DIRECT,
//!   unaligned buffers are bounced through an aligned one, so callers need not align theirs).
//! - [`MemDevice`]: the same in memory (tests; it survives a "crash" because the test keeps it).
//!
//! Contract: `write_at` returns once the bytes are handed to the device (they may sit in a
//! volatile cache); only `sync` makes every write that returned before it durable. Offsets and
//! lengths given by the tier are multiples of [`FlashDevice::sector_size`].
//!
//! A cache holds plaintext copies of every user's cached and dirty blocks, so a cache path is
//! private: created mode 0600 (`O_EXCL`), never followed through a symlink (`O_NOFOLLOW`), and
//! an existing file or device is refused unless it is owned by the daemon's user or root and
//! has no group or other permission bit ([`check_private`], on the opened descriptor).

use crate::pagecache::{self, DropBehind, IoChoice, IoMode};
use std::fmt;
use std::fs::{File, Metadata, OpenOptions};
use std::io::{self, Seek, SeekFrom};
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
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
    /// Called now and then from the tier's cleaning ticks (another thread, without the
    /// tier's lock): a device may let go of what it keeps of past I/O once it is quiet
    /// ([`FileDevice`]: the cache file's pages). Default: nothing.
    fn settle(&self) {}
    /// Bytes `0..end` are the tier's superblock, records and checksum tables, which every
    /// store reads and rewrites a part of: a device that lets go of what it keeps of past I/O
    /// keeps those while in use, and lets go of them only once quiet for a while
    /// ([`FileDevice`]: their pages, after [`crate::HEAD_LINGER`] quiet `settle` calls).
    /// Default: nothing.
    fn keep_hot(&self, _end: u64) {}
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
    io: IoMode,
    /// Buffers handed to the kernel must be aligned to this (direct I/O; else 1).
    mem_align: usize,
    /// Modes `auto` skipped, and why.
    io_skipped: Vec<String>,
    behind: DropBehind,
}

/// Why a cache file or device is refused ([`check_private`]); each says what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NotPrivate {
    #[error("not a regular file or a block device")]
    NotFileOrDevice,
    #[error(
        "owned by uid {uid}, neither this daemon's user (uid {euid}) nor root; the cache holds \
         copies of every user's data: `chown {euid} {at}` (and `chmod 600 {at}`) if it is \
         yours, else give another path"
    )]
    Owner { uid: u32, euid: u32, at: String },
    #[error(
        "mode {mode:04o} gives other users access to the cache, which holds copies of every \
         user's data: `chmod 600 {at}`"
    )]
    Mode { mode: u32, at: String },
}

/// Refuses a cache file or device other users could read or write: it must be a regular file
/// or a block device, owned by this process's effective user or root, with no group or other
/// permission bit.
pub fn check_private(meta: &Metadata, path: &Path) -> Result<(), NotPrivate> {
    let at = || path.display().to_string();
    let kind = meta.file_type();
    if !kind.is_file() && !kind.is_block_device() {
        return Err(NotPrivate::NotFileOrDevice);
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if meta.uid() != euid && meta.uid() != 0 {
        return Err(NotPrivate::Owner {
            uid: meta.uid(),
            euid,
            at: at(),
        });
    }
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(NotPrivate::Mode { mode, at: at() });
    }
    Ok(())
}

/// Opens `path` without following a symlink there; `create`: a missing file is created
/// (`O_EXCL`, mode 0600; lost to another creator in between, the existing one is opened).
/// Returns the file and whether it was created here.
fn open_nofollow(path: &Path, write: bool, create: bool) -> io::Result<(File, bool)> {
    let open = |new: bool| {
        let mut o = OpenOptions::new();
        o.read(true).write(write);
        if new {
            o.create_new(true).mode(0o600);
        }
        o.custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
    };
    let named = |e: io::Error| match e.raw_os_error() {
        Some(libc::ELOOP) => io::Error::new(
            io::ErrorKind::InvalidInput,
            "is a symbolic link, which a cache path never follows: give the path of the file \
             or device itself",
        ),
        _ => e,
    };
    match open(false) {
        Ok(f) => Ok((f, false)),
        Err(e) if create && e.kind() == io::ErrorKind::NotFound => match open(true) {
            Ok(f) => Ok((f, true)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                open(false).map(|f| (f, false)).map_err(named)
            }
            Err(e) => Err(named(e)),
        },
        Err(e) => Err(named(e)),
    }
}

fn refused(why: NotPrivate) -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, why)
}

impl FileDevice {
    /// Opens `path` for a tier (see the module docs for what is refused). With `size`, a
    /// missing regular file is created (mode 0600) and the file is sized and preallocated to
    /// it (`posix_fallocate`, falling back to `set_len`); a block device keeps its size.
    /// `io`: how it is read and written (`crate::pagecache`; an [`IoChoice::Only`] mode that
    /// does not work on it is an error).
    pub fn open(path: &Path, size: Option<u64>, io: IoChoice) -> io::Result<Self> {
        let (mut dev, created) = Self::open_private(path, size.is_some())?;
        let r = dev.size_and_choose(size, io);
        dev.undo_if_failed(r, created, false)?;
        Ok(dev)
    }

    /// As [`FileDevice::open`] for a mount: also takes an exclusive `flock` on the open file
    /// (two daemons on one cache would corrupt it; held as long as the device), and sizes it
    /// to `new_size` only when it is new: missing (then created) or an empty regular file.
    /// Returns the device and whether it is new. A new one without `new_size` is an error.
    pub fn open_locked(
        path: &Path,
        new_size: Option<u64>,
        io: IoChoice,
    ) -> io::Result<(Self, bool)> {
        let (mut dev, created) = Self::open_private(path, new_size.is_some())?;
        use std::os::fd::AsRawFd;
        // SAFETY: flock on a descriptor `dev.file` owns; no memory is involved.
        if unsafe { libc::flock(dev.file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!("in use by another tiercache mount (flock: {e})"),
            ));
        }
        let fresh = created || (dev.file.metadata()?.is_file() && dev.len == 0);
        let size = match (fresh, new_size) {
            (false, _) => None,
            (true, Some(size)) => Some(size),
            (true, None) => {
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    "no cache there yet (empty file)",
                ))
            }
        };
        let r = dev.size_and_choose(size, io);
        dev.undo_if_failed(r, created, fresh)?;
        Ok((dev, fresh))
    }

    /// Sizes the device to `size` (when given) and picks its I/O mode.
    fn size_and_choose(&mut self, size: Option<u64>, io: IoChoice) -> io::Result<()> {
        if let Some(size) = size {
            self.size_to(size)?;
        }
        self.choose_io(io)
    }

    /// A failed open leaves the path as it found it: a file created here is removed, one
    /// that was empty is emptied again (else the next mount would find a file that is not a
    /// cache and refuse it).
    fn undo_if_failed(&self, r: io::Result<()>, created: bool, was_empty: bool) -> io::Result<()> {
        if r.is_err() {
            if created {
                let _ = std::fs::remove_file(&self.path);
            } else if was_empty {
                let _ = self.file.set_len(0);
            }
        }
        r
    }

    /// Opened buffered (the mode is chosen once the file has its size: the probes read it).
    fn open_private(path: &Path, create: bool) -> io::Result<(Self, bool)> {
        let (file, created) = open_nofollow(path, true, create)?;
        check_private(&file.metadata()?, path).map_err(refused)?;
        Ok((Self::buffered(file, path)?, created))
    }

    fn buffered(mut file: File, path: &Path) -> io::Result<Self> {
        // Works for regular files and block devices alike.
        let len = file.seek(SeekFrom::End(0))?;
        Ok(Self {
            file,
            path: path.to_path_buf(),
            len,
            sector: 512,
            io: IoMode::Buffered,
            mem_align: 1,
            io_skipped: Vec::new(),
            behind: DropBehind::default(),
        })
    }

    /// Probes and sets the I/O mode; in every mode but `buffered`, the file's pages already
    /// cached (by an earlier buffered run, or the probes) are dropped.
    fn choose_io(&mut self, io: IoChoice) -> io::Result<()> {
        let format_sector = self.peek_format_sector()?;
        let c = pagecache::choose(&self.file, self.len, io, format_sector)?;
        self.io = c.mode;
        self.sector = c.sector;
        self.mem_align = c.mem_align;
        self.io_skipped = c.skipped;
        if self.io != IoMode::Buffered {
            self.behind.drop_now(&self.file);
        }
        Ok(())
    }

    /// The sector size of a cache already on the device (a valid superblock in its first
    /// 8 KiB), read buffered before any mode is set.
    fn peek_format_sector(&self) -> io::Result<Option<u32>> {
        let n = usize::try_from(self.len.min(8192)).unwrap_or(0);
        let mut head = vec![0u8; n];
        self.file.read_exact_at(&mut head, 0)?;
        Ok(crate::format::Superblock::sector_in_head(&head))
    }

    /// How it is read and written (`flash.io_mode` in `stats`).
    pub fn io_mode(&self) -> IoMode {
        self.io
    }

    /// The modes `auto` tried before [`FileDevice::io_mode`], and why they did not work.
    pub fn io_skipped(&self) -> &[String] {
        &self.io_skipped
    }

    /// A regular file is sized to `size` and preallocated; a block device keeps its size.
    fn size_to(&mut self, size: u64) -> io::Result<()> {
        let meta = self.file.metadata()?;
        if meta.is_file() {
            if meta.len() != size {
                self.file.set_len(size)?;
            }
            preallocate(&self.file, size);
        }
        self.len = self.file.seek(SeekFrom::End(0))?;
        Ok(())
    }

    /// Opens `path` read-only (for `check`), never through a symlink: writes fail with the
    /// OS's error. Nothing is refused for its owner or mode (reading changes nothing; the
    /// caller may warn, see [`check_private`]). Read in the mode `auto` picks.
    pub fn open_read_only(path: &Path) -> io::Result<Self> {
        let (file, _) = open_nofollow(path, false, false)?;
        let mut dev = Self::buffered(file, path)?;
        dev.choose_io(IoChoice::Auto)?;
        Ok(dev)
    }

    /// The open file's metadata (`fstat`).
    pub fn metadata(&self) -> io::Result<Metadata> {
        self.file.metadata()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A scratch buffer of `n` bytes aligned for direct I/O, inside a larger allocation (no
    /// unsafe needed).
    fn aligned(&self, n: usize) -> (Vec<u8>, usize) {
        let a = self.mem_align;
        let v = vec![0u8; n + a];
        let start = v.as_ptr().align_offset(a).min(a);
        (v, start)
    }

    /// `RWF_DONTCACHE` for I/O at `off`, but in the hot head (which the busy drops spare too).
    fn dontcache(&self, off: u64) -> libc::c_int {
        if self.behind.is_hot(off) {
            0
        } else {
            libc::RWF_DONTCACHE
        }
    }

    /// Whether `buf` can go to the kernel as it is (direct I/O needs aligned memory; offsets
    /// and lengths are multiples of the sector size by the trait's contract).
    fn is_aligned(&self, buf: &[u8]) -> bool {
        (buf.as_ptr() as usize).is_multiple_of(self.mem_align)
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
        match self.io {
            IoMode::Direct if !self.is_aligned(buf) => {
                let (mut v, s) = self.aligned(buf.len());
                self.file.read_exact_at(&mut v[s..s + buf.len()], off)?;
                buf.copy_from_slice(&v[s..s + buf.len()]);
                Ok(())
            }
            IoMode::Dontcache => {
                pagecache::read_exact_flags(&self.file, buf, off, self.dontcache(off))?;
                // Read-ahead pages never read stay (they drop when read).
                self.behind.note_read(&self.file, off, buf.len());
                Ok(())
            }
            IoMode::Fadvise => {
                self.file.read_exact_at(buf, off)?;
                self.behind.note_read(&self.file, off, buf.len());
                Ok(())
            }
            _ => self.file.read_exact_at(buf, off),
        }
    }

    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        bounds(self.len, off, buf.len())?;
        match self.io {
            IoMode::Direct if !self.is_aligned(buf) => {
                let (mut v, s) = self.aligned(buf.len());
                v[s..s + buf.len()].copy_from_slice(buf);
                self.file.write_all_at(&v[s..s + buf.len()], off)
            }
            IoMode::Dontcache => {
                pagecache::write_all_flags(&self.file, buf, off, self.dontcache(off))?;
                // What the kernel keeps of overwrites (their write-out completing in
                // interrupt context) goes with the periodic drop.
                self.behind.note(&self.file, buf.len());
                Ok(())
            }
            IoMode::Fadvise => {
                self.file.write_all_at(buf, off)?;
                self.behind.note(&self.file, buf.len());
                Ok(())
            }
            _ => self.file.write_all_at(buf, off),
        }
    }

    /// `fdatasync` in every mode (with O_DIRECT too: it flushes the device's volatile cache
    /// and commits extent changes); then, but for `direct` and `buffered`, the file's pages
    /// (all clean now) are dropped, but the hot head's ([`FlashDevice::keep_hot`]).
    fn sync(&self) -> io::Result<()> {
        self.file.sync_data()?;
        if matches!(self.io, IoMode::Dontcache | IoMode::Fadvise) {
            self.behind.synced(&self.file);
        }
        Ok(())
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn sector_size(&self) -> usize {
        self.sector
    }

    fn settle(&self) {
        if matches!(self.io, IoMode::Dontcache | IoMode::Fadvise) {
            self.behind.settle(&self.file);
        }
    }

    fn keep_hot(&self, end: u64) {
        self.behind.keep_hot(end);
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
