//! The daemon's errors: [`ConfigError`] for settings that are not valid (what was wrong and
//! where: the file and line, the key or the flag), [`DaemonError`] for starting and serving a
//! mount (the underlying error kept as the source: I/O with the path it concerns, the memory
//! tier's, the flash and remote tiers', FUSE's, a reload's). Their `Display` is the one-line
//! message the command line prints; `cmd/` turns them into it (`From<_> for String`).

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

/// A setting that is not valid: a config file that cannot be read or parsed, or a value given
/// in it or by a flag. The place (`FILE:LINE`, `--flag`, `key (FILE)`) wraps the reason as
/// [`ConfigError::At`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The config file cannot be read.
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The config file is not TOML, or has a key or value type the settings do not take.
    #[error("{}:{line}: {message}", path.display())]
    Syntax {
        path: PathBuf,
        line: usize,
        message: String,
    },
    /// BACKING or MOUNTPOINT is not a directory this process can use (`what`: which one).
    #[error("{what} {}: {}", path.display(), os_text(source))]
    Dir {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A value that is not valid by itself: the reason, without where it was given.
    #[error("{0}")]
    Invalid(String),
    /// `source`, for the value given at `at`.
    #[error("{at}: {source}")]
    At {
        at: String,
        #[source]
        source: Box<ConfigError>,
    },
}

impl ConfigError {
    /// A value that is not valid, for `reason`.
    pub fn invalid(reason: impl Into<String>) -> ConfigError {
        ConfigError::Invalid(reason.into())
    }

    /// The value at `at` (`FILE:LINE`, `--flag`, ...) is not valid, for `reason`.
    pub fn bad(at: impl Into<String>, reason: impl Into<String>) -> ConfigError {
        ConfigError::invalid(reason).at(at)
    }

    /// This error, for the value given at `at`.
    pub fn at(self, at: impl Into<String>) -> ConfigError {
        ConfigError::At {
            at: at.into(),
            source: Box::new(self),
        }
    }

    /// The error under every [`ConfigError::At`]: what was wrong, past where.
    pub fn root(&self) -> &ConfigError {
        match self {
            ConfigError::At { source, .. } => source.root(),
            e => e,
        }
    }
}

impl From<ConfigError> for String {
    fn from(e: ConfigError) -> String {
        e.to_string()
    }
}

/// An I/O error's text without its `(os error N)`.
fn os_text(e: &io::Error) -> String {
    let text = e.to_string();
    text.split(" (os error").next().unwrap_or(&text).to_string()
}

/// `what: ` before a source's message, or nothing when `what` is empty.
fn lead(what: &str) -> String {
    if what.is_empty() {
        String::new()
    } else {
        format!("{what}: ")
    }
}

/// Why a mount could not start, or a request to the running daemon failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DaemonError {
    /// A setting is not valid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A system call on `what` (a path, the control socket, ...) failed.
    #[error("{}{source}", lead(what))]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    /// Mounting, unmounting or serving the FUSE file system failed.
    #[error(transparent)]
    Fuse(#[from] tiercache_fuse::FuseError),
    /// The memory tier refused its settings or failed.
    #[error(transparent)]
    Memory(#[from] tiercache_manager::MemError),
    /// A test tier could not be built.
    #[error(transparent)]
    Core(#[from] tiercache_core::CoreError),
    /// A flash tier's cache (`what`: its path and the step) failed.
    #[error("{}{source}", lead(what))]
    Flash {
        what: String,
        #[source]
        source: tiercache_flash::FlashError,
    },
    /// Writing a persistent tier's dirty blocks to BACKING before the mount failed.
    #[error("{}{source}", lead(what))]
    Recovery {
        what: String,
        #[source]
        source: tiercache_manager::RecoverError,
    },
    /// A remote tier's key or servers.
    #[error("{}{source}", lead(what))]
    Remote {
        what: String,
        #[source]
        source: tiercache_remote::RemoteError,
    },
    /// A reload was refused.
    #[error(transparent)]
    Reload(#[from] super::reload::ReloadError),
    /// BACKING cannot name its files by handle (a write-back flash tier needs it).
    #[error(
        "BACKING {} has no file handles (name_to_handle_at: {source}); a write-back flash tier \
         needs them to find its files after a crash: use --flash-mode writethrough or \
         writearound",
        backing.display()
    )]
    NoFileHandles {
        backing: PathBuf,
        #[source]
        source: io::Error,
    },
    /// BACKING's files cannot be reopened by handle (a write-back flash tier needs it).
    #[error(
        "cannot reopen files of BACKING {} by handle (open_by_handle_at: {source}; it needs \
         CAP_DAC_READ_SEARCH: run tiercache as root), which a write-back flash tier needs \
         after a crash: use --flash-mode writethrough or writearound",
        backing.display()
    )]
    NoOpenByHandle {
        backing: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The pid file of the mount point is locked by another daemon.
    #[error(
        "{}: cannot lock {} ({source}); another tiercache may be starting on it",
        mountpoint.display(),
        pid_file.display()
    )]
    PidLock {
        mountpoint: PathBuf,
        pid_file: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The zero-copy service's abstract socket `@name` is taken (or cannot be bound).
    #[error("--zero-copy: cannot bind @{name} ({source}; is this mount point already served?)")]
    ZeroCopyBind {
        name: String,
        #[source]
        source: io::Error,
    },
    /// A condition that stops the mount or refuses a request, with no error beneath it (the
    /// mount point is served already, a BACKING overlaps another mount's, files are open...).
    #[error("{0}")]
    Refused(String),
    /// `source`, concerning `what`.
    #[error("{what}: {source}")]
    Context {
        what: String,
        #[source]
        source: Box<DaemonError>,
    },
    /// The outcome of a stop, as told to each `tiercache unmount` waiting for it.
    #[error(transparent)]
    Shared(Arc<DaemonError>),
}

impl DaemonError {
    /// A failed system call on `what`.
    pub fn io(what: impl Into<String>, source: io::Error) -> DaemonError {
        DaemonError::Io {
            what: what.into(),
            source,
        }
    }

    /// A condition with no error beneath it.
    pub fn refused(why: impl Into<String>) -> DaemonError {
        DaemonError::Refused(why.into())
    }

    /// This error, concerning `what`.
    pub fn context(self, what: impl Into<String>) -> DaemonError {
        DaemonError::Context {
            what: what.into(),
            source: Box::new(self),
        }
    }
}

impl From<DaemonError> for String {
    fn from(e: DaemonError) -> String {
        e.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_wrap_the_reason_and_root_finds_it() {
        let e = ConfigError::invalid("`x` is not a size")
            .at("size")
            .at("f.toml:3");
        assert_eq!(e.to_string(), "f.toml:3: size: `x` is not a size");
        assert!(matches!(e.root(), ConfigError::Invalid(r) if r == "`x` is not a size"));
        let d = ConfigError::Dir {
            what: "BACKING",
            path: "/nope".into(),
            source: io::Error::from_raw_os_error(libc::ENOENT),
        };
        assert_eq!(d.to_string(), "BACKING /nope: No such file or directory");
        assert!(std::error::Error::source(&d).is_some());
    }

    #[test]
    fn daemon_io_keeps_its_source_and_an_empty_what_adds_nothing() {
        let e = DaemonError::io("", io::Error::other("boom"));
        assert_eq!(e.to_string(), "boom");
        let e = DaemonError::io("/x", io::Error::other("boom")).context("the mount lock /y");
        assert_eq!(e.to_string(), "the mount lock /y: /x: boom");
        assert!(std::error::Error::source(&e).is_some());
    }
}
