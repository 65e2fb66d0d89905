//! How requests travel between the kernel and the daemon: `/dev/fuse` (a pool of request
//! threads reading one device) or FUSE over io_uring (one ring per CPU, each request answered
//! on the CPU that made it; the fork of fuser in `vendor/fuser` implements it).
//!
//! The ring needs Linux 6.14 or later with the fuse module's `enable_uring` parameter on
//! (`/sys/module/fuse/parameters/enable_uring`, off by default). `Auto` takes it when the
//! kernel offers it; `IoUring` refuses to mount without it.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

/// Where the kernel switch for the ring lives.
pub const ENABLE_URING_PARAM: &str = "/sys/module/fuse/parameters/enable_uring";

/// The transport a mount asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Transport {
    /// `/dev/fuse` only (default).
    #[default]
    DevFuse,
    /// FUSE over io_uring; mounting fails when the kernel does not offer it.
    IoUring,
    /// FUSE over io_uring when the kernel offers it, `/dev/fuse` otherwise.
    Auto,
}

impl Transport {
    /// The names the CLI and the configuration file use.
    pub const NAMES: [&'static str; 3] = ["dev-fuse", "io-uring", "auto"];

    /// The name of this transport, one of [`Self::NAMES`].
    pub fn name(self) -> &'static str {
        match self {
            Self::DevFuse => Self::NAMES[0],
            Self::IoUring => Self::NAMES[1],
            Self::Auto => Self::NAMES[2],
        }
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A transport name that is none of [`Transport::NAMES`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown transport '{0}' (expected one of: dev-fuse, io-uring, auto)")]
pub struct BadTransport(pub String);

impl FromStr for Transport {
    type Err = BadTransport;

    fn from_str(s: &str) -> Result<Self, BadTransport> {
        match s {
            "dev-fuse" => Ok(Self::DevFuse),
            "io-uring" => Ok(Self::IoUring),
            "auto" => Ok(Self::Auto),
            _ => Err(BadTransport(s.to_owned())),
        }
    }
}

/// Whether the kernel's switch for the ring is on: `Some(true)`/`Some(false)` from the module
/// parameter, `None` when the parameter does not exist (no ring support in this kernel, or
/// the fuse module not loaded yet).
pub fn kernel_ring_switch() -> Option<bool> {
    let v = std::fs::read_to_string(ENABLE_URING_PARAM).ok()?;
    Some(matches!(v.trim(), "Y" | "y" | "1"))
}

/// The transport figures of a mount (`transport` in `stats --json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct TransportStats {
    /// `"io_uring"` when the rings serve requests, `"dev_fuse"` otherwise.
    pub kind: &'static str,
    /// Ring queues (one per possible CPU) set up for the mount, also when it fell back to
    /// `/dev/fuse` after; 0 when it did not ask for the rings.
    pub queues: usize,
    /// Requests served through the rings since the mount.
    pub ring_requests: u64,
    /// Of those, replies made by I/O workers and handed to the ring's thread.
    pub ring_worker_replies: u64,
    /// Ring entries replaced after the kernel refused a commit (0 unless something is wrong).
    pub ring_entries_replaced: u64,
}

/// Reads a mount's transport figures; cheap to clone and keep.
#[derive(Debug, Clone, Default)]
pub struct TransportReader(pub(crate) Option<Arc<fuser::UringStats>>);

impl TransportReader {
    /// The figures now.
    pub fn stats(&self) -> TransportStats {
        match &self.0 {
            // The counters are kept also after a fall back: they only ever grow.
            Some(s) => TransportStats {
                kind: if s.active() { "io_uring" } else { "dev_fuse" },
                queues: s.queues(),
                ring_requests: s.requests(),
                ring_worker_replies: s.worker_replies(),
                ring_entries_replaced: s.entries_replaced(),
            },
            None => TransportStats {
                kind: "dev_fuse",
                queues: 0,
                ring_requests: 0,
                ring_worker_replies: 0,
                ring_entries_replaced: 0,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_bad_names_say_what_is_expected() {
        for name in Transport::NAMES {
            assert_eq!(name.parse::<Transport>().map(Transport::name), Ok(name));
        }
        let e = "uring".parse::<Transport>().unwrap_err().to_string();
        assert!(e.contains("'uring'") && e.contains("io-uring"), "{e}");
    }

    #[test]
    fn a_mount_without_rings_reports_dev_fuse() {
        let s = TransportReader::default().stats();
        assert_eq!((s.kind, s.queues, s.ring_requests), ("dev_fuse", 0, 0));
    }
}
