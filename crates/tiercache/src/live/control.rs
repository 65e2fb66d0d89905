//! The control socket: one per mount, owner-only, one JSON request line → one JSON reply line.
//!
//! Files live in the runtime directory ([`runtime_dir`], mode 0700): `NAME-HASH.sock` (mode
//! 0600), `NAME-HASH.pid` and `NAME-HASH.log`, where NAME is the mount point's last component and
//! HASH a 64-bit FNV-1a of its canonical path. Besides the modes, the daemon checks each peer's
//! uid (SO_PEERCRED): only its own uid and root are served.

use serde::{Deserialize, Serialize};
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// What a client asks.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "cmd", rename_all = "snake_case")]
pub enum Request {
    Stats,
    PriorityAdd { dir: PathBuf, recursive: bool },
    PriorityRemove { dir: PathBuf },
    PriorityList,
    Flush,
    Unmount,
}

/// The daemon's answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Reply {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<serde_json::Value>,
}

/// Serves requests; implemented by the running mount.
pub trait Handler: Send + Sync + 'static {
    fn handle(&self, req: Request) -> Result<serde_json::Value, String>;
}

/// `/run/tiercache` for root, else `$XDG_RUNTIME_DIR/tiercache` or `/tmp/tiercache-UID`.
pub fn runtime_dir() -> PathBuf {
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    if uid == 0 {
        return PathBuf::from("/run/tiercache");
    }
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d).join("tiercache"),
        _ => PathBuf::from(format!("/tmp/tiercache-{uid}")),
    }
}

/// The canonical form of a mount point without touching a possibly dead FUSE mount: canonicalize
/// the parent (a live directory) and append the last component.
pub fn canonical_mountpoint(p: &Path) -> PathBuf {
    let abs = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    match (abs.parent(), abs.file_name()) {
        (Some(parent), Some(name)) => std::fs::canonicalize(parent)
            .map(|d| d.join(name))
            .unwrap_or(abs),
        _ => abs,
    }
}

/// Paths of one mount's control files.
#[derive(Debug, Clone)]
pub struct MountFiles {
    pub socket: PathBuf,
    pub pid: PathBuf,
    pub log: PathBuf,
}

impl MountFiles {
    pub fn for_mountpoint(mountpoint: &Path) -> Self {
        let canon = canonical_mountpoint(mountpoint);
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in canon.as_os_str().as_encoded_bytes() {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        let name: String = canon
            .file_name()
            .map(|n| {
                n.to_string_lossy()
                    .chars()
                    .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
                    .take(32)
                    .collect()
            })
            .unwrap_or_else(|| "root".into());
        let base = runtime_dir().join(format!("{name}-{h:016x}"));
        MountFiles {
            socket: base.with_extension("sock"),
            pid: base.with_extension("pid"),
            log: base.with_extension("log"),
        }
    }

    /// Creates the runtime directory, owner-only.
    pub fn ensure_dir(&self) -> io::Result<()> {
        let dir = runtime_dir();
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
    }

    /// The daemon's pid, if the pid file names a live process.
    pub fn live_pid(&self) -> Option<i32> {
        let pid: i32 = std::fs::read_to_string(&self.pid)
            .ok()?
            .trim()
            .parse()
            .ok()?;
        // SAFETY: kill with signal 0 only checks for existence and permission.
        (pid > 0 && unsafe { libc::kill(pid, 0) } == 0).then_some(pid)
    }
}

fn peer_uid(s: &UnixStream) -> Option<u32> {
    use std::os::fd::AsRawFd;
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid for writes of the sizes passed; the fd is open.
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    (rc == 0).then_some(cred.uid)
}

/// Binds the socket (mode 0600) and serves it on a background thread.
pub fn serve(files: &MountFiles, handler: Arc<dyn Handler>) -> io::Result<()> {
    files.ensure_dir()?;
    let _ = std::fs::remove_file(&files.socket);
    let listener = UnixListener::bind(&files.socket)?;
    std::fs::set_permissions(&files.socket, std::fs::Permissions::from_mode(0o600))?;
    // SAFETY: getuid has no preconditions.
    let me = unsafe { libc::getuid() };
    std::thread::Builder::new()
        .name("tc-control".into())
        .spawn(move || {
            for conn in listener.incoming() {
                let Ok(stream) = conn else { continue };
                match peer_uid(&stream) {
                    Some(uid) if uid == me || uid == 0 => {}
                    _ => continue,
                }
                let h = Arc::clone(&handler);
                let _ = std::thread::Builder::new()
                    .name("tc-control-conn".into())
                    .spawn(move || serve_one(stream, h.as_ref()));
            }
        })?;
    Ok(())
}

fn serve_one(stream: UnixStream, h: &dyn Handler) {
    let mut reader = BufReader::new(match stream.try_clone() {
        Ok(s) => s,
        Err(_) => return,
    });
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    let reply = match serde_json::from_str::<Request>(line.trim()) {
        Ok(req) => match h.handle(req) {
            Ok(data) => Reply {
                ok: true,
                error: None,
                data: Some(data),
            },
            Err(e) => Reply {
                ok: false,
                error: Some(e),
                data: None,
            },
        },
        Err(e) => Reply {
            ok: false,
            error: Some(format!("bad request: {e}")),
            data: None,
        },
    };
    let mut w = stream;
    if let Ok(mut text) = serde_json::to_string(&reply) {
        text.push('\n');
        let _ = w.write_all(text.as_bytes());
    }
}

/// Sends one request to the mount at `mountpoint` and returns its data, or a one-line error.
pub fn call(
    mountpoint: &Path,
    req: &Request,
    timeout: Duration,
) -> Result<serde_json::Value, String> {
    let files = MountFiles::for_mountpoint(mountpoint);
    let stream = UnixStream::connect(&files.socket).map_err(|e| {
        format!(
            "{}: no tiercache daemon answers ({}: {e}); is it mounted? (`tiercache unmount --force` clears a dead mount)",
            mountpoint.display(),
            files.socket.display()
        )
    })?;
    stream
        .set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    let mut w = stream.try_clone().map_err(|e| e.to_string())?;
    let mut text = serde_json::to_string(req).map_err(|e| e.to_string())?;
    text.push('\n');
    w.write_all(text.as_bytes())
        .map_err(|e| format!("control socket: {e}"))?;
    let mut line = String::new();
    BufReader::new(stream)
        .read_line(&mut line)
        .map_err(|e| format!("control socket: {e}"))?;
    let reply: Reply =
        serde_json::from_str(line.trim()).map_err(|e| format!("control socket: bad reply: {e}"))?;
    if reply.ok {
        Ok(reply.data.unwrap_or(serde_json::Value::Null))
    } else {
        Err(reply.error.unwrap_or_else(|| "request failed".into()))
    }
}
