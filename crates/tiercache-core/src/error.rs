//! Errors of the engine layer.

use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum CoreError {
    /// A configuration value is out of range; names the parameter.
    #[error("{param}: {reason}")]
    InvalidConfig { param: &'static str, reason: String },
    /// Every candidate victim is pinned or dirty: the caller should clean or wait, then retry.
    #[error("no evictable block in tier `{tier}`: retry after writeback")]
    Retry { tier: String },
}

/// A structural invariant that does not hold, found by a `check_invariants` (tests and debug
/// checks); says which.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invariant broken: {0}")]
pub struct InvariantViolation(pub String);

impl From<String> for InvariantViolation {
    fn from(s: String) -> Self {
        Self(s)
    }
}

impl From<&str> for InvariantViolation {
    fn from(s: &str) -> Self {
        Self(s.to_string())
    }
}

impl CoreError {
    pub fn config(param: &'static str, reason: impl Into<String>) -> Self {
        CoreError::InvalidConfig {
            param,
            reason: reason.into(),
        }
    }
}
