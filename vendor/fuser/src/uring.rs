//! FUSE over io_uring (Linux 6.14+, with the fuse module's `enable_uring` parameter on).
//!
//! The kernel keeps one request queue per possible CPU and puts a request on the queue of the
//! CPU its caller runs on. Each queue is served here by one thread pinned to that CPU, with its
//! own io_uring (128-byte SQEs) and [`ENTRIES_PER_QUEUE`] registered ring entries. A request
//! arrives in an entry's buffers (a CQE); the reply is written into the same buffers and handed
//! back with COMMIT_AND_FETCH, which also arms the entry for the next request. So a request and
//! its reply stay on the caller's CPU, and one system call both answers and waits.
//!
//! Invariants:
//! - An entry belongs either to the kernel (registered or committed, waiting for a request) or
//!   to exactly one request being served. Only that request's [`UringReply`] writes the entry's
//!   buffers, and it commits exactly once: a reply dropped unsent commits `EIO`. No entry is
//!   lost to a reply that never comes.
//! - Only the queue's thread submits to its ring. A reply made on another thread is queued and
//!   the queue's thread is woken through an eventfd.
//! - An entry's buffers outlive every use the kernel can make of them: a failed commit retires
//!   the entry's buffers (kept until the queue goes) and registers fresh ones, and the queue is
//!   dropped only after its thread has exited and closed its ring.
//! - Rings and buffers are set up before the INIT reply. If that fails, FUSE_OVER_IO_URING is
//!   not requested and `/dev/fuse` serves everything; if the kernel refuses a registration, it
//!   falls back to `/dev/fuse` itself.
//! - A queue never just stops while the connection lives: the kernel would hold its CPU's
//!   requests forever. A handler's panic is caught (its reply commits EIO); a queue that cannot
//!   start forces the fallback; one that cannot go on aborts the connection (its callers get
//!   an error, the session ends) through the fuse control file system.
//!
//! FORGET, INTERRUPT and notifications stay on `/dev/fuse`: the kernel sends them there.

use std::cell::UnsafeCell;
use std::io;
use std::io::IoSlice;
use std::os::fd::AsRawFd;
use std::os::fd::BorrowedFd;
use std::os::fd::FromRawFd;
use std::os::fd::OwnedFd;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::PoisonError;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicI32;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;

use io_uring::IoUring;
use io_uring::cqueue;
use io_uring::opcode;
use io_uring::squeue;
use io_uring::types;
use log::debug;
use log::error;
use log::info;
use log::warn;

use crate::Filesystem;
use crate::channel::ChannelSender;
use crate::ll::Operation;
use crate::passthrough::BackingId;
use crate::reply::ReplyEmpty;
use crate::request::RequestWithSender;
use crate::session::SessionEventLoop;

/// uapi: FUSE_IO_URING_CMD_REGISTER and FUSE_IO_URING_CMD_COMMIT_AND_FETCH.
const CMD_REGISTER: u32 = 1;
const CMD_COMMIT_AND_FETCH: u32 = 2;
/// Ring entries registered per queue: requests of one CPU served at once.
pub(crate) const ENTRIES_PER_QUEUE: usize = 8;
/// The largest write the kernel sends in one request on the ring. Each entry's payload buffer
/// is at least this large, so it bounds the transport's memory: entries × queues × this.
pub(crate) const RING_MAX_WRITE: u32 = 1 << 20;
const SQ_DEPTH: u32 = 32;
const TAG_EFD: u64 = u64::MAX;
const KIND_REGISTER: u64 = 1 << 32;
const KIND_COMMIT: u64 = 2 << 32;
const KIND_REREGISTER: u64 = 3 << 32;
const KIND_MASK: u64 = 0xffff_ffff << 32;
/// Entries a queue may replace after refused commits before it gives up (each keeps its old
/// buffers, which the kernel may still reference).
const MAX_REPLACEMENTS: u64 = 64;
const IN_HEADER_SZ: usize = 40;
const OUT_HEADER_SZ: usize = 16;
const OP_IN_SZ: usize = 128;

/// uapi: `struct fuse_uring_req_header` with its `struct fuse_uring_ent_in_out`.
#[repr(C)]
struct ReqHeader {
    in_out: [u8; 128],
    op_in: [u8; OP_IN_SZ],
    flags: u64,
    commit_id: u64,
    payload_sz: u32,
    padding: u32,
    reserved: u64,
}

/// The buffers of one ring entry, as registered with the kernel.
struct EntryBufs {
    hdr: Box<UnsafeCell<ReqHeader>>,
    payload: Box<[UnsafeCell<u8>]>,
}

impl EntryBufs {
    fn new(payload_len: usize) -> Box<Self> {
        // SAFETY: ReqHeader is integers and byte arrays; all zeroes is a valid value.
        let hdr = Box::new(UnsafeCell::new(unsafe { std::mem::zeroed::<ReqHeader>() }));
        // Zeroed by the allocator (fresh pages for large sizes): nothing is touched, so the
        // buffer costs memory only as far as requests fill it.
        let bytes: Box<[u8]> = vec![0u8; payload_len].into_boxed_slice();
        // SAFETY: UnsafeCell<u8> is repr(transparent) over u8, so the slice's layout is the same.
        let payload = unsafe { Box::from_raw(Box::into_raw(bytes) as *mut [UnsafeCell<u8>]) };
        Box::new(Self { hdr, payload })
    }

    fn payload_ptr(&self) -> *mut u8 {
        UnsafeCell::raw_get(self.payload.as_ptr())
    }
}

/// Figures of the ring transport of one session, shared with the file system's owner.
#[derive(Debug, Default)]
pub struct UringStats {
    queues: usize,
    /// Queues whose entries the kernel has been given.
    started: AtomicUsize,
    /// The kernel refused a first registration, or a queue forced the fallback.
    fell_back: AtomicBool,
    requests: AtomicU64,
    worker_replies: AtomicU64,
    entries_replaced: AtomicU64,
}

impl UringStats {
    /// Request queues (one per possible CPU).
    pub fn queues(&self) -> usize {
        self.queues
    }
    /// Whether the rings serve: every queue registered and none refused.
    pub fn active(&self) -> bool {
        !self.fell_back() && self.started.load(Ordering::Acquire) == self.queues
    }
    /// Whether the connection went back to `/dev/fuse` (a refused or failed registration).
    pub fn fell_back(&self) -> bool {
        self.fell_back.load(Ordering::Acquire)
    }
    /// Whether the start is over: every queue registered, or the connection fell back.
    pub fn settled(&self) -> bool {
        self.fell_back() || self.started.load(Ordering::Acquire) == self.queues
    }
    /// Requests served through the rings since the mount.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }
    /// Of those, replies made on another thread than the queue's (handed over by eventfd).
    pub fn worker_replies(&self) -> u64 {
        self.worker_replies.load(Ordering::Relaxed)
    }
    /// Entries re-registered with fresh buffers after the kernel refused a commit.
    pub fn entries_replaced(&self) -> u64 {
        self.entries_replaced.load(Ordering::Relaxed)
    }
}

/// State of one queue shared between its thread and the replies in flight.
pub(crate) struct Queue {
    qid: u16,
    payload_len: usize,
    /// Slot `i` holds the buffers of entry `i`. Only the queue's thread replaces a slot's
    /// buffers, and only while no request owns the entry (after a failed commit).
    slots: Vec<UnsafeCell<Box<EntryBufs>>>,
    /// Buffers of entries whose commit failed: the kernel may still hold them.
    retired: Mutex<Vec<EntryBufs>>,
    /// Entries whose reply is written, with their commit ids, awaiting COMMIT_AND_FETCH.
    pending: Mutex<Vec<(usize, u64)>>,
    efd: OwnedFd,
    owner_tid: AtomicI32,
    stop: AtomicBool,
    stats: Arc<UringStats>,
    /// The connection's `abort` file in the fuse control file system, if known.
    abort: Option<Arc<std::path::Path>>,
    /// Entries of this queue the kernel holds or a request owns (refused ones are not).
    live_entries: AtomicUsize,
    replaced: AtomicU64,
}

// SAFETY: the `UnsafeCell`s are the entries' buffers. Per the module invariants an entry's
// buffers are accessed by the kernel while it owns the entry, and otherwise by exactly one
// request's reply (on any thread), or by the queue's thread when it (re)registers the entry;
// ownership passes through the ring (CQE, commit) and the `pending` mutex.
unsafe impl Send for Queue {}
// SAFETY: as above.
unsafe impl Sync for Queue {}

impl Queue {
    fn bufs(&self, slot: usize) -> &EntryBufs {
        // SAFETY: the slot's Box is replaced only by the queue's thread while nobody else
        // holds the entry; see `slots`.
        unsafe { &*self.slots[slot].get() }
    }

    /// Writes a reply (fuse_out_header, then the payload) into entry `slot`.
    ///
    /// # Safety
    /// The caller owns the entry (it serves the request that arrived in it).
    unsafe fn write_reply(&self, slot: usize, data: &[IoSlice<'_>]) -> io::Result<()> {
        let b = self.bufs(slot);
        let total: usize = data.iter().map(|s| s.len()).sum();
        if total < OUT_HEADER_SZ || total - OUT_HEADER_SZ > self.payload_len {
            return Err(io::Error::other(format!(
                "reply of {total} bytes does not fit a ring entry"
            )));
        }
        // SAFETY: the caller owns the entry, so nobody else touches its buffers now.
        let hdr = unsafe { &mut *b.hdr.get() };
        let payload = b.payload_ptr();
        let mut pos = 0usize;
        for s in data {
            let mut s: &[u8] = s;
            if pos < OUT_HEADER_SZ {
                let n = (OUT_HEADER_SZ - pos).min(s.len());
                hdr.in_out[pos..pos + n].copy_from_slice(&s[..n]);
                pos += n;
                s = &s[n..];
            }
            if !s.is_empty() {
                let off = pos - OUT_HEADER_SZ;
                // SAFETY: off + len <= payload_len (checked above); the entry is ours.
                unsafe { std::ptr::copy_nonoverlapping(s.as_ptr(), payload.add(off), s.len()) };
                pos += s.len();
            }
        }
        hdr.payload_sz = u32::try_from(pos - OUT_HEADER_SZ).unwrap_or(u32::MAX);
        Ok(())
    }

    /// Writes an error reply into entry `slot`.
    ///
    /// # Safety
    /// As for [`Self::write_reply`].
    unsafe fn write_error(&self, slot: usize, unique: u64, errno: i32) {
        // SAFETY: the caller owns the entry.
        let hdr = unsafe { &mut *self.bufs(slot).hdr.get() };
        hdr.in_out[0..4].copy_from_slice(&(OUT_HEADER_SZ as u32).to_ne_bytes());
        hdr.in_out[4..8].copy_from_slice(&(-errno).to_ne_bytes());
        hdr.in_out[8..16].copy_from_slice(&unique.to_ne_bytes());
        hdr.payload_sz = 0;
    }

    /// Hands entry `slot` back for COMMIT_AND_FETCH; wakes the queue's thread if another
    /// thread replied.
    fn complete(&self, slot: usize, commit_id: u64) {
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((slot, commit_id));
        if this_tid() != self.owner_tid.load(Ordering::Relaxed) {
            self.stats.worker_replies.fetch_add(1, Ordering::Relaxed);
            self.wake();
        }
    }

    /// The queue cannot go on: ends the connection rather than leave this CPU's callers
    /// waiting for a queue nobody serves.
    fn fatal(&self, why: &str) {
        error!(
            "ring queue {}: {why}; aborting the FUSE connection",
            self.qid
        );
        let done = self.abort.as_ref().map(|p| std::fs::write(p, b"1"));
        match done {
            Some(Ok(())) => {}
            Some(Err(e)) => error!("ring queue {}: cannot abort the connection: {e}", self.qid),
            None => error!(
                "ring queue {}: connection unknown, cannot abort it",
                self.qid
            ),
        }
    }

    fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to the queue's own eventfd, which lives as
        // long as the queue. An eventfd write fails only when the counter would overflow, and
        // then the thread is awake anyway.
        unsafe { libc::write(self.efd.as_raw_fd(), (&raw const one).cast(), 8) };
    }
}

thread_local! {
    // SAFETY: gettid has no preconditions.
    static TID: i32 = unsafe { libc::gettid() };
}

/// This thread's id, from a thread-local (a reply checks it, so no system call per request).
fn this_tid() -> i32 {
    TID.with(|t| *t)
}

/// Reply target of a request that arrived on the ring: one entry of one queue.
pub(crate) struct UringReply {
    q: Arc<Queue>,
    slot: usize,
    commit_id: u64,
    ch: ChannelSender,
    sent: AtomicBool,
}

impl std::fmt::Debug for UringReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "UringReply(q={}, entry={})", self.q.qid, self.slot)
    }
}

impl UringReply {
    /// Sends the reply: writes it into the entry and queues the commit. A reply that does not
    /// fit is answered `EIO` instead (and reported), so the entry always goes back.
    pub(crate) fn send(&self, data: &[IoSlice<'_>]) -> io::Result<()> {
        if self.sent.swap(true, Ordering::AcqRel) {
            return Err(io::Error::other("a ring entry was replied to twice"));
        }
        // SAFETY: this reply owns the entry until `complete` hands it back.
        let r = unsafe { self.q.write_reply(self.slot, data) };
        if r.is_err() {
            // SAFETY: as above.
            unsafe { self.q.write_error(self.slot, self.commit_id, libc::EIO) };
        }
        self.q.complete(self.slot, self.commit_id);
        r
    }

    pub(crate) fn open_backing(&self, fd: BorrowedFd<'_>) -> io::Result<BackingId> {
        self.ch.open_backing(fd)
    }

    /// # Safety
    /// As `ChannelSender::wrap_backing`: `id` names a backing file this session opened.
    pub(crate) unsafe fn wrap_backing(&self, id: u32) -> BackingId {
        // SAFETY: forwarded; the caller upholds wrap_backing's contract.
        unsafe { self.ch.wrap_backing(id) }
    }
}

impl Drop for UringReply {
    fn drop(&mut self) {
        if !self.sent.swap(true, Ordering::AcqRel) {
            warn!(
                "ring request {} dropped without a reply; answering EIO",
                self.commit_id
            );
            // SAFETY: unsent, so this reply still owns the entry.
            unsafe { self.q.write_error(self.slot, self.commit_id, libc::EIO) };
            self.q.complete(self.slot, self.commit_id);
        }
    }
}

/// One queue, set up before the INIT reply and handed to its thread.
pub(crate) struct PreparedQueue {
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
    q: Arc<Queue>,
}

/// All queues of a session, or the reason they could not be set up. `abort` is the
/// connection's abort file, used if a queue cannot go on.
pub(crate) fn prepare(
    payload_len: usize,
    abort: Option<std::path::PathBuf>,
) -> io::Result<(Vec<PreparedQueue>, Arc<UringStats>)> {
    let abort: Option<Arc<std::path::Path>> = abort.map(Arc::from);
    let n = crate::uring_host::possible_cpus();
    let qmax = usize::from(u16::MAX);
    if n > qmax {
        return Err(io::Error::other(format!("{n} possible CPUs")));
    }
    let stats = Arc::new(UringStats {
        queues: n,
        ..UringStats::default()
    });
    let mut out = Vec::with_capacity(n);
    for qid in 0..n {
        // Disabled until the queue's own thread enables it: a single-issuer ring belongs to
        // the task that enables it.
        let ring = IoUring::builder()
            .setup_single_issuer()
            .setup_coop_taskrun()
            .setup_r_disabled()
            .build(SQ_DEPTH)?;
        // SAFETY: plain eventfd creation; the descriptor is owned right below.
        let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if efd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: efd is a fresh descriptor nobody else owns.
        let efd = unsafe { OwnedFd::from_raw_fd(efd) };
        let slots = (0..ENTRIES_PER_QUEUE)
            .map(|_| UnsafeCell::new(EntryBufs::new(payload_len)))
            .collect();
        let q = Arc::new(Queue {
            qid: u16::try_from(qid).unwrap_or(u16::MAX),
            payload_len,
            slots,
            retired: Mutex::new(Vec::new()),
            pending: Mutex::new(Vec::new()),
            efd,
            owner_tid: AtomicI32::new(0),
            stop: AtomicBool::new(false),
            stats: Arc::clone(&stats),
            abort: abort.clone(),
            live_entries: AtomicUsize::new(ENTRIES_PER_QUEUE),
            replaced: AtomicU64::new(0),
        });
        out.push(PreparedQueue { ring, q });
    }
    Ok((out, stats))
}

/// A queue whose thread did not start.
pub(crate) struct Abandoned(Arc<Queue>, io::Error);

impl Abandoned {
    pub(crate) fn abandon(self, dev_fd: RawFd, why: &str) {
        abandon(&self.0, dev_fd, &format!("{why} ({})", self.1));
    }
}

impl PreparedQueue {
    pub(crate) fn abandon(self, dev_fd: RawFd, why: &str) {
        abandon(&self.q, dev_fd, why);
    }
}

/// A queue that cannot start: makes the kernel serve the connection through `/dev/fuse` (else
/// it holds every request until this queue registers), or ends the connection.
fn abandon(q: &Queue, dev_fd: RawFd, why: &str) {
    error!("ring queue {}: {why}; falling back to /dev/fuse", q.qid);
    q.stats.fell_back.store(true, Ordering::Release);
    if let Err(e) = force_fallback(dev_fd, q.qid) {
        q.fatal(&format!("the fallback failed too ({e})"));
    }
}

/// Handle on a running queue thread: asks it to stop, joins it, then drops its buffers.
pub(crate) struct QueueHandle {
    q: Arc<Queue>,
    thread: std::thread::JoinHandle<()>,
}

impl QueueHandle {
    pub(crate) fn stop(&self) {
        self.q.stop.store(true, Ordering::Release);
        self.q.wake();
    }

    /// Waits for the thread; only then may the buffers go (the kernel copies into them in
    /// the thread's context).
    pub(crate) fn join(self) {
        if self.thread.join().is_err() {
            error!("ring queue {} thread panicked", self.q.qid);
        }
    }
}

/// Starts the thread of one prepared queue.
pub(crate) fn spawn<FS: Filesystem + Send + Sync + 'static>(
    prepared: PreparedQueue,
    dev_fd: RawFd,
    se: SessionEventLoop<FS>,
) -> Result<QueueHandle, Abandoned> {
    let q = Arc::clone(&prepared.q);
    match std::thread::Builder::new()
        .name(format!("fuser-ring-{}", q.qid))
        .spawn(move || run_queue(prepared, dev_fd, &se))
    {
        Ok(thread) => Ok(QueueHandle { q, thread }),
        Err(e) => Err(Abandoned(q, e)),
    }
}

fn cmd_bytes(commit_id: u64, qid: u16) -> [u8; 80] {
    // uapi: struct fuse_uring_cmd_req { u64 flags; u64 commit_id; u16 qid; u8 padding[6]; }
    let mut c = [0u8; 80];
    c[8..16].copy_from_slice(&commit_id.to_ne_bytes());
    c[16..18].copy_from_slice(&qid.to_ne_bytes());
    c
}

const _: () = assert!(size_of::<squeue::Entry128>() == 128);

fn set_sqe_len(e: squeue::Entry128, len: u32) -> squeue::Entry128 {
    // SAFETY: in io-uring 0.7.16 (pinned exactly in Cargo.toml for this reason) Entry128 is
    // repr(C) { Entry(io_uring_sqe, 64 bytes), [u8; 64] }, and the kernel ABI puts
    // io_uring_sqe.len, a u32, at offset 24; any bit pattern is a valid SQE to build.
    let mut raw: [u8; 128] = unsafe { std::mem::transmute(e) };
    raw[24..28].copy_from_slice(&len.to_ne_bytes());
    // SAFETY: as above.
    unsafe { std::mem::transmute::<[u8; 128], squeue::Entry128>(raw) }
}

/// Makes the kernel give up the ring for this connection: it answers a REGISTER it refuses (here
/// an iovec count of 0) by serving the connection through `/dev/fuse` again.
fn force_fallback(dev_fd: RawFd, qid: u16) -> io::Result<()> {
    let mut ring: IoUring<squeue::Entry128, cqueue::Entry> = IoUring::builder().build(2)?;
    let sqe = opcode::UringCmd80::new(types::Fd(dev_fd), CMD_REGISTER)
        .cmd(cmd_bytes(0, qid))
        .build();
    let sqe = set_sqe_len(sqe, 0);
    // SAFETY: the SQE names no buffer (no iovec address, count 0).
    unsafe { ring.submission().push(&sqe) }.map_err(|_| io::Error::other("ring full"))?;
    ring.submit_and_wait(1)?;
    Ok(())
}

fn is_teardown(errno: i32) -> bool {
    matches!(
        errno,
        libc::ENOTCONN | libc::ECANCELED | libc::ECONNABORTED | libc::ENODEV
    )
}

/// The loop state of one queue thread.
struct Server<'a, FS: Filesystem> {
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
    q: Arc<Queue>,
    dev_fd: RawFd,
    se: &'a SessionEventLoop<FS>,
    /// Registration iovecs, per slot; they must stay valid while the kernel may read them.
    #[allow(
        clippy::vec_box,
        reason = "the kernel holds their addresses: they must not move"
    )]
    iovs: Vec<Box<[libc::iovec; 2]>>,
    efd_buf: Box<u64>,
    /// A request copied out of an entry into one contiguous buffer for the parser.
    rbuf: Vec<u64>,
    /// Completions read at the start, before the queue counted as started.
    backlog: Vec<(u64, i32)>,
}

fn run_queue<FS: Filesystem>(p: PreparedQueue, dev_fd: RawFd, se: &SessionEventLoop<FS>) {
    let qid = p.q.qid;
    crate::uring_host::pin_to_cpu(usize::from(qid));
    p.q.owner_tid.store(this_tid(), Ordering::Relaxed);
    let words = (p.q.payload_len + IN_HEADER_SZ + OP_IN_SZ).div_ceil(8);
    let mut s = Server {
        ring: p.ring,
        q: p.q,
        dev_fd,
        se,
        iovs: Vec::new(),
        efd_buf: Box::new(0),
        rbuf: vec![0u64; words],
        backlog: Vec::new(),
    };
    if let Err(e) = s.start() {
        // The kernel has not got every entry: requests wait for the ring until it has. Only
        // a registration the kernel refuses makes it fall back, so refuse one on purpose.
        error!("ring queue {qid}: cannot start: {e}; falling back to /dev/fuse");
        s.q.stats.fell_back.store(true, Ordering::Release);
        if let Err(e) = force_fallback(dev_fd, qid) {
            s.q.fatal(&format!("the fallback failed too ({e})"));
        }
        return;
    }
    let started = s.q.stats.started.fetch_add(1, Ordering::AcqRel) + 1;
    if started == s.q.stats.queues {
        info!("FUSE over io_uring: all {started} queues registered");
    }
    match s.serve() {
        Ok(()) => debug!("ring queue {qid} stopped"),
        Err(e) if s.q.stop.load(Ordering::Acquire) => debug!("ring queue {qid}: {e} at the end"),
        Err(e) => s.q.fatal(&e.to_string()),
    }
}

impl<FS: Filesystem> Server<'_, FS> {
    fn push(&mut self, sqe: &squeue::Entry128) -> io::Result<()> {
        loop {
            // SAFETY: every buffer an SQE names (iovecs, entry buffers, efd_buf) lives in
            // `self` or the queue, which outlive the ring.
            if unsafe { self.ring.submission().push(sqe) }.is_ok() {
                return Ok(());
            }
            self.ring.submit()?;
        }
    }

    fn register(&mut self, slot: usize, kind: u64) -> io::Result<()> {
        let b = self.q.bufs(slot);
        let iov = Box::new([
            libc::iovec {
                iov_base: b.hdr.get().cast(),
                iov_len: size_of::<ReqHeader>(),
            },
            libc::iovec {
                iov_base: b.payload_ptr().cast(),
                iov_len: self.q.payload_len,
            },
        ]);
        let sqe = opcode::UringCmd80::new(types::Fd(self.dev_fd), CMD_REGISTER)
            .cmd(cmd_bytes(0, self.q.qid))
            .addr(Some(iov.as_ptr() as u64))
            .build()
            .user_data(kind | slot as u64);
        let sqe = set_sqe_len(sqe, 2);
        if slot < self.iovs.len() {
            self.iovs[slot] = iov;
        } else {
            self.iovs.push(iov);
        }
        self.push(&sqe)
    }

    fn arm_efd(&mut self) -> io::Result<()> {
        let buf: *mut u64 = &raw mut *self.efd_buf;
        let sqe: squeue::Entry128 =
            opcode::Read::new(types::Fd(self.q.efd.as_raw_fd()), buf.cast(), 8)
                .build()
                .user_data(TAG_EFD)
                .into();
        self.push(&sqe)
    }

    fn start(&mut self) -> io::Result<()> {
        self.ring.submitter().register_enable_rings()?;
        for slot in 0..ENTRIES_PER_QUEUE {
            self.register(slot, KIND_REGISTER)?;
        }
        self.arm_efd()?;
        self.ring.submit()?;
        // A refused registration completes at once: take note of it before this queue counts
        // as started, so the mount never reports rings the kernel has already given up.
        self.backlog
            .extend(self.ring.completion().map(|c| (c.user_data(), c.result())));
        for &(ud, res) in &self.backlog {
            if ud & KIND_MASK == KIND_REGISTER && res < 0 && !is_teardown(-res) {
                self.q.stats.fell_back.store(true, Ordering::Release);
            }
        }
        Ok(())
    }

    fn serve(&mut self) -> io::Result<()> {
        let mut cqes: Vec<(u64, i32)> = std::mem::take(&mut self.backlog);
        loop {
            if cqes.is_empty() {
                match self.ring.submit_and_wait(1) {
                    Ok(_) => {}
                    Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                    Err(e) => return Err(e),
                }
                cqes.extend(self.ring.completion().map(|c| (c.user_data(), c.result())));
            }
            for &(ud, res) in &cqes {
                if ud == TAG_EFD {
                    self.arm_efd()?;
                } else if res >= 0 {
                    let slot = (ud & 0xffff_ffff) as usize;
                    // A panicking handler must not take the queue down with it: the reply it
                    // held commits EIO as it unwinds, and the queue goes on.
                    let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        self.dispatch(slot);
                    }));
                    if served.is_err() {
                        error!("ring queue {}: a request handler panicked", self.q.qid);
                    }
                } else if is_teardown(-res) {
                    debug!("ring queue {}: connection ended", self.q.qid);
                    return Ok(());
                } else {
                    self.failed(ud, -res)?;
                }
            }
            cqes.clear();
            if self.q.stop.load(Ordering::Acquire) {
                return Ok(());
            }
            let done = std::mem::take(
                &mut *self
                    .q
                    .pending
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner),
            );
            for (slot, commit_id) in done {
                let sqe = opcode::UringCmd80::new(types::Fd(self.dev_fd), CMD_COMMIT_AND_FETCH)
                    .cmd(cmd_bytes(commit_id, self.q.qid))
                    .build()
                    .user_data(KIND_COMMIT | slot as u64);
                self.push(&sqe)?;
            }
        }
    }

    /// A REGISTER or COMMIT_AND_FETCH the kernel refused (not because the connection ends).
    fn failed(&mut self, ud: u64, errno: i32) -> io::Result<()> {
        let slot = (ud & 0xffff_ffff) as usize;
        let err = io::Error::from_raw_os_error(errno);
        match ud & KIND_MASK {
            KIND_REGISTER => {
                // A first registration refused: the kernel serves through /dev/fuse now.
                warn!(
                    "ring queue {}: registration refused ({err}): /dev/fuse serves",
                    self.q.qid
                );
                self.q.stats.fell_back.store(true, Ordering::Release);
                return Ok(());
            }
            KIND_REREGISTER => {
                // A replacement refused while the ring serves: one entry fewer.
                error!("ring queue {}: a new entry was refused: {err}", self.q.qid);
                if self.q.live_entries.fetch_sub(1, Ordering::AcqRel) == 1 {
                    return Err(io::Error::other("no ring entry left"));
                }
                return Ok(());
            }
            _ => {}
        }
        if self.q.replaced.fetch_add(1, Ordering::AcqRel) >= MAX_REPLACEMENTS {
            return Err(io::Error::other(format!(
                "{MAX_REPLACEMENTS} commits refused (last: {err})"
            )));
        }
        // The kernel has ended the request; the entry is lost to it. Its buffers may still be
        // referenced there, so they are retired, and fresh ones take the slot.
        error!(
            "ring queue {}: commit of entry {slot} refused: {err}; registering a new entry",
            self.q.qid
        );
        let fresh = EntryBufs::new(self.q.payload_len);
        // SAFETY: the failed commit means no request owns the entry and the kernel will not
        // hand it another; only this thread touches a slot in that state.
        let old = std::mem::replace(unsafe { &mut *self.q.slots[slot].get() }, fresh);
        self.q
            .retired
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(*old);
        self.q
            .stats
            .entries_replaced
            .fetch_add(1, Ordering::Relaxed);
        self.register(slot, KIND_REREGISTER)
    }

    /// Serves the request that arrived in entry `slot`.
    fn dispatch(&mut self, slot: usize) {
        self.q.stats.requests.fetch_add(1, Ordering::Relaxed);
        let b = self.q.bufs(slot);
        // SAFETY: the CQE handed the entry to us; nobody else touches it until we reply.
        let hdr = unsafe { &*b.hdr.get() };
        let commit_id = hdr.commit_id;
        let reply = UringReply {
            q: Arc::clone(&self.q),
            slot,
            commit_id,
            ch: self.se.ch.sender(),
            sent: AtomicBool::new(false),
        };
        let len = u32::from_ne_bytes([hdr.in_out[0], hdr.in_out[1], hdr.in_out[2], hdr.in_out[3]])
            as usize;
        let psz = hdr.payload_sz as usize;
        let op_len = len.checked_sub(IN_HEADER_SZ + psz);
        let Some(op_len) = op_len.filter(|&o| o <= OP_IN_SZ && psz <= self.q.payload_len) else {
            error!(
                "ring queue {}: malformed request (length {len}, payload {psz})",
                self.q.qid
            );
            return; // `reply` drops unsent: EIO.
        };
        // SAFETY: viewing the u64 buffer as bytes (alignment 8 satisfies u8).
        let buf: &mut [u8] = unsafe {
            std::slice::from_raw_parts_mut(self.rbuf.as_mut_ptr().cast(), self.rbuf.len() * 8)
        };
        buf[..IN_HEADER_SZ].copy_from_slice(&hdr.in_out[..IN_HEADER_SZ]);
        buf[IN_HEADER_SZ..IN_HEADER_SZ + op_len].copy_from_slice(&hdr.op_in[..op_len]);
        // SAFETY: psz <= payload_len; the entry is ours until replied.
        unsafe {
            std::ptr::copy_nonoverlapping(
                b.payload_ptr(),
                buf.as_mut_ptr().add(IN_HEADER_SZ + op_len),
                psz,
            );
        }
        let ch = self.se.ch.sender();
        let Some(req) = RequestWithSender::new_uring(ch, &buf[..len], reply) else {
            error!(
                "ring queue {}: request {commit_id} does not parse",
                self.q.qid
            );
            return; // the reply went down with the request: EIO.
        };
        if let Ok(Operation::Destroy(_)) = req.request.operation() {
            // As on /dev/fuse: acknowledged here, the session calls `destroy` once at the end.
            req.reply::<ReplyEmpty>().ok();
            return;
        }
        req.dispatch(self.se);
    }
}
