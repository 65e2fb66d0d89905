//! The cache's own changes to a file's metadata on BACKING, and the stamps they leave: recorded
//! so that the next `open` does not take them for an outside edit (the rules: `versions`).

use crate::cache::{lock, Inner};
use crate::stamp::FileStamp;
use std::io;
use tiercache_core::FileId;

impl Inner {
    /// Runs `apply`, a change of `file`'s metadata on BACKING that leaves its bytes alone (mode,
    /// owner, extended attributes, links, names), then records the stamp BACKING shows (`stat`,
    /// asked only when the cache keeps something of the file). See the module docs.
    pub(crate) fn change_metadata(
        &self,
        file: FileId,
        apply: &mut dyn FnMut() -> io::Result<()>,
        stat: &mut dyn FnMut() -> io::Result<FileStamp>,
    ) -> io::Result<()> {
        let shared = self.shared(file).ok();
        let _io = shared.as_ref().map(|s| lock(&s.io));
        // What BACKING showed before our change: recorded only if it was ours (see above).
        let before = stat().ok();
        apply()?;
        let known = {
            let eng = self.lock();
            eng.files().contains(&file) || eng.kept().contains(file)
        };
        if !known {
            return Ok(());
        }
        let now = match stat() {
            Ok(s) => s,
            Err(e) => {
                // Not recorded: the next open takes the change for an outside one (its clean
                // blocks are read again), which is safe.
                log::warn!("file {}: fstat after a metadata change failed: {e}", file.0);
                return Ok(());
            }
        };
        self.note_own_stamp(file, before.as_ref(), now);
        Ok(())
    }

    /// BACKING's inode of `file` has no link left after a change the cache made (an unlink or a
    /// rename over it through the mount): its clean blocks are not kept when it is forgotten.
    pub(crate) fn mark_unlinked(&self, file: FileId) {
        if let Some(f) = self.lock().files_mut().get_mut(&file) {
            f.mark_unlinked();
        }
    }

    /// Records `now`, read after a change of the cache's own, as `file`'s stamp — unless a
    /// newer one is recorded already, or BACKING showed `before` (read before the change) and
    /// that is not the recorded stamp: then someone else changed the file first, and recording
    /// would hide that change (`None`: not known, recorded).
    pub(crate) fn note_own_stamp(&self, file: FileId, before: Option<&FileStamp>, now: FileStamp) {
        let mut eng = self.lock();
        match eng.files_mut().get_mut(&file) {
            Some(f) => {
                if before.is_some_and(|b| *b != f.stamp()) {
                    log::info!(
                        "file {}: changed on BACKING before one of the cache's own changes; \
                         not recorded, so the next open sees it",
                        file.0
                    );
                } else if now.supersedes(&f.stamp()) {
                    f.record_stamp(now);
                }
            }
            None => eng.kept_mut().note(file, before, now),
        }
    }
}
