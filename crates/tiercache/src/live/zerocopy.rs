//! The daemon's zero-copy service (`--zero-copy`, paper 003): an abstract Unix socket named
//! after the mount point (`tiercache_wire::socket_name`) where clients get the memory
//! tier's shared region and ask for misses; hits never reach here.
//!
//! Admission: a peer (SO_PEERCRED) whose uid is the daemon's or root's, or that is in
//! `--zero-copy-group` (`SO_PEERGROUPS`), gets one of 64 client indices and a pin area of its
//! own; others are refused with a reason. A file is registered only from a descriptor the
//! client opened on the mount itself (the kernel and the mount checked its rights) and that
//! names, by its path and inode, a regular file of BACKING. A client cannot store into the
//! region (sealed, read-only for it): its updates arrive as `Write` requests, taken only for a
//! file it opened read-write, and written like a FUSE write. When a connection ends, its files
//! are released and its pins dropped (`MemCache::release_client`), whatever state the client
//! died in.

use super::adapter::CacheDataPath;
use super::error::DaemonError;
use std::collections::HashMap;
use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};
use tiercache_fuse::DataPath;
use tiercache_manager::FileId;
use tiercache_memtier::shm::{ClientId, Region, MAX_CLIENTS};
use tiercache_wire::{self as wire, Request, Response};

/// `--zero-copy` settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZeroCopySettings {
    /// `--zero-copy-group`: its members are admitted too.
    pub group: Option<u32>,
}

/// Counters for `stats --json` `zerocopy`.
#[derive(Debug, Default)]
pub struct ZcCounters {
    pub clients: AtomicU64,
    /// Blocks the daemon read and pinned for clients (their misses).
    pub misses: AtomicU64,
    pub refused: AtomicU64,
}

/// The bound service, before and after it starts serving.
#[derive(Debug)]
pub struct Service {
    listener: UnixListener,
    name: String,
    settings: ZeroCopySettings,
    pub counters: Arc<ZcCounters>,
}

impl Service {
    /// Binds the mount's socket (before mounting: a taken name mounts nothing).
    pub fn bind(mountpoint: &Path, settings: ZeroCopySettings) -> Result<Self, DaemonError> {
        let name = wire::socket_name(mountpoint);
        let addr = SocketAddr::from_abstract_name(name.as_bytes())
            .map_err(|e| DaemonError::io(format!("--zero-copy: socket name {name}"), e))?;
        let listener =
            UnixListener::bind_addr(&addr).map_err(|source| DaemonError::ZeroCopyBind {
                name: name.clone(),
                source,
            })?;
        Ok(Self {
            listener,
            name,
            settings,
            counters: Arc::new(ZcCounters::default()),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Serves clients on a thread of its own, for as long as the daemon runs.
    pub fn serve(
        self,
        data: Arc<CacheDataPath>,
        mountpoint: PathBuf,
        backing: PathBuf,
    ) -> Result<(), DaemonError> {
        let region =
            data.mem().zero_copy_region().cloned().ok_or_else(|| {
                DaemonError::refused("--zero-copy: the memory tier is not shared")
            })?;
        let shared = Arc::new(Shared {
            data,
            region,
            mountpoint,
            backing,
            settings: self.settings,
            bits: Mutex::new(0),
            counters: self.counters,
            next_handle: AtomicU64::new(1),
            conns: AtomicUsize::new(0),
        });
        let listener = self.listener;
        std::thread::Builder::new()
            .name("zc-accept".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    match conn {
                        Ok(s) => {
                            // Anyone may connect to an abstract socket: a bounded number of
                            // connections (admitted or not) get a thread.
                            if shared.conns.fetch_add(1, Relaxed) >= MAX_CONNECTIONS {
                                shared.conns.fetch_sub(1, Relaxed);
                                continue;
                            }
                            let shared = Arc::clone(&shared);
                            let slot = ConnSlot(Arc::clone(&shared));
                            let spawned = std::thread::Builder::new()
                                .name("zc-client".into())
                                .spawn(move || {
                                    // Given back however the thread ends (a panic included).
                                    let _slot = slot;
                                    shared.serve_client(s);
                                });
                            // A thread that could not start dropped its `ConnSlot` with it.
                            if let Err(e) = spawned {
                                log::error!("zero-copy: cannot start a client thread: {e}");
                            }
                        }
                        Err(e) => log::warn!("zero-copy: accept: {e}"),
                    }
                }
            })
            .map(|_| ())
            .map_err(|e| DaemonError::io("--zero-copy: cannot start the service", e))
    }
}

#[derive(Debug)]
struct Shared {
    data: Arc<CacheDataPath>,
    region: Arc<Region>,
    mountpoint: PathBuf,
    backing: PathBuf,
    settings: ZeroCopySettings,
    /// Client bits in use.
    bits: Mutex<u64>,
    counters: Arc<ZcCounters>,
    next_handle: AtomicU64,
    /// Connections being served (admitted or not yet answered).
    conns: AtomicUsize,
}

/// One counted connection; dropping it gives the place back.
struct ConnSlot(Arc<Shared>);

impl Drop for ConnSlot {
    fn drop(&mut self) {
        self.0.conns.fetch_sub(1, Relaxed);
    }
}

/// Connections served at once (64 clients and room for those being turned away).
const MAX_CONNECTIONS: usize = 128;
/// Files one client may hold open.
const MAX_FILES: usize = 1024;
/// How long a peer has to say hello.
const HELLO_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// An admitted client's state; dropping it (after the connection ends, or while a panic
/// unwinds) releases its files, its pins and its index.
struct Session<'a> {
    shared: &'a Shared,
    id: ClientId,
    /// Who the client is (as of its `connect`).
    peer: Peer,
    /// Its pin area's memfd, sent with `Welcome`.
    pins: File,
    files: HashMap<u64, Opened>,
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        for (_, o) in self.files.drain() {
            self.shared.data.release(&o.fh);
        }
        self.shared.data.mem().release_client(self.id);
        let mut bits = self
            .shared
            .bits
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *bits &= !(1u64 << self.id.0);
        self.shared.counters.clients.fetch_sub(1, Relaxed);
    }
}

use super::zerocopy_open::Opened;

/// A client's credentials as of its `connect` (`SO_PEERCRED`, `SO_PEERGROUPS`).
#[derive(Debug, Clone)]
struct Peer {
    uid: u32,
    gid: u32,
    groups: Vec<u32>,
}

impl Peer {
    /// Clears the set-ID bits of `o` that a write by this client must clear — as the kernel
    /// does for a writer without `CAP_FSETID` (root keeps them, as on the mount).
    fn clear_setid(&self, data: &CacheDataPath, o: &Opened) -> std::io::Result<()> {
        if self.uid == 0 {
            return Ok(());
        }
        let in_group = |g: u32| g == self.gid || self.groups.contains(&g);
        tiercache_fuse::clear_setid_for_write(data, o.fh.ino, &o.fh.file, &in_group)
    }
}

fn refuse(message: impl Into<String>, errno: i32) -> Response {
    Response::Error {
        message: message.into(),
        errno,
    }
}

impl Shared {
    fn serve_client(&self, sock: UnixStream) {
        let (id, pins, peer) = match self.admit(&sock) {
            Ok(b) => b,
            Err(resp) => {
                self.counters.refused.fetch_add(1, Relaxed);
                // Answered at once: its hello, if any, waits unread in the socket.
                let _ = wire::send(&sock, &resp, &[]);
                return;
            }
        };
        self.counters.clients.fetch_add(1, Relaxed);
        let mut session = Session {
            shared: self,
            id,
            peer,
            pins,
            files: HashMap::new(),
        };
        // A peer that never says hello does not keep its thread.
        let _ = sock.set_read_timeout(Some(HELLO_TIMEOUT));
        let mut hello = true;
        loop {
            let Ok((req, mut fds)) = wire::recv::<Request>(&sock) else {
                break;
            };
            // A write's bytes follow it: read them whatever the answer, to stay in step.
            let payload = match &req {
                Request::Write { .. } => match wire::recv_payload(&sock) {
                    Ok(p) => p,
                    Err(_) => break,
                },
                _ => Vec::new(),
            };
            let (resp, send_fds) = self.handle(req, fds.pop(), &payload, &mut session);
            let fds = if send_fds {
                vec![self.region.file().as_raw_fd(), session.pins.as_raw_fd()]
            } else {
                Vec::new()
            };
            if wire::send(&sock, &resp, &fds).is_err() {
                break;
            }
            if hello {
                hello = false;
                let _ = sock.set_read_timeout(None);
            }
        }
        // `session` drops here (or while unwinding): files, pins and bit go.
    }

    /// Checks the peer and gives it a client index and a pin area, or says why not.
    fn admit(&self, sock: &UnixStream) -> Result<(ClientId, File, Peer), Response> {
        let cred =
            wire::peer_cred(sock).map_err(|e| refuse(format!("SO_PEERCRED: {e}"), libc::EACCES))?;
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        let peer = Peer {
            uid: cred.uid,
            gid: cred.gid,
            groups: peer_groups(sock),
        };
        let in_group = self
            .settings
            .group
            .is_some_and(|g| cred.gid == g || peer.groups.contains(&g));
        if cred.uid != me && cred.uid != 0 && !in_group {
            log::warn!(
                "zero-copy: refused uid {} (pid {}): not the mount's owner, root or in --zero-copy-group",
                cred.uid,
                cred.pid
            );
            return Err(refuse(
                format!(
                    "uid {} may not map this mount's cache (the owner, root and --zero-copy-group may)",
                    cred.uid
                ),
                libc::EACCES,
            ));
        }
        let mut bits = self.bits.lock().unwrap_or_else(PoisonError::into_inner);
        let free = (0..MAX_CLIENTS as u32).find(|&b| *bits & (1u64 << b) == 0);
        let Some(b) = free else {
            return Err(refuse(
                format!("too many zero-copy clients (at most {MAX_CLIENTS})"),
                libc::EUSERS,
            ));
        };
        let id = ClientId(b);
        // A fresh, zeroed pin area: nothing a previous client of this index left counts.
        let pins = self.region.add_client(id).map_err(|e| {
            log::error!("zero-copy: cannot make a pin area: {e}");
            refuse(format!("cannot make a pin area: {e}"), libc::ENOMEM)
        })?;
        *bits |= 1u64 << b;
        Ok((id, pins, peer))
    }

    fn handle(
        &self,
        req: Request,
        fd: Option<OwnedFd>,
        payload: &[u8],
        session: &mut Session<'_>,
    ) -> (Response, bool) {
        let (id, files) = (session.id, &mut session.files);
        match req {
            Request::Hello { version } if version == wire::VERSION => (
                Response::Welcome {
                    version: wire::VERSION,
                    client: id.0,
                    epoch: self.region.epoch(),
                    block_size: self.region.layout().block as u32,
                },
                true,
            ),
            Request::Hello { version } => (
                refuse(
                    format!(
                        "protocol version {version}; this daemon speaks {}",
                        wire::VERSION
                    ),
                    libc::EPROTO,
                ),
                false,
            ),
            Request::Open if files.len() >= MAX_FILES => (
                refuse(
                    format!("at most {MAX_FILES} open files per client"),
                    libc::EMFILE,
                ),
                false,
            ),
            Request::Open => self.open(fd, files),
            Request::Pin {
                handle,
                first,
                count,
            } => self.pin(files, id, handle, first, count),
            Request::Write {
                handle,
                offset,
                runs,
            } => self.write(session, handle, offset, &runs, payload),
            Request::Sync {
                handle,
                offset,
                len,
                extend,
            } => self.sync(session, handle, offset, len, extend),
            Request::Close { handle } => match files.remove(&handle) {
                Some(o) => {
                    self.data.release(&o.fh);
                    (Response::Closed, false)
                }
                None => (refuse(format!("no open file {handle}"), libc::EBADF), false),
            },
        }
    }

    /// `Open`: the descriptor the client sent becomes one of its open files.
    fn open(&self, fd: Option<OwnedFd>, files: &mut HashMap<u64, Opened>) -> (Response, bool) {
        match fd {
            None => (refuse("open without a descriptor", libc::EINVAL), false),
            Some(fd) => match super::zerocopy_open::register(
                &self.data,
                &self.mountpoint,
                &self.backing,
                File::from(fd),
                self.next_handle.fetch_add(1, Relaxed),
            ) {
                Ok(o) => {
                    let handle = self.next_handle.fetch_add(1, Relaxed);
                    let resp = Response::Opened {
                        handle,
                        file: o.fh.ino,
                        size: self.size(&o),
                    };
                    files.insert(handle, o);
                    (resp, false)
                }
                Err(e) => (
                    refuse(e.to_string(), super::zerocopy_open::errno_of(&e)),
                    false,
                ),
            },
        }
    }

    /// `Pin`: `count` blocks from `first` pinned for client `id`.
    fn pin(
        &self,
        files: &HashMap<u64, Opened>,
        id: ClientId,
        handle: u64,
        first: u64,
        count: u64,
    ) -> (Response, bool) {
        let Some(o) = files.get(&handle) else {
            return (refuse(format!("no open file {handle}"), libc::EBADF), false);
        };
        if count == 0 || count > wire::MAX_PIN_BLOCKS {
            return (
                refuse(
                    format!("count must be 1..={}", wire::MAX_PIN_BLOCKS),
                    libc::EINVAL,
                ),
                false,
            );
        }
        match self
            .data
            .mem()
            .pin_blocks(FileId(o.fh.ino), first, count, id)
        {
            Ok(slots) => {
                self.counters.misses.fetch_add(count, Relaxed);
                (
                    Response::Pinned {
                        slots,
                        size: self.size(o),
                    },
                    false,
                )
            }
            Err(e) => (
                refuse(e.to_string(), super::zerocopy_open::errno_of(&e)),
                false,
            ),
        }
    }

    /// `Write`: a commit of `runs` of `payload` at `offset`, for a file opened for writing.
    fn write(
        &self,
        session: &mut Session<'_>,
        handle: u64,
        offset: u64,
        runs: &[[u32; 2]],
        payload: &[u8],
    ) -> (Response, bool) {
        let files = &session.files;
        let Some(o) = files.get(&handle) else {
            return (refuse(format!("no open file {handle}"), libc::EBADF), false);
        };
        if !o.writable {
            return (refuse("the file was opened read-only", libc::EBADF), false);
        }
        let written = session
            .peer
            .clear_setid(&self.data, o)
            .and_then(|()| self.write_runs(o, offset, runs, payload));
        // Also after a failure part-way: some runs may be written. The runs lie in the
        // block at `offset`; the kernel refreshes the size with the same call.
        let block = self.region.layout().block;
        self.data.changed_outside_mount(o.fh.ino, offset, block);
        match written {
            Ok(()) => (Response::Written { size: self.size(o) }, false),
            Err(e) => (
                refuse(e.to_string(), super::zerocopy_open::errno_of(&e)),
                false,
            ),
        }
    }

    /// `Sync`: the file's dirty blocks made durable, growing it first with `extend`.
    fn sync(
        &self,
        session: &mut Session<'_>,
        handle: u64,
        offset: u64,
        len: u64,
        extend: bool,
    ) -> (Response, bool) {
        let files = &session.files;
        let Some(o) = files.get(&handle) else {
            return (refuse(format!("no open file {handle}"), libc::EBADF), false);
        };
        let grow = extend.then(|| offset.saturating_add(len));
        if grow.is_some() && !o.writable {
            return (refuse("the file was opened read-only", libc::EBADF), false);
        }
        // Growing a file is a write (a truncate up): set-ID bits go as on the mount.
        let cleared = match grow {
            Some(_) => session.peer.clear_setid(&self.data, o),
            None => Ok(()),
        };
        let synced = cleared.and_then(|()| self.data.mem().sync_extend(FileId(o.fh.ino), grow));
        if grow.is_some() {
            // The kernel's size (and any page past the old end) is refreshed.
            self.data.changed_outside_mount(o.fh.ino, offset, 0);
        }
        match synced {
            Ok(size) => (Response::Synced { size }, false),
            Err(e) => (
                refuse(e.to_string(), super::zerocopy_open::errno_of(&e)),
                false,
            ),
        }
    }

    /// A client's commit: each run of `payload` written at `offset + start`, as a FUSE write
    /// of the file would be (the runs were checked to fit the payload and a block first).
    fn write_runs(
        &self,
        o: &Opened,
        offset: u64,
        runs: &[[u32; 2]],
        payload: &[u8],
    ) -> std::io::Result<()> {
        let invalid =
            |why: &str| std::io::Error::new(std::io::ErrorKind::InvalidInput, why.to_string());
        let block = self.region.layout().block;
        let mut at = 0usize;
        let mut plan = Vec::with_capacity(runs.len());
        for &[start, len] in runs {
            let end = u64::from(start) + u64::from(len);
            if len == 0 || end > block {
                return Err(invalid("a run is empty or passes the block"));
            }
            let bytes = payload
                .get(at..at + len as usize)
                .ok_or_else(|| invalid("the runs are longer than the bytes sent"))?;
            let off = offset
                .checked_add(u64::from(start))
                .filter(|&o| o.saturating_add(u64::from(len)) <= i64::MAX as u64)
                .ok_or_else(|| invalid("offset out of range"))?;
            plan.push((off, bytes));
            at += len as usize;
        }
        if at != payload.len() {
            return Err(invalid("bytes sent that no run covers"));
        }
        for (off, bytes) in plan {
            let n = self.data.write(&o.fh, off, bytes)?;
            if n as usize != bytes.len() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::WriteZero,
                    format!("short write at {off}: {n} of {} bytes", bytes.len()),
                ));
            }
        }
        Ok(())
    }

    fn size(&self, o: &Opened) -> u64 {
        self.data
            .mem()
            .logical_size(FileId(o.fh.ino))
            .or_else(|| o.fh.file.metadata().ok().map(|m| m.len()))
            .unwrap_or(0)
    }
}

/// The peer's supplementary groups as of its `connect` (`SO_PEERGROUPS`), empty if unknown.
fn peer_groups(sock: &UnixStream) -> Vec<u32> {
    /// `SO_PEERGROUPS` (Linux 4.13; the libc crate has it only for some architectures).
    const SO_PEERGROUPS: libc::c_int = 59;
    let mut gids = vec![0 as libc::gid_t; 256];
    let mut len = (gids.len() * std::mem::size_of::<libc::gid_t>()) as libc::socklen_t;
    // SAFETY: `gids` has room for `len` bytes; the kernel writes at most that and sets `len`.
    let r = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_PEERGROUPS,
            gids.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Vec::new();
    }
    gids.truncate(len as usize / std::mem::size_of::<libc::gid_t>());
    gids
}

/// `stats --json` `zerocopy`: `enabled`, `clients`, `pinned_slots`, `held_slots`, `hits`
/// (counted by the clients in shared memory), `misses` (blocks the daemon read and pinned for
/// them), `refused`.
pub fn stats_json(
    mem: &tiercache_manager::MemCache,
    counters: Option<&ZcCounters>,
) -> serde_json::Value {
    match (mem.zero_copy_region(), counters) {
        (Some(r), Some(c)) => serde_json::json!({
            "enabled": true,
            "clients": c.clients.load(Relaxed),
            "pinned_slots": r.pinned_slots(),
            "held_slots": mem.held_slots(),
            "hits": r.total_client_hits(),
            "misses": c.misses.load(Relaxed),
            "refused": c.refused.load(Relaxed),
        }),
        _ => serde_json::json!({
            "enabled": false, "clients": 0, "pinned_slots": 0, "held_slots": 0,
            "hits": 0, "misses": 0, "refused": 0,
        }),
    }
}
