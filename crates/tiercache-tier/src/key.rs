//! Block identity that survives a restart.
//!
//! A bare inode number is not an identity: inode numbers are reused, and a remount may see a
//! different file under the same number. [`FileKey`] adds the device and the inode's birth time
//! (`statx` `STATX_BTIME`; 0 where BACKING does not report one, e.g. NFS — then the content
//! `version` below is what tells versions apart). Every block a tier stores also carries the
//! `version` of its file's content the manager had when the block was stored (a fingerprint of
//! size, mtime, ctime and inode number at open; see `tiercache-manager`'s `stamp` and `versions`
//! and design.md §3): a lookup with another version is a miss, so a copy left from before a
//! change behind the cache's back is never served. The ctime is in it because an edit can put
//! size and mtime back (`touch -r`) but not the ctime, and Linux gives userspace no other change
//! counter (`STATX_CHANGE_COOKIE` is kernel-internal). The manager's own changes move the ctime
//! too; it records BACKING's stamp after each, and keeps the version across them, so they do not
//! make its files' copies misses (within a session: after a restart a file the cache changed
//! starts a new version).

use serde::Serialize;
use tiercache_core::BlockIndex;

/// Which file: BACKING's device, inode number and inode birth time (ns since the epoch, 0 when
/// unknown).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct FileKey {
    pub dev: u64,
    pub ino: u64,
    pub birth: u64,
}

/// Which block of which file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TierKey {
    pub file: FileKey,
    pub block: BlockIndex,
}

impl TierKey {
    pub const fn new(file: FileKey, block: u64) -> Self {
        Self {
            file,
            block: BlockIndex(block),
        }
    }
}
