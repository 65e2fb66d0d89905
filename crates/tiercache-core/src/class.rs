//! Block classes (what the user says a block is worth) and pools (where a tier keeps it).

use crate::error::ParseError;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The class of a block, fixed by the file it belongs to. Priority blocks are those of files in
/// priority directories (paper 000).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Class {
    Priority,
    #[default]
    Normal,
}

impl Class {
    pub const ALL: [Class; 2] = [Class::Priority, Class::Normal];
    pub const COUNT: usize = Self::ALL.len();

    #[inline]
    pub const fn index(self) -> usize {
        match self {
            Class::Priority => 0,
            Class::Normal => 1,
        }
    }
    pub const fn as_str(self) -> &'static str {
        match self {
            Class::Priority => "priority",
            Class::Normal => "normal",
        }
    }
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Class {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "priority" => Ok(Class::Priority),
            "normal" => Ok(Class::Normal),
            _ => Err(ParseError::unknown("class", s, "priority|normal")),
        }
    }
}

/// A pool inside a tier. With partitioning, priority blocks live in `Protected` and the rest in
/// `Normal`; without it every block lives in `Normal`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PoolId {
    Protected,
    Normal,
}

impl PoolId {
    pub const ALL: [PoolId; 2] = [PoolId::Protected, PoolId::Normal];

    #[inline]
    pub const fn index(self) -> usize {
        match self {
            PoolId::Protected => 0,
            PoolId::Normal => 1,
        }
    }
    #[inline]
    pub const fn other(self) -> PoolId {
        match self {
            PoolId::Protected => PoolId::Normal,
            PoolId::Normal => PoolId::Protected,
        }
    }
    pub const fn as_str(self) -> &'static str {
        match self {
            PoolId::Protected => "protected",
            PoolId::Normal => "normal",
        }
    }
}
