//! Errors of the mount API.

use std::io;
use std::path::PathBuf;

/// Why mounting or unmounting failed. Messages are one line each.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum FuseError {
    /// BACKING does not exist.
    #[error("backing directory {0} does not exist")]
    BackingMissing(PathBuf),
    /// BACKING exists but is not a directory.
    #[error("backing path {0} is not a directory")]
    BackingNotDir(PathBuf),
    /// MOUNTPOINT does not exist.
    #[error("mount point {0} does not exist")]
    MountpointMissing(PathBuf),
    /// MOUNTPOINT exists but is not a directory.
    #[error("mount point {0} is not a directory")]
    MountpointNotDir(PathBuf),
    /// MOUNTPOINT contains entries.
    #[error("mount point {0} is not empty")]
    MountpointNotEmpty(PathBuf),
    /// Something is already mounted on MOUNTPOINT.
    #[error("mount point {0} is already a mount point")]
    AlreadyMounted(PathBuf),
    /// One directory lies inside the other (or they are the same).
    #[error(
        "mount point {mountpoint} and backing directory {backing} overlap (one contains the other)"
    )]
    Overlap {
        /// Canonical backing directory.
        backing: PathBuf,
        /// Canonical mount point.
        mountpoint: PathBuf,
    },
    /// A mount option is out of range.
    #[error("invalid mount option: {0}")]
    InvalidOption(String),
    /// `--backing-identity caller` asked of a daemon that does not run as root.
    #[error(
        "invalid mount option: backing identity 'caller' needs a daemon running as root \
         (CAP_SETUID, CAP_SETGID)"
    )]
    CallerIdentityNeedsRoot,
    /// `--backing-identity caller`, but the daemon cannot switch identities (a root without
    /// `CAP_SETUID`/`CAP_SETGID`).
    #[error("invalid mount option: backing identity 'caller': {0}")]
    CallerIdentityUnavailable(#[source] io::Error),
    /// A path could not be inspected.
    #[error("cannot access {path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// `--transport io-uring`, but the kernel does not serve this mount through rings.
    #[error("FUSE over io_uring for {mountpoint}: {why}")]
    NoRing {
        /// The mount point.
        mountpoint: PathBuf,
        /// What is missing, and how to get it.
        why: String,
    },
    /// The kernel refused the mount or the FUSE handshake failed.
    #[error("mounting FUSE on {path} failed: {source}")]
    Mount {
        /// The mount point.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// umount(2) failed for a reason other than the file system being busy.
    #[error("unmounting {path} failed: {source}")]
    Unmount {
        /// The mount point.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The file system was busy; it was detached lazily instead.
    #[error("{0} was busy and has been detached lazily; the session ends when the last open file is closed")]
    Busy(PathBuf),
    /// The FUSE session loop stopped with an error.
    #[error("FUSE session ended with an error: {0}")]
    Session(#[source] io::Error),
}
