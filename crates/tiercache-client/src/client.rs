//! [`Client`]: one connection to a mount's zero-copy service, its read-only mapping of the
//! memory tier and its own pin area.
//!
//! Pins: a client holds at most one bit per slot in its pin area; `slots` here counts the
//! references this process holds per slot, and the bit goes when the last one is dropped.

use crate::file::ZcFile;
use crate::wire::{self, Request, Response};
use std::collections::HashMap;
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
    Gone(String),
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
    /// References this process holds to each slot (the bit goes with the last).
    slots: Mutex<HashMap<u32, u32>>,
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
            (Err(e), Ok(())) => return Err(Error::Gone(e.to_string())),
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
            slots: Mutex::new(HashMap::new()),
            forks: FORKS.load(Relaxed),
            stats: ClientStats::default(),
        })
    }

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
            return Err(Error::Gone("the region is closed".into()));
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
        sent.map_err(|e| Error::Gone(e.to_string()))?;
        let (resp, _) = wire::recv::<Response>(&sock).map_err(|e| Error::Gone(e.to_string()))?;
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
        let mut slots = lock(&self.slots);
        if let Some(refs) = slots.get_mut(&slot) {
            *refs = refs.saturating_sub(1);
            if *refs == 0 {
                slots.remove(&slot);
                self.region.unpin(slot);
            }
        }
    }

    /// Slots this client holds pinned now.
    pub fn pinned_slots(&self) -> usize {
        lock(&self.slots).len()
    }

    /// The lock-free hit path: the hint table names a slot, its header says it holds `block`
    /// of `file`, valid, and still does once pinned. No system call.
    pub(crate) fn try_hit(&self, file: u64, block: u64) -> Option<u32> {
        self.region
            .hints(file, block)
            .find(|&slot| self.pin_slot(file, block, slot, false))
    }

    /// Pins `slot` for `block` of `file` (validated in its header) and counts the reference.
    /// Also for a slot the daemon pinned for us: if it no longer holds the block (retired
    /// meanwhile) and we hold nothing else of it, the bit the daemon set is cleared here.
    pub(crate) fn pin_slot(&self, file: u64, block: u64, slot: u32, from_daemon: bool) -> bool {
        // Under the map's lock: a concurrent release of our last reference to the same slot
        // cannot clear the bit this pin relies on.
        let mut slots = lock(&self.slots);
        if self.region.try_pin(slot, file, block).is_none() {
            // A bit the daemon set for this reply that we cannot use (the block left the
            // slot meanwhile) is cleared if nothing of ours relies on it. (On the hint path
            // `try_pin` already dropped any bit it set itself.)
            if from_daemon && !slots.contains_key(&slot) {
                self.region.unpin(slot);
            }
            return false;
        }
        *slots.entry(slot).or_default() += 1;
        true
    }

    /// Lets go of slots the daemon pinned for us that we did not use.
    pub(crate) fn drop_unused(&self, unused: &[u32]) {
        let held = lock(&self.slots);
        for &slot in unused {
            if !held.contains_key(&slot) {
                self.region.unpin(slot);
            }
        }
    }

    /// Counts a hit (here and in the pin area, which the daemon's stats sum).
    pub(crate) fn count_hit(&self) {
        self.stats.hits.fetch_add(1, Relaxed);
        self.region.hits().fetch_add(1, Relaxed);
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
        let slots = std::mem::take(&mut *lock(&self.slots));
        for slot in slots.into_keys() {
            self.region.unpin(slot);
        }
    }
}
