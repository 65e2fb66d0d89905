//! Mount entry points: [`mount`] (background session + [`MountHandle`]) and
//! [`run`] (blocking, for a foreground daemon).
//!
//! The session is a `fuser::Session` with `threads` request loops, each on
//! its own cloned `/dev/fuse` descriptor (`FUSE_DEV_IOC_CLONE`), so requests
//! are served concurrently. The mount always uses `default_permissions`
//! (kernel-side permission checks, see `fs.rs`) and, unless [`MountFlags`] ask for `dev` or
//! `suid`, `nosuid,nodev`; it shows
//! up in `/proc/mounts` as type `fuse` with source `fs_name` (fuser's direct
//! `mount(2)` ignores the subtype; the `fusermount3` path uses it).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use fuser::{Config, MountOption, Session, SessionACL, SessionUnmounter};

use crate::creds::{BackingIdentity, Identity};
use crate::data::DataPath;
use crate::error::FuseError;
use crate::fs::{FsConfig, Negotiated, TierFs};
use crate::inode::{InodeStats, InodeTable};
use crate::iopool::{IoPool, IoStatsReader};
use crate::kcache::{KernelCache, KernelCacheHandle, KernelCacheMode};
use crate::sys;
use crate::transport::{kernel_ring_switch, Transport, TransportReader, ENABLE_URING_PARAM};

/// Options of one mount. Construct with `MountOptions::default()` and adjust
/// the fields.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct MountOptions {
    /// Number of request-serving threads (1..=256).
    pub threads: usize,
    /// I/O workers (0..=1024) that answer the requests that wait for BACKING (read misses,
    /// writes that need I/O, fsync, fallocate; see `ops_io.rs`), so that the request threads
    /// stay free for hits. Size it for BACKING's concurrency, not the CPUs. 0: everything
    /// runs on the request threads.
    pub io_workers: usize,
    /// Which files the kernel page cache may hold (`kcache.rs`). `Priority` (default): files
    /// the data path calls hot; the rest get `FOPEN_DIRECT_IO`, all their I/O goes through
    /// the data path (shared mmap still works when the kernel accepts
    /// `FUSE_DIRECT_IO_ALLOW_MMAP`). `All`: every file, like libfuse's `kernel_cache`. `Off`:
    /// none.
    pub kernel_cache: KernelCacheMode,
    /// Let users other than the mounting one access the mount (`allow_other`).
    pub allow_other: bool,
    /// Source name shown in `/proc/mounts` (no commas or whitespace).
    pub fs_name: String,
    /// How long the kernel may cache attributes.
    pub attr_ttl: Duration,
    /// How long the kernel may cache name lookups.
    pub entry_ttl: Duration,
    /// Most `O_PATH` descriptors kept open for inodes named by handles; `None`: a quarter of
    /// the descriptor limit (after raising it), at most 65,536.
    pub fd_cache: Option<usize>,
    /// Name inodes by file handles where BACKING allows it (default). `false` keeps one
    /// descriptor per inode the kernel holds (the fallback scheme), e.g. to compare them.
    pub inode_handles: bool,
    /// With whose rights backing calls that check permissions or create objects run
    /// (default [`BackingIdentity::Auto`]: the caller's when the daemon is root).
    pub backing_identity: BackingIdentity,
    /// The generic mount flags (`ro`, `nodev`, ...) of the mount itself.
    pub flags: MountFlags,
    /// How requests reach the daemon (`transport.rs`): `/dev/fuse` by default.
    pub transport: Transport,
}

/// Generic mount flags, as `mount(8)` spells them. The default is `rw,nodev,nosuid,exec`:
/// device files and set-id bits of BACKING are honoured only when asked for (`dev`, `suid`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MountFlags {
    /// `ro`: the kernel refuses every change (EROFS) before it reaches the daemon.
    pub read_only: bool,
    /// `dev`: device files on the mount can be opened as devices.
    pub dev: bool,
    /// `suid`: set-user-id and set-group-id bits take effect on exec.
    pub suid: bool,
    /// `noexec`: no program on the mount can be executed.
    pub noexec: bool,
    /// `noatime`: the kernel does not update access times.
    pub noatime: bool,
    /// `sync`: writes are synchronous (`MS_SYNCHRONOUS`).
    pub sync: bool,
    /// `dirsync`: directory changes are synchronous.
    pub dirsync: bool,
}

impl MountFlags {
    /// The flags as fuser options (its direct `mount(2)` adds `nodev`/`nosuid` unless `Dev`/
    /// `Suid` are among them).
    fn options(&self) -> Vec<MountOption> {
        let pairs = [
            (self.read_only, MountOption::RO),
            (self.dev, MountOption::Dev),
            (self.suid, MountOption::Suid),
            (self.noexec, MountOption::NoExec),
            (self.noatime, MountOption::NoAtime),
            (self.sync, MountOption::Sync),
            (self.dirsync, MountOption::DirSync),
        ];
        pairs
            .into_iter()
            .filter_map(|(on, o)| on.then_some(o))
            .collect()
    }
}

impl Default for MountOptions {
    fn default() -> Self {
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        Self {
            // One per CPU: measured on 2 CPUs, 2 threads serve 4 KiB hits at ~88 K IOPS, 4 at
            // ~55 K (more threads, more wake-ups on other CPUs). Raise it for high-latency
            // BACKING with many concurrent clients.
            threads: cpus.clamp(2, 16),
            io_workers: DEFAULT_IO_WORKERS,
            kernel_cache: KernelCacheMode::Priority,
            allow_other: false,
            fs_name: "tiercache".to_owned(),
            attr_ttl: Duration::from_secs(1),
            entry_ttl: Duration::from_secs(1),
            fd_cache: None,
            inode_handles: true,
            backing_identity: BackingIdentity::Auto,
            flags: MountFlags::default(),
            transport: Transport::DevFuse,
        }
    }
}

/// Default [`MountOptions::io_workers`]: about what one disk's command queue or a small NFS
/// server (eight `nfsd` threads) serves at once; a quarter is reserved for priority requests.
pub const DEFAULT_IO_WORKERS: usize = 8;

impl MountOptions {
    fn check(&self) -> Result<(), FuseError> {
        if !(1..=256).contains(&self.threads) {
            return Err(FuseError::InvalidOption(format!(
                "threads must be in 1..=256, got {}",
                self.threads
            )));
        }
        if self.io_workers > 1024 {
            return Err(FuseError::InvalidOption(format!(
                "io_workers must be in 0..=1024, got {}",
                self.io_workers
            )));
        }
        let bad = |c: char| c == ',' || c.is_whitespace() || c == '\0';
        if self.fs_name.is_empty() || self.fs_name.contains(bad) {
            return Err(FuseError::InvalidOption(format!(
                "fs_name must be non-empty without commas or whitespace, got {:?}",
                self.fs_name
            )));
        }
        Ok(())
    }
}

/// A mounted session and what the handle keeps of it.
struct NewSession {
    session: Session<TierFs>,
    /// Canonical mount point.
    mountpoint: PathBuf,
    negotiated: Arc<Negotiated>,
    inodes: Arc<InodeTable>,
    io: IoStatsReader,
    kcache: Arc<KernelCache>,
    ring: TransportReader,
}

/// Validates, builds the file system and mounts it (handshake included).
fn new_session(
    backing: &Path,
    mountpoint: &Path,
    opts: &MountOptions,
    data: Arc<dyn DataPath>,
) -> Result<NewSession, FuseError> {
    opts.check()?;
    if opts.transport == Transport::IoUring && kernel_ring_switch() == Some(false) {
        return Err(no_ring(
            mountpoint,
            format!("the kernel has it switched off (echo Y > {ENABLE_URING_PARAM})"),
        ));
    }
    let limit = match crate::handle::raise_nofile_limit() {
        Ok((before, now)) => {
            log::info!("open-files limit (RLIMIT_NOFILE): soft {before} raised to {now}");
            now
        }
        Err(e) => {
            log::warn!("cannot raise the open-files limit: {e}");
            crate::handle::nofile_limit().map_or(1024, |l| l.0)
        }
    };
    // Callers' status files (their groups, `callers`): a 64th of the limit, beside the node
    // descriptor cache's quarter and the data path's share.
    let status_fds = usize::try_from(limit / 64)
        .unwrap_or(usize::MAX)
        .clamp(16, 1024);
    let ident = Identity::new(opts.backing_identity, status_fds)?;
    if ident.per_caller() {
        log::info!(
            "backing calls that check permissions or create run as the caller (groups read \
             live, at most {status_fds} callers' status files open)"
        );
    }
    let (backing, mountpoint) = crate::validate::validate(backing, mountpoint)?;
    let io_err = |source: io::Error| FuseError::Io {
        path: backing.clone(),
        source,
    };
    let root = sys::open_dir_path(&backing).map_err(io_err)?;
    let st = sys::fstat(std::os::fd::AsRawFd::as_raw_fd(&root)).map_err(io_err)?;
    let fd_cache = opts.fd_cache.unwrap_or_else(|| {
        usize::try_from(limit / 4)
            .unwrap_or(usize::MAX)
            .clamp(16, 65_536)
    });
    let inodes = Arc::new(InodeTable::new(root, &st, fd_cache, opts.inode_handles));
    match inodes.fallback_reason() {
        None => {
            log::info!("inodes are named by file handles; at most {fd_cache} cached descriptors")
        }
        Some(why) => log::warn!("{why}: one descriptor per inode the kernel holds (limit {limit})"),
    }
    let negotiated = Arc::new(Negotiated::default());
    let pool = IoPool::new(opts.io_workers).map_err(|source| FuseError::Mount {
        path: mountpoint.clone(),
        source,
    })?;
    let io = pool.stats_reader();
    let kcache = Arc::new(KernelCache::new(opts.kernel_cache));
    let fs = TierFs::new(
        Arc::clone(&inodes),
        data,
        FsConfig {
            attr_ttl: opts.attr_ttl,
            entry_ttl: opts.entry_ttl,
            // A 16th of the open-files limit: with the descriptor cache's quarter, the closed
            // files' half (the data path's) and the callers' 64th, under the limit.
            writers_threshold: usize::try_from(limit / 16)
                .unwrap_or(usize::MAX)
                .clamp(16, 65_536),
        },
        Arc::clone(&negotiated),
        ident,
        pool,
        Arc::clone(&kcache),
    );
    let session =
        Session::new(fs, &mountpoint, &fuser_config(opts)).map_err(|source| FuseError::Mount {
            path: mountpoint.clone(),
            source,
        })?;
    let ring = match session.io_uring_status() {
        Some(Ok(stats)) => TransportReader(Some(stats)),
        Some(Err(why)) if opts.transport == Transport::IoUring => {
            // Dropping the session takes the mount off again: no half-done mount.
            drop(session);
            return Err(no_ring(&mountpoint, why));
        }
        _ => TransportReader(None),
    };
    Ok(NewSession {
        session,
        mountpoint,
        negotiated,
        inodes,
        io,
        kcache,
        ring,
    })
}

/// fuser's session options for `opts`.
fn fuser_config(opts: &MountOptions) -> Config {
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName(opts.fs_name.clone()),
        MountOption::Subtype("tiercache".to_owned()),
        MountOption::DefaultPermissions,
    ];
    config.mount_options.extend(opts.flags.options());
    config.acl = if opts.allow_other {
        SessionACL::All
    } else {
        SessionACL::Owner
    };
    config.n_threads = Some(opts.threads);
    config.clone_fd = true;
    config.io_uring = opts.transport != Transport::DevFuse;
    config
}

fn no_ring(mountpoint: &Path, why: String) -> FuseError {
    FuseError::NoRing {
        mountpoint: mountpoint.to_owned(),
        why,
    }
}

/// Mounts BACKING on MOUNTPOINT and serves it from background threads.
///
/// Returns once the kernel handshake is done, i.e. the mount is usable.
/// Dropping the handle (or [`MountHandle::unmount`]) unmounts.
pub fn mount(
    backing: &Path,
    mountpoint: &Path,
    opts: MountOptions,
    data: Arc<dyn DataPath>,
) -> Result<MountHandle, FuseError> {
    let NewSession {
        mut session,
        mountpoint,
        negotiated,
        inodes,
        io,
        kcache,
        ring,
    } = new_session(backing, mountpoint, &opts, data)?;
    let unmounter = session.unmount_callable();
    let kcache = KernelCacheHandle::new(kcache, session.notifier());
    let thread = std::thread::Builder::new()
        .name("tiercache-fuse".to_owned())
        .spawn(move || session.run())
        .map_err(|source| FuseError::Mount {
            path: mountpoint.clone(),
            source,
        })?;
    let handle = MountHandle {
        mountpoint,
        attached: Attached::Fuser(unmounter),
        thread: Some(thread),
        negotiated,
        inodes: InodeStatsReader(inodes),
        io,
        kcache,
        ring,
    };
    rings_settled(handle, opts.transport)
}

/// Waits until the ring queues have registered with the kernel (their threads start with the
/// session), or the connection fell back to `/dev/fuse`; `--transport io-uring` then unmounts
/// and fails rather than serve through `/dev/fuse`.
fn rings_settled(handle: MountHandle, transport: Transport) -> Result<MountHandle, FuseError> {
    let Some(stats) = handle.ring.0.clone() else {
        log::info!("requests travel through /dev/fuse");
        return Ok(handle);
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !stats.settled() && std::time::Instant::now() < deadline && !handle.is_finished() {
        std::thread::sleep(Duration::from_millis(2));
    }
    if stats.active() {
        log::info!(
            "requests travel through io_uring ({} queues)",
            stats.queues()
        );
        return Ok(handle);
    }
    let why = if stats.fell_back() {
        "the kernel refused the rings' registration"
    } else {
        "the rings did not register within 10 s"
    };
    // Not settled: the kernel still holds every request for the rings, so the mount would
    // hang; it goes, whatever was asked.
    if transport == Transport::IoUring || !stats.fell_back() {
        let mountpoint = handle.mountpoint.clone();
        if let Err(e) = handle.unmount() {
            log::warn!("unmounting after the rings failed: {e}");
        }
        return Err(no_ring(&mountpoint, why.to_owned()));
    }
    log::warn!("FUSE over io_uring: {why}; requests travel through /dev/fuse");
    Ok(handle)
}

/// Mounts and serves in the calling thread until the file system is
/// unmounted from outside (`umount`, `fusermount3 -u`). With `transport` `IoUring` it fails
/// only when the kernel does not offer the rings at the handshake; a registration the kernel
/// refuses later leaves the session on `/dev/fuse` (logged). [`mount`] checks that too.
pub fn run(
    backing: &Path,
    mountpoint: &Path,
    opts: MountOptions,
    data: Arc<dyn DataPath>,
) -> Result<(), FuseError> {
    let s = new_session(backing, mountpoint, &opts, data)?;
    s.session.run().map_err(FuseError::Session)
}

/// Who still has to take the mount off its mount point.
///
/// fuser's `Mount` unmounts the path when it is dropped at the end of the session unless it was
/// taken out through the [`SessionUnmounter`] first, and it cannot tell that someone else already
/// unmounted it (it would unmount the path a second time: `EINVAL`, or worse, whatever was
/// mounted there since). So every unmount goes through fuser's unmounter while fuser still holds
/// the mount; only after fuser has let go of it (its one attempt failed with `EBUSY`) does the
/// handle call `umount2` itself.
#[derive(Debug)]
enum Attached {
    /// fuser holds the mount and will unmount the path when the session ends.
    Fuser(SessionUnmounter),
    /// Still mounted, but fuser has forgotten it: the handle unmounts it itself.
    Ours,
    /// Unmounted or detached.
    Gone,
}

/// A mounted file system served by background threads.
#[derive(Debug)]
pub struct MountHandle {
    mountpoint: PathBuf,
    attached: Attached,
    /// Runs `Session::run`; `None` once joined or abandoned.
    thread: Option<JoinHandle<io::Result<()>>>,
    negotiated: Arc<Negotiated>,
    inodes: InodeStatsReader,
    io: IoStatsReader,
    kcache: KernelCacheHandle,
    ring: TransportReader,
}

/// Reads the inode table's statistics of a mount; cheap to clone and keep.
#[derive(Debug, Clone)]
pub struct InodeStatsReader(Arc<InodeTable>);

impl InodeStatsReader {
    /// Inodes known, descriptors held, memory per inode, and how inodes are named.
    pub fn stats(&self) -> InodeStats {
        self.0.stats()
    }
}

impl MountHandle {
    /// A reader of the inode table's statistics.
    pub fn inode_stats(&self) -> InodeStatsReader {
        self.inodes.clone()
    }

    /// A reader of the I/O workers' figures (queued and running requests per class).
    pub fn io_stats(&self) -> IoStatsReader {
        self.io.clone()
    }

    /// A reader of the transport's figures (`/dev/fuse` or the rings, and what they served).
    pub fn transport(&self) -> TransportReader {
        self.ring.clone()
    }

    /// The kernel page cache of the mount: invalidation of ranges the daemon changed for
    /// someone else, and its figures.
    pub fn kernel_cache(&self) -> KernelCacheHandle {
        self.kcache.clone()
    }

    /// Canonical mount point.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// Whether the kernel accepted `FUSE_DIRECT_IO_ALLOW_MMAP` (protocol 7.39):
    /// shared writable mmap works on direct-I/O files.
    pub fn direct_io_allow_mmap(&self) -> bool {
        self.negotiated.direct_io_allow_mmap.load(Ordering::Relaxed)
    }

    /// Whether the kernel accepted `FUSE_DO_READDIRPLUS`.
    pub fn readdirplus(&self) -> bool {
        self.negotiated.readdirplus.load(Ordering::Relaxed)
    }

    /// True once the session has ended (unmounted from outside, or failed).
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Unmounts and waits for the session threads.
    ///
    /// If the file system is busy it is detached lazily (`MNT_DETACH`) and
    /// [`FuseError::Busy`] is returned; the session then ends by itself when
    /// the last open file is closed.
    pub fn unmount(mut self) -> Result<(), FuseError> {
        self.do_unmount()
    }

    /// Blocks until the file system is unmounted by someone else.
    pub fn wait(mut self) -> Result<(), FuseError> {
        // Whoever unmounts it ends the session; then fuser's own guard runs at the session's end.
        self.attached = Attached::Gone;
        self.join()
    }

    fn join(&mut self) -> Result<(), FuseError> {
        match self.thread.take().map(JoinHandle::join) {
            None | Some(Ok(Ok(()))) => Ok(()),
            Some(Ok(Err(e))) => Err(FuseError::Session(e)),
            Some(Err(_)) => Err(FuseError::Session(io::Error::other(
                "session thread panicked",
            ))),
        }
    }

    fn unmount_error(&self, source: io::Error) -> FuseError {
        FuseError::Unmount {
            path: self.mountpoint.clone(),
            source,
        }
    }

    /// One plain unmount attempt (no detach). `Ok(true)`: unmounted; `Ok(false)`: busy, still
    /// mounted and served. Afterwards nobody else will unmount the path again.
    fn unmount_once(&mut self) -> Result<bool, FuseError> {
        match std::mem::replace(&mut self.attached, Attached::Gone) {
            Attached::Gone => Ok(true),
            Attached::Fuser(mut u) => match u.unmount() {
                // fuser's attempt is its only one: from now on the mount is ours to remove.
                Ok(()) => Ok(true),
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                    self.attached = Attached::Ours;
                    Ok(false)
                }
                Err(e) => {
                    self.attached = Attached::Ours;
                    Err(self.unmount_error(e))
                }
            },
            Attached::Ours => {
                let c = sys::bytes_cstr(std::os::unix::ffi::OsStrExt::as_bytes(
                    self.mountpoint.as_os_str(),
                ))
                .map_err(|e| self.unmount_error(e))?;
                // SAFETY: `c` is a valid NUL-terminated path.
                if unsafe { libc::umount2(c.as_ptr(), 0) } == 0 {
                    return Ok(true);
                }
                let err = io::Error::last_os_error();
                self.attached = Attached::Ours;
                match err.raw_os_error() {
                    Some(libc::EBUSY) => Ok(false),
                    // Not privileged: through fusermount3, as fuser would.
                    Some(libc::EPERM) => {
                        let ok = std::process::Command::new("fusermount3")
                            .arg("-u")
                            .arg(&self.mountpoint)
                            .status()
                            .is_ok_and(|s| s.success());
                        if ok {
                            self.attached = Attached::Gone;
                            Ok(true)
                        } else {
                            Err(self.unmount_error(err))
                        }
                    }
                    _ => Err(self.unmount_error(err)),
                }
            }
        }
    }

    /// Unmounts only if nothing uses the file system: on `EBUSY` it stays mounted and served
    /// and [`FuseError::Busy`] is returned (nothing is detached). Can be retried.
    pub fn try_unmount(&mut self) -> Result<(), FuseError> {
        if self.unmount_once()? {
            self.join()
        } else {
            Err(FuseError::Busy(self.mountpoint.clone()))
        }
    }

    /// Detaches lazily (`MNT_DETACH`): the path is free at once, files already open keep being
    /// served, and the session ends when the last one is closed ([`MountHandle::is_finished`]).
    /// A file system nothing uses is simply unmounted.
    pub fn detach(&mut self) -> Result<(), FuseError> {
        if self.unmount_once()? {
            return Ok(());
        }
        self.umount_detach()?;
        // The session thread keeps serving open files; nothing is left to unmount.
        self.attached = Attached::Gone;
        Ok(())
    }

    /// `umount2(MNT_DETACH)` of the mount point.
    fn umount_detach(&self) -> Result<(), FuseError> {
        let c = sys::bytes_cstr(std::os::unix::ffi::OsStrExt::as_bytes(
            self.mountpoint.as_os_str(),
        ))
        .map_err(|e| self.unmount_error(e))?;
        // SAFETY: `c` is a valid NUL-terminated path.
        if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } != 0 {
            return Err(self.unmount_error(io::Error::last_os_error()));
        }
        Ok(())
    }

    fn do_unmount(&mut self) -> Result<(), FuseError> {
        if matches!(self.attached, Attached::Gone) {
            return self.join();
        }
        match self.unmount_once() {
            Ok(true) => self.join(),
            Ok(false) => {
                self.umount_detach()?;
                self.attached = Attached::Gone;
                // do not wait: users of the detached tree may keep it alive
                self.thread = None;
                Err(FuseError::Busy(self.mountpoint.clone()))
            }
            Err(e) => {
                self.thread = None;
                Err(e)
            }
        }
    }
}

impl Drop for MountHandle {
    fn drop(&mut self) {
        if !matches!(self.attached, Attached::Gone) || self.thread.is_some() {
            if let Err(e) = self.do_unmount() {
                log::warn!("{e}");
            }
        }
    }
}
