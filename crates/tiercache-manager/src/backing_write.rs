//! The steps every write to BACKING from the cache takes — the flusher's write-back of memory's
//! dirty blocks (`flusher`) and the cleaning of a lower tier's dirty blocks (`lower_wb`) alike:
//! one copy of each.
//!
//! 1. Before the first `pwrite`, [`Inner::hide_backing_ctime`]: from then on BACKING's ctime
//!    is ours, not the application's; readers keep seeing the ctime as it was (see `times`).
//! 2. Runs of at most [`MAX_RUN_BYTES`] each.
//! 3. After them, [`Inner::restore_backing_mtime`]: our writes moved BACKING's mtime to now;
//!    the time of the application's writes is put back.
//! 4. The stamp is refreshed (`files`), then, under the engine lock, [`Engine::end_backing_write`]:
//!    our ctime maps to the hidden one, BACKING's size and its need of a sync follow.

use crate::cache::Inner;
use crate::engine::Engine;
use crate::times::{ctime_of, CtimeMap};
use std::fs::{File, Metadata};
use std::time::SystemTime;
use tiercache_core::FileId;

/// Bytes per merged write request to BACKING at most.
pub(crate) const MAX_RUN_BYTES: usize = 1 << 20;

impl Inner {
    /// Step 1: BACKING's ctime (`before`: its metadata before our writes) is hidden behind
    /// the logical one until [`Engine::end_backing_write`]; the file's BACKING device is
    /// noted (batched syncs group by it). False if the file is not in the table.
    pub(crate) fn hide_backing_ctime(&self, file: FileId, before: &Metadata) -> bool {
        let mut eng = self.lock();
        let pending = eng.files().get(&file).and_then(|f| f.mtime());
        let logical = eng
            .ctimes_mut()
            .resolve(file, ctime_of(before), None, pending);
        match eng.files_mut().get_mut(&file) {
            Some(f) => {
                f.hide_ctime(logical, std::os::unix::fs::MetadataExt::dev(before));
                true
            }
            None => false,
        }
    }

    /// Step 3: puts `mtime` back on BACKING after our writes (`what`: for the log). False if
    /// that failed (logged).
    pub(crate) fn restore_backing_mtime(
        &self,
        file: FileId,
        fd: &File,
        mtime: SystemTime,
        what: &str,
    ) -> bool {
        match crate::owner::set_mtime(fd, mtime) {
            Ok(()) => true,
            Err(e) => {
                log::warn!(
                    "file {}: setting the mtime after {what} failed: {e}",
                    file.0
                );
                false
            }
        }
    }
}

impl Engine {
    /// Step 4: BACKING's ctime after our writes (`end_ctime`) maps to the one hidden at
    /// step 1; with bytes written up to `wrote_end` (0: none), BACKING's size grows (never
    /// past the file's) and the file needs a sync.
    pub(crate) fn end_backing_write(
        &mut self,
        file: FileId,
        end_ctime: Option<SystemTime>,
        wrote_end: u64,
    ) {
        let during = self
            .files_mut()
            .get_mut(&file)
            .and_then(|f| f.take_wb_ctime());
        if let (Some(logical), Some(ours)) = (during, end_ctime) {
            self.ctimes_mut().set(file, CtimeMap { ours, logical });
        }
        if let (true, Some(f)) = (wrote_end > 0, self.files_mut().get_mut(&file)) {
            f.wrote_to_backing(wrote_end);
        }
    }
}
