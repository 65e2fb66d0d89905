//! Errors of the memory tier.
//!
//! The data path (`read`, `write`, `fsync`, ...) returns [`std::io::Result`] so that the FUSE
//! layer can hand the errno straight to the kernel; construction and configuration return
//! [`MemError`]. Invariant: an error that came from the backing file keeps its errno all the way
//! out (`From<MemError> for io::Error` unwraps `Io` as is, and remembered write-back errors are
//! rebuilt from their raw OS error).

use std::io;
use thiserror::Error;
use tiercache_core::{CoreError, FileId};

/// What can go wrong building or using the memory tier.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum MemError {
    /// A configuration value is out of range; names the parameter.
    #[error("invalid {param}: {reason}")]
    InvalidConfig { param: &'static str, reason: String },
    /// The engine refused (bad partition parameters, or `Retry` surfaced where it should not).
    #[error(transparent)]
    Core(#[from] CoreError),
    /// The data arena could not be allocated.
    #[error("cannot allocate a {bytes}-byte arena")]
    Alloc { bytes: u64 },
    /// The file was never opened (or was forgotten), or it has no backing file handle.
    #[error("file {} is not open in the memory tier", .0 .0)]
    UnknownFile(FileId),
    /// Backing I/O failed; the errno is kept.
    #[error(transparent)]
    Io(#[from] io::Error),
}

impl MemError {
    pub(crate) fn config(param: &'static str, reason: impl Into<String>) -> Self {
        MemError::InvalidConfig {
            param,
            reason: reason.into(),
        }
    }

    /// The errno the FUSE layer should answer with.
    pub fn errno(&self) -> i32 {
        match self {
            MemError::InvalidConfig { .. } => libc::EINVAL,
            MemError::Core(CoreError::Retry { .. }) => libc::EAGAIN,
            MemError::Core(_) => libc::EINVAL,
            MemError::Alloc { .. } => libc::ENOMEM,
            MemError::UnknownFile(_) => libc::EBADF,
            MemError::Io(e) => e.raw_os_error().unwrap_or(libc::EIO),
        }
    }
}

impl From<MemError> for io::Error {
    /// Backing errors pass through unchanged; the others become their errno (so that
    /// `raw_os_error()` is always set for the FUSE layer).
    fn from(e: MemError) -> Self {
        match e {
            MemError::Io(e) => e,
            other => io::Error::from_raw_os_error(other.errno()),
        }
    }
}

/// A backing error kept for the next `fsync`/`flush` of the file (io::Error is not `Clone`).
#[derive(Debug, Clone)]
pub(crate) struct StoredError {
    errno: Option<i32>,
    kind: io::ErrorKind,
    msg: String,
}

impl StoredError {
    pub(crate) fn of(e: &io::Error) -> Self {
        Self {
            errno: e.raw_os_error(),
            kind: e.kind(),
            msg: e.to_string(),
        }
    }

    /// Rebuilds the error; the raw OS error (errno) is preserved when there was one.
    pub(crate) fn to_io(&self) -> io::Error {
        match self.errno {
            Some(n) => io::Error::from_raw_os_error(n),
            None => io::Error::new(self.kind, self.msg.clone()),
        }
    }
}

/// `EBADF` for an operation on a file the tier does not know.
pub(crate) fn unknown_file(file: FileId) -> io::Error {
    MemError::UnknownFile(file).into()
}
