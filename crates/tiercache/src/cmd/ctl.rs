//! Control commands on a running mount: `stats`, `priority`, `class`, `flush`, `unmount`.

use super::detach::{self, AtPath};
use super::mounts::{self, is_mounted};
use crate::live::classes::ClassBounds;
use crate::live::control::{self, canonical_mountpoint, CallError, MountFiles, Request};
use crate::live::stats;
use clap::{Args, Subcommand};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub struct StatsArgs {
    pub mountpoint: PathBuf,
    /// Print the JSON document (keys: memory.*, classes.*, backing.*, pid, ...).
    #[arg(long)]
    pub json: bool,
    /// Print again every SECONDS until interrupted (with --json: one document per line).
    #[arg(long, value_name = "SECONDS")]
    pub watch: Option<f64>,
    /// Also print each class's estimated hit-ratio curve (`--partition mrc`; the JSON always
    /// has it, under classes.NAME.curve).
    #[arg(long)]
    pub curves: bool,
}

#[derive(Subcommand, Debug)]
pub enum PriorityCommand {
    /// Make files in DIR (inside the mount; need not exist yet) priority.
    Add {
        mountpoint: PathBuf,
        dir: PathBuf,
        /// The whole subtree, not only files directly under DIR.
        #[arg(long)]
        recursive: bool,
    },
    /// Stop treating DIR as a priority directory.
    Remove { mountpoint: PathBuf, dir: PathBuf },
    /// List the priority directories.
    List {
        mountpoint: PathBuf,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum ClassCommand {
    /// Create class NAME (or change it) and put files directly under each DIR (inside the
    /// mount; need not exist yet) in it.
    Add {
        mountpoint: PathBuf,
        name: String,
        /// Comma-separated directories.
        #[arg(value_delimiter = ',')]
        dirs: Vec<PathBuf>,
        /// The whole subtree of each DIR, not only files directly under it.
        #[arg(long)]
        recursive: bool,
        #[command(flatten)]
        bounds: BoundArgs,
    },
    /// Change class NAME's hit-ratio target, floor or cap.
    Set {
        mountpoint: PathBuf,
        name: String,
        #[command(flatten)]
        bounds: BoundArgs,
    },
    /// Remove class NAME: its files go back to `normal`.
    Remove { mountpoint: PathBuf, name: String },
    /// List the classes, their targets, bounds and directories.
    List {
        mountpoint: PathBuf,
        #[arg(long)]
        json: bool,
    },
}

/// A class's target and bounds as `tiercache class add|set` take them.
#[derive(Args, Debug)]
pub struct BoundArgs {
    /// Hit-ratio target, a fraction in 0..1 (`none`: best effort).
    #[arg(long, value_name = "F")]
    pub target: Option<String>,
    /// Floor of the class's pool, e.g. 64M (`none`: no floor).
    #[arg(long, value_name = "SIZE")]
    pub min: Option<String>,
    /// Cap of the class's pool, e.g. 16M (`none`: no cap).
    #[arg(long, value_name = "SIZE")]
    pub max: Option<String>,
}

impl From<BoundArgs> for ClassBounds {
    fn from(b: BoundArgs) -> Self {
        ClassBounds {
            target: b.target,
            min: b.min,
            max: b.max,
        }
    }
}

#[derive(Args, Debug)]
pub struct UnmountArgs {
    pub mountpoint: PathBuf,
    /// Unmount even if files are open (their access is aborted), give up dirty data that cannot be
    /// written back, and detach a mount whose daemon is dead or does not answer (killing a stale
    /// daemon). Data acknowledged by fsync is on BACKING in every case.
    #[arg(long)]
    pub force: bool,
}

const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// [`control::call_typed`], with a daemon that does not answer explained from the mount table:
/// no such path, not a mount point, a subdirectory of a mount, or another file system.
fn call_typed(
    mountpoint: &Path,
    req: &Request,
    timeout: Duration,
) -> Result<serde_json::Value, CallError> {
    control::call_typed(mountpoint, req, timeout).map_err(|e| match e {
        CallError::Unreachable(m) => CallError::Unreachable(
            mounts::not_a_tiercache_mount(mountpoint, &canonical_mountpoint(mountpoint))
                .unwrap_or(m),
        ),
        refused => refused,
    })
}

fn call(mountpoint: &Path, req: &Request, timeout: Duration) -> Result<serde_json::Value, String> {
    call_typed(mountpoint, req, timeout).map_err(String::from)
}

pub fn stats_cmd(a: StatsArgs) -> Result<(), String> {
    if let Some(w) = a.watch {
        if !(w.is_finite() && w > 0.0) {
            return Err(format!("--watch: {w} is not a positive number of seconds"));
        }
    }
    loop {
        let v = call(&a.mountpoint, &Request::Stats, CALL_TIMEOUT)?;
        if a.json && a.watch.is_some() {
            // One document per line (NDJSON), so the stream parses.
            println!("{}", serde_json::to_string(&v).map_err(|e| e.to_string())?);
        } else if a.json {
            println!(
                "{}",
                serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?
            );
        } else {
            print!(
                "{}{}{}{}",
                stats::text(&v),
                crate::live::io::text(&v),
                crate::live::transport::text(&v),
                crate::live::kernel_cache::text(&v)
            );
            if a.curves {
                print!("{}", super::curves::text(&v));
            }
        }
        match a.watch {
            Some(w) => {
                std::thread::sleep(Duration::from_secs_f64(w));
                if !a.json {
                    println!();
                }
            }
            None => return Ok(()),
        }
    }
}

pub fn priority_cmd(c: PriorityCommand) -> Result<(), String> {
    let (mp, req, json) = match c {
        PriorityCommand::Add {
            mountpoint,
            dir,
            recursive,
        } => (mountpoint, Request::PriorityAdd { dir, recursive }, false),
        PriorityCommand::Remove { mountpoint, dir } => {
            (mountpoint, Request::PriorityRemove { dir }, false)
        }
        PriorityCommand::List { mountpoint, json } => (mountpoint, Request::PriorityList, json),
    };
    let v = call(&mp, &req, CALL_TIMEOUT)?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&v["rules"]).map_err(|e| e.to_string())?
        );
    } else {
        for r in v["rules"].as_array().into_iter().flatten() {
            let dir = r["dir"].as_str().unwrap_or("");
            let shown = if dir.is_empty() { "." } else { dir };
            println!(
                "{shown}{}",
                if r["recursive"].as_bool() == Some(true) {
                    "  (recursive)"
                } else {
                    ""
                }
            );
        }
    }
    Ok(())
}

pub fn class_cmd(c: ClassCommand) -> Result<(), String> {
    let (mp, req, json) = match c {
        ClassCommand::Add {
            mountpoint,
            name,
            dirs,
            recursive,
            bounds,
        } => {
            let req = Request::ClassAdd {
                name,
                dirs,
                recursive,
                bounds: bounds.into(),
            };
            (mountpoint, req, false)
        }
        ClassCommand::Set {
            mountpoint,
            name,
            bounds,
        } => {
            let req = Request::ClassSet {
                name,
                bounds: bounds.into(),
            };
            (mountpoint, req, false)
        }
        ClassCommand::Remove { mountpoint, name } => {
            (mountpoint, Request::ClassRemove { name }, false)
        }
        ClassCommand::List { mountpoint, json } => (mountpoint, Request::ClassList, json),
    };
    let v = call(&mp, &req, CALL_TIMEOUT)?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&v["classes"]).map_err(|e| e.to_string())?
        );
        return Ok(());
    }
    for c in v["classes"].as_array().into_iter().flatten() {
        println!("{}", class_line(c));
    }
    Ok(())
}

/// One class of `class list`: `web  target 0.99  min 16384 blocks  dirs www/top, www/s/**`.
fn class_line(c: &serde_json::Value) -> String {
    let mut line = format!("{:<10}", c["name"].as_str().unwrap_or("?"));
    line += &match c["target"].as_f64() {
        Some(t) => format!("  target {t}"),
        None => "  best effort".to_string(),
    };
    for k in ["min", "max"] {
        if let Some(n) = c[format!("{k}_blocks")].as_u64() {
            line += &format!("  {k} {n} blocks");
        }
    }
    let dir = |d: &serde_json::Value, suffix: &str| {
        let d = d.as_str().unwrap_or("");
        format!("{}{suffix}", if d.is_empty() { "." } else { d })
    };
    let dirs: Vec<String> = (c["dirs"].as_array().into_iter().flatten())
        .map(|d| dir(d, ""))
        .chain((c["recursive"].as_array().into_iter().flatten()).map(|d| dir(d, "/** (recursive)")))
        .collect();
    if !dirs.is_empty() {
        line += &format!("  dirs {}", dirs.join(", "));
    }
    line
}

pub fn flush_cmd(mountpoint: &Path) -> Result<(), String> {
    // Write-back of a large dirty set can take long on a slow disk: no short timeout.
    call(mountpoint, &Request::Flush, Duration::from_secs(24 * 3600))?;
    Ok(())
}

pub fn unmount_cmd(a: UnmountArgs) -> Result<(), String> {
    let mp = canonical_mountpoint(&a.mountpoint);
    let files = MountFiles::for_mountpoint(&mp);
    // The daemon answers after unmounting and writing everything back: no short timeout.
    let req = Request::Unmount { force: a.force };
    match call_typed(&a.mountpoint, &req, Duration::from_secs(24 * 3600)) {
        Ok(v) => {
            let pid = v["pid"].as_i64().unwrap_or(0) as i32;
            let start = Instant::now();
            while pid > 0 && alive(pid) && start.elapsed() < Duration::from_secs(30) {
                std::thread::sleep(Duration::from_millis(20));
            }
            if is_mounted(&mp) {
                return Err(format!(
                    "{}: still mounted after the daemon stopped",
                    mp.display()
                ));
            }
            println!("tiercache: unmounted {}", mp.display());
            Ok(())
        }
        Err(CallError::Refused(e)) => Err(e),
        Err(CallError::Unreachable(e)) if !a.force => Err(e),
        Err(CallError::Unreachable(_)) => force(&a.mountpoint, &mp, &files),
    }
}

fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(pid, 0) == 0 }
}

/// Lazy-detaches a tiercache mount whose daemon does not answer and kills that daemon. Refuses
/// anything that is not a tiercache mount (a user who confuses BACKING with MOUNTPOINT must not
/// detach an NFS volume), and a path where nothing is mounted. What is checked is what is
/// detached: the mount the path leads to, held by a descriptor ([`detach`]).
fn force(given: &Path, mp: &Path, files: &MountFiles) -> Result<(), String> {
    let live = files.live_pid();
    let opened = match detach::open_mount(mp).map_err(|e| format!("{}: {e}", given.display()))? {
        AtPath::Mount(m) => m,
        AtPath::NotMounted => {
            let why = mounts::not_a_tiercache_mount(given, mp)
                .unwrap_or_else(|| format!("{}: not mounted", given.display()));
            let Some(pid) = live else {
                return Err(format!("{why}; nothing to unmount"));
            };
            // A daemon holding the pid file but answering nothing, with no mount left: stop it.
            kill(pid);
            remove_control_files(files);
            println!("tiercache: nothing was mounted; stopped unresponsive daemon pid {pid}");
            return Ok(());
        }
    };
    let m = &opened.entry;
    if !m.is_tiercache() {
        return Err(format!(
            "{}: not a tiercache mount ({} is mounted there); refusing to detach it",
            given.display(),
            m.describe()
        ));
    }
    if m.mount_point != mp {
        return Err(format!(
            "{}: the mount found there is listed on {} (the path changed while it was \
             checked); refusing to detach it",
            given.display(),
            m.mount_point.display()
        ));
    }
    if let Some(pid) = live {
        kill(pid);
    }
    opened.detach(mp)?;
    remove_control_files(files);
    println!("tiercache: detached {}", mp.display());
    Ok(())
}

/// SIGKILL to a daemon that holds its pid-file lock but does not answer its socket.
fn kill(pid: i32) {
    // SAFETY: plain kill(2) of the pid the daemon wrote; `live_pid` checked that it still holds
    // the pid-file lock (a recycled pid never does).
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
}

/// The socket and pid file of a daemon that is gone (its log stays: it says why it died).
fn remove_control_files(files: &MountFiles) {
    let _ = std::fs::remove_file(&files.socket);
    let _ = std::fs::remove_file(&files.pid);
}
