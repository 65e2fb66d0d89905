//! How a mount serves, from its flags and config file: the kernel's cache timeouts, whose
//! rights BACKING is asked with, and how requests travel (`--transport`); the metrics address
//! and thread counts are checked here. Every error names the flag or the key, in one line.

use super::mount::Source;
use crate::live::config::MountOptions;
use crate::live::error::ConfigError;
use std::time::Duration;

/// How the mount serves: kernel cache timeouts and whose rights BACKING is asked with (the
/// metrics address and thread counts are checked here and used as given).
pub(super) struct Serving {
    pub(super) entry_timeout: Duration,
    pub(super) attr_timeout: Duration,
    pub(super) backing_identity: tiercache_fuse::BackingIdentity,
    pub(super) transport: tiercache_fuse::Transport,
}

/// Checks `metrics`, `threads`, `io_workers`, the timeouts, `backing_identity` and
/// `transport`.
pub(super) fn serving(
    o: &MountOptions,
    flags: &MountOptions,
    src: &Source<'_>,
) -> Result<Serving, ConfigError> {
    if let Some(addr) = &o.metrics {
        addr.parse::<std::net::SocketAddr>().map_err(|_| {
            ConfigError::bad(
                src.of("metrics", flags.metrics.is_some()),
                format!("`{addr}` is not an address like 127.0.0.1:9477"),
            )
        })?;
    }
    if let Some(t) = o.threads {
        if !(1..=256).contains(&t) {
            return Err(ConfigError::bad(
                src.of("threads", flags.threads.is_some()),
                format!("{t} is outside 1..=256"),
            ));
        }
    }
    if let Some(n) = o.io_workers {
        if n > 1024 {
            return Err(ConfigError::bad(
                src.of("io-workers", flags.io_workers.is_some()),
                format!("{n} is outside 0..=1024"),
            ));
        }
    }
    let timeout = |secs: Option<f64>, from_flag: bool, name: &str| {
        let secs = secs.unwrap_or(1.0);
        if !(0.0..=86_400.0).contains(&secs) {
            return Err(ConfigError::bad(
                src.of(name, from_flag),
                format!("{secs} is outside 0..=86400 seconds"),
            ));
        }
        Ok(Duration::from_secs_f64(secs))
    };
    let entry_timeout = timeout(
        o.entry_timeout,
        flags.entry_timeout.is_some(),
        "entry-timeout",
    )?;
    let attr_timeout = timeout(o.attr_timeout, flags.attr_timeout.is_some(), "attr-timeout")?;
    let backing_identity = match o.backing_identity.as_deref() {
        None | Some("auto") => tiercache_fuse::BackingIdentity::Auto,
        Some("caller") => tiercache_fuse::BackingIdentity::Caller,
        Some("daemon") => tiercache_fuse::BackingIdentity::Daemon,
        Some(other) => {
            return Err(ConfigError::bad(
                src.of("backing-identity", flags.backing_identity.is_some()),
                format!("`{other}` is not auto, caller or daemon"),
            ))
        }
    };
    let transport = match o.transport.as_deref() {
        None => tiercache_fuse::Transport::default(),
        Some(t) => t.parse().map_err(|e: tiercache_fuse::BadTransport| {
            ConfigError::bad(
                src.of("transport", flags.transport.is_some()),
                e.to_string(),
            )
        })?,
    };
    Ok(Serving {
        entry_timeout,
        attr_timeout,
        backing_identity,
        transport,
    })
}
