//! [`Client`]: one connection to a mount's zero-copy service and its mapping of the memory
//! tier; [`ZcFile`]: a file opened through it; [`BlockRef`]: a pinned block, read in place.
//!
//! Pins: a client holds at most one bit in a slot's `pins` bitmap; `slots` here counts the
//! references this process holds per slot, and the bit goes when the last one is dropped.

use crate::wire::{self, Request, Response};
use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard, PoisonError};
use tiercache_memtier::shm::Region;

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
    region: Region,
    bit: u64,
    block: usize,
    /// What this process holds of each slot (the bits go with the last reference).
    slots: Mutex<HashMap<u32, SlotUse>>,
    /// Held across a `PinWrite` request and by a `BlockMut` ending its update, so the end of
    /// one update cannot clear the writer bit the daemon just set for the next.
    write_gate: Mutex<()>,
    /// `FORKS` when connected.
    forks: u64,
    pub stats: ClientStats,
}

/// Bumped in every child a `fork()` makes (an `atfork` handler): a `Client` made before the
/// fork refuses to work in the child, which would share its client bit and pins.
static FORKS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static ATFORK: std::sync::Once = std::sync::Once::new();

/// This process's client sockets (-1: free). In a forked child they are replaced by
/// `/dev/null`, so a connection ends when its parent does (the daemon then drops its pins)
/// rather than living on in the child.
static SOCKETS: [std::sync::atomic::AtomicI32; 64] =
    [const { std::sync::atomic::AtomicI32::new(-1) }; 64];

extern "C" fn forked_child() {
    FORKS.fetch_add(1, Relaxed);
    for s in &SOCKETS {
        let fd = s.load(Relaxed);
        if fd >= 0 {
            // SAFETY: open/dup2/close are async-signal-safe; `fd` is a descriptor this
            // process registered (the child's copy), replaced in place.
            unsafe {
                let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
                if null >= 0 {
                    libc::dup2(null, fd);
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

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Client {
    /// Connects to the zero-copy service of the tiercache mount at `mount`.
    pub fn connect(mount: impl AsRef<Path>) -> Result<Self> {
        ATFORK.call_once(|| {
            // SAFETY: registers a handler that only bumps an atomic (async-signal-safe).
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
        wire::send(
            &sock,
            &Request::Hello {
                version: wire::VERSION,
            },
            None,
        )?;
        let (resp, fd) = wire::recv::<Response>(&sock).map_err(|e| Error::Gone(e.to_string()))?;
        let (client, block) = match resp {
            Response::Welcome {
                version,
                client,
                block_size,
                ..
            } if version == wire::VERSION && client < 64 => (client, block_size as usize),
            Response::Error { message, errno } => return Err(Error::Refused { message, errno }),
            other => return Err(Error::Protocol(format!("unexpected answer {other:?}"))),
        };
        let fd = fd.ok_or_else(|| Error::Protocol("no region descriptor".into()))?;
        let region = Region::open(File::from(fd))?;
        if region.layout().block as usize != block {
            return Err(Error::Protocol(
                "block size disagrees with the region".into(),
            ));
        }
        register_socket(sock.as_raw_fd());
        Ok(Self {
            sock: Mutex::new(sock),
            region,
            bit: 1u64 << client,
            block,
            slots: Mutex::new(HashMap::new()),
            write_gate: Mutex::new(()),
            forks: FORKS.load(Relaxed),
            stats: ClientStats::default(),
        })
    }

    pub fn block_size(&self) -> usize {
        self.block
    }

    /// One request, one answer (a descriptor may ride along with the request).
    /// Refuses use in a child `fork()` made after `connect`.
    fn same_process(&self) -> Result<()> {
        if FORKS.load(Relaxed) != self.forks {
            return Err(Error::Protocol(
                "this client was connected before fork(): connect anew in the child".into(),
            ));
        }
        Ok(())
    }

    fn call(&self, req: &Request, fd: Option<&File>) -> Result<Response> {
        self.same_process()?;
        if !self.region.serving() {
            return Err(Error::Gone("the region is closed".into()));
        }
        let sock = lock(&self.sock);
        wire::send(&sock, req, fd.map(AsRawFd::as_raw_fd))
            .map_err(|e| Error::Gone(e.to_string()))?;
        let (resp, _) = wire::recv::<Response>(&sock).map_err(|e| Error::Gone(e.to_string()))?;
        match resp {
            Response::Error { message, errno } => Err(Error::Refused { message, errno }),
            r => Ok(r),
        }
    }

    /// Opens `path` (a file on the mount) for zero-copy access. The file is opened here, with
    /// this process's rights, through the mount: the kernel and the mount's permission checks
    /// decide, and the daemon only registers what was opened.
    pub fn open(&self, path: impl AsRef<Path>) -> Result<ZcFile<'_>> {
        self.open_with(path, false)
    }

    /// Like [`Client::open`], for reading and in-place updates ([`ZcFile::write_block`],
    /// [`ZcFile::sync`]): the file is opened read-write through the mount.
    pub fn open_rw(&self, path: impl AsRef<Path>) -> Result<ZcFile<'_>> {
        self.open_with(path, true)
    }

    fn open_with(&self, path: impl AsRef<Path>, write: bool) -> Result<ZcFile<'_>> {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(write)
            .open(path.as_ref())?;
        match self.call(&Request::Open, Some(&f))? {
            Response::Opened { handle, file, size } => Ok(ZcFile {
                client: self,
                handle,
                id: file,
                size: AtomicU64::new(size),
            }),
            other => Err(Error::Protocol(format!("unexpected answer {other:?}"))),
        }
    }

    /// Drops one reference to `slot`; the last one clears the bit.
    fn release(&self, slot: u32) {
        if self.same_process().is_err() {
            return; // the bits are the parent's
        }
        let mut slots = lock(&self.slots);
        if let Some(u) = slots.get_mut(&slot) {
            u.refs = u.refs.saturating_sub(1);
            if u.refs == 0 {
                slots.remove(&slot);
                if let Some(h) = self.region.header(slot) {
                    h.unpin(self.bit);
                }
            }
        }
    }

    /// Slots this client holds pinned now.
    pub fn pinned_slots(&self) -> usize {
        lock(&self.slots).len()
    }

    /// The lock-free hit path: the hint table names a slot, its header says it holds `block`
    /// of `file`, valid, and still does once pinned. No system call.
    fn try_hit(&self, file: u64, block: u64) -> Result<Option<u32>> {
        for slot in self.region.hints(file, block) {
            match self.pin_slot(file, block, slot, false) {
                Pin::Held => return Ok(Some(slot)),
                Pin::Miss => {}
                Pin::Busy => return Err(busy(block)),
            }
        }
        Ok(None)
    }

    /// Pins `slot` for `block` of `file` (validated in its header) and counts the reference.
    /// Also for a slot the daemon pinned for us: if it no longer holds the block (retired
    /// meanwhile) and we hold nothing else of it, the bit the daemon set is cleared here.
    fn pin_slot(&self, file: u64, block: u64, slot: u32, from_daemon: bool) -> Pin {
        // Under the map's lock: a concurrent release of our last reference to the same slot
        // cannot clear the bit this pin relies on.
        let mut slots = lock(&self.slots);
        let Some(h) = self.region.header(slot) else {
            return Pin::Miss;
        };
        if slots.get(&slot).is_some_and(|u| u.writing) {
            // Busy only if it is this block (a stale hint may name a slot of another one).
            let same = h.file.load(Relaxed) == file && h.block.load(Relaxed) == block;
            return if same { Pin::Busy } else { Pin::Miss };
        }
        if h.try_pin(file, block, self.bit).is_none() {
            // A bit the daemon set for this reply that we cannot use (the block left the
            // slot meanwhile) is cleared if nothing of ours relies on it. (On the hint path
            // `try_pin` already dropped any bit it set itself.)
            if from_daemon && !slots.contains_key(&slot) {
                h.unpin(self.bit);
            }
            return Pin::Miss;
        }
        slots.entry(slot).or_default().refs += 1;
        Pin::Held
    }
}

/// What this process holds of one slot.
#[derive(Debug, Default, Clone, Copy)]
struct SlotUse {
    /// References (`BlockRef`s, a `BlockMut`'s included).
    refs: u32,
    /// A `BlockMut` of it is alive (then it is the only reference: no `&[u8]` aliases it).
    writing: bool,
}

/// Outcome of pinning one slot.
enum Pin {
    Held,
    Miss,
    /// This client is updating the block in place: no shared reference to it meanwhile.
    Busy,
}

fn busy(block: u64) -> Error {
    Error::Refused {
        message: format!("block {block} is being updated in place by this client"),
        errno: libc::EBUSY,
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        // Our pins die with the connection (the daemon clears our bit when it sees EOF); the
        // region unmaps with `self.region`. In a forked child the bits are the parent's.
        if self.same_process().is_err() {
            return;
        }
        unregister_socket(lock(&self.sock).as_raw_fd());
        let slots = std::mem::take(&mut *lock(&self.slots));
        for (slot, u) in slots {
            if let Some(h) = self.region.header(slot) {
                if u.writing {
                    h.end_write(self.bit);
                }
                h.unpin(self.bit);
            }
        }
    }
}

/// A file opened for zero-copy access.
#[derive(Debug)]
pub struct ZcFile<'c> {
    client: &'c Client,
    handle: u64,
    id: u64,
    size: AtomicU64,
}

impl<'c> ZcFile<'c> {
    /// The file's size as last reported by the daemon.
    pub fn size(&self) -> u64 {
        self.size.load(Relaxed)
    }

    /// 003's readblock: blocks `first..first+count`, pinned in the cache's memory and read in
    /// place. Hits cost no system call; misses are read by the daemon (lower tiers, BACKING)
    /// with one request for all of them. Stops at EOF (fewer blocks returned).
    pub fn read_blocks(&self, first: u64, count: u64) -> Result<Vec<BlockRef<'c>>> {
        let c = self.client;
        c.same_process()?;
        if !c.region.serving() {
            return Err(Error::Gone("the region is closed".into()));
        }
        if count > MAX_BLOCKS {
            return Err(Error::Refused {
                message: format!("at most {MAX_BLOCKS} blocks per call"),
                errno: libc::EINVAL,
            });
        }
        let mut out: Vec<Option<BlockRef<'c>>> = Vec::with_capacity(count as usize);
        let mut missing = Vec::new();
        for i in 0..count {
            match c.try_hit(self.id, first.saturating_add(i))? {
                Some(slot) => {
                    c.stats.hits.fetch_add(1, Relaxed);
                    if let Some(h) = c.region.client_hits(c.bit.trailing_zeros()) {
                        h.fetch_add(1, Relaxed);
                    }
                    out.push(Some(BlockRef::new(c, slot)));
                }
                None => {
                    missing.push(i);
                    out.push(None);
                }
            }
        }
        if let (Some(&lo), Some(&hi)) = (missing.first(), missing.last()) {
            c.stats.misses.fetch_add(missing.len() as u64, Relaxed);
            let req = Request::Pin {
                handle: self.handle,
                first: first.saturating_add(lo),
                count: hi - lo + 1,
            };
            match c.call(&req, None)? {
                Response::Pinned { slots, size } => {
                    self.size.store(size, Relaxed);
                    let mut busy_at = None;
                    // Every slot the daemon pinned for us is either counted or let go.
                    let mut unused = Vec::new();
                    for (j, s) in slots.into_iter().enumerate() {
                        let i = lo as usize + j;
                        let Some(slot) = s else { continue };
                        if i >= out.len() || out[i].is_some() || busy_at.is_some() {
                            unused.push(slot);
                            continue;
                        }
                        match c.pin_slot(self.id, first + i as u64, slot, true) {
                            Pin::Held => out[i] = Some(BlockRef::new(c, slot)),
                            Pin::Miss => {}
                            Pin::Busy => busy_at = Some(first + i as u64),
                        }
                    }
                    {
                        let held = lock(&c.slots);
                        for slot in unused {
                            if !held.contains_key(&slot) {
                                if let Some(h) = c.region.header(slot) {
                                    h.unpin(c.bit);
                                }
                            }
                        }
                    }
                    if let Some(b) = busy_at {
                        return Err(busy(b));
                    }
                }
                other => return Err(Error::Protocol(format!("unexpected answer {other:?}"))),
            }
        }
        let bs = c.block as u64;
        let size = self.size();
        let mut blocks = Vec::with_capacity(out.len());
        for (i, b) in out.into_iter().enumerate() {
            match b {
                Some(b) => blocks.push(b),
                // Past EOF (as the daemon last said): the range ends here.
                None if (first + i as u64).saturating_mul(bs) >= size => break,
                None => {
                    return Err(Error::Refused {
                        message: format!(
                            "block {} could not be kept in the cache",
                            first + i as u64
                        ),
                        errno: libc::EAGAIN,
                    })
                }
            }
        }
        Ok(blocks)
    }

    /// 003's readbyte: bytes `offset..offset+len` (clipped at EOF) as a view over pinned
    /// blocks — a table of block pointers, no copy.
    pub fn read_bytes(&self, offset: u64, len: usize) -> Result<ByteView<'c>> {
        let bs = self.client.block as u64;
        let end = offset.saturating_add(len as u64);
        if len == 0 {
            return Ok(ByteView {
                blocks: Vec::new(),
                skip: 0,
                len: 0,
            });
        }
        let (b0, b1) = (offset / bs, (end - 1) / bs);
        let blocks = self.read_blocks(b0, b1 - b0 + 1)?;
        let avail = (b0 * bs + blocks.len() as u64 * bs).min(self.size().max(offset));
        let len = avail.saturating_sub(offset).min(len as u64) as usize;
        Ok(ByteView {
            blocks,
            skip: (offset - b0 * bs) as usize,
            len,
        })
    }
}

impl<'c> ZcFile<'c> {
    /// 003's in-place update: block `block` pinned and marked dirty for this client, to change
    /// in place. Other processes mapping it, and readers on the mount, see the bytes at once;
    /// they reach BACKING by write-back, durably with [`ZcFile::sync`]. The block may lie
    /// past EOF too (it starts as zeros; it becomes the file's when `sync(.., extend)` covers
    /// it). One request to the daemon; the updates through it cost none.
    pub fn write_block(&self, block: u64) -> Result<BlockMut<'c>> {
        let c = self.client;
        let req = Request::PinWrite {
            handle: self.handle,
            block,
        };
        // Held across the request: the end of another update of the same block cannot clear
        // the writer bit between the daemon setting it and us recording it.
        let _gate = lock(&c.write_gate);
        match c.call(&req, None)? {
            Response::Pinned { slots, size } => {
                self.size.store(size, Relaxed);
                let Some(Some(slot)) = slots.first().copied() else {
                    return Err(Error::Protocol("no slot for a pinned block".into()));
                };
                let Some(h) = c.region.header(slot) else {
                    return Err(Error::Protocol(format!("slot {slot} out of range")));
                };
                let mut held = lock(&c.slots);
                let mine = held.get(&slot).copied();
                match mine {
                    // One reference while updating: no `&[u8]` of ours aliases the `&mut`.
                    Some(u) if u.writing => return Err(busy(block)),
                    Some(_) => {
                        // Our shared references keep the pin; the update does not happen.
                        h.end_write(c.bit);
                        return Err(Error::Refused {
                            message: format!(
                                "block {block} is referenced by this client (drop its BlockRefs first)"
                            ),
                            errno: libc::EBUSY,
                        });
                    }
                    None => {}
                }
                if h.try_pin(self.id, block, c.bit).is_none() {
                    h.end_write(c.bit);
                    h.unpin(c.bit);
                    return Err(Error::Refused {
                        message: format!("block {block} left the cache; try again"),
                        errno: libc::EAGAIN,
                    });
                }
                held.insert(
                    slot,
                    SlotUse {
                        refs: 1,
                        writing: true,
                    },
                );
                Ok(BlockMut {
                    block: BlockRef::new(c, slot),
                })
            }
            other => Err(Error::Protocol(format!("unexpected answer {other:?}"))),
        }
    }

    /// 003's syncblock: the file's dirty blocks reach BACKING and are synced; with `extend`,
    /// the size grows to `offset + len` when that passes EOF (the block holding the new EOF
    /// must have been updated in place); the
    /// mtime is now. Returns the file's size.
    pub fn sync(&self, offset: u64, len: u64, extend: bool) -> Result<u64> {
        let req = Request::Sync {
            handle: self.handle,
            offset,
            len,
            extend,
        };
        match self.client.call(&req, None)? {
            Response::Synced { size } => {
                self.size.store(size, Relaxed);
                Ok(size)
            }
            other => Err(Error::Protocol(format!("unexpected answer {other:?}"))),
        }
    }
}

impl Drop for ZcFile<'_> {
    fn drop(&mut self) {
        let _ = self.client.call(
            &Request::Close {
                handle: self.handle,
            },
            None,
        );
    }
}

/// One pinned block of the cache, read in place. Its bytes may change under it when the file
/// is written (through the mount, or in place by another client), as a shared mapping's do;
/// the block itself stays this block until the reference is dropped.
#[derive(Debug)]
pub struct BlockRef<'c> {
    client: &'c Client,
    slot: u32,
}

impl<'c> BlockRef<'c> {
    fn new(client: &'c Client, slot: u32) -> Self {
        Self { client, slot }
    }

    /// The slot it lives in.
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// The block's bytes (a whole block; past EOF they are zero).
    pub fn bytes(&self) -> &[u8] {
        let r = &self.client.region;
        // SAFETY: the slot index came from a header of this region (in range); the slot is
        // pinned by our bit while `self` lives, so the daemon neither reuses nor unmaps it;
        // the mapping outlives `'c`. Other writers may change the bytes as with any shared
        // mapping (documented above): we hand out plain bytes, never rely on them for safety.
        unsafe { std::slice::from_raw_parts(r.data_ptr(self.slot), self.client.block) }
    }
}

impl std::ops::Deref for BlockRef<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.bytes()
    }
}

impl Drop for BlockRef<'_> {
    fn drop(&mut self) {
        self.client.release(self.slot);
    }
}

/// A pinned block being updated in place ([`ZcFile::write_block`]). When the last mutable
/// reference of this client to the block goes, its update ends (the block's dirty sequence
/// moves, so write-back writes the new bytes).
#[derive(Debug)]
pub struct BlockMut<'c> {
    block: BlockRef<'c>,
}

impl BlockMut<'_> {
    pub fn slot(&self) -> u32 {
        self.block.slot
    }

    /// The block's bytes, to change in place.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        let c = self.block.client;
        // SAFETY: as in `BlockRef::bytes` (in range, pinned, mapping alive); the mapping is
        // writable (MAP_SHARED, PROT_WRITE) and `&mut self` makes this the only reference this
        // process hands out through `self`. Other writers (other clients, the mount) may change
        // the bytes too, as with any shared mapping.
        unsafe { std::slice::from_raw_parts_mut(c.region.data_ptr(self.block.slot), c.block) }
    }
}

impl std::ops::Deref for BlockMut<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.block.bytes()
    }
}

impl std::ops::DerefMut for BlockMut<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.bytes_mut()
    }
}

impl Drop for BlockMut<'_> {
    fn drop(&mut self) {
        let c = self.block.client;
        if c.same_process().is_err() {
            return; // the bits are the parent's
        }
        let _gate = lock(&c.write_gate);
        let mut held = lock(&c.slots);
        if let Some(u) = held.get_mut(&self.block.slot) {
            if u.writing {
                u.writing = false;
                if let Some(h) = c.region.header(self.block.slot) {
                    h.end_write(c.bit);
                }
            }
        }
        // Then `self.block` drops the reference (and, the last, the pin).
    }
}

/// A byte range of a file over pinned blocks (003's readbyte).
#[derive(Debug)]
pub struct ByteView<'c> {
    blocks: Vec<BlockRef<'c>>,
    skip: usize,
    len: usize,
}

impl ByteView<'_> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Byte `i` of the range.
    pub fn get(&self, i: usize) -> Option<u8> {
        if i >= self.len {
            return None;
        }
        let bs = self.blocks.first().map_or(1, |b| b.client.block);
        let p = self.skip + i;
        self.blocks.get(p / bs).map(|b| b.bytes()[p % bs])
    }

    /// The range as consecutive slices, one per block.
    pub fn chunks(&self) -> impl Iterator<Item = &[u8]> {
        let mut skip = self.skip;
        let mut left = self.len;
        self.blocks.iter().map_while(move |b| {
            if left == 0 {
                return None;
            }
            let bytes = &b.bytes()[skip..];
            let n = bytes.len().min(left);
            skip = 0;
            left -= n;
            Some(&bytes[..n])
        })
    }

    /// Copies the range into `out` (which must be `len()` long).
    pub fn copy_to(&self, out: &mut [u8]) {
        let mut at = 0;
        for c in self.chunks() {
            out[at..at + c.len()].copy_from_slice(c);
            at += c.len();
        }
    }
}
