//! Newtype identifiers: which file, which block of it, which cache slot.

use serde::{Deserialize, Serialize};

/// A file known to the cache. In the simulator this is a stream or trace volume number; in the
/// live mount it is the backing inode number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FileId(pub u64);

/// Index of a block within its file (byte offset / block size).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct BlockIndex(pub u64);

/// The cache key: one block of one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct BlockKey {
    pub file: FileId,
    pub block: BlockIndex,
}

impl BlockKey {
    pub const fn new(file: u64, block: u64) -> Self {
        Self {
            file: FileId(file),
            block: BlockIndex(block),
        }
    }
}

/// A resident-block slot inside one tier, `0..capacity`. Slot numbers are dense and stable while a
/// block is resident, so the live cache uses them directly as indices into its data arena.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SlotId(pub u32);

impl SlotId {
    #[inline]
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

/// Block size in bytes: a power of two between 512 B and 1 MiB.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockSize(u32);

impl BlockSize {
    pub const DEFAULT: BlockSize = BlockSize(4096);

    /// Returns `None` unless `bytes` is a power of two in `512..=1 MiB`.
    pub fn new(bytes: u64) -> Option<Self> {
        if bytes.is_power_of_two() && (512..=1 << 20).contains(&bytes) {
            Some(Self(bytes as u32))
        } else {
            None
        }
    }
    pub const fn bytes(self) -> u64 {
        self.0 as u64
    }
    pub const fn shift(self) -> u32 {
        self.0.trailing_zeros()
    }
    /// The block containing byte `offset`.
    pub const fn block_of(self, offset: u64) -> BlockIndex {
        BlockIndex(offset >> self.shift())
    }
}

impl Default for BlockSize {
    fn default() -> Self {
        Self::DEFAULT
    }
}
