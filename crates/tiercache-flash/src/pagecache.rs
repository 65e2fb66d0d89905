//! What a [`crate::FileDevice`] leaves in the kernel's page cache: its I/O modes, the probe
//! that picks one when the cache file is opened, and the system calls they need.
//!
//! The SSD tier sits under the memory tier: a page-cache copy of its blocks is a third copy of
//! data the memory tier holds or chose to let go, taking RAM from every other program on the
//! machine (paper 000's harm). So by default the cache file leaves (almost) nothing there:
//!
//! - [`IoMode::Fadvise`]: plain `pread`/`pwrite`, and `posix_fadvise(POSIX_FADV_DONTNEED)`
//!   after every [`DROP_EVERY`] bytes of I/O and after every sync on the file but its head
//!   (the tier's superblock, records and checksum tables, which every store reads and
//!   rewrites a part of), on the tier's ticks once the file is quiet, and on the whole file,
//!   head included, once it has been quiet for about 10 s ([`DropBehind`]). The kernel's
//!   write-back and read-ahead keep working; what is cached at any moment is bounded by about
//!   [`DROP_EVERY`] plus one read-ahead window plus the head's pages touched since the file
//!   was last quiet that long (dirty pages are not dropped, their write-out is started; the
//!   quiet drops take them once clean). Works wherever `posix_fadvise` does
//!   (files and block devices).
//! - [`IoMode::Dontcache`]: `preadv2`/`pwritev2` with `RWF_DONTCACHE` (Linux 6.14+, file
//!   systems that support it) but for the head (plain I/O, dropped as with `fadvise`): each
//!   I/O drops its pages itself — except, on the kernels
//!   measured, pages whose write-out completes in interrupt context (overwrites of written
//!   blocks) and read-ahead pages never read, which the same drops as above catch. Each write
//!   starts its own write-out at once (the kernel cannot gather a 4 KiB write with its
//!   neighbours), and reads get a small read-ahead: slower than `fadvise` for the tier's 4 KiB
//!   blocks, hence second in [`AUTO_ORDER`].
//! - [`IoMode::Direct`]: `O_DIRECT`, set with `fcntl` on the open descriptor, with buffers,
//!   offsets and lengths aligned as `statx(STATX_DIOALIGN)` says (the device's sector size
//!   becomes that offset alignment; a cache formatted with smaller sectors cannot use it).
//!   Nothing is cached at all, but every 4 KiB block is a synchronous device request.
//! - [`IoMode::Buffered`]: plain `pread`/`pwrite` (the page cache keeps what it likes).
//!
//! `auto` tries them in [`AUTO_ORDER`]; a file on tmpfs or ramfs is memory already (its pages
//! are its storage), so there it is `buffered`. Durability is the same in every mode: only
//! `fdatasync` makes writes durable (with O_DIRECT too: it flushes the device's volatile
//! cache and commits the file system's extent changes).

use std::fmt;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileTypeExt;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// How a cache file is read and written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum IoMode {
    /// `O_DIRECT`: nothing in the page cache.
    Direct,
    /// `RWF_DONTCACHE` on every I/O (plus the periodic drop for what the kernel leaves).
    Dontcache,
    /// Buffered I/O and `POSIX_FADV_DONTNEED` every [`DROP_EVERY`] bytes and after syncs.
    Fadvise,
    /// Buffered I/O; the page cache keeps what it likes.
    Buffered,
}

/// What `auto` tries, in order (the first that works on the file is taken). Why this order:
/// the repository's `docs/design.md` §3c, with measurements.
pub const AUTO_ORDER: [IoMode; 4] = [
    IoMode::Fadvise,
    IoMode::Dontcache,
    IoMode::Direct,
    IoMode::Buffered,
];

/// Bytes of I/O after which the whole file's clean pages are dropped (`fadvise` and
/// `dontcache`): about the page cache the file may hold between drops. Not smaller: a drop
/// also takes the read-ahead a sequential reader has not reached yet (the kernel reads it
/// again), and read-ahead windows reach several MiB (`read_ahead_kb`), so drops every 1 MiB
/// made a sequential read of the file read nearly three times its bytes from the disk.
pub const DROP_EVERY: u64 = 4 << 20;

const ALL: [IoMode; 4] = [
    IoMode::Direct,
    IoMode::Dontcache,
    IoMode::Fadvise,
    IoMode::Buffered,
];

impl IoMode {
    /// Its name in settings, `stats` (`flash.io_mode`) and the log.
    pub fn name(self) -> &'static str {
        match self {
            IoMode::Direct => "direct",
            IoMode::Dontcache => "dontcache",
            IoMode::Fadvise => "fadvise",
            IoMode::Buffered => "buffered",
        }
    }
}

impl fmt::Display for IoMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The mode asked for: probe ([`IoChoice::Auto`], the default) or exactly one (an error where
/// it does not work).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IoChoice {
    #[default]
    Auto,
    Only(IoMode),
}

/// A name that is no [`IoChoice`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown I/O mode `{0}` (expected auto|fadvise|dontcache|direct|buffered)")]
pub struct BadIoMode(pub String);

impl std::str::FromStr for IoChoice {
    type Err = BadIoMode;
    fn from_str(s: &str) -> Result<Self, BadIoMode> {
        if s == "auto" {
            return Ok(IoChoice::Auto);
        }
        ALL.into_iter()
            .find(|m| m.name() == s)
            .map(IoChoice::Only)
            .ok_or_else(|| BadIoMode(s.to_string()))
    }
}

impl fmt::Display for IoChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IoChoice::Auto => f.write_str("auto"),
            IoChoice::Only(m) => m.fmt(f),
        }
    }
}

/// The mode a file got, and the geometry it implies.
#[derive(Debug, Clone)]
pub(crate) struct Chosen {
    pub mode: IoMode,
    /// The device's sector size (512, or direct I/O's offset alignment).
    pub sector: usize,
    /// Alignment of buffers handed to the kernel (direct I/O; 1 otherwise).
    pub mem_align: usize,
    /// Modes `auto` skipped and why (for the log).
    pub skipped: Vec<String>,
}

/// Picks the mode for `file` (`len` bytes, sized already). `format_sector`: the sector size
/// of the cache already on it, if any (direct I/O needs it to be a multiple of its alignment).
pub(crate) fn choose(
    file: &File,
    len: u64,
    choice: IoChoice,
    format_sector: Option<u32>,
) -> io::Result<Chosen> {
    let in_memory = in_memory_fs(file)?;
    let only: [IoMode; 1];
    let order: &[IoMode] = match choice {
        IoChoice::Auto if in_memory.is_some() => &[IoMode::Buffered],
        IoChoice::Auto => &AUTO_ORDER,
        IoChoice::Only(m) => {
            if let Some(fs) = in_memory.filter(|_| m != IoMode::Buffered) {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!(
                        "I/O mode {m}: the cache file is on {fs}, whose pages are its storage \
                         (nothing to keep out of the page cache); use auto or buffered"
                    ),
                ));
            }
            only = [m];
            &only
        }
    };
    let mut skipped = Vec::new();
    if let Some(fs) = in_memory {
        skipped.push(format!("on {fs}, whose pages are its storage"));
    }
    for &mode in order {
        match try_mode(file, len, mode, format_sector) {
            Ok((sector, mem_align)) => {
                return Ok(Chosen {
                    mode,
                    sector,
                    mem_align,
                    skipped,
                })
            }
            Err(e) if choice == IoChoice::Auto => skipped.push(format!("{mode}: {e}")),
            Err(e) => {
                // EINVAL / EOPNOTSUPP from a probe: the kernel or file system lacks the mode.
                let kind = match e.raw_os_error() {
                    Some(libc::EINVAL | libc::EOPNOTSUPP) => io::ErrorKind::Unsupported,
                    _ => e.kind(),
                };
                return Err(io::Error::new(
                    kind,
                    format!("I/O mode {mode} does not work on it: {e}"),
                ));
            }
        }
    }
    // Unreachable: `buffered` always works and ends every order.
    Err(io::Error::other(format!(
        "no I/O mode works: {}",
        skipped.join("; ")
    )))
}

/// Whether `mode` works on `file`: its I/O succeeds and, where the file can be mapped, a
/// page it read is not cached afterwards (`mincore`). `Ok((sector, mem_align))`.
fn try_mode(
    file: &File,
    len: u64,
    mode: IoMode,
    format_sector: Option<u32>,
) -> io::Result<(usize, usize)> {
    let page = page_size();
    // The probes read the first page (or what there is of it).
    let n = usize::try_from(len.min(page as u64)).unwrap_or(0);
    let got = match mode {
        IoMode::Buffered => return Ok((512, 1)),
        IoMode::Fadvise => {
            let mut b = vec![0u8; n];
            read_exact_flags(file, &mut b, 0, 0)?;
            drop_cached(file)?;
            (512, 1)
        }
        IoMode::Dontcache => {
            // A page cached already is left cached by RWF_DONTCACHE: start without one.
            let _ = drop_cached(file);
            let mut b = vec![0u8; n];
            read_exact_flags(file, &mut b, 0, libc::RWF_DONTCACHE)?;
            (512, 1)
        }
        IoMode::Direct => try_direct(file, len, format_sector)?,
    };
    if n == page && first_page_cached(file) == Some(true) {
        if mode == IoMode::Direct {
            let _ = set_direct(file, false);
        }
        return Err(io::Error::other(
            "the pages it reads stay in the page cache here",
        ));
    }
    Ok(got)
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).ok().filter(|&n| n > 0).unwrap_or(4096)
}

/// Which pages of `file` in `range` (widened to whole pages) are in the page cache: `mincore`
/// over a read-only mapping of that range, which reads nothing. For probes, benchmarks and
/// tests that must know what a configuration left cached.
pub fn resident_pages(file: &File, range: std::ops::Range<u64>) -> io::Result<Vec<bool>> {
    let page = page_size() as u64;
    let (start, end) = (range.start / page * page, range.end.div_ceil(page) * page);
    if end <= start {
        return Ok(Vec::new());
    }
    let len =
        usize::try_from(end - start).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    let off =
        libc::off_t::try_from(start).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    // SAFETY: a new read-only shared mapping of an open file; no existing memory is involved,
    // and it is only handed to mincore, never dereferenced.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            off,
        )
    };
    if map == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let mut v = vec![0u8; len.div_ceil(page as usize)];
    // SAFETY: `map` starts a mapping of `len` bytes; `v` has one byte per page of it.
    let rc = unsafe { libc::mincore(map, len, v.as_mut_ptr()) };
    let err = io::Error::last_os_error();
    // SAFETY: unmaps exactly the mapping made above.
    unsafe { libc::munmap(map, len) };
    if rc != 0 {
        return Err(err);
    }
    Ok(v.iter().map(|&b| b & 1 != 0).collect())
}

/// Whether the file's first page is in the page cache; `None` when that cannot be told.
fn first_page_cached(file: &File) -> Option<bool> {
    let page = page_size() as u64;
    resident_pages(file, 0..page).ok()?.first().copied()
}

/// Sets O_DIRECT on `file` if its file system allows it with the cache's sector size, and
/// reads one aligned sector to be sure; `Ok((sector, mem_align))`.
fn try_direct(file: &File, len: u64, format_sector: Option<u32>) -> io::Result<(usize, usize)> {
    let (mem, offset) = dio_align(file)?;
    if let Some(s) = format_sector.filter(|&s| !(s as usize).is_multiple_of(offset)) {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "the cache was formatted with {s}-byte sectors; direct I/O here needs \
                 multiples of {offset}"
            ),
        ));
    }
    set_direct(file, true)?;
    // Pages cached before are not what is tested.
    let _ = drop_cached(file);
    let sector = offset.max(512);
    let n = page_size().max(sector);
    if len >= n as u64 {
        let mut v = vec![0u8; n + mem.max(1)];
        let at = v.as_ptr().align_offset(mem.max(1)).min(mem);
        if let Err(e) = read_exact_flags(file, &mut v[at..at + n], 0, 0) {
            // Best effort: the caller goes on without O_DIRECT, or fails.
            let _ = set_direct(file, false);
            return Err(e);
        }
    }
    Ok((sector, mem.max(1)))
}

/// Direct I/O's (buffer, offset) alignment: `statx(STATX_DIOALIGN)`; where the kernel does
/// not say (before 6.1), a block device's logical sector size, else 4096 for both.
fn dio_align(file: &File) -> io::Result<(usize, usize)> {
    // SAFETY: `statx` is plain data; all-zero is a valid value.
    let mut sx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: the descriptor is open for the call, the path is a NUL-terminated empty string
    // (AT_EMPTY_PATH: the descriptor itself) and `sx` is a valid statx buffer.
    let rc = unsafe {
        libc::statx(
            file.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN,
            &mut sx,
        )
    };
    if rc == 0 && sx.stx_mask & libc::STATX_DIOALIGN != 0 {
        if sx.stx_dio_mem_align == 0 || sx.stx_dio_offset_align == 0 {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "the file system has no direct I/O for it",
            ));
        }
        return Ok((
            sx.stx_dio_mem_align as usize,
            sx.stx_dio_offset_align as usize,
        ));
    }
    if file.metadata()?.file_type().is_block_device() {
        let mut n: libc::c_int = 0;
        // SAFETY: BLKSSZGET writes one int through the pointer, which is valid for it.
        if unsafe { libc::ioctl(file.as_raw_fd(), libc::BLKSSZGET, &mut n) } == 0 && n > 0 {
            let n = n as usize;
            return Ok((n, n));
        }
    }
    Ok((4096, 4096))
}

/// Turns O_DIRECT on or off on the open descriptor (EINVAL: the file system has no direct
/// I/O).
fn set_direct(file: &File, on: bool) -> io::Result<()> {
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on a descriptor `file` owns; no memory is involved.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    let want = if on {
        flags | libc::O_DIRECT
    } else {
        flags & !libc::O_DIRECT
    };
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, want) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `ramfs`'s `f_type` (not in the libc crate).
const RAMFS_MAGIC: i64 = 0x8584_58f6;

/// The memory file system a regular file is on (tmpfs, ramfs), if it is. A block device's
/// node lives on devtmpfs, which says nothing about the device: never "in memory".
#[allow(clippy::unnecessary_cast)] // f_type's and the magics' widths differ between targets
fn in_memory_fs(file: &File) -> io::Result<Option<&'static str>> {
    if file.metadata()?.file_type().is_block_device() {
        return Ok(None);
    }
    // SAFETY: `statfs` is plain data; all-zero is a valid value.
    let mut sf: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: the descriptor is open for the call and `sf` is a valid statfs buffer.
    if unsafe { libc::fstatfs(file.as_raw_fd(), &mut sf) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let t = sf.f_type as i64;
    Ok(if t == libc::TMPFS_MAGIC as i64 {
        Some("tmpfs")
    } else if t == RAMFS_MAGIC {
        Some("ramfs")
    } else {
        None
    })
}

/// `POSIX_FADV_DONTNEED` on the whole file: starts the write-out of its dirty pages and drops
/// its clean ones.
pub(crate) fn drop_cached(file: &File) -> io::Result<()> {
    drop_cached_from(file, 0)
}

/// [`drop_cached`] from byte `from` to the end of the file.
fn drop_cached_from(file: &File, from: u64) -> io::Result<()> {
    drop_cached_range(file, from, 0)
}

/// Drops the clean pages of `len` bytes from `from` (`len` 0: to the end of the file).
fn drop_cached_range(file: &File, from: u64, len: u64) -> io::Result<()> {
    let (from, len) = (off_t(from)?, off_t(len)?);
    // SAFETY: posix_fadvise on a descriptor `file` owns; no memory is involved.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), from, len, libc::POSIX_FADV_DONTNEED) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

fn off_t(off: u64) -> io::Result<libc::off_t> {
    libc::off_t::try_from(off)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset out of range"))
}

/// Fills `buf` from `off` with `preadv2(flags)`; a short read is an error.
pub(crate) fn read_exact_flags(
    file: &File,
    mut buf: &mut [u8],
    mut off: u64,
    flags: libc::c_int,
) -> io::Result<()> {
    while !buf.is_empty() {
        let iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: one iovec naming `buf`, which is valid for writes of its length for the
        // whole call; the descriptor is open.
        let n = unsafe { libc::preadv2(file.as_raw_fd(), &iov, 1, off_t(off)?, flags) };
        match n {
            0 => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("short read at {off}"),
                ))
            }
            n if n > 0 => {
                let n = n as usize;
                buf = &mut buf[n..];
                off += n as u64;
            }
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    Ok(())
}

/// Writes all of `buf` at `off` with `pwritev2(flags)`.
pub(crate) fn write_all_flags(
    file: &File,
    mut buf: &[u8],
    mut off: u64,
    flags: libc::c_int,
) -> io::Result<()> {
    while !buf.is_empty() {
        let iov = libc::iovec {
            iov_base: buf.as_ptr().cast_mut().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: one iovec naming `buf`, which is valid for reads of its length for the
        // whole call (pwritev2 only reads it); the descriptor is open.
        let n = unsafe { libc::pwritev2(file.as_raw_fd(), &iov, 1, off_t(off)?, flags) };
        match n {
            0 => return Err(io::Error::new(io::ErrorKind::WriteZero, "wrote nothing")),
            n if n > 0 => {
                let n = n as usize;
                buf = &buf[n..];
                off += n as u64;
            }
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    Ok(())
}

/// Quiet [`DropBehind::settle`] calls after a drop on which the file is dropped again: a drop
/// only starts the write-out of dirty pages, which are clean (and dropped) by one of these
/// (with the tier's 20 ms ticks, for about a second).
const REDROPS: u32 = 50;

/// Quiet ticks in a row (a device's `settle` calls that found no I/O since the last one) after
/// which the cache file's head goes too (about 10 s with the tier's 20 ms ticks); then again on
/// the next 50 ticks.
pub const HEAD_LINGER: u32 = 500;

/// Bytes past the end of the latest read that the busy drops spare: the read-ahead a sequential
/// reader of the file has been given and not reached yet. Dropping it made the kernel read it
/// again (a sequential read of the cache file read about twice its bytes from the disk with
/// read-ahead windows of 8 MiB, this machine's `read_ahead_kb`). It is what the kernel reads
/// ahead anyway; it goes with the next busy drop once the reader has moved on, and with the
/// quiet drops.
pub const READ_AHEAD_SPARE: u64 = 8 << 20;

/// Counts the bytes that may have left pages behind and drops the file's clean pages every
/// [`DROP_EVERY`] of them and after every sync ("busy" drops), and once the file is quiet (no
/// I/O between two [`Self::settle`] calls), again on [`REDROPS`] quiet calls after that: so
/// no data block's page stays behind once the file has been quiet a while.
///
/// All of these spare the file's head, bytes `0..hot` ([`Self::keep_hot`]: the tier's
/// superblock, records and checksum tables, 2 KiB per 1 MiB set): every store reads and
/// rewrites a set's checksum table and record, each a part of a page, so a dropped page there
/// costs a synchronous disk read (a read-modify-write for a write) in the request path, under
/// the tier's lock. Dropping it after every sync made a burst of random writes read the same
/// pages again and again; dropping it at the first quiet tick made the first burst after every
/// pause (paper 001's idle-time workload: bursts between idle gaps of seconds) read them again.
/// The head goes once the file has been quiet for [`HEAD_LINGER`] calls in a row: so while the
/// tier is in use the file holds at most its head (0.2 % of its size) plus what the busy drops
/// bound; once quiet that long, nothing.
#[derive(Debug, Default)]
pub(crate) struct DropBehind {
    /// Bytes of I/O since the last drop.
    since: AtomicU64,
    /// I/O calls and syncs so far (never reset): unchanged between two `settle` calls = quiet.
    ops: AtomicU64,
    /// `ops` at the last `settle`.
    seen: AtomicU64,
    /// Quiet `settle` calls left that drop again.
    redrops: AtomicU32,
    /// End of the head the drops spare (0: none).
    hot: AtomicU64,
    /// Quiet `settle` calls in a row (saturating).
    quiet: AtomicU32,
    /// End of the latest read (0: none since the last quiet drop): the busy drops spare
    /// [`READ_AHEAD_SPARE`] bytes from there.
    read_end: AtomicU64,
}

impl DropBehind {
    /// Bytes `0..end` are spared by the busy drops (taken by the quiet ones).
    pub fn keep_hot(&self, end: u64) {
        self.hot.store(end, Ordering::Relaxed);
    }

    /// Whether `off` is in the head the busy drops spare.
    pub fn is_hot(&self, off: u64) -> bool {
        off < self.hot.load(Ordering::Relaxed)
    }

    /// A read of `n` bytes at `off` on `file`: counted as [`Self::note`], and remembered so the
    /// busy drops spare the read-ahead past it.
    pub fn note_read(&self, file: &File, off: u64, n: usize) {
        self.read_end.store(off + n as u64, Ordering::Relaxed);
        self.note(file, n);
    }

    /// `n` more bytes of I/O on `file`.
    pub fn note(&self, file: &File, n: usize) {
        self.ops.fetch_add(1, Ordering::Relaxed);
        let before = self.since.fetch_add(n as u64, Ordering::Relaxed);
        if before + n as u64 >= DROP_EVERY {
            self.drop_busy(file);
        }
    }

    /// After a sync: the file's clean pages (all of them now) but the head go.
    pub fn synced(&self, file: &File) {
        self.ops.fetch_add(1, Ordering::Relaxed);
        self.drop_busy(file);
    }

    /// Called now and then (the tier's ticks): when there was I/O since the last drop but none
    /// since the last call (so an active stream's read-ahead is not dropped under it), drops
    /// the file's clean pages but the head's, and again while [`REDROPS`] last; the head too
    /// once the calls have found the file quiet [`HEAD_LINGER`] times in a row.
    pub fn settle(&self, file: &File) {
        let ops = self.ops.load(Ordering::Relaxed);
        if self.seen.swap(ops, Ordering::Relaxed) != ops {
            self.quiet.store(0, Ordering::Relaxed);
            return; // not quiet
        }
        let quiet = self
            .quiet
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_add(1))
            .map_or(u32::MAX, |n| n + 1);
        // Quiet: no reader is ahead of its read-ahead any more.
        self.read_end.store(0, Ordering::Relaxed);
        if (HEAD_LINGER..HEAD_LINGER + REDROPS).contains(&quiet) {
            Self::drop_logged(file, 0);
        } else if self.since.load(Ordering::Relaxed) > 0 {
            self.drop_busy(file);
        } else if self
            .redrops
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_ok()
        {
            Self::drop_logged(file, self.hot.load(Ordering::Relaxed));
        }
    }

    /// Drops all of the file's clean pages now, head included.
    pub fn drop_now(&self, file: &File) {
        self.rearm();
        Self::drop_logged(file, 0);
    }

    /// Drops the file's clean pages but the head's and a reader's read-ahead, and counts
    /// afresh.
    fn drop_busy(&self, file: &File) {
        self.rearm();
        let hot = self.hot.load(Ordering::Relaxed);
        let read_end = self.read_end.load(Ordering::Relaxed);
        if read_end <= hot {
            return Self::drop_logged(file, hot);
        }
        // The head, then up to the latest read, then past its spared read-ahead.
        for (from, len) in [(hot, read_end - hot), (read_end + READ_AHEAD_SPARE, 0)] {
            if let Err(e) = drop_cached_range(file, from, len) {
                log::debug!("posix_fadvise(DONTNEED) on the flash cache: {e}");
            }
        }
    }

    /// A drop is under way: count afresh, and drop again on the next quiet calls.
    fn rearm(&self) {
        self.since.store(0, Ordering::Relaxed);
        self.redrops.store(REDROPS, Ordering::Relaxed);
    }

    fn drop_logged(file: &File, from: u64) {
        if let Err(e) = drop_cached_from(file, from) {
            // The advice worked when the file was opened; losing it costs page cache only.
            log::debug!("posix_fadvise(DONTNEED) on the flash cache: {e}");
        }
    }
}
