//! tiercache-wire: the zero-copy socket protocol, the one copy that both ends use — the
//! daemon's zero-copy service (the `tiercache` crate) and the client library
//! (`tiercache-client`, which re-exports it as `wire`).
//!
//! Frames of a 4-byte little-endian length and a JSON body; descriptors ride along with a
//! frame as `SCM_RIGHTS` (the region and the client's pin area with `Welcome`, the client's
//! own descriptor of the file with `Open`); a `Write` is followed by one raw frame (length +
//! bytes). Readers never trust a peer: a frame over [`MAX_FRAME`] is an error before anything
//! is allocated. Specified byte by byte in the repository's `docs/design.md` §8.

use serde::{Deserialize, Serialize};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

/// Protocol version (`Hello`/`Welcome`).
pub const VERSION: u32 = 2;
/// Blocks one `Pin` request (and one `read_blocks` call) may cover.
pub const MAX_PIN_BLOCKS: u64 = 4096;
/// Largest frame body either side accepts.
pub const MAX_FRAME: usize = 1 << 20;

/// Client → daemon.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    Hello {
        version: u32,
    },
    /// Registers the file whose descriptor (opened by the client on the mount, so the kernel
    /// and the mount checked the client's right to it) rides along.
    Open,
    /// Reads blocks `first..first+count` into the cache and pins them for this client.
    Pin {
        handle: u64,
        first: u64,
        count: u64,
    },
    /// Writes the bytes of the raw frame that follows (the concatenated `runs`, each `[start,
    /// len]` relative to `offset`, in order) into the file at `offset + start`, as `pwrite`s
    /// through the mount would (past EOF they extend the file). Only for a file opened
    /// read-write. The client's commit of an update (`tiercache_client::BlockMut`).
    Write {
        handle: u64,
        offset: u64,
        runs: Vec<[u32; 2]>,
    },
    /// 003's syncblock: with `extend`, the size grows to `offset + len` if the file is shorter
    /// (zeros where nothing was written); dirty blocks to BACKING, synced.
    Sync {
        handle: u64,
        offset: u64,
        len: u64,
        extend: bool,
    },
    Close {
        handle: u64,
    },
}

/// Daemon → client.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "r", rename_all = "snake_case")]
pub enum Response {
    /// The region's descriptor and this client's pin area ride along, in that order; `client`
    /// is the client's index (its pin area says it too).
    Welcome {
        version: u32,
        client: u32,
        epoch: u64,
        block_size: u32,
    },
    Opened {
        handle: u64,
        file: u64,
        size: u64,
    },
    /// Each block's slot (`None`: past EOF, or it could not be kept), and the file's size.
    Pinned {
        slots: Vec<Option<u32>>,
        size: u64,
    },
    Written {
        size: u64,
    },
    Synced {
        size: u64,
    },
    Closed,
    Error {
        message: String,
        errno: i32,
    },
}

/// Writes one frame, with `fds` attached (at most [`MAX_FDS`]).
pub fn send(sock: &UnixStream, body: &impl Serialize, fds: &[RawFd]) -> io::Result<()> {
    let json = serde_json::to_vec(body).map_err(io::Error::other)?;
    let mut frame = Vec::with_capacity(4 + json.len());
    frame.extend_from_slice(&(json.len() as u32).to_le_bytes());
    frame.extend_from_slice(&json);
    if fds.is_empty() {
        (&*sock).write_all(&frame)
    } else {
        let n = send_fds(sock, &frame, fds)?;
        (&*sock).write_all(&frame[n..])
    }
}

/// Writes `body` and then `payload` as one raw frame (a `Write` and its bytes).
pub fn send_with_payload(
    sock: &UnixStream,
    body: &impl Serialize,
    payload: &[u8],
) -> io::Result<()> {
    if payload.len() > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("payload of {} bytes (at most {MAX_FRAME})", payload.len()),
        ));
    }
    let json = serde_json::to_vec(body).map_err(io::Error::other)?;
    let mut frame = Vec::with_capacity(8 + json.len() + payload.len());
    frame.extend_from_slice(&(json.len() as u32).to_le_bytes());
    frame.extend_from_slice(&json);
    frame.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    frame.extend_from_slice(payload);
    (&*sock).write_all(&frame)
}

fn frame_len(len: [u8; 4]) -> io::Result<usize> {
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {len} bytes (at most {MAX_FRAME})"),
        ));
    }
    Ok(len)
}

/// Reads one frame and the descriptors that came with it.
pub fn recv<T: for<'de> Deserialize<'de>>(sock: &UnixStream) -> io::Result<(T, Vec<OwnedFd>)> {
    let mut len = [0u8; 4];
    let (n, fds) = recv_fds(sock, &mut len)?;
    if n == 0 {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "peer closed"));
    }
    (&*sock).read_exact(&mut len[n..])?;
    let mut body = vec![0u8; frame_len(len)?];
    (&*sock).read_exact(&mut body)?;
    let v = serde_json::from_slice(&body)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("bad frame: {e}")))?;
    Ok((v, fds))
}

/// Reads the raw frame that follows a `Write`.
pub fn recv_payload(sock: &UnixStream) -> io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    (&*sock).read_exact(&mut len)?;
    let mut body = vec![0u8; frame_len(len)?];
    (&*sock).read_exact(&mut body)?;
    Ok(body)
}

/// Descriptors one frame may carry.
pub const MAX_FDS: usize = 2;
/// Space for the control message of `MAX_FDS` descriptors (and room to spare).
const CMSG_SPACE: usize = 64;

fn send_fds(sock: &UnixStream, bytes: &[u8], fds: &[RawFd]) -> io::Result<usize> {
    if fds.len() > MAX_FDS {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "too many descriptors for one frame",
        ));
    }
    let fd_bytes = std::mem::size_of_val(fds) as u32;
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    let mut cbuf = [0u64; CMSG_SPACE / 8];
    // SAFETY: an all-zero msghdr is valid; the pointers set below outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE is a pure computation.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(fd_bytes) } as _;
    // SAFETY: `msg_control` points at `cbuf`, large enough for one cmsg with MAX_FDS fds
    // (CMSG_SPACE(8) = 24 ≤ 64; CMSG_FIRSTHDR returning non-null is checked); we write its
    // header and `fds.len()` descriptors in bounds.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        if c.is_null() {
            return Err(io::Error::other("no room for a control message"));
        }
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(fd_bytes) as _;
        let data = libc::CMSG_DATA(c).cast::<RawFd>();
        for (i, &fd) in fds.iter().enumerate() {
            data.add(i).write_unaligned(fd);
        }
    }
    // SAFETY: a valid socket and a fully initialised msghdr.
    let n = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

fn recv_fds(sock: &UnixStream, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut cbuf = [0u64; CMSG_SPACE / 8];
    // SAFETY: an all-zero msghdr is valid; the pointers set below outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = CMSG_SPACE as _;
    let n = loop {
        // SAFETY: a valid socket and msghdr; MSG_CMSG_CLOEXEC keeps received fds from leaking
        // into children.
        let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 {
            break n as usize;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    };
    let mut fds = Vec::new();
    // SAFETY: walking the control messages the kernel wrote into `cbuf` with the CMSG macros,
    // which stay within `msg_controllen`; an SCM_RIGHTS message carries whole fds, which we
    // take ownership of (past MAX_FDS they are closed).
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c).cast::<RawFd>();
                let count = ((*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize)
                    / std::mem::size_of::<RawFd>();
                for i in 0..count {
                    let raw = data.add(i).read_unaligned();
                    let owned = OwnedFd::from_raw_fd(raw);
                    if fds.len() < MAX_FDS {
                        fds.push(owned);
                    }
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(io::Error::other("a descriptor was cut off (MSG_CTRUNC)"));
    }
    Ok((n, fds))
}

/// Credentials of the process at the other end of `sock` (`SO_PEERCRED`).
pub fn peer_cred(sock: &UnixStream) -> io::Result<libc::ucred> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred`/`len` are valid out pointers of the right size.
    let r = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred)
}

/// The canonical form of a mount point without touching a possibly dead FUSE mount:
/// canonicalize the parent (a live directory) and append the last component (after following
/// symlinks to the mount point itself, which `readlink` does without asking the mount).
pub fn canonical_mountpoint(p: &Path) -> PathBuf {
    let mut abs = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    for _ in 0..40 {
        let Ok(target) = std::fs::read_link(&abs) else {
            break;
        };
        let base = abs.parent().map(Path::to_path_buf).unwrap_or_default();
        abs = std::path::absolute(base.join(target)).unwrap_or(abs);
    }
    match (abs.parent(), abs.file_name()) {
        (Some(parent), Some(name)) => std::fs::canonicalize(parent)
            .map(|d| d.join(name))
            .unwrap_or(abs),
        _ => abs,
    }
}

/// `NAME-HASH` of a mount point: NAME its last component (alphanumerics and `-`, at most 32),
/// HASH a 64-bit FNV-1a of its canonical path. Names the control files and this socket.
pub fn mount_key(mountpoint: &Path) -> String {
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
    format!("{name}-{h:016x}")
}

/// The abstract socket name of a mount's zero-copy service: `tiercache-zc-NAME-HASH`.
pub fn socket_name(mountpoint: &Path) -> String {
    format!("tiercache-zc-{}", mount_key(mountpoint))
}

/// Connects to the abstract socket `name`.
pub fn connect_abstract(name: &str) -> io::Result<UnixStream> {
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
    UnixStream::connect_addr(&addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_and_descriptors_cross_a_socket_pair() {
        let (a, b) = UnixStream::pair().unwrap_or_else(|e| panic!("{e}"));
        let f = std::fs::File::open("/proc/self/status").unwrap_or_else(|e| panic!("{e}"));
        send(&a, &Request::Open, &[f.as_raw_fd()]).unwrap_or_else(|e| panic!("{e}"));
        send(&a, &Request::Close { handle: 3 }, &[]).unwrap_or_else(|e| panic!("{e}"));
        let w = Request::Write {
            handle: 1,
            offset: 8,
            runs: vec![[0, 2], [5, 1]],
        };
        send_with_payload(&a, &w, b"abc").unwrap_or_else(|e| panic!("{e}"));
        send(&a, &Request::Open, &[f.as_raw_fd(), f.as_raw_fd()]).unwrap_or_else(|e| panic!("{e}"));
        let (r, mut fds): (Request, _) = recv(&b).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r, Request::Open);
        assert_eq!(fds.len(), 1);
        let fd = fds.pop().expect("descriptor passed");
        let got = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            got,
            std::path::Path::new("/proc")
                .join(std::process::id().to_string())
                .join("status")
        );
        let (r, fds): (Request, _) = recv(&b).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r, Request::Close { handle: 3 });
        assert!(fds.is_empty());
        let (r, _): (Request, _) = recv(&b).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r, w);
        assert_eq!(recv_payload(&b).unwrap_or_else(|e| panic!("{e}")), b"abc");
        let (_, fds): (Request, _) = recv(&b).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(fds.len(), 2, "two descriptors in one frame");
    }

    #[test]
    fn socket_names_differ_per_mount_point() {
        let a = socket_name(Path::new("/mnt/a"));
        assert!(a.starts_with("tiercache-zc-a-"), "{a}");
        assert_ne!(a, socket_name(Path::new("/srv/a")));
    }
}
