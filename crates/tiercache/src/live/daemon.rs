//! The mount daemon: builds the memory tier and the FUSE mount, serves the control socket and
//! metrics, and on SIGTERM/SIGINT, `tiercache unmount` or an external unmount writes everything
//! back before it exits.

use super::adapter::CacheDataPath;
use super::control::{self, Handler, MountFiles, Request};
use super::priority::{normalize, PriorityDirs, PriorityRule};
use super::{logging, metrics, stats};
use crate::cmd::mount::MountArgs;
use std::fs::OpenOptions;
use std::io::{BufWriter, Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tiercache_mem::{Device, DeviceModel, EmulatedDevice, MemCache, MemConfig, RealDevice};

/// Everything a mount needs, validated.
#[derive(Debug, Clone)]
pub struct Settings {
    pub backing: PathBuf,
    /// Canonical.
    pub mountpoint: PathBuf,
    pub mem: MemConfig,
    pub priority: PriorityDirs,
    pub emulate: Option<DeviceModel>,
    pub kernel_cache: bool,
    pub allow_other: bool,
    pub trace_out: Option<PathBuf>,
    pub metrics: Option<String>,
    pub threads: Option<usize>,
}

/// The running mount as the control socket sees it.
struct Live {
    data: Arc<CacheDataPath>,
    mountpoint: PathBuf,
    backing: PathBuf,
    stop: Arc<AtomicBool>,
    emulation: Option<String>,
}

impl Handler for Live {
    fn handle(&self, req: Request) -> Result<serde_json::Value, String> {
        match req {
            Request::Stats => Ok(stats::json(
                &self.data.mem().stats(),
                &self.mountpoint,
                &self.backing,
                self.emulation.as_deref(),
            )),
            Request::PriorityAdd { dir, recursive } => {
                let dir = normalize(&dir, &self.mountpoint)?;
                let added = self.data.update_priority(|p| {
                    p.add(PriorityRule {
                        dir: dir.clone(),
                        recursive,
                    });
                    true
                });
                log::info!("priority add {} (recursive: {recursive})", dir.display());
                Ok(serde_json::json!({ "changed": added, "rules": self.data.priority_rules() }))
            }
            Request::PriorityRemove { dir } => {
                let dir = normalize(&dir, &self.mountpoint)?;
                if !self.data.update_priority(|p| p.remove(&dir)) {
                    return Err(format!("{} is not a priority directory", dir.display()));
                }
                log::info!("priority remove {}", dir.display());
                Ok(serde_json::json!({ "changed": true, "rules": self.data.priority_rules() }))
            }
            Request::PriorityList => Ok(serde_json::json!({ "rules": self.data.priority_rules() })),
            Request::Flush => {
                let t = Instant::now();
                self.data
                    .mem()
                    .flush_all()
                    .map_err(|e| format!("flush: {e}"))?;
                Ok(serde_json::json!({ "flushed": true, "secs": t.elapsed().as_secs_f64() }))
            }
            Request::Unmount => {
                self.stop.store(true, Ordering::SeqCst);
                Ok(serde_json::json!({ "unmounting": true, "pid": std::process::id() }))
            }
        }
    }
}

/// The mount's control files, refusing a mount point a live daemon already serves.
fn claim_files(mountpoint: &std::path::Path) -> Result<MountFiles, String> {
    let files = MountFiles::for_mountpoint(mountpoint);
    if let Some(pid) = files.live_pid() {
        return Err(format!(
            "{}: already served by tiercache pid {pid}",
            mountpoint.display()
        ));
    }
    files
        .ensure_dir()
        .map_err(|e| format!("{}: {e}", control::runtime_dir().display()))?;
    Ok(files)
}

/// Mounts and serves until stopped. Errors before the mount is up leave nothing mounted.
pub fn run_foreground(s: Settings) -> Result<(), String> {
    logging::init();
    let files = claim_files(&s.mountpoint)?;
    let backing =
        std::fs::canonicalize(&s.backing).map_err(|e| format!("{}: {e}", s.backing.display()))?;
    let real: Arc<dyn Device> = Arc::new(RealDevice);
    let (device, emulation): (Arc<dyn Device>, Option<String>) = match s.emulate {
        Some(model) => {
            let label = format!("MODEL {model}");
            (Arc::new(EmulatedDevice::new(real, model)), Some(label))
        }
        None => (real, None),
    };
    let mem = Arc::new(MemCache::new(s.mem.clone(), device).map_err(|e| e.to_string())?);
    if let Some(path) = &s.trace_out {
        let f = std::fs::File::create(path)
            .map_err(|e| format!("--trace-out {}: {e}", path.display()))?;
        mem.set_trace(Some(Box::new(BufWriter::new(f))))
            .map_err(|e| format!("--trace-out {}: {e}", path.display()))?;
    }
    let data = Arc::new(CacheDataPath::new(
        Arc::clone(&mem),
        backing.clone(),
        s.priority.clone(),
    ));
    let mut opts = tiercache_fuse::MountOptions::default();
    opts.kernel_cache = s.kernel_cache;
    opts.allow_other = s.allow_other;
    if let Some(t) = s.threads {
        opts.threads = t;
    }
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .map_err(|e| format!("signal handler: {e}"))?;
    }
    // Bind the metrics address before mounting, so a bad or busy address mounts nothing.
    let metrics_listener = match &s.metrics {
        Some(addr) => {
            Some(std::net::TcpListener::bind(addr).map_err(|e| format!("--metrics {addr}: {e}"))?)
        }
        None => None,
    };
    let handle = tiercache_fuse::mount(
        &s.backing,
        &s.mountpoint,
        opts,
        data.clone() as Arc<dyn tiercache_fuse::DataPath>,
    )
    .map_err(|e| e.to_string())?;
    let live = Arc::new(Live {
        data: Arc::clone(&data),
        mountpoint: s.mountpoint.clone(),
        backing: backing.clone(),
        stop: Arc::clone(&stop),
        emulation: emulation.clone(),
    });
    if let Err(e) = control::serve(&files, live.clone()) {
        drop(handle);
        return Err(format!("control socket {}: {e}", files.socket.display()));
    }
    let _ = std::fs::write(&files.pid, format!("{}\n", std::process::id()));
    if let Some(l) = metrics_listener {
        let live = Arc::clone(&live);
        let render: metrics::Render = Arc::new(move || stats::prometheus(&live.data.mem().stats()));
        metrics::serve_listener(l, render).map_err(|e| format!("--metrics: {e}"))?;
    }
    log::info!(
        "mounted {} on {} (memory {} blocks of {} B, partition {}, policy {}){}",
        backing.display(),
        s.mountpoint.display(),
        s.mem.capacity_blocks,
        s.mem.block_size.bytes(),
        s.mem.partition.kind,
        s.mem.policy,
        emulation
            .as_ref()
            .map_or(String::new(), |e| format!(", BACKING behind device {e}"))
    );
    let external = loop {
        if stop.load(Ordering::SeqCst) {
            break false;
        }
        if handle.is_finished() {
            break true;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    log::info!(
        "{}: writing back and stopping",
        if external {
            "unmounted from outside"
        } else {
            "stop requested"
        }
    );
    let mut result = Ok(());
    if !external {
        if let Err(e) = handle.unmount() {
            log::warn!("{e}");
        }
    }
    if let Err(e) = mem.shutdown() {
        log::error!("write-back at shutdown failed: {e}");
        result = Err(format!("write-back at shutdown failed: {e}"));
    }
    let _ = std::fs::remove_file(&files.socket);
    let _ = std::fs::remove_file(&files.pid);
    log::info!("stopped");
    result
}

/// Starts the daemon in its own session with output to its log file, and returns once the mount
/// answers on its control socket (or with the daemon's own one-line error).
pub fn spawn_background(_args: &MountArgs, s: &Settings) -> Result<(), String> {
    let files = claim_files(&s.mountpoint)?;
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&files.log)
        .map_err(|e| format!("{}: {e}", files.log.display()))?;
    let start_len = log.metadata().map_or(0, |m| m.len());
    let exe = std::env::current_exe().map_err(|e| format!("cannot find own executable: {e}"))?;
    let err_log = log.try_clone().map_err(|e| e.to_string())?;
    let mut cmd = Command::new(exe);
    cmd.args(std::env::args_os().skip(1))
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
        .map_err(|e| format!("cannot start the daemon: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            let why = last_error_line(&files.log, start_len)
                .unwrap_or_else(|| format!("daemon exited with {status}"));
            return Err(why.trim_start_matches("tiercache: ").to_string());
        }
        if control::call(
            &s.mountpoint,
            &Request::PriorityList,
            Duration::from_secs(2),
        )
        .is_ok()
        {
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
    Err(format!(
        "the daemon did not come up within 60 s; see {}",
        files.log.display()
    ))
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
