//! [`Client`]: one connection to a mount's zero-copy service, its read-only mapping of the
//! memory tier and its own pin area.
//!
//! Pins: a client holds at most one bit per slot in its pin area; `slots` here counts the
//! references this process holds per slot (`PinCounts`, `pins.rs`), and the bit goes when the last one
//! is dropped. The counts' lock is taken once per `read_blocks` for all its hits (and once for
//! the daemon's reply), once per reference dropped.

use crate::block::BlockRef;
use crate::file::ZcFile;
use crate::pins::PinCounts;
use crate::wire::{self, Request, Response};
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard, PoisonError};
use tiercache_memtier::shm::{ClientId, RegionView};

/// What can go wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No zero-copy service for that mount (not mounted with `--zero-copy`, or not a mount).
    #[error("no zero-copy service for {mount}: {source} (mounted with --zero-copy?)")]
    NoService {
        mount: String,
        #[source]
        source: io::Error,
    },
    /// The daemon said no (permission, unknown file, too many clients…).
    #[error("tiercache daemon: {message}")]
    Refused { message: String, errno: i32 },
    /// The daemon went away or restarted: reconnect.
    #[error("the tiercache daemon is gone ({0}); reconnect")]
    Gone(#[source] io::Error),
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("protocol error: {0}")]
    Protocol(String),
}

impl Error {
    /// The errno closest to the error (for the C API).
    pub fn errno(&self) -> i32 {
        match self {
            Error::NoService { .. } => libc::ENOENT,
            Error::Refused { errno, .. } => *errno,
            Error::Gone(_) => libc::ESHUTDOWN,
            Error::Io(e) => e.raw_os_error().unwrap_or(libc::EIO),
            Error::Protocol(_) => libc::EPROTO,
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// Blocks one `read_blocks` call may ask for (the daemon pins at most this many per request).
pub const MAX_BLOCKS: u64 = wire::MAX_PIN_BLOCKS;

/// Hits and misses of this client's `read_blocks`.
#[derive(Debug, Default)]
pub struct ClientStats {
    /// Blocks found and pinned in shared memory with no call to the daemon.
    pub hits: AtomicU64,
    /// Blocks the daemon had to read and pin.
    pub misses: AtomicU64,
}

/// A connection to a mount's zero-copy service; see the module docs.
#[derive(Debug)]
pub struct Client {
    sock: Mutex<UnixStream>,
    pub(crate) region: RegionView,
    block: usize,
    /// References this process holds to each slot (the bit goes with the last). A pin bit is
    /// set and cleared only under this lock, so a release of the last reference cannot clear
    /// a bit a concurrent pin of the same slot relies on.
    slots: Mutex<PinCounts>,
    /// `FORKS` when connected.
    forks: u64,
    pub stats: ClientStats,
}

/// Bumped in every child a `fork()` makes (an `atfork` handler): a `Client` made before the
/// fork refuses to work in the child, which would share its pin area.
static FORKS: AtomicU64 = AtomicU64::new(0);
static ATFORK: std::sync::Once = std::sync::Once::new();

/// This process's client sockets (-1: free). In a forked child each is replaced by
/// `/dev/null` (close-on-exec, as the socket was), so a connection ends when its parent does
/// (the daemon then drops its pins) rather than living on in the child, and the child can
/// never write into it; and the table is emptied there: those descriptor numbers are the
/// child's to reuse, and a later fork must not replace what the child then opens under them.
static SOCKETS: [std::sync::atomic::AtomicI32; 64] =
    [const { std::sync::atomic::AtomicI32::new(-1) }; 64];

extern "C" fn forked_child() {
    FORKS.fetch_add(1, Relaxed);
    for s in &SOCKETS {
        let fd = s.swap(-1, Relaxed);
        if fd >= 0 {
            // SAFETY: open/socket/dup3/close are async-signal-safe; `fd` is a descriptor this
            // process registered (the child's copy), replaced in place. dup3 with O_CLOEXEC:
            // dup2 would clear close-on-exec, and the child's programs would inherit it.
            unsafe {
                let mut null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
                if null < 0 {
                    // No /dev/null (a chroot): an unconnected socket goes nowhere either.
                    null = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
                }
                if null >= 0 {
                    libc::dup3(null, fd, libc::O_CLOEXEC);
                    libc::close(null);
                }
            }
        }
    }
}

/// Registers `fd` in `SOCKETS` (not registered past 64 clients in one process).
fn register_socket(fd: i32) {
    for s in &SOCKETS {
        if s.compare_exchange(-1, fd, Relaxed, Relaxed).is_ok() {
            return;
        }
    }
}

fn unregister_socket(fd: i32) {
    for s in &SOCKETS {
        if s.compare_exchange(fd, -1, Relaxed, Relaxed).is_ok() {
            return;
        }
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

pub(crate) fn unexpected(r: &Response) -> Error {
    Error::Protocol(format!("unexpected answer {r:?}"))
}

impl Client {
    /// Connects to the zero-copy service of the tiercache mount at `mount`.
    pub fn connect(mount: impl AsRef<Path>) -> Result<Self> {
        ATFORK.call_once(|| {
            // SAFETY: registers a handler that only bumps an atomic and swaps descriptors
            // (async-signal-safe).
            unsafe { libc::pthread_atfork(None, None, Some(forked_child)) };
        });
        let mount = mount.as_ref();
        let sock = wire::connect_abstract(&wire::socket_name(mount)).map_err(|source| {
            Error::NoService {
                mount: mount.display().to_string(),
                source,
            }
        })?;
        // Trust only a daemon run by root or by this user (an abstract name can be taken by
        // anyone).
        let peer = wire::peer_cred(&sock)?;
        // SAFETY: getuid has no preconditions.
        let me = unsafe { libc::getuid() };
        if peer.uid != 0 && peer.uid != me {
            return Err(Error::Protocol(format!(
                "the zero-copy service of {} runs as uid {}, neither root nor you",
                mount.display(),
                peer.uid
            )));
        }
        let hello = Request::Hello {
            version: wire::VERSION,
        };
        // A refused peer is answered at once and the connection closed, maybe before our hello
        // is written: its answer is read even when the write fails.
        let sent = wire::send(&sock, &hello, &[]);
        let (resp, fds) = match (wire::recv::<Response>(&sock), sent) {
            (Ok(r), _) => r,
            (Err(_), Err(e)) => return Err(Error::Io(e)),
            (Err(e), Ok(())) => return Err(Error::Gone(e)),
        };
        let (client, block) = match resp {
            Response::Welcome {
                version,
                client,
                block_size,
                ..
            } if version == wire::VERSION => (client, block_size as usize),
            Response::Error { message, errno } => return Err(Error::Refused { message, errno }),
            other => return Err(unexpected(&other)),
        };
        let mut fds = fds.into_iter();
        let (Some(region), Some(pins)) = (fds.next(), fds.next()) else {
            return Err(Error::Protocol("no region or pin area descriptor".into()));
        };
        let region = RegionView::open(File::from(region), File::from(pins), ClientId(client))?;
        if region.layout().block as usize != block {
            return Err(Error::Protocol(
                "block size disagrees with the region".into(),
            ));
        }
        register_socket(sock.as_raw_fd());
        Ok(Self {
            sock: Mutex::new(sock),
            region,
            block,
            slots: Mutex::new(PinCounts::default()),
            forks: FORKS.load(Relaxed),
            stats: ClientStats::default(),
        })
    }

    #[inline]
    pub fn block_size(&self) -> usize {
        self.block
    }

    /// Refuses use in a child `fork()` made after `connect`.
    pub(crate) fn same_process(&self) -> Result<()> {
        if FORKS.load(Relaxed) != self.forks {
            return Err(Error::Protocol(
                "this client was connected before fork(): connect anew in the child".into(),
            ));
        }
        Ok(())
    }

    pub(crate) fn check_serving(&self) -> Result<()> {
        self.same_process()?;
        if !self.region.serving() {
            return Err(Error::Gone(io::Error::new(
                io::ErrorKind::NotConnected,
                "the region is closed",
            )));
        }
        Ok(())
    }

    /// One request, one answer (a descriptor may ride along with the request, or a payload
    /// follow it).
    pub(crate) fn call(
        &self,
        req: &Request,
        fd: Option<&File>,
        payload: Option<&[u8]>,
    ) -> Result<Response> {
        self.check_serving()?;
        let sock = lock(&self.sock);
        let sent = match payload {
            Some(p) => wire::send_with_payload(&sock, req, p),
            None => {
                let fds: Vec<_> = fd.map(AsRawFd::as_raw_fd).into_iter().collect();
                wire::send(&sock, req, &fds)
            }
        };
        sent.map_err(Error::Gone)?;
        let (resp, _) = wire::recv::<Response>(&sock).map_err(Error::Gone)?;
        match resp {
            Response::Error { message, errno } => Err(Error::Refused { message, errno }),
            r => Ok(r),
        }
    }

    /// Opens `path` (a file on the mount) for zero-copy reads. The file is opened here, with
    /// this process's rights, through the mount: the kernel and the mount's permission checks
    /// decide, and the daemon only registers what was opened.
    pub fn open(&self, path: impl AsRef<Path>) -> Result<ZcFile<'_>> {
        self.open_with(path.as_ref(), false)
    }

    /// Like [`Client::open`], for reading and updates ([`ZcFile::write_block`],
    /// [`ZcFile::sync`]): the file is opened read-write through the mount.
    pub fn open_rw(&self, path: impl AsRef<Path>) -> Result<ZcFile<'_>> {
        self.open_with(path.as_ref(), true)
    }

    fn open_with(&self, path: &Path, write: bool) -> Result<ZcFile<'_>> {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(write)
            .open(path)?;
        match self.call(&Request::Open, Some(&f), None)? {
            Response::Opened { handle, file, size } => {
                Ok(ZcFile::new(self, handle, file, size, write))
            }
            other => Err(unexpected(&other)),
        }
    }

    /// Drops one reference to `slot`; the last one clears the bit.
    pub(crate) fn release(&self, slot: u32) {
        if self.same_process().is_err() {
            return; // the pin area is the parent's
        }
        let mut counts = lock(&self.slots);
        if counts.remove(slot) {
            self.region.unpin(slot);
        }
    }

    /// Slots this client holds pinned now.
    pub fn pinned_slots(&self) -> usize {
        lock(&self.slots).held()
    }

    /// The lock-free hit path of blocks `first..first + count` of `file`, pushed to `out` in
    /// order: a slot the hint table names whose header says it holds the block, valid, and
    /// still does once pinned; `None` where there is none (a miss). No system call; one lock
    /// of the counts for all. Returns the hits.
    pub(crate) fn pin_hits<'c>(
        &'c self,
        file: u64,
        first: u64,
        count: u64,
        out: &mut Vec<Option<BlockRef<'c>>>,
    ) -> u64 {
        let mut hits = 0;
        let mut counts = lock(&self.slots);
        for i in 0..count {
            let block = first.saturating_add(i);
            let slot = self
                .region
                .hints(file, block)
                .find(|&slot| self.pin_counted(&mut counts, file, block, slot, false));
            hits += u64::from(slot.is_some());
            // Nothing is dropped here (a drop would take the lock we hold).
            out.push(slot.map(|slot| BlockRef::new(self, slot)));
        }
        drop(counts);
        if hits > 0 {
            self.stats.hits.fetch_add(hits, Relaxed);
            // Also in the pin area, which the daemon's stats sum.
            self.region.hits().fetch_add(hits, Relaxed);
        }
        hits
    }

    /// Takes the slots the daemon pinned for us for blocks `first + lo..` of `file` (one per
    /// block, `None` where it pinned none): each fills its block's hole in `out` if its header
    /// still names the block, valid; every other one is let go unless we hold it anyway.
    pub(crate) fn adopt<'c>(
        &'c self,
        file: u64,
        first: u64,
        lo: usize,
        pinned: Vec<Option<u32>>,
        out: &mut [Option<BlockRef<'c>>],
    ) {
        let mut counts = lock(&self.slots);
        let mut unused = Vec::new();
        for (j, slot) in pinned.into_iter().enumerate() {
            let Some(slot) = slot else { continue };
            let i = lo + j;
            if out.get(i).is_none_or(Option::is_some) {
                unused.push(slot);
            } else if self.pin_counted(
                &mut counts,
                file,
                first.saturating_add(i as u64),
                slot,
                true,
            ) {
                out[i] = Some(BlockRef::new(self, slot));
            }
        }
        for slot in unused {
            if counts.get(slot) == 0 {
                self.region.unpin(slot);
            }
        }
    }

    /// Pins `slot` for `block` of `file` (validated in its header) and counts the reference,
    /// under the counts' lock (`counts`). Also for a slot the daemon pinned for us: if it no
    /// longer holds the block (retired meanwhile) and we hold nothing else of it, the bit the
    /// daemon set is cleared here.
    fn pin_counted(
        &self,
        counts: &mut PinCounts,
        file: u64,
        block: u64,
        slot: u32,
        from_daemon: bool,
    ) -> bool {
        if self.region.try_pin(slot, file, block).is_none() {
            // (On the hint path `try_pin` already dropped any bit it set itself.)
            if from_daemon && counts.get(slot) == 0 {
                self.region.unpin(slot);
            }
            return false;
        }
        counts.add(slot);
        true
    }

    /// Start of this client's pin area, the only shared memory it can store into (for tests
    /// that show a misbehaving client cannot harm the daemon).
    #[doc(hidden)]
    pub fn pin_area_ptr(&self) -> *mut u8 {
        self.region.pin_area_ptr()
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        // Our pins die with the connection (the daemon drops our pin area when it sees EOF);
        // the mappings go with `self.region`. In a forked child the pins are the parent's.
        if self.same_process().is_err() {
            return;
        }
        unregister_socket(lock(&self.sock).as_raw_fd());
        for slot in lock(&self.slots).take_all() {
            self.region.unpin(slot);
        }
    }
}
