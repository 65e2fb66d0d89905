//! The named values that pass between the write-back pipeline's stages — snapshot
//! (`writeback`, `lower_wb`), store below (`lower_wb`), runs to BACKING (`backing_write`),
//! commit — and the file meta a persistent tier keeps with a file's dirty blocks. A leaf
//! module: it imports no other module of the manager.

use std::io;
use std::time::SystemTime;
use tiercache_core::{Class, FileId, SlotId};
use tiercache_tier::{FileHandle, FileKey, FileMeta};

/// Which file a write-back batch belongs to, here (`file`) and below (`fkey`, `version`,
/// `class`: the persistent identity every tier keys the file's blocks by).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ident {
    pub file: FileId,
    pub fkey: FileKey,
    pub version: u64,
    pub class: Class,
}

/// A dirty block of memory in a write-back: its index, its slot and the slot's dirty
/// sequence at the snapshot. Invariant: the slot is pinned from the snapshot until the
/// commit (or, for an older copy below to discard, until that discard), so it still holds
/// this block; its bytes are the snapshot's only while the sequence has not moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DirtySlot {
    pub block: u64,
    pub slot: SlotId,
    pub seq: u64,
}

/// What storing a snapshot's dirty blocks into the tier below did: `stored` there (dirty
/// below from now on), and the `rest`, turned down, for BACKING. Together they are the
/// snapshot's list, each in its order.
#[derive(Debug, Default)]
pub(crate) struct StoredBelow {
    pub stored: Vec<DirtySlot>,
    pub rest: Vec<DirtySlot>,
}

/// A block a cleaning of the lower tier took to BACKING: its index and its dirty sequence
/// below when it was read (`None`: the tier had lost it — nothing was written). Marked clean
/// below only if that sequence still holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CleanedBlock {
    pub block: u64,
    pub seq: Option<u64>,
}

/// What a run writer did (`backing_write`): the record of each block written, or counted as
/// written (past EOF; lost below), in the order they were done; the end of the furthest
/// byte written (0: none); and the error that stopped it. Invariant: a block whose bytes did
/// not reach BACKING is not in `done` (it stays dirty).
#[derive(Debug)]
pub(crate) struct RunsWritten<D> {
    pub done: Vec<D>,
    pub wrote_end: u64,
    pub err: Option<io::Error>,
}

impl<D> RunsWritten<D> {
    /// Nothing written: `err` stopped it before the first run.
    pub(crate) fn failed(err: io::Error) -> Self {
        RunsWritten {
            done: Vec::new(),
            wrote_end: 0,
            err: Some(err),
        }
    }
}

/// The meta a persistent tier keeps with a file's dirty blocks.
pub(crate) fn file_meta(size: u64, mtime: SystemTime, handle: FileHandle) -> FileMeta {
    let mtime_ns = match mtime.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_nanos()).unwrap_or(i64::MAX),
    };
    FileMeta {
        size,
        mtime_ns,
        handle,
    }
}
