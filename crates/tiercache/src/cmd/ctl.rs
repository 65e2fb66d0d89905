//! Control commands on a running mount: `stats`, `priority`, `flush`, `unmount`.

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

pub fn stats_cmd(a: StatsArgs) -> Result<(), String> {
    if let Some(w) = a.watch {
        if !(w.is_finite() && w > 0.0) {
            return Err(format!("--watch: {w} is not a positive number of seconds"));
        }
    }
    loop {
        let v = control::call(&a.mountpoint, &Request::Stats, CALL_TIMEOUT)?;
        if a.json && a.watch.is_some() {
            // One document per line (NDJSON), so the stream parses.
            println!("{}", serde_json::to_string(&v).map_err(|e| e.to_string())?);
        } else if a.json {
            println!(
                "{}",
                serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?
            );
        } else {
            print!("{}", stats::text(&v));
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
    let v = control::call(&mp, &req, CALL_TIMEOUT)?;
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

pub fn flush_cmd(mountpoint: &Path) -> Result<(), String> {
    // Write-back of a large dirty set can take long on a slow disk: no short timeout.
    control::call(mountpoint, &Request::Flush, Duration::from_secs(24 * 3600))?;
    Ok(())
}

/// Whether `path` is a mount point now (from /proc/self/mountinfo, octal escapes decoded).
pub fn is_mounted(path: &Path) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let want = path.as_os_str().as_encoded_bytes();
    info.lines()
        .any(|l| l.split(' ').nth(4).is_some_and(|mp| unescape(mp) == want))
}

fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

pub fn unmount_cmd(a: UnmountArgs) -> Result<(), String> {
    let mp = canonical_mountpoint(&a.mountpoint);
    let files = MountFiles::for_mountpoint(&mp);
    // The daemon answers after unmounting and writing everything back: no short timeout.
    let req = Request::Unmount { force: a.force };
    match control::call_typed(&mp, &req, Duration::from_secs(24 * 3600)) {
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
        Err(CallError::Unreachable(_)) => force(&mp, &files),
    }
}

fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(pid, 0) == 0 }
}

/// Lazy-detaches the mount and kills a stale daemon.
fn force(mp: &Path, files: &MountFiles) -> Result<(), String> {
    if let Some(pid) = files.live_pid() {
        // SAFETY: plain kill(2) of the pid the daemon wrote; it does not answer its socket.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
    if is_mounted(mp) {
        let c =
            std::ffi::CString::new(mp.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
        // SAFETY: `c` is a valid NUL-terminated path.
        let rc = unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        if rc != 0 {
            let st = std::process::Command::new("fusermount3")
                .arg("-uz")
                .arg(mp)
                .status();
            if !st.is_ok_and(|s| s.success()) {
                return Err(format!(
                    "{}: cannot detach: {}",
                    mp.display(),
                    std::io::Error::last_os_error()
                ));
            }
        }
    }
    let _ = std::fs::remove_file(&files.socket);
    let _ = std::fs::remove_file(&files.pid);
    println!("tiercache: detached {}", mp.display());
    Ok(())
}
