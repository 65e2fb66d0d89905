//! Errors of the memory tier.
//!
//! The data path (`read`, `write`, `fsync`, ...) returns [`std::io::Result`] so that the FUSE
//! layer can hand the errno straight to the kernel; construction and configuration return
//! [`MemError`]. Invariant: an error that came from the backing file keeps its errno all the way
//! out (`From<MemError> for io::Error` unwraps `Io` as is, and remembered write-back errors are
//! rebuilt from their raw OS error).

use std::io;
use std::time::{Duration, Instant};
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
    #[error(transparent)]
    Arena(#[from] tiercache_memtier::ArenaError),
    /// The file was never opened (or was forgotten), or it has no backing file handle.
    #[error("file {} is not open in the memory tier", .0 .0)]
    UnknownFile(FileId),
    /// A lower tier's spill hook could not be set: the tier already belongs to another stack.
    #[error("a lower tier cannot join this stack")]
    SpillHook(#[source] tiercache_tier::TierError),
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
            MemError::Arena(_) => libc::ENOMEM,
            MemError::UnknownFile(_) => libc::EBADF,
            MemError::SpillHook(_) => libc::EBUSY,
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

/// How often a file's repeated write-back failure is logged at most.
pub(crate) const ERROR_LOG_EVERY: Duration = Duration::from_secs(60);

/// Rate limit of one file's write-back error log: the first failure is logged, then at most one
/// line per [`ERROR_LOG_EVERY`] with the number of failures not logged in between.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct ErrorLog {
    /// When the last line was logged (`None`: no failure since the last success).
    last: Option<Instant>,
    /// Failures since `last` that were not logged.
    suppressed: u64,
}

impl ErrorLog {
    /// Notes a failure at `now`. `Some(n)` when it is to be logged, `n` being the failures not
    /// logged since the previous line.
    pub(crate) fn failed(&mut self, now: Instant) -> Option<u64> {
        match self.last {
            Some(t) if now.saturating_duration_since(t) < ERROR_LOG_EVERY => {
                self.suppressed += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.suppressed))
            }
        }
    }

    /// Notes a success. `Some(n)` when it ends a run of failures, `n` of them not logged.
    pub(crate) fn succeeded(&mut self) -> Option<u64> {
        self.last
            .take()
            .map(|_| std::mem::take(&mut self.suppressed))
    }
}

/// `EBADF` for an operation on a file the tier does not know.
pub(crate) fn unknown_file(file: FileId) -> io::Error {
    MemError::UnknownFile(file).into()
}

#[cfg(test)]
mod tests {
    //! Write-back errors were logged every second per file forever: the log is rate limited.
    use super::*;

    #[test]
    fn repeated_write_back_errors_are_logged_once_a_minute_with_a_count() {
        let t0 = Instant::now();
        let mut l = ErrorLog::default();
        assert_eq!(l.failed(t0), Some(0), "the first failure is logged");
        for s in 1..60 {
            assert_eq!(l.failed(t0 + Duration::from_secs(s)), None);
        }
        assert_eq!(l.failed(t0 + Duration::from_secs(60)), Some(59));
        assert_eq!(l.failed(t0 + Duration::from_secs(61)), None);
        assert_eq!(
            l.succeeded(),
            Some(1),
            "recovery reports the unlogged failures"
        );
        assert_eq!(l.succeeded(), None, "nothing to report after a success");
        assert_eq!(
            l.failed(t0 + Duration::from_secs(62)),
            Some(0),
            "a new run of failures is logged at once"
        );
    }
}
