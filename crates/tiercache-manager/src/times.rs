//! Logical file times: what `stat` must show while BACKING's own times are the tier's doing.
//!
//! Natively a write sets mtime and ctime at once. Through the tier a write lands in memory and
//! reaches BACKING later, and that `pwrite` moves BACKING's mtime and ctime to the write-back
//! time. Readers must not see that: `make`, `rsync` and `git` compare mtimes, and `tar` fails
//! with "file changed as we read it" when the ctime moves during its read.
//!
//! - mtime: `FileState::mtime` is the time of the last cached write (or of a later truncate or
//!   explicit `set_times`) while not all writes are on BACKING; each write-back sets BACKING's
//!   mtime to it afterwards, so BACKING ends up with the application's time.
//! - ctime cannot be set. While a write-back changes BACKING, `FileState::wb_ctime` (the logical
//!   ctime at its start) is reported; afterwards the [`CtimeTable`] maps BACKING's resulting
//!   ctime — and any older one, from a stat taken before — to that logical ctime. A later ctime
//!   on BACKING is someone else's change (chmod, link, truncate...) and shows as is; the entry is
//!   then useless and dropped. The table outlives the per-file state (a file's state goes when
//!   it is closed and its blocks are evicted, but a `tar` may have stat'ed it just before), is
//!   bounded, and is lost at unmount: a file whose entry is gone shows its write-back ctime from
//!   then on. An entry goes with the rest of the file when the kernel forgets the inode
//!   (`MemCache::forget`): the kernel keeps no attributes of it then, and its number may be
//!   reused.
//!   A chmod that races with a write-back of the same file may have its ctime hidden.
//!
//! Inode numbers are reused, but a new file's ctime is later than any write-back of the old one,
//! so a stale entry never applies to it.

use std::collections::HashMap;
use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;
use std::time::{Duration, SystemTime};
use tiercache_core::FileId;

/// Entries kept at most; the oldest half goes when it is exceeded.
const MAX_ENTRIES: usize = 1 << 16;

/// After a write-back: BACKING's ctime `ours` (or an older one) stands for `logical`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CtimeMap {
    pub ours: SystemTime,
    pub logical: SystemTime,
}

/// Times readers must see instead of BACKING's ([`crate::MemCache::logical_times`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogicalTimes {
    /// Modification time of cached writes BACKING does not show yet.
    pub mtime: Option<SystemTime>,
    /// Change time where BACKING's was moved by the tier's write-back or lags cached writes.
    pub ctime: Option<SystemTime>,
}

/// Per-file [`CtimeMap`]s (guarded by the engine lock), bounded.
#[derive(Debug, Default)]
pub(crate) struct CtimeTable {
    map: HashMap<FileId, (CtimeMap, u64)>,
    seq: u64,
}

impl CtimeTable {
    pub fn get(&self, file: FileId) -> Option<CtimeMap> {
        self.map.get(&file).map(|e| e.0)
    }

    pub fn set(&mut self, file: FileId, m: CtimeMap) {
        self.seq += 1;
        self.map.insert(file, (m, self.seq));
        if self.map.len() > MAX_ENTRIES {
            let keep_from = self.seq - (MAX_ENTRIES / 2) as u64;
            self.map.retain(|_, e| e.1 > keep_from);
        }
    }

    /// Forgets `file`'s entry (the kernel forgot the inode; its number may be reused).
    pub fn remove(&mut self, file: FileId) {
        self.map.remove(&file);
    }

    /// The logical ctime of `file` whose BACKING ctime is `backing`, given the write-back in
    /// progress (`during`) and the pending logical mtime. Drops an entry BACKING moved past.
    pub fn resolve(
        &mut self,
        file: FileId,
        backing: SystemTime,
        during: Option<SystemTime>,
        mtime: Option<SystemTime>,
    ) -> SystemTime {
        let base = match (during, self.get(file)) {
            (Some(c), _) => c,
            (None, Some(m)) if backing <= m.ours => m.logical,
            (None, Some(_)) => {
                self.map.remove(&file);
                backing
            }
            (None, None) => backing,
        };
        // a write changes the ctime too, and its write-back comes later
        mtime.map_or(base, |m| base.max(m))
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.map.len()
    }
}

/// The change time in `m`.
pub(crate) fn ctime_of(m: &Metadata) -> SystemTime {
    let nsec = u32::try_from(m.ctime_nsec()).unwrap_or(0);
    match u64::try_from(m.ctime()) {
        Ok(s) => SystemTime::UNIX_EPOCH + Duration::new(s, nsec),
        Err(_) => SystemTime::UNIX_EPOCH,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(s)
    }

    #[test]
    fn write_back_ctime_is_hidden_until_someone_else_changes_it() {
        let f = FileId(7);
        let mut c = CtimeTable::default();
        assert_eq!(c.resolve(f, t(10), None, None), t(10));
        // cached write at 12: ctime follows the write
        assert_eq!(c.resolve(f, t(10), None, Some(t(12))), t(12));
        // write-back in progress: BACKING's moving ctime is not shown
        assert_eq!(c.resolve(f, t(20), Some(t(12)), Some(t(12))), t(12));
        c.set(
            f,
            CtimeMap {
                ours: t(20),
                logical: t(12),
            },
        );
        assert_eq!(c.resolve(f, t(20), None, None), t(12));
        assert_eq!(c.resolve(f, t(10), None, None), t(12), "stat from before");
        // chmod at 30
        assert_eq!(c.resolve(f, t(30), None, None), t(30));
        assert!(c.get(f).is_none(), "entry dropped");
    }

    #[test]
    fn table_is_bounded() {
        let mut c = CtimeTable::default();
        let m = CtimeMap {
            ours: t(2),
            logical: t(1),
        };
        for i in 0..(MAX_ENTRIES as u64 + 10) {
            c.set(FileId(i), m);
        }
        assert!(c.len() <= MAX_ENTRIES);
        assert!(
            c.get(FileId(MAX_ENTRIES as u64 + 9)).is_some(),
            "newest kept"
        );
        assert!(c.get(FileId(0)).is_none(), "oldest dropped");
    }
}
