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
    PriorityAdd {
        dir: PathBuf,
        recursive: bool,
    },
    PriorityRemove {
        dir: PathBuf,
    },
    PriorityList,
    /// `tiercache class add`: creates class `name` when new, sets the bounds given, adds
    /// `dirs` to it.
    ClassAdd {
        name: String,
        #[serde(default)]
        dirs: Vec<PathBuf>,
        #[serde(default)]
        recursive: bool,
        #[serde(default)]
        bounds: super::classes::ClassBounds,
    },
    /// `tiercache class set`: changes an existing class's bounds.
    ClassSet {
        name: String,
        #[serde(default)]
        bounds: super::classes::ClassBounds,
    },
    /// `tiercache class remove`: its files go back to `normal`.
    ClassRemove {
        name: String,
    },
    ClassList,
    Flush,
    Unmount {
        #[serde(default)]
        force: bool,
    },
    /// Re-read the config file and apply what can change while mounted.
    Reload,
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
    fn handle(&self, req: Request) -> Result<serde_json::Value, super::error::DaemonError>;
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

pub use tiercache_wire::canonical_mountpoint;

/// Paths of one mount's control files.
#[derive(Debug, Clone)]
pub struct MountFiles {
    pub socket: PathBuf,
    pub pid: PathBuf,
    pub log: PathBuf,
}

impl MountFiles {
    pub fn for_mountpoint(mountpoint: &Path) -> Self {
        Self::in_dir(&runtime_dir(), mountpoint)
    }

    /// The files a daemon with runtime directory `dir` (see [`runtime_dir`]) has for
    /// `mountpoint`.
    pub fn in_dir(dir: &Path, mountpoint: &Path) -> Self {
        // The same NAME-HASH as the zero-copy socket's.
        let key = tiercache_wire::mount_key(mountpoint);
        let base = dir.join(key);
        MountFiles {
            socket: base.with_extension("sock"),
            pid: base.with_extension("pid"),
            log: base.with_extension("log"),
        }
    }

    /// Creates the runtime directory (mode 0700) or checks the existing one: it must be a real
    /// directory (not a symlink) owned by us and closed to group and others. Nothing is chmod'ed
    /// or followed, so another user cannot redirect our files by planting a link.
    pub fn ensure_dir(&self) -> io::Result<()> {
        use std::os::unix::fs::MetadataExt;
        let dir = runtime_dir();
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        let m = std::fs::symlink_metadata(&dir)?;
        // SAFETY: getuid has no preconditions.
        let me = unsafe { libc::getuid() };
        if !m.file_type().is_dir() || m.uid() != me || m.mode() & 0o077 != 0 {
            return Err(io::Error::other(format!(
                "{} must be a directory owned by uid {me} with mode 0700 (not a symlink); remove it",
                dir.display()
            )));
        }
        Ok(())
    }

    /// Takes the mount's pid-file lock (held for the daemon's life) and writes our pid. Fails if
    /// a live daemon holds it.
    pub fn lock_pid(&self) -> io::Result<std::fs::File> {
        use std::io::Write as _;
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&self.pid)?;
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            return Err(io::Error::last_os_error());
        }
        f.set_len(0)?;
        writeln!(f, "{}", std::process::id())?;
        Ok(f)
    }

    /// The daemon's pid, if the pid file names a live process.
    /// A pid file whose lock is free is stale (its daemon died), whatever process now has that
    /// pid: only a daemon holding the lock counts, so pid reuse cannot make us kill a stranger.
    pub fn live_pid(&self) -> Option<i32> {
        use std::os::fd::AsRawFd;
        let f = std::fs::File::open(&self.pid).ok()?;
        // SAFETY: flock on a descriptor we own; a shared probe released when `f` closes.
        let free = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) } == 0;
        if free {
            return None;
        }
        let pid: i32 = std::fs::read_to_string(&self.pid)
            .ok()?
            .trim()
            .parse()
            .ok()?;
        (pid > 0).then_some(pid)
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
        .spawn(move || accept_loop(&listener, me, &handler))?;
    Ok(())
}

/// Descriptors held back for the control socket: when the process has run out (e.g. the
/// kernel holds more inodes than the mount can open), they are given up to accept and serve
/// one request, so `stats`, `flush` and `unmount` still answer.
const RESERVED_FDS: usize = 8;

fn reserve() -> Vec<std::fs::File> {
    (0..RESERVED_FDS)
        .filter_map(|_| std::fs::File::open("/dev/null").ok())
        .collect()
}

fn accept_loop(listener: &UnixListener, me: u32, handler: &Arc<dyn Handler>) {
    let mut reserved = reserve();
    let mut logged = false;
    loop {
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                if !logged {
                    log::warn!(
                        "control socket: out of file descriptors ({e}); serving with the {} reserved ones",
                        reserved.len()
                    );
                    logged = true;
                }
                reserved.clear();
                match listener.accept() {
                    Ok((s, _)) => {
                        // served here, so nothing else takes the freed descriptors meanwhile
                        if authorised(&s, me) {
                            serve_one(&s, handler.as_ref());
                        }
                        drop(s);
                        reserved = reserve();
                        continue;
                    }
                    Err(e) => {
                        log::warn!("control socket: accept failed even with the reserve: {e}");
                        std::thread::sleep(Duration::from_millis(100));
                        reserved = reserve();
                        continue;
                    }
                }
            }
            Err(e) => {
                log::warn!("control socket: accept: {e}");
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        if reserved.len() < RESERVED_FDS {
            reserved = reserve();
        }
        logged = false;
        if !authorised(&stream, me) {
            continue;
        }
        let h = Arc::clone(handler);
        let _ = std::thread::Builder::new()
            .name("tc-control-conn".into())
            .spawn(move || serve_one(&stream, h.as_ref()));
    }
}

fn authorised(s: &UnixStream, me: u32) -> bool {
    matches!(peer_uid(s), Some(uid) if uid == me || uid == 0)
}

/// Longest request line accepted.
const MAX_REQUEST: u64 = 64 << 10;

/// One request line, one reply line. Uses the connection's own descriptor only (no clone).
fn serve_one(stream: &UnixStream, h: &dyn Handler) {
    use std::io::Read as _;
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut reader = BufReader::new(stream.take(MAX_REQUEST));
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
                error: Some(e.to_string()),
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

/// Longest reply read (a `stats` document is a few KiB): a peer that is not a tiercache daemon
/// cannot make the caller hold more.
const MAX_REPLY: u64 = 16 << 20;

/// Why a control call failed: the one-line message, and whether a daemon answered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CallError {
    /// No daemon answered (not mounted, or the daemon is dead or hung).
    #[error("{0}")]
    Unreachable(String),
    /// The daemon answered with an error.
    #[error("{0}")]
    Refused(String),
}

impl From<CallError> for String {
    fn from(e: CallError) -> String {
        match e {
            CallError::Unreachable(m) | CallError::Refused(m) => m,
        }
    }
}

/// Sends one request to the mount at `mountpoint` and returns its data, or why not.
pub fn call(
    mountpoint: &Path,
    req: &Request,
    timeout: Duration,
) -> Result<serde_json::Value, CallError> {
    call_typed(mountpoint, req, timeout)
}

/// [`call`], telling an unreachable daemon from a refusal.
pub fn call_typed(
    mountpoint: &Path,
    req: &Request,
    timeout: Duration,
) -> Result<serde_json::Value, CallError> {
    let files = MountFiles::for_mountpoint(mountpoint);
    let stream = UnixStream::connect(&files.socket).map_err(|e| {
        CallError::Unreachable(format!(
            "{}: no tiercache daemon answers ({}: {e}); is it mounted? (`tiercache unmount --force` clears a dead mount)",
            mountpoint.display(),
            files.socket.display()
        ))
    })?;
    exchange(stream, req, timeout)
}

/// [`call_typed`] on the control socket at `socket` (e.g. another user's mount, for root).
pub fn call_socket(
    socket: &Path,
    req: &Request,
    timeout: Duration,
) -> Result<serde_json::Value, CallError> {
    let stream = UnixStream::connect(socket)
        .map_err(|e| CallError::Unreachable(format!("{}: {e}", socket.display())))?;
    exchange(stream, req, timeout)
}

/// One request and its reply on a connected control socket; waits at most `timeout` for it.
fn exchange(
    stream: UnixStream,
    req: &Request,
    timeout: Duration,
) -> Result<serde_json::Value, CallError> {
    use CallError::{Refused, Unreachable};
    let io = |e: std::io::Error| Unreachable(format!("control socket: {e}"));
    stream.set_read_timeout(Some(timeout)).map_err(io)?;
    let mut w = stream.try_clone().map_err(io)?;
    let mut text = serde_json::to_string(req).map_err(|e| Refused(e.to_string()))?;
    text.push('\n');
    w.write_all(text.as_bytes()).map_err(io)?;
    let mut line = String::new();
    BufReader::new(std::io::Read::take(stream, MAX_REPLY))
        .read_line(&mut line)
        .map_err(|e| match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => Unreachable(format!(
                "control socket: no answer within {} s",
                timeout.as_secs_f64()
            )),
            _ => io(e),
        })?;
    let reply: Reply = serde_json::from_str(line.trim())
        .map_err(|e| Unreachable(format!("control socket: bad reply: {e}")))?;
    if reply.ok {
        Ok(reply.data.unwrap_or(serde_json::Value::Null))
    } else {
        Err(Refused(
            reply.error.unwrap_or_else(|| "request failed".into()),
        ))
    }
}
