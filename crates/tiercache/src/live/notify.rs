//! systemd's service notification protocol (`sd_notify(3)`): one datagram of `KEY=VALUE` lines
//! to the unix socket `$NOTIFY_SOCKET` names (a path, or `@NAME` for an abstract socket).
//! Without `$NOTIFY_SOCKET` (not started by systemd as `Type=notify`) nothing is sent.
//!
//! The daemon sends `READY=1` (with `MAINPID=` and `STATUS=`) only once the mount serves: the
//! FUSE handshake is done and the control socket answers. A background mount's first process,
//! which systemd started, also sends `MAINPID=` of the daemon before it exits, so the unit
//! follows the daemon (`NotifyAccess=all` lets the daemon itself be heard).

use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// Sends `state` to `$NOTIFY_SOCKET`; `Ok(false)` when it is not set.
pub fn notify(state: &str) -> io::Result<bool> {
    let Some(name) = std::env::var_os("NOTIFY_SOCKET") else {
        return Ok(false);
    };
    let bytes = name.as_bytes();
    let addr = match bytes.strip_prefix(b"@") {
        Some(abstract_name) => SocketAddr::from_abstract_name(abstract_name)?,
        None => SocketAddr::from_pathname(&name)?,
    };
    let sock = UnixDatagram::unbound()?;
    sock.send_to_addr(state.as_bytes(), &addr)?;
    Ok(true)
}

/// [`notify`], a failure logged (the mount works without it; systemd's start timeout reports
/// the missing `READY=1`).
pub fn notify_or_log(state: &str) {
    if let Err(e) = notify(state) {
        log::warn!("cannot notify systemd ($NOTIFY_SOCKET): {e}");
    }
}
