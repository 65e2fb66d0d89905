//! What happens when the kernel forgets an inode: `forget`, and `drop_forgotten_state` for
//! `open` when a forgotten state turns out to be another file.
//!
//! Inode reuse. A [`FileId`] is a backing inode number, which BACKING gives to a new file once
//! the old inode is freed. While the FUSE layer knows the inode its node pins it (an `O_PATH`
//! descriptor), so cached blocks without a backing handle are safe; after the kernel forgot the
//! node ([`crate::MemCache::forget`]) nothing pins it any more. The kernel forgets idle inodes
//! whenever its dentry cache shrinks (memory pressure, `drop_caches`), so dropping the blocks
//! then would empty the cache, priority pool included, under load. So `forget` writes the file's
//! dirty blocks back and, when BACKING reports the inode's birth time (`statx` btime), keeps the
//! clean blocks in a *forgotten* state: the next `open` of the id reuses them only if the stamp
//! (size, mtime, ctime, inode number) and the birth time both match — a new inode with the same
//! number is born later — and replaces the state otherwise; eviction takes them meanwhile. Without a
//! birth time it drops everything the tier has of the file — blocks, state, remembered error,
//! logical times. When the write-back fails the state stays forgotten with its dirty blocks and
//! its backing handle (which pins the inode), kept for retries; its clean blocks go, and the
//! next `open` reuses the state only if the stamp matches exactly; otherwise the old data is
//! written back through the old handle once more and the state is replaced. A forgotten state
//! without a birth time goes as soon as it is clean. A forget that arrives while handles are
//! still open (the kernel may send FORGET before the last RELEASE is handled) is carried out
//! at the last release, leaving dirty blocks to the flusher (a close does not wait for
//! write-back) — unless the mount removed the file's last name (`mark_unlinked`): then the
//! release carries the forget out in full, which discards them once BACKING shows no link;
//! without a birth time it drops the clean blocks at once. A forget may also come
//! late: node ids are inode numbers, so the kernel can look the inode up and open it again
//! before the forget of its previous node is carried out. An open that comes while `forget`
//! writes back makes `forget` stop there and leave the state to the handle; one that came
//! before is the open-handles case above (never the state of an open handle).

use crate::cache::Inner;
use crate::file_state::FileShared;
use crate::locks::{lock, try_lock, try_write_lock, write_lock};
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;
use tiercache_core::FileId;

impl Inner {
    /// The kernel forgot `file`, whose id may name another file from now on: writes its dirty
    /// blocks back (synchronously; not for an unlinked inode, whose data nobody can reach any
    /// more) and drops all its blocks and its state. If the write-back fails, the state stays
    /// forgotten (see the module docs). With handles still open, clean blocks go now and the
    /// rest at the last release. Returns the blocks dropped.
    pub(crate) fn forget(&self, file: FileId) -> usize {
        self.forget_waiting(file, true, None).unwrap_or(0)
    }

    /// The forget a last release carries out for a removed file with writes pending
    /// ([`Inner::release`]): only while `shared` is still the file's state and no handle is
    /// open again — a new open means the kernel knows the inode again, and this forget is stale.
    pub(crate) fn forget_released(&self, file: FileId, shared: &Arc<FileShared>) {
        self.forget_waiting(file, true, Some(shared));
    }

    /// [`Inner::forget`] when it needs no I/O and no wait — no tier below (dropping copies
    /// there may be I/O), the file's locks free, and, once closed, nothing to write back and no
    /// descriptor of BACKING left to close (a close may flush to a network server, or free a
    /// deleted inode): done, and `true`. That is the usual case of a written-back file an
    /// `rm -rf` removes, whose FORGET then costs no thread switch; an open file's forget is
    /// left to its last release, as `forget` does. Otherwise `false`, and nothing changed.
    pub(crate) fn try_forget(&self, file: FileId) -> bool {
        self.lower().is_none() && self.forget_waiting(file, false, None).is_some()
    }

    /// `forget`, waiting for the file's locks and writing back if `wait`; without, `None`
    /// (nothing changed) where it would have to. With `released`, only for that state and
    /// while it has no handle ([`Inner::forget_released`]).
    fn forget_waiting(
        &self,
        file: FileId,
        wait: bool,
        released: Option<&Arc<FileShared>>,
    ) -> Option<usize> {
        let Ok(shared) = self.shared(file) else {
            return Some(0);
        };
        if released.is_some_and(|r| !Arc::ptr_eq(r, &shared)) {
            return Some(0);
        }
        let (_io, _op) = if wait {
            (lock(&shared.io), write_lock(&shared.op))
        } else {
            (try_lock(&shared.io)?, try_write_lock(&shared.op)?)
        };
        let fd = match self.forget_start(file, &shared, wait, released.is_some())? {
            Ok(fd) => fd,
            Err(dropped) => return Some(dropped),
        };
        let unlinked = fd
            .as_deref()
            .is_some_and(|fd| fd.metadata().is_ok_and(|m| m.nlink() == 0));
        let written = match fd {
            Some(_) if !unlinked => {
                let r = self.flush_locked(file, crate::writeback::Why::Forget);
                // A forgotten file keeps no descriptor: not even the device's, for the pages
                // its write-back left (an uncached device holds one until it drops them).
                self.device().settle();
                r.map(|_| ())
            }
            _ => Ok(()),
        };
        let mut invalidate_below = None;
        let (dropped, fd) =
            self.forget_locked(file, &shared, unlinked, &written, &mut invalidate_below);
        drop(fd);
        if let (Some(lower), Some(fk)) = (self.lower(), invalidate_below) {
            lower.invalidate_file(fk, 0);
        }
        Some(dropped)
    }

    /// `forget`'s first step, on the quiesced file: with handles open it is left to the last
    /// release (`Err`: the blocks dropped now); else returns the descriptor to write the
    /// pending blocks back through (`None`: nothing pending). Without `wait`, `None` before
    /// any change for a closed file whose forget is I/O: blocks to write back, or a
    /// descriptor of BACKING the state still holds (dropped by the forget). `released`: a
    /// release's forget, which an open handle makes stale (nothing done).
    fn forget_start(
        &self,
        file: FileId,
        shared: &Arc<FileShared>,
        wait: bool,
        released: bool,
    ) -> Option<Result<Option<Arc<File>>, usize>> {
        let mut eng = self.lock();
        let Some(f) = eng.files_mut().get_mut(&file) else {
            return Some(Err(0));
        };
        if !Arc::ptr_eq(f.shared(), shared) {
            return Some(Err(0)); // opened anew meanwhile: not the file that was forgotten
        }
        if !wait && f.handles() == 0 && (f.has_pending_writes() || f.backing().is_some()) {
            return None;
        }
        if released && f.handles() > 0 {
            return Some(Err(0));
        }
        f.reset_read_ahead();
        if f.handles() > 0 {
            f.forget_at_release();
            if f.keeps_clean_when_forgotten() {
                return Some(Err(0));
            }
            return Some(Err(eng.drop_file_blocks(file, false).0));
        }
        Some(Ok(if f.has_pending_writes() {
            f.backing().cloned()
        } else {
            None
        }))
    }

    /// `forget`'s last step, after the write-back (`written`): keeps the clean blocks of a
    /// file its birth time tells apart, else drops what it can and the state once empty.
    /// Returns the blocks dropped and the descriptor to close after the engine lock.
    fn forget_locked(
        &self,
        file: FileId,
        shared: &Arc<FileShared>,
        unlinked: bool,
        written: &std::io::Result<()>,
        invalidate_below: &mut Option<tiercache_tier::FileKey>,
    ) -> (usize, Option<Arc<File>>) {
        let mut eng = self.lock();
        if !eng.files().is_same(&file, shared) {
            return (0, None);
        }
        if eng.files().get(&file).is_some_and(|f| f.handles() > 0) {
            // Opened again during the write-back (a new lookup of the same inode: the
            // kernel knows it again, so this forget is stale): the state belongs to the
            // open handle and must stay. Its dirty blocks are on BACKING already.
            return (0, None);
        }
        let keep_clean = !unlinked
            && eng
                .files()
                .get(&file)
                .is_some_and(|f| f.keeps_clean_when_forgotten() && written.is_ok());
        if keep_clean {
            // The kernel dropped its inode (memory pressure, drop_caches), not the file:
            // the clean blocks stay, forgotten, and the next open reuses them only for the
            // same inode (same stamp and birth time); eviction takes them otherwise.
            if let Some(f) = eng.files_mut().get_mut(&file) {
                f.mark_forgotten();
            }
            // Logical times were the old node's; BACKING's are the file's from now on.
            eng.ctimes_mut().remove(file);
            let fd = eng.gc_file(file);
            drop(eng);
            drop(fd);
            return (0, None);
        }
        if let Some(f) = eng.files_mut().get_mut(&file) {
            if unlinked {
                f.discard_lower_dirty(); // its data is meaningless now
            }
            if let (Some(fk), true) = (f.fkey(), f.lower_dirty().is_empty()) {
                // Without a birth time (or once unlinked) the identity may be reused.
                // Dropped below after the engine lock (the file is quiesced).
                *invalidate_below = Some(fk);
            }
        }
        let (clean, dirty) = eng.drop_file_blocks(file, unlinked);
        if dirty > 0 {
            log::debug!(
                "file {}: forgotten after unlink; {dirty} dirty blocks not written",
                file.0
            );
        }
        match eng.files_mut().get_mut(&file) {
            Some(f) if f.blocks().is_empty() && f.lower_dirty().is_empty() => {
                let fd = eng
                    .files_mut()
                    .remove(&file)
                    .and_then(|mut f| f.take_backing());
                eng.ctimes_mut().remove(file);
                (clean + dirty, fd)
            }
            Some(f) => {
                f.mark_forgotten();
                let left = f.dirty().len();
                let why = match written {
                    Err(e) => e.to_string(),
                    Ok(()) => "blocks busy".to_string(),
                };
                if left == 0 {
                    // Only the tier below still holds dirty copies: its cleaning goes on.
                    log::debug!(
                        "file {}: forgotten; kept until the tier below has written it back",
                        file.0
                    );
                } else {
                    log::warn!(
                        "file {}: forgotten with {left} dirty blocks not written back ({why}); \
                         they are kept and retried",
                        file.0
                    );
                }
                (clean, None)
            }
            None => (clean + dirty, None),
        }
    }

    /// For `open`, which holds the file's `io` and `op` locks: writes a forgotten state's dirty
    /// blocks back through its own handle once more, then drops the state whatever the outcome
    /// (the id names a different file now). Returns the old handle and the blocks dropped, or
    /// `None` when blocks were busy and the state was kept.
    pub(crate) fn drop_forgotten_state(
        &self,
        file: FileId,
        shared: &Arc<FileShared>,
    ) -> Option<(Option<Arc<File>>, usize)> {
        // Errors are logged and counted by the write-back itself.
        let _ = self.flush_locked(file, crate::writeback::Why::Forget);
        self.device().settle();
        let mut invalidate_below = None;
        let result = self.drop_forgotten_locked(file, shared, &mut invalidate_below);
        // After the engine lock: the caller holds the file's `io` and `op` locks.
        if let (Some(lower), Some(fk)) = (self.lower(), invalidate_below) {
            lower.invalidate_file(fk, 0);
        }
        result
    }

    fn drop_forgotten_locked(
        &self,
        file: FileId,
        shared: &Arc<FileShared>,
        invalidate_below: &mut Option<tiercache_tier::FileKey>,
    ) -> Option<(Option<Arc<File>>, usize)> {
        let mut eng = self.lock();
        if !eng.files().is_same(&file, shared) {
            return Some((None, 0)); // written back and gone already
        }
        let (clean, mut dirty) = eng.drop_file_blocks(file, true);
        if let Some(f) = eng.files_mut().get_mut(&file) {
            dirty += f.discard_lower_dirty();
            *invalidate_below = f.fkey();
        }
        if dirty > 0 {
            log::error!(
                "file {}: discarding {dirty} dirty blocks of a forgotten file that could not be \
                 written back; the id names a different file now",
                file.0
            );
        }
        if eng
            .files()
            .get(&file)
            .is_some_and(|f| !f.blocks().is_empty())
        {
            log::error!(
                "file {}: blocks busy while replacing a forgotten file",
                file.0
            );
            return None;
        }
        let fd = eng
            .files_mut()
            .remove(&file)
            .and_then(|mut f| f.take_backing());
        eng.ctimes_mut().remove(file);
        Some((fd, clean + dirty))
    }
}
