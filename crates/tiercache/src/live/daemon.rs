//! The mount daemon: builds the memory tier and the FUSE mount, serves the control socket and
//! metrics, and on SIGTERM/SIGINT, `tiercache unmount` or an external unmount writes everything
//! back before it exits.

use super::adapter::CacheDataPath;
use super::classes::{ClassRules, LiveClasses};
use super::config::{LowerTierSpec, RespawnArgs};
use super::control::{self, Handler, MountFiles, Request};
use super::error::DaemonError;
use super::flash::{self, MountedFlash};
use super::reload::{self, Reloader};
use super::remote::{self, MountedRemote};
use super::{logging, metrics, stats};
use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tiercache_manager::{BackingCache, DeviceModel, MemCache, MemConfig};

/// Everything a mount needs, validated.
#[derive(Debug, Clone)]
pub struct Settings {
    pub backing: PathBuf,
    /// Canonical.
    pub mountpoint: PathBuf,
    pub mem: MemConfig,
    /// Class directories (priority directories among them); the class table is
    /// `mem.partition.params.classes`.
    pub rules: ClassRules,
    pub emulate: Option<DeviceModel>,
    /// `--backing-cache`: whether BACKING I/O leaves pages in the kernel page cache.
    pub backing_cache: BackingCache,
    /// Which files the kernel page cache holds too.
    pub kernel_cache: tiercache_fuse::KernelCacheMode,
    pub allow_other: bool,
    pub trace_out: Option<PathBuf>,
    pub metrics: Option<String>,
    pub threads: Option<usize>,
    /// I/O workers (`None`: the FUSE layer's default).
    pub io_workers: Option<usize>,
    /// Kernel caching of lookups and attributes.
    pub entry_timeout: Duration,
    pub attr_timeout: Duration,
    /// Tiers below memory, top first.
    pub lower_tiers: Vec<LowerTierSpec>,
    /// With whose rights backing operations that check permissions or create objects run.
    pub backing_identity: tiercache_fuse::BackingIdentity,
    /// `/dev/fuse` or the rings.
    pub transport: tiercache_fuse::Transport,
    /// `--zero-copy`: the zero-copy service and its admission.
    pub zero_copy: Option<super::zerocopy::ZeroCopySettings>,
    /// `--mount-flags`: `ro`, `nodev`, ...
    pub mount_flags: tiercache_fuse::MountFlags,
    /// The config file's `log_level` (`TIERCACHE_LOG` overrides it).
    pub log_level: Option<log::LevelFilter>,
}

/// `tiercache unmount`, handed from the control socket to the main loop, which answers once
/// the mount is gone and everything is written back (or with why not).
struct StopRequest {
    force: bool,
    reply: mpsc::Sender<StopOutcome>,
}

/// How a stop ended, as told to every `tiercache unmount` waiting for it.
type StopOutcome = Result<(), Arc<DaemonError>>;

/// The running mount as the control socket sees it.
struct Live {
    data: Arc<CacheDataPath>,
    mountpoint: PathBuf,
    backing: PathBuf,
    log: PathBuf,
    stops: Mutex<mpsc::Sender<StopRequest>>,
    emulation: Option<String>,
    inodes: tiercache_fuse::InodeStatsReader,
    io: tiercache_fuse::IoStatsReader,
    transport: tiercache_fuse::TransportReader,
    kernel: tiercache_fuse::KernelCacheHandle,
    remotes: Vec<MountedRemote>,
    flashes: Vec<MountedFlash>,
    zero_copy: Option<Arc<super::zerocopy::ZcCounters>>,
    /// `None`: the mount was started without a way to re-read its settings.
    reloader: Option<Arc<Reloader>>,
}

impl Handler for Live {
    fn handle(&self, req: Request) -> Result<serde_json::Value, DaemonError> {
        if let Some(r) = super::class_ctl::handle(&self.data, &self.mountpoint, &req) {
            return r;
        }
        match req {
            Request::Stats => {
                let ms = self.data.mem().stats();
                let mut v = stats::json(
                    &ms,
                    &self.mountpoint,
                    &self.backing,
                    self.emulation.as_deref(),
                );
                v["log_file"] = serde_json::json!(self.log);
                v["inodes"] = stats::inodes_json(&self.inodes.stats());
                v["io"] = super::io::json(&self.io.stats());
                v["transport"] = super::transport::json(&self.transport.stats());
                v["kernel_cache"] = super::kernel_cache::json(&self.kernel.stats());
                let (remote, all) = remote::stats_json(&self.remotes, ms.lower.as_ref());
                v["remote"] = remote;
                v["flash"] = flash::stats_json(&self.flashes);
                v["zerocopy"] =
                    super::zerocopy::stats_json(self.data.mem(), self.zero_copy.as_deref());
                if !all.is_null() {
                    v["remote_tiers"] = all;
                }
                if let Some(r) = &self.reloader {
                    v["settings"] = r.settings_json();
                }
                Ok(v)
            }
            Request::Reload => {
                let r = self
                    .reloader
                    .as_ref()
                    .ok_or_else(|| DaemonError::refused("this mount cannot reload"))?;
                let out = r.reload().inspect_err(|e| {
                    log::error!("reload refused, nothing changed: {e}");
                })?;
                log_reload("reload", &out);
                Ok(out.json())
            }
            Request::Flush => {
                let t = Instant::now();
                self.data
                    .mem()
                    .flush_all()
                    .map_err(|e| DaemonError::io("flush", e))?;
                Ok(serde_json::json!({ "flushed": true, "secs": t.elapsed().as_secs_f64() }))
            }
            Request::Unmount { force } => {
                let (reply, answer) = mpsc::channel();
                self.stops
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .send(StopRequest { force, reply })
                    .map_err(|_| DaemonError::refused("the daemon is already stopping"))?;
                // Answered after the unmount and the final write-back, however long that takes.
                answer
                    .recv()
                    .map_err(|_| DaemonError::refused("the daemon stopped without an answer"))?
                    .map_err(DaemonError::Shared)?;
                Ok(serde_json::json!({ "unmounted": true, "pid": std::process::id() }))
            }
            // Answered by `class_ctl` above.
            other => Err(DaemonError::refused(format!(
                "unexpected request {other:?}"
            ))),
        }
    }
}

/// The mount's control files, refusing a mount point a live daemon already serves.
fn claim_files(mountpoint: &std::path::Path) -> Result<MountFiles, DaemonError> {
    let files = MountFiles::for_mountpoint(mountpoint);
    if let Some(pid) = files.live_pid() {
        return Err(DaemonError::refused(format!(
            "{}: already served by tiercache pid {pid}",
            mountpoint.display()
        )));
    }
    files
        .ensure_dir()
        .map_err(|e| DaemonError::io(control::runtime_dir().display().to_string(), e))?;
    Ok(files)
}

/// Mounts and serves until stopped. Errors before the mount is up leave nothing mounted.
pub fn run_foreground(s: Settings, source: Option<reload::Source>) -> Result<(), DaemonError> {
    logging::init(logging::effective(s.log_level));
    // What a reload compares the re-read settings with.
    let in_force = s.clone();
    let (files, pid_lock, mut owned) = own_files(&s.mountpoint)?;
    let backing = std::fs::canonicalize(&s.backing)
        .map_err(|e| DaemonError::io(s.backing.display().to_string(), e))?;
    // The mount's source names its BACKING, for the one-mount check of later mounts.
    let fs_name = super::mountinfo::fs_name_for(&backing)?;
    // One mount per BACKING; held until this mount is in the mount table (recovery of an SSD
    // tier included: it writes to BACKING too).
    let claim = super::one_mount::claim(&backing)?;
    let (mem, remotes, flashes, emulation) = super::stack::open_cache(&s, &backing)?;
    let data = Arc::new(CacheDataPath::new(
        Arc::clone(&mem),
        backing.clone(),
        LiveClasses::new(s.mem.partition.params.clone(), s.rules.clone()),
    ));
    let opts = mount_options(&s, fs_name);
    let (stop, hup) = stop_signals()?;
    // Bind the metrics address before mounting, so a bad or busy address mounts nothing.
    let metrics_listener = bind_metrics(&s)?;
    // Bound before mounting too: a zero-copy name in use mounts nothing.
    let zero_copy = match &s.zero_copy {
        Some(z) => Some(super::zerocopy::Service::bind(&s.mountpoint, z.clone())?),
        None => None,
    };
    let handle = tiercache_fuse::mount(
        &s.backing,
        &s.mountpoint,
        opts,
        data.clone() as Arc<dyn tiercache_fuse::DataPath>,
    )?;
    drop(claim);
    data.set_kernel_cache(handle.kernel_cache());
    // The FUSE connection's number, to abort it (so no write is acknowledged any more) when a
    // forced stop must not leave open files being served.
    let conn = std::fs::metadata(&s.mountpoint)
        .map(|m| fuse_connection(m.dev()))
        .ok();
    let (stop_tx, stop_rx) = mpsc::channel::<StopRequest>();
    let remotes_for_reload = remotes.clone();
    let live = Arc::new(Live {
        data: Arc::clone(&data),
        mountpoint: s.mountpoint.clone(),
        backing: backing.clone(),
        log: files.log.clone(),
        stops: Mutex::new(stop_tx),
        emulation: emulation.clone(),
        inodes: handle.inode_stats(),
        io: handle.io_stats(),
        transport: handle.transport(),
        kernel: handle.kernel_cache(),
        remotes,
        flashes: flashes.clone(),
        zero_copy: zero_copy.as_ref().map(|z| Arc::clone(&z.counters)),
        reloader: source.map(|src| {
            Arc::new(Reloader::new(
                src,
                in_force,
                Arc::clone(&data),
                remotes_for_reload,
            ))
        }),
    });
    if let Err(e) = start_services(&s, &backing, zero_copy, &files, &live, metrics_listener) {
        drop(handle);
        return Err(e);
    }
    announce(&s, &backing, emulation.as_deref());
    let on_hup = hup_handler(live.reloader.clone());
    let signals = Signals {
        stop: &stop,
        hup: &hup,
        on_hup: &on_hup,
    };
    let result = serve_then_write_back(
        handle,
        &signals,
        &stop_rx,
        conn,
        &s.mountpoint,
        &mem,
        &flashes,
    );
    log::info!("stopped");
    owned.clean = result.is_ok();
    drop(owned);
    drop(pid_lock);
    // Let the control threads deliver their answers before the process goes.
    std::thread::sleep(Duration::from_millis(100));
    result.map_err(DaemonError::Shared)
}

/// The metrics address bound, if one is configured.
fn bind_metrics(s: &Settings) -> Result<Option<std::net::TcpListener>, DaemonError> {
    s.metrics
        .as_ref()
        .map(|addr| {
            std::net::TcpListener::bind(addr)
                .map_err(|e| DaemonError::io(format!("--metrics {addr}"), e))
        })
        .transpose()
}

/// Serves until a stop, unmounts, writes everything back and marks the flash tiers cleanly
/// shut; every `tiercache unmount` waiting gets the outcome.
fn serve_then_write_back(
    mut handle: tiercache_fuse::MountHandle,
    signals: &Signals<'_>,
    stop_rx: &mpsc::Receiver<StopRequest>,
    conn: Option<u64>,
    mountpoint: &std::path::Path,
    mem: &MemCache,
    flashes: &[MountedFlash],
) -> StopOutcome {
    let mut waiting = serve_until_stopped(&mut handle, signals, stop_rx, conn, mountpoint);
    drop(handle);
    super::notify::notify_or_log("STOPPING=1\nSTATUS=unmounted; writing back");
    let mut result = final_write_back(mem, stop_rx, &mut waiting, conn);
    if result.is_ok() {
        // Everything is on BACKING: the flash tiers are marked cleanly shut (warm restart).
        result = flash::close(flashes).map_err(Arc::new);
    }
    for w in waiting {
        let _ = w.send(result.clone());
    }
    result
}

/// Claims the mount's control socket, pid file and log: locked for the daemon's life, and
/// removed however it returns (the log only after a clean stop; after a failure it is the
/// record of why).
fn own_files(
    mountpoint: &std::path::Path,
) -> Result<(MountFiles, PidFile, OwnedFiles), DaemonError> {
    let files = claim_files(mountpoint)?;
    // Held for the daemon's life: proves to `live_pid` that the pid file is ours.
    let lock = files.lock_pid().map_err(|source| DaemonError::PidLock {
        mountpoint: mountpoint.to_path_buf(),
        pid_file: files.pid.clone(),
        source,
    })?;
    let pid_lock = PidFile {
        path: files.pid.clone(),
        _lock: lock,
    };
    // From here on the socket and the log are this daemon's: removed however it returns (the
    // log only after a clean stop; after a failure it is the record of why).
    let owned = OwnedFiles {
        socket: files.socket.clone(),
        log: files.log.clone(),
        clean: false,
    };
    Ok((files, pid_lock, owned))
}

/// What serves beside the mount: zero-copy clients, the control socket, `/metrics`.
fn start_services(
    s: &Settings,
    backing: &std::path::Path,
    zero_copy: Option<super::zerocopy::Service>,
    files: &MountFiles,
    live: &Arc<Live>,
    metrics_listener: Option<std::net::TcpListener>,
) -> Result<(), DaemonError> {
    if let Some(z) = zero_copy {
        let name = z.name().to_string();
        let mountpoint = tiercache_wire::canonical_mountpoint(&s.mountpoint);
        z.serve(Arc::clone(&live.data), mountpoint, backing.to_path_buf())?;
        log::info!("zero-copy clients served on @{name}");
    }
    control::serve(files, Arc::clone(live) as Arc<dyn Handler>)
        .map_err(|e| DaemonError::io(format!("control socket {}", files.socket.display()), e))?;
    if let Some(l) = metrics_listener {
        serve_metrics(l, Arc::clone(live))?;
    }
    Ok(())
}

/// What SIGHUP does: reload the configuration, or say this mount cannot.
fn hup_handler(reloader: Option<Arc<Reloader>>) -> impl Fn() {
    move || match &reloader {
        Some(r) => match r.reload() {
            Ok(out) => log_reload("SIGHUP: reload", &out),
            Err(e) => log::error!("SIGHUP: reload refused, nothing changed: {e}"),
        },
        None => log::warn!("SIGHUP: this mount cannot reload"),
    }
}

/// The FUSE mount's options from the settings.
fn mount_options(s: &Settings, fs_name: String) -> tiercache_fuse::MountOptions {
    let mut opts = tiercache_fuse::MountOptions::default();
    opts.kernel_cache = s.kernel_cache;
    opts.allow_other = s.allow_other;
    if let Some(t) = s.threads {
        opts.threads = t;
    }
    if let Some(n) = s.io_workers {
        opts.io_workers = n;
    }
    opts.entry_ttl = s.entry_timeout;
    opts.backing_identity = s.backing_identity;
    opts.transport = s.transport;
    opts.attr_ttl = s.attr_timeout;
    opts.fs_name = fs_name;
    opts.flags = s.mount_flags;
    opts
}

/// Flags set by SIGTERM/SIGINT (stop) and SIGHUP (reload), read by the main loop.
fn stop_signals() -> Result<(Arc<AtomicBool>, Arc<AtomicBool>), DaemonError> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .map_err(|e| DaemonError::io("signal handler", e))?;
    }
    // SIGHUP reloads the configuration (the main loop picks it up).
    let hup = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGHUP, Arc::clone(&hup))
        .map_err(|e| DaemonError::io("signal handler", e))?;
    Ok((stop, hup))
}

/// Serves `/metrics` on `l` from the live mount's counters.
fn serve_metrics(l: std::net::TcpListener, live: Arc<Live>) -> Result<(), DaemonError> {
    let render: metrics::Render = Arc::new(move || {
        let ms = live.data.mem().stats();
        stats::prometheus(&ms)
            + &remote::prometheus(&live.remotes, ms.lower.as_ref())
            + &flash::prometheus(&live.flashes)
            + &super::io::prometheus(&live.io.stats())
            + &super::transport::prometheus(&live.transport.stats())
            + &super::kernel_cache::prometheus(&live.kernel.stats())
            + &stats::inodes_prometheus(&live.inodes.stats())
    });
    metrics::serve_listener(l, render)
        .map(|_| ())
        .map_err(|e| DaemonError::io("--metrics", e))
}

/// Tells systemd and the log that the mount serves (mounted, handshake done, control socket
/// bound).
fn announce(s: &Settings, backing: &std::path::Path, emulation: Option<&str>) {
    // Mounted, handshake done, control socket bound: the mount serves.
    super::notify::notify_or_log(&format!(
        "READY=1\nMAINPID={}\nSTATUS=serving {} on {}",
        std::process::id(),
        backing.display(),
        s.mountpoint.display()
    ));
    log::info!(
        "mounted {} on {} (memory {} blocks of {} B, partition {}, policy {}, kernel cache {}){}",
        backing.display(),
        s.mountpoint.display(),
        s.mem.capacity_blocks,
        s.mem.block_size.bytes(),
        s.mem.partition.kind,
        s.mem.policy,
        s.kernel_cache,
        emulation.map_or(String::new(), |e| format!(", BACKING behind device {e}"))
    );
    if let Some(hint) = super::vcpu::halt_hint() {
        log::info!("{hint}");
    }
}

/// The signals the main loop acts on: stop (SIGTERM, SIGINT) and reload (SIGHUP).
struct Signals<'a> {
    stop: &'a AtomicBool,
    hup: &'a AtomicBool,
    on_hup: &'a dyn Fn(),
}

/// Logs a reload's outcome, naming what was not applied.
fn log_reload(what: &str, out: &reload::Outcome) {
    log::info!(
        "{what}: changed: [{}]; not applied (needs a remount): [{}]",
        out.changed.join(", "),
        out.not_applied.join(", ")
    );
}

/// The control socket and the log of a daemon that holds its pid-file lock. Dropping removes the
/// socket, and the log too after a clean stop (nothing in it is needed any more).
struct OwnedFiles {
    socket: PathBuf,
    log: PathBuf,
    clean: bool,
}

impl Drop for OwnedFiles {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.socket);
        if self.clean {
            let _ = std::fs::remove_file(&self.log);
        }
    }
}

/// The locked pid file; removed when the daemon is done with it, whichever way it returns (a
/// failed mount leaves no pid file behind).
struct PidFile {
    path: PathBuf,
    /// Holds the flock; closing it releases the lock.
    _lock: std::fs::File,
}

impl Drop for PidFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The FUSE connection id (the minor number of the mount's device), as named in
/// `/sys/fs/fuse/connections/`.
fn fuse_connection(dev: u64) -> u64 {
    (dev & 0xff) | ((dev >> 12) & 0xfff00)
}

/// Aborts the FUSE connection: every pending and later request fails (ECONNABORTED), so nothing
/// more is acknowledged that the final write-back would not see.
fn abort_connection(conn: Option<u64>) {
    let Some(c) = conn else { return };
    let path = format!("/sys/fs/fuse/connections/{c}/abort");
    if !std::path::Path::new(&path).exists() {
        mount_fusectl();
    }
    if let Err(e) = std::fs::write(&path, b"1") {
        log::warn!(
            "cannot abort the FUSE connection ({path}: {e}); open files are cut off at exit"
        );
    }
}

/// Mounts the FUSE control file system where the kernel expects it, if it is not there.
fn mount_fusectl() {
    let (src, target, fstype) = (c"fusectl", c"/sys/fs/fuse/connections", c"fusectl");
    // SAFETY: valid NUL-terminated strings and no data argument; failure is only logged.
    let rc = unsafe {
        libc::mount(
            src.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        log::warn!("cannot mount fusectl: {}", std::io::Error::last_os_error());
    }
}

/// Serves until the mount is gone. A signal or `tiercache unmount` unmounts when nothing is in
/// use. If files are open: `unmount` is refused (the caller is told), `unmount --force` detaches
/// and aborts the connection, and a signal detaches lazily and keeps serving the open files
/// until they are closed (a second signal aborts them). Returns the unmount requests waiting
/// for the final write-back's outcome.
fn serve_until_stopped(
    handle: &mut tiercache_fuse::MountHandle,
    signals: &Signals<'_>,
    requests: &mpsc::Receiver<StopRequest>,
    conn: Option<u64>,
    mountpoint: &std::path::Path,
) -> Vec<mpsc::Sender<StopOutcome>> {
    let mut waiting = Vec::new();
    let mut draining = false;
    loop {
        if handle.is_finished() {
            log::info!(
                "{}: writing back and stopping",
                if draining {
                    "last open file closed"
                } else {
                    "unmounted from outside"
                }
            );
            return waiting;
        }
        if signals.hup.swap(false, Ordering::SeqCst) && !draining {
            (signals.on_hup)();
        }
        if signals.stop.swap(false, Ordering::SeqCst) {
            if draining {
                log::warn!("second stop signal: aborting the files still open");
                abort_connection(conn);
                return waiting;
            }
            match handle.try_unmount() {
                Ok(()) => {
                    log::info!("stop signal: unmounted; writing back");
                    return waiting;
                }
                Err(tiercache_fuse::FuseError::Busy(_)) => {
                    log::info!(
                        "stop signal while files are open: detached; serving them until closed"
                    );
                    if let Err(e) = handle.detach() {
                        log::error!("{e}");
                        return waiting;
                    }
                    draining = true;
                }
                Err(e) => {
                    log::error!("{e}");
                    return waiting;
                }
            }
        }
        while let Ok(req) = requests.try_recv() {
            if draining {
                if req.force {
                    abort_connection(conn);
                    waiting.push(req.reply);
                    return waiting;
                }
                waiting.push(req.reply);
                continue;
            }
            match handle.try_unmount() {
                Ok(()) => {
                    log::info!("unmount requested: unmounted; writing back");
                    waiting.push(req.reply);
                    return waiting;
                }
                Err(tiercache_fuse::FuseError::Busy(_)) if !req.force => {
                    let _ = req.reply.send(Err(Arc::new(DaemonError::refused(format!(
                        "{}: busy (files are open); close them, or `tiercache unmount --force` to detach it and abort their access",
                        mountpoint.display()
                    )))));
                }
                Err(tiercache_fuse::FuseError::Busy(_)) => {
                    log::warn!("forced unmount while files are open: detaching and aborting them");
                    if let Err(e) = handle.detach() {
                        log::error!("{e}");
                    }
                    abort_connection(conn);
                    waiting.push(req.reply);
                    return waiting;
                }
                Err(e) => {
                    let _ = req.reply.send(Err(Arc::new(DaemonError::Fuse(e))));
                }
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Writes everything back. On failure (BACKING full or failing) the dirty data stays in memory
/// and is retried every 5 s, and at once when `tiercache unmount` asks again, while the control
/// socket keeps answering (`stats`, `flush`); `tiercache unmount --force` gives up and discards
/// it, with the error logged and returned.
fn final_write_back(
    mem: &MemCache,
    requests: &mpsc::Receiver<StopRequest>,
    waiting: &mut Vec<mpsc::Sender<StopOutcome>>,
    conn: Option<u64>,
) -> StopOutcome {
    let _ = conn;
    // Zero-copy clients learn at their next call that the region is no longer served (their
    // updates are requests: those answered are in memory, and written back below).
    if let Some(r) = mem.zero_copy_region() {
        r.close();
    }
    loop {
        match mem.flush_all() {
            Ok(()) => {
                return mem
                    .shutdown()
                    .map_err(|e| Arc::new(DaemonError::io("write-back at shutdown failed", e)));
            }
            Err(e) => {
                let msg = format!(
                    "write-back failed: {e}; the dirty data stays in this daemon's memory and is retried every 5 s (fix BACKING, or `tiercache unmount --force` to discard it)"
                );
                log::error!("{msg}");
                let failed = Arc::new(DaemonError::refused(msg.clone()));
                for w in waiting.drain(..) {
                    let _ = w.send(Err(Arc::clone(&failed)));
                }
                let deadline = Instant::now() + Duration::from_secs(5);
                while Instant::now() < deadline {
                    if let Ok(req) = requests.recv_timeout(Duration::from_millis(200)) {
                        if req.force {
                            let gave_up = format!("{msg}; forced stop: dirty data discarded");
                            log::error!("{gave_up}");
                            waiting.push(req.reply);
                            return Err(Arc::new(DaemonError::refused(gave_up)));
                        }
                        // Someone asks again: retry now and answer with that outcome.
                        waiting.push(req.reply);
                        break;
                    }
                }
            }
        }
    }
}

/// Starts the daemon in its own session with output to its log file, and returns once the mount
/// answers on its control socket (or with the daemon's own one-line error).
pub fn spawn_background(respawn: &RespawnArgs, s: &Settings) -> Result<(), DaemonError> {
    let files = claim_files(&s.mountpoint)?;
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&files.log)
        .map_err(|e| DaemonError::io(files.log.display().to_string(), e))?;
    let start_len = log.metadata().map_or(0, |m| m.len());
    let exe =
        std::env::current_exe().map_err(|e| DaemonError::io("cannot find own executable", e))?;
    let err_log = log.try_clone().map_err(|e| DaemonError::io("", e))?;
    let mut cmd = Command::new(exe);
    cmd.args(&respawn.0)
        .arg("--foreground")
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(err_log);
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent; it detaches the
    // daemon from the caller's terminal and process group.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| DaemonError::io("cannot start the daemon", e))?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(DaemonError::Refused(
                match last_error_line(&files.log, start_len) {
                    Some(why) => {
                        // The error line says it all; a log this attempt created goes with it.
                        if start_len == 0 {
                            let _ = std::fs::remove_file(&files.log);
                        }
                        why.trim_start_matches("tiercache: ").to_string()
                    }
                    None => format!(
                        "the daemon exited with {status}; see {}",
                        files.log.display()
                    ),
                },
            ));
        }
        if control::call(
            &s.mountpoint,
            &Request::PriorityList,
            Duration::from_secs(2),
        )
        .is_ok()
        {
            // systemd started this process: the daemon is the service's main process now.
            super::notify::notify_or_log(&format!("MAINPID={}", child.id()));
            println!(
                "tiercache: mounted {} on {} (pid {}, log {})",
                s.backing.display(),
                s.mountpoint.display(),
                child.id(),
                files.log.display()
            );
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(DaemonError::refused(format!(
        "the daemon did not come up within 60 s; see {}",
        files.log.display()
    )))
}

fn last_error_line(log: &std::path::Path, from: u64) -> Option<String> {
    let mut f = std::fs::File::open(log).ok()?;
    f.seek(SeekFrom::Start(from)).ok()?;
    let mut text = String::new();
    f.read_to_string(&mut text).ok()?;
    text.lines()
        .rev()
        .find(|l| l.starts_with("tiercache: "))
        .map(str::to_string)
}
