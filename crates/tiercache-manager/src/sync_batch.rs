//! Batched syncs of BACKING, and the bound on descriptors held by closed files.
//!
//! A write-back is not followed by an `fsync` of its file: a `tar x` closes thousands of files a
//! second and never asks for one, and on a disk each would cost a journal commit. Durability
//! comes from the application's `fsync`/`fdatasync` (a per-file sync, as before), from
//! `flush_all` (`tiercache flush`, unmount: every file written back, then one `syncfs` per file
//! system BACKING spans) and from the flusher, which makes the written-back data of closed
//! files durable with at most one `syncfs` per file system every `SYNC_PERIOD` — and only
//! then lets their descriptors go (past half the descriptor budget it may do so sooner, at most
//! once per period, and at once when the budget is full).
//!
//! Errors are errseq-like: a failed `syncfs` cannot say whose data was lost, so each file it
//! was to cover is then synced on its own. A file whose sync fails gets the error remembered
//! (its next `fsync`, or `close` of a writer, reports it once), counted in `writeback_errors`
//! and logged; its state stays (without a descriptor) until the error was reported.
//!
//! Invariant: a closed file's descriptor goes only after a sync covered the data written
//! through it (else a later write-back error of BACKING's page cache, kept with an inode nobody
//! holds, could go with the inode unseen), except for forgotten files (see `forget`).

use crate::cache::Inner;
use crate::file_state::FileShared;
use crate::stats::Counters;
use crate::writeback::Why;
use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;
use std::time::Instant;
use tiercache_core::FileId;

/// A file whose written-back data waits for a sync.
struct Pending {
    file: FileId,
    /// BACKING's device, when a write-back saw it.
    dev: Option<u64>,
    shared: Arc<FileShared>,
    generation: u64,
    fd: Arc<File>,
}

/// Which files a sync round covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    /// Closed files (the flusher: their descriptors go afterwards).
    Closed,
    /// Every file (`flush_all`).
    All,
}

impl Inner {
    /// Whether `SYNC_PERIOD` has passed since the last background sync round.
    pub(crate) fn sync_due(&self) -> bool {
        self.sync_state().due()
    }

    /// Makes the written-back data of the files in `scope` durable: one `syncfs` per file
    /// system, each file synced on its own where that fails. Synced closed files let their
    /// descriptors go. Returns the first error (also remembered by its file).
    pub(crate) fn sync_written(&self, scope: Scope) -> io::Result<()> {
        let pending: Vec<Pending> = {
            let eng = self.lock();
            eng.files()
                .iter()
                .filter(|(_, f)| f.needs_sync() && f.dirty().is_empty())
                .filter(|(_, f)| scope == Scope::All || f.handles() == 0)
                .filter_map(|(id, f)| {
                    Some(Pending {
                        file: *id,
                        dev: f.dev(),
                        shared: Arc::clone(f.shared()),
                        generation: f.generation(),
                        fd: f.backing().cloned()?,
                    })
                })
                .collect()
        };
        self.sync_state().round_began();
        if pending.is_empty() {
            return Ok(());
        }
        // One syncfs per file system (a submount of BACKING is another one). Files are listed
        // by id, so each group is in inode order.
        let mut groups: BTreeMap<Option<u64>, Vec<Pending>> = BTreeMap::new();
        for p in pending {
            let dev = p.dev.or_else(|| p.fd.metadata().ok().map(|m| m.dev()));
            groups.entry(dev).or_default().push(p);
        }
        let mut first: Option<io::Error> = None;
        for (dev, group) in groups {
            let whole = match (dev, group.first()) {
                (Some(_), Some(p)) => self.dev_sync_fs(&p.fd),
                _ => Err(io::Error::other("fstat failed")),
            };
            if let Err(e) = whole {
                if dev.is_some() {
                    log::warn!(
                        "syncfs of BACKING failed ({e}); syncing {} files one by one",
                        group.len()
                    );
                }
                for p in &group {
                    if let Err(e) = self.sync_one(p) {
                        first.get_or_insert(e);
                    }
                }
                continue;
            }
            self.mark_synced(&group);
        }
        first.map_or(Ok(()), Err)
    }

    /// Syncs one file after a failed `syncfs`; a failure is remembered, counted and logged.
    fn sync_one(&self, p: &Pending) -> io::Result<()> {
        let Err(e) = self.dev_sync(p.file, &p.fd, false) else {
            self.mark_synced(std::slice::from_ref(p));
            return Ok(());
        };
        Counters::add(&self.counters().writeback_errors, 1);
        let log = {
            let mut eng = self.lock();
            match eng.files_mut().get_mut(&p.file) {
                Some(f) if Arc::ptr_eq(f.shared(), &p.shared) => {
                    // What the failed sync lost cannot be written again (the pages it had
                    // are gone): reported once instead, at the next fsync or close.
                    f.sync_lost(&e, p.generation);
                    f.log_failure(Instant::now())
                }
                _ => Some(0),
            }
        };
        if let Some(unlogged) = log {
            log::error!(
                "file {}: sync of written-back data failed, data may be lost: {e}{}",
                p.file.0,
                crate::writeback::unlogged_note(unlogged)
            );
        }
        let fd = self.lock().gc_file(p.file);
        drop(fd);
        Err(e)
    }

    /// The files of `synced` not written to since their snapshot need no sync; closed ones
    /// let their descriptor go (closed after the engine lock).
    fn mark_synced(&self, synced: &[Pending]) {
        let fds: Vec<Option<Arc<File>>> = {
            let mut eng = self.lock();
            synced
                .iter()
                .map(|p| {
                    let f = eng.files_mut().get_mut(&p.file)?;
                    // Same state, untouched since the snapshot: what the sync covered is all
                    // it had written (a later write-back needs a later write).
                    if Arc::ptr_eq(f.shared(), &p.shared) {
                        f.synced_if_unchanged(p.generation);
                    }
                    eng.gc_file(p.file)
                })
                .collect()
        };
        drop(fds);
    }

    /// Keeps the closed files that hold a backing descriptor under the budget: past half of
    /// it (if a sync round is due; at once when the budget is full), the oldest-dirtied are
    /// written back now and one sync round lets the descriptors of the synced closed files go.
    /// Publishes the exact count for `release`.
    pub(crate) fn bound_closed_fds(&self) {
        let budget = self.sync_state().refresh_budget();
        let held = |inner: &Self| -> Vec<(FileId, Option<Instant>)> {
            inner
                .lock()
                .files()
                .iter()
                .filter(|(_, f)| f.handles() == 0 && f.backing().is_some())
                .map(|(id, f)| (*id, f.dirtied_at()))
                .collect()
        };
        let mut files = held(self);
        if files.len() > budget / 2 && (files.len() >= budget || self.sync_due()) {
            files.sort_by_key(|&(id, at)| (at, id.0));
            let excess = files.len() - budget / 8;
            // Written back in inode order (see `flush_tick`).
            let mut oldest: Vec<FileId> = files.iter().take(excess).map(|&(id, _)| id).collect();
            oldest.sort_unstable_by_key(|id| id.0);
            for file in oldest {
                if self.wake().stopping() {
                    break;
                }
                // Errors are logged and remembered by the write-back.
                let _ = self.flush_file(file, Why::Background);
            }
            // Errors are remembered by their files.
            let _ = self.sync_written(Scope::Closed);
            files = held(self);
        }
        self.sync_state().recount(files.len());
    }

    /// Whether one more closed file holding its descriptor would make the closing thread write
    /// back and sync ([`Inner::help_bound_closed_fds`]); a hint, as others may close meanwhile.
    pub(crate) fn closed_fds_near_bound(&self) -> bool {
        self.sync_state().near_bound()
    }

    /// Counts one more closed file holding its descriptor; past half the budget, the closing
    /// thread itself writes back and syncs the oldest such files (one thread at a time; the
    /// others wait for it and look again), as a writer over the dirty limit helps write back.
    pub(crate) fn help_bound_closed_fds(&self) {
        if !self.sync_state().count_closed() {
            return;
        }
        let _one = self.sync_state().gate();
        if self.sync_state().still_over() {
            self.bound_closed_fds();
        }
    }
}
