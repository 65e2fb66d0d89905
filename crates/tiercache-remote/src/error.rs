//! [`RemoteError`]: what can go wrong setting up or talking to the remote tier.

use std::io;
use std::path::PathBuf;

/// Errors of the remote tier's setup (addresses, key file) and of its protocol client.
///
/// On the request path a remote failure is never passed to the caller: it is counted and the
/// read becomes a miss (see [`crate::RemoteTier`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RemoteError {
    /// A server address or a `memcached://` URL that cannot be used; names the bad part.
    #[error("bad memcached address {addr:?}: {why}")]
    BadAddress { addr: String, why: String },
    /// The configuration is unusable (no servers, zero block size, …).
    #[error("remote tier config: {0}")]
    Config(String),
    /// The key file is missing, unreadable, malformed or accessible by group/other.
    #[error("key file {}: {why}", path.display())]
    KeyFile { path: PathBuf, why: String },
    /// Network I/O with a server failed or timed out.
    #[error("memcached {server}: {source}")]
    Io {
        server: String,
        #[source]
        source: io::Error,
    },
    /// The server sent something the protocol does not allow here (the connection is dropped).
    #[error("memcached {server}: protocol error: {source}")]
    Protocol {
        server: String,
        #[source]
        source: crate::proto::ProtoError,
    },
    /// The server answered `SERVER_ERROR`, `CLIENT_ERROR` or `ERROR`.
    #[error("memcached {server}: {msg}")]
    Server { server: String, msg: String },
}
