//! [`RemoteConfig`] and the `memcached://` URL.

use crate::error::RemoteError;
use crate::keyfile::RemoteKey;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

/// How a [`crate::RemoteTier`] is built. [`RemoteConfig::new`] fills in the defaults.
#[derive(Debug, Clone)]
pub struct RemoteConfig {
    pub name: String,
    /// `host:port` of each memcached server (`[v6addr]:port` for IPv6); at most 255.
    pub servers: Vec<String>,
    /// Isolates clients sharing a pool: part of every key name and of every value's
    /// authenticated data. Default `"tiercache"` (the mount's default too).
    pub namespace: String,
    pub key: RemoteKey,
    /// Default 4096. Every server's `item_size_max` (`-I`) must hold a block's item (block +
    /// value overhead + key + memcached's item header); [`crate::RemoteTier::connect`]
    /// refuses a server that answers with a smaller one.
    pub block_size: usize,
    /// Index bound. `None` (default): from the servers' memory (`-m`, `stats settings`
    /// `maxbytes`, = `limit_maxbytes`) at connect (64 MiB per server when none answers),
    /// capped at what 1/16 of this host's physical memory can index (with a warning).
    pub capacity_blocks: Option<u64>,
    /// Per request, connect included. Default 50 ms. For the background worker one request is
    /// one pipelined batch (values up to 256 KiB in all, or a single larger value), so the
    /// timeout must cover sending that batch.
    pub timeout: Duration,
    /// Consecutive failures or timeouts that eject a server. Default 2.
    pub eject_after: u32,
    /// How long an ejected server is left alone before it is probed. Default 2 s.
    pub retry_after: Duration,
    /// Stores and deletes waiting for the background worker (queued or being sent); a store
    /// finding the queue full is rejected without touching the index, a delete dropped.
    /// Default 1024.
    pub queue_depth: usize,
}

impl RemoteConfig {
    /// A config with the defaults documented on each field (namespace `"tiercache"`).
    pub fn new(name: impl Into<String>, servers: Vec<String>, key: RemoteKey) -> Self {
        Self {
            name: name.into(),
            servers,
            namespace: "tiercache".to_string(),
            key,
            block_size: 4096,
            capacity_blocks: None,
            timeout: Duration::from_millis(50),
            eject_after: 2,
            retry_after: Duration::from_secs(2),
            queue_depth: 1024,
        }
    }
}

fn bad(addr: &str, why: impl Into<String>) -> RemoteError {
    RemoteError::BadAddress {
        addr: addr.to_string(),
        why: why.into(),
    }
}

/// Parses `memcached://HOST:PORT[,HOST:PORT...]` into `host:port` strings (IPv6 as
/// `[addr]:port`). The error names the bad part.
pub fn parse_url(s: &str) -> Result<Vec<String>, RemoteError> {
    let rest = s
        .strip_prefix("memcached://")
        .ok_or_else(|| bad(s, "expected memcached://HOST:PORT[,HOST:PORT...]"))?;
    if rest.is_empty() {
        return Err(bad(s, "no servers listed"));
    }
    rest.split(',')
        .map(|part| check_addr(part).map(|()| part.to_string()))
        .collect()
}

/// Checks the syntax of one `host:port` (no name lookup).
pub fn check_addr(a: &str) -> Result<(), RemoteError> {
    if a.is_empty() {
        return Err(bad(a, "empty server address"));
    }
    if a.starts_with('[') {
        return match a.parse::<SocketAddr>() {
            Ok(SocketAddr::V6(v6)) if v6.port() != 0 => Ok(()),
            _ => Err(bad(a, "expected [IPv6]:PORT")),
        };
    }
    let (host, port) = a.rsplit_once(':').ok_or_else(|| bad(a, "missing :PORT"))?;
    if host.contains(':') {
        return Err(bad(a, "put an IPv6 address in brackets: [ADDR]:PORT"));
    }
    if host.is_empty()
        || !host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b'_')
    {
        return Err(bad(a, "bad host name"));
    }
    match port.parse::<u16>() {
        Ok(p) if p != 0 => Ok(()),
        _ => Err(bad(a, format!("bad port {port:?}"))),
    }
}

/// Checks and resolves one `host:port` to its first socket address.
pub fn resolve(a: &str) -> Result<SocketAddr, RemoteError> {
    check_addr(a)?;
    a.to_socket_addrs()
        .map_err(|e| bad(a, format!("cannot resolve: {e}")))?
        .next()
        .ok_or_else(|| bad(a, "resolves to no address"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(
            parse_url("memcached://10.0.0.5:11211,10.0.0.6:11211").unwrap(),
            vec!["10.0.0.5:11211", "10.0.0.6:11211"]
        );
        assert_eq!(
            parse_url("memcached://[::1]:11211,localhost:2").unwrap(),
            vec!["[::1]:11211", "localhost:2"]
        );
        for (url, part) in [
            ("http://a:1", "http://a:1"),
            ("memcached://", "memcached://"),
            ("memcached://a:1,b", "b"),
            ("memcached://a:1,", ""),
            ("memcached://a:0", "a:0"),
            ("memcached://a:x", "a:x"),
            ("memcached://::1:5", "::1:5"),
            ("memcached://[::1]", "[::1]"),
            ("memcached://a b:1", "a b:1"),
            ("memcached://a:1/", "a:1/"),
        ] {
            match parse_url(url) {
                Err(RemoteError::BadAddress { addr, .. }) => assert_eq!(addr, part, "{url}"),
                other => panic!("{url}: {other:?}"),
            }
        }
    }

    #[test]
    fn default_namespace_is_the_mounts() {
        let cfg = RemoteConfig::new("r", vec![], RemoteKey::from_bytes([0; 32]));
        assert_eq!(cfg.namespace, "tiercache");
    }

    #[test]
    fn resolves_loopback() {
        assert!(resolve("127.0.0.1:11211").is_ok());
        assert!(resolve("[::1]:11211").is_ok());
    }
}
