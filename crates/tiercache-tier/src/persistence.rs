//! The [`Persistence`] trait: what a tier that survives a restart keeps besides its blocks —
//! the meta of each file with dirty blocks (so that after a crash they can be written to the
//! right BACKING file, up to the right size, with the right mtime) and, at open, the files it
//! found with dirty blocks. Offered through
//! [`DataTier::persistence`](crate::DataTier::persistence) by exactly the tiers with
//! [`TierInfo::persistent`](crate::TierInfo::persistent).

use crate::key::FileKey;

/// Longest file handle kept (`MAX_HANDLE_SZ` of Linux).
pub const MAX_HANDLE_BYTES: usize = 128;

/// A `name_to_handle_at` handle of a BACKING file: opens it again by `open_by_handle_at`
/// after a crash, without its path (renames do not change it).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FileHandle {
    /// `handle_type` (file-system specific).
    pub kind: i32,
    /// `f_handle`, at most [`MAX_HANDLE_BYTES`].
    pub bytes: Vec<u8>,
}

/// What a persistent tier keeps durable with a file's dirty blocks, so that after a crash they
/// can be written to the right BACKING file, up to the right size, with the right mtime.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FileMeta {
    /// Logical size: may exceed BACKING's while appended blocks are only in the tier.
    pub size: u64,
    /// Logical modification time (the time of the last write), ns since the epoch.
    pub mtime_ns: i64,
    pub handle: FileHandle,
}

/// A file whose dirty blocks a persistent tier found when it was opened after a restart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveredFile {
    pub file: FileKey,
    /// Content version of its dirty blocks (for [`Cleaning::read_dirty`](crate::Cleaning::read_dirty)).
    pub version: u64,
    /// The newest meta made durable with them (`None`: none was, e.g. written by a manager
    /// that did not keep any).
    pub meta: Option<FileMeta>,
    pub dirty_blocks: u64,
}

/// A persistent tier's file meta and recovery list. Object safe: handed out as
/// `&dyn Persistence` by [`DataTier::persistence`](crate::DataTier::persistence).
pub trait Persistence: Send + Sync {
    /// Keeps `meta` with the dirty blocks of `file`, durable at the tier's next
    /// [`DataTier::sync`](crate::DataTier::sync) (newest call wins); dropped once the file has
    /// no dirty block there. The manager calls it before storing a file's dirty blocks and
    /// whenever its size or mtime changes while it has some. A tier that stores no dirty block
    /// (one opened only to be drained) may ignore it.
    fn set_file_meta(&self, file: &FileKey, meta: &FileMeta);
    /// Files with dirty blocks found when the tier was opened (before the manager stored
    /// anything), to be cleaned before the mount is served.
    fn recovered_files(&self) -> Vec<RecoveredFile>;
}
