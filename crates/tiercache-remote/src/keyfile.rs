//! The tier's secret: a random 256-bit [`RemoteKey`] kept in a key file (64 hex digits and a
//! newline, mode 0600). [`generate`] never overwrites a file and never follows a symlink;
//! [`load`] opens the path without following a symlink, checks the file it opened (a regular
//! file, owned by this process's effective user or root, no access for group or others) and
//! reads that same file, so the checked file is the one read.

use crate::error::RemoteError;
use rand::RngCore;
use std::fmt;
use std::fs::{self, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// The master key every value key and key-naming key is derived from.
#[derive(Clone, PartialEq, Eq)]
pub struct RemoteKey([u8; 32]);

impl RemoteKey {
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// A fresh key from the operating system's random source.
    pub fn random() -> Self {
        let mut b = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut b);
        Self(b)
    }

    pub(crate) fn bytes(&self) -> &[u8; 32] {
        &self.0
    }

    fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn from_hex(s: &str) -> Option<Self> {
        if s.len() != 64 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let mut b = [0u8; 32];
        for (i, out) in b.iter_mut().enumerate() {
            *out = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(Self(b))
    }
}

impl fmt::Debug for RemoteKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RemoteKey(<redacted>)")
    }
}

fn err(path: &Path, why: impl Into<String>) -> RemoteError {
    RemoteError::KeyFile {
        path: path.to_path_buf(),
        why: why.into(),
    }
}

/// Writes a new random key to `path` (mode 0600) and returns it. Refuses an existing file.
pub fn generate(path: &Path) -> Result<RemoteKey, RemoteError> {
    let key = RemoteKey::random();
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                err(path, "already exists; refusing to overwrite a key")
            } else {
                err(path, format!("cannot create: {e}"))
            }
        })?;
    // The umask cannot widen 0600, but an inherited ACL default could: set it explicitly.
    f.set_permissions(fs::Permissions::from_mode(0o600))
        .map_err(|e| err(path, format!("cannot set mode 0600: {e}")))?;
    writeln!(f, "{}", key.to_hex())
        .and_then(|()| f.sync_all())
        .map_err(|e| err(path, format!("cannot write: {e}")))?;
    Ok(key)
}

/// Reads the key at `path`. Refuses a missing or malformed file, a symlink (opened with
/// `O_NOFOLLOW`), anything but a regular file, a file owned by another user than the
/// process's effective one or root, and one whose mode lets group or others read or write it
/// (`mode & 0o077 != 0`). The checks are made on the opened file (`fstat`), which is then
/// read: no window for swapping the file between check and read. Each error is one line
/// naming the path and what is wrong.
pub fn load(path: &Path) -> Result<RemoteKey, RemoteError> {
    let f = OpenOptions::new()
        .read(true)
        // O_NONBLOCK: opening a planted FIFO must not hang; a regular file ignores it.
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => err(path, "is a symbolic link; refusing to follow it"),
            _ => err(path, format!("cannot open: {e}")),
        })?;
    let meta = f
        .metadata()
        .map_err(|e| err(path, format!("cannot stat: {e}")))?;
    if !meta.is_file() {
        return Err(err(path, "not a regular file"));
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if meta.uid() != euid && meta.uid() != 0 {
        return Err(err(
            path,
            format!(
                "owned by uid {}, not by this user (uid {euid}) or root; refusing another \
                 user's key",
                meta.uid()
            ),
        ));
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(err(
            path,
            format!("mode {mode:04o} lets group/others access the key; chmod 600 it"),
        ));
    }
    let mut text = String::new();
    // A key file is 65 bytes; read a little more to notice a larger one without reading it all.
    Read::take(&f, 4096)
        .read_to_string(&mut text)
        .map_err(|e| err(path, format!("cannot read: {e}")))?;
    RemoteKey::from_hex(text.trim())
        .ok_or_else(|| err(path, "malformed: expected 64 hex digits (tiercache keygen)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip() {
        let k = RemoteKey::random();
        assert_eq!(RemoteKey::from_hex(&k.to_hex()), Some(k.clone()));
        assert_eq!(format!("{k:?}"), "RemoteKey(<redacted>)");
        assert!(RemoteKey::from_hex("zz").is_none());
        assert!(RemoteKey::from_hex(&"g".repeat(64)).is_none());
    }
}
