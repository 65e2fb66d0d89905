//! Block classes (what the user says a block is worth) and pools (where a tier keeps it).
//!
//! A class is a small index into the tier's class table (`partition::ClassTable`), which gives
//! it a name, a hit-ratio target and bounds. Two indices are fixed: [`Class::PRIORITY`] (paper
//! 000's priority directories) and [`Class::NORMAL`] (every file in no class). A pool has the
//! index of the class it was made for; classes without a pool of their own share
//! [`PoolId::NORMAL`], the rest pool.

use crate::error::ParseError;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// The most classes (and so pools) a tier has; a power of two (indices are masked with it).
pub const MAX_CLASSES: usize = 8;
const _: () = assert!(MAX_CLASSES.is_power_of_two());

/// The class of a block, fixed by the file it belongs to. Invariant: `index() < MAX_CLASSES`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Class(u8);

impl Default for Class {
    fn default() -> Self {
        Class::NORMAL
    }
}

impl Class {
    /// Files in priority directories (paper 000's protected class).
    pub const PRIORITY: Class = Class(0);
    /// Files in no class.
    pub const NORMAL: Class = Class(1);
    /// The two classes every table has, in index order.
    pub const BUILT_IN: [Class; 2] = [Class::PRIORITY, Class::NORMAL];

    /// The class with index `i`, if below [`MAX_CLASSES`].
    pub const fn new(i: usize) -> Option<Class> {
        if i < MAX_CLASSES {
            Some(Class(i as u8))
        } else {
            None
        }
    }
    /// Every possible class, in index order.
    pub fn all() -> impl Iterator<Item = Class> {
        (0..MAX_CLASSES as u8).map(Class)
    }
    /// The index, below [`MAX_CLASSES`] (the mask restates the type's invariant so that indexing
    /// an array of `MAX_CLASSES` needs no bounds check on the hot path).
    #[inline]
    pub const fn index(self) -> usize {
        (self.0 as usize) & (MAX_CLASSES - 1)
    }
    /// The name a class has when no table names it: `priority`, `normal`, `class2`, ….
    pub const fn as_str(self) -> &'static str {
        const NAMES: [&str; MAX_CLASSES] = [
            "priority", "normal", "class2", "class3", "class4", "class5", "class6", "class7",
        ];
        NAMES[self.0 as usize]
    }
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Class {
    type Err = ParseError;
    /// A class's default name (`priority`, `normal`, `classN`); named classes are looked up in
    /// a table instead.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Class::all()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| ParseError::unknown("class", s, "priority|normal|class2..class7"))
    }
}

impl Serialize for Class {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Class {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A pool inside a tier: index `k` holds class `k`'s blocks when that class has a pool of its
/// own; [`PoolId::NORMAL`] holds the rest. Without partitioning every block is in `NORMAL`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PoolId(u8);

impl PoolId {
    /// Paper 000's protected pool: the priority class's own.
    pub const PROTECTED: PoolId = PoolId(0);
    /// The rest pool.
    pub const NORMAL: PoolId = PoolId(1);
    /// The two pools every partitioned tier has, in index order.
    pub const BUILT_IN: [PoolId; 2] = [PoolId::PROTECTED, PoolId::NORMAL];

    /// The pool made for `class` (whether or not the class uses it).
    #[inline]
    pub const fn own(class: Class) -> PoolId {
        PoolId(class.0)
    }
    /// The pool with index `i`, if below [`MAX_CLASSES`].
    pub const fn new(i: usize) -> Option<PoolId> {
        if i < MAX_CLASSES {
            Some(PoolId(i as u8))
        } else {
            None
        }
    }
    /// The index, below [`MAX_CLASSES`] (masked as [`Class::index`] is).
    #[inline]
    pub const fn index(self) -> usize {
        (self.0 as usize) & (MAX_CLASSES - 1)
    }
    /// The class this pool was made for.
    pub const fn class(self) -> Class {
        Class(self.0)
    }
    pub const fn as_str(self) -> &'static str {
        const NAMES: [&str; MAX_CLASSES] = [
            "protected",
            "normal",
            "pool2",
            "pool3",
            "pool4",
            "pool5",
            "pool6",
            "pool7",
        ];
        NAMES[self.0 as usize]
    }
}

impl fmt::Display for PoolId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for PoolId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}
