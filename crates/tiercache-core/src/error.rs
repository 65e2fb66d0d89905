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

/// A value given as text (a flag, a config key, a workload term) that does not parse: the
/// text, and what would have been accepted.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ParseError {
    /// Not one of a fixed set of names.
    #[error("unknown {what} `{value}` (expected {expected})")]
    Unknown {
        what: &'static str,
        value: String,
        expected: &'static str,
    },
    /// The right kind of value, but not a valid one.
    #[error("`{value}`: {why}")]
    Invalid { value: String, why: String },
    /// A compound value (`what` `value`, e.g. a tier `NAME:BLOCKS:POLICY`) with a wrong part.
    #[error("{what} `{value}`: {why}")]
    InvalidIn {
        what: &'static str,
        value: String,
        why: String,
    },
    /// A part of a compound value did not parse.
    #[error("{what} `{value}`: {source}")]
    Part {
        what: &'static str,
        value: String,
        #[source]
        source: Box<ParseError>,
    },
}

impl ParseError {
    pub fn unknown(what: &'static str, value: &str, expected: &'static str) -> Self {
        ParseError::Unknown {
            what,
            value: value.to_string(),
            expected,
        }
    }
    pub fn invalid(value: &str, why: impl Into<String>) -> Self {
        ParseError::Invalid {
            value: value.to_string(),
            why: why.into(),
        }
    }
    pub fn invalid_in(what: &'static str, value: &str, why: impl Into<String>) -> Self {
        ParseError::InvalidIn {
            what,
            value: value.to_string(),
            why: why.into(),
        }
    }
    pub fn part(what: &'static str, value: &str, source: ParseError) -> Self {
        ParseError::Part {
            what,
            value: value.to_string(),
            source: Box::new(source),
        }
    }
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
