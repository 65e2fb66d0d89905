//! [`BenchError`]: why a benchmark scenario stopped. The CLI prints it as one line; the kind and
//! the underlying error stay available to callers (`source()`).

use std::io;

/// Why a benchmark scenario could not finish. Display is the one line the CLI prints.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    /// A system call or file operation failed; `what` names the operation and the path or
    /// program it concerned.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    /// A program's JSON output (fio, `tiercache stats --json`) or our own report could not be
    /// parsed or written.
    #[error("{what}: {source}")]
    Json {
        what: String,
        #[source]
        source: serde_json::Error,
    },
    /// A flag's value is not usable; `flag` is spelt without the dashes.
    #[error("--{flag}: {reason}")]
    Flag { flag: String, reason: String },
    /// The zero-copy client failed; `what` names the call.
    #[error("{what}: {source}")]
    Client {
        what: String,
        #[source]
        source: tiercache_client::Error,
    },
    /// A program the scenario runs is missing or failed (`what` says which and how).
    #[error("{0}")]
    Tool(String),
    /// What the scenario observed does not let it go on: a mount that did not come up, a short
    /// read, a cleaner that did not settle, a result that failed its own check.
    #[error("{0}")]
    Scenario(String),
}

impl BenchError {
    /// An I/O error with what it concerned.
    pub(crate) fn io(what: impl Into<String>, source: io::Error) -> Self {
        Self::Io {
            what: what.into(),
            source,
        }
    }

    /// A JSON error with what it concerned.
    pub(crate) fn json(what: impl Into<String>, source: serde_json::Error) -> Self {
        Self::Json {
            what: what.into(),
            source,
        }
    }

    /// A flag value that cannot be used.
    pub(crate) fn flag(flag: impl Into<String>, reason: impl ToString) -> Self {
        Self::Flag {
            flag: flag.into(),
            reason: reason.to_string(),
        }
    }

    /// A zero-copy client error with the call it came from.
    pub(crate) fn client(what: impl Into<String>, source: tiercache_client::Error) -> Self {
        Self::Client {
            what: what.into(),
            source,
        }
    }

    /// A program that is missing or failed.
    pub(crate) fn tool(what: impl Into<String>) -> Self {
        Self::Tool(what.into())
    }

    /// A scenario that cannot go on.
    pub(crate) fn scenario(what: impl Into<String>) -> Self {
        Self::Scenario(what.into())
    }
}
