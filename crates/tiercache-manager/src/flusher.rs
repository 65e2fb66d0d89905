//! The background flusher threads, writer throttling, `fsync` and `flush_all`: when files are
//! written back (one write-back: `writeback`).
//!
//! Background policy: every `flush_interval` (or when kicked because dirty blocks passed the
//! background limit) the flusher writes back, in inode order, every file dirty for longer than
//! `dirty_expire`, and, when dirty blocks exceed `dirty_background_ratio`, the oldest-dirtied
//! further files down to a quarter below it (in inode order too). A file is written back as a
//! whole (all its dirty blocks). No
//! write-back but `fsync`'s is followed by a sync of its file: see `sync_batch`.

use crate::cache::{lock, Inner};
use crate::error::unknown_file;
use crate::stats::Counters;
use crate::writeback::Why;
use std::io;
use std::sync::Arc;
use std::time::Instant;
use tiercache_core::FileId;

/// Files a throttled writer may write back before it goes on anyway.
const MAX_THROTTLE_ROUNDS: usize = 64;

impl Inner {
    pub(crate) fn flusher_loop(&self) {
        // Kicks seen so far: one sent while this thread was busy ends its next wait at once.
        let mut seen = 0;
        loop {
            if !self
                .wake()
                .wait_for_kick(self.timings().interval(), &mut seen)
            {
                return;
            }
            self.flush_tick();
        }
    }

    /// One flusher round.
    fn flush_tick(&self) {
        let now = Instant::now();
        let wb_total = Counters::get(&self.counters().writeback_blocks);
        let candidates: Vec<(FileId, Option<Instant>, usize)> = {
            let mut eng = self.lock();
            eng.windows_at(now)
                .0
                .sample_rate(now, wb_total, self.timings().interval());
            eng.files()
                .dirty_files()
                .map(|(id, f)| (*id, f.dirtied_at(), f.dirty().len()))
                .collect()
        };
        // Expired files go in inode order (files of one directory are mostly neighbours on
        // BACKING, and so are their inodes): a disk's elevator sees a mostly sequential stream.
        let (mut expired, others): (Vec<_>, Vec<_>) =
            candidates.into_iter().partition(|&(_, at, _)| {
                at.is_some_and(|t| {
                    now.saturating_duration_since(t) >= self.timings().dirty_expire()
                })
            });
        expired.sort_unstable_by_key(|&(id, _, _)| id.0);
        let expired: Vec<FileId> = expired.into_iter().map(|(id, _, _)| id).collect();
        if !self.flush_background(&expired) {
            return;
        }
        // Then, while dirty blocks exceed the background ratio, the oldest-dirtied others, down
        // to a quarter below it: a writer over the ratio kicks a round at every write, and
        // rounds that stopped right at the ratio scanned every dirty file once per write. The
        // files chosen are written in inode order too.
        let dirty = self.lock().dirty_blocks();
        if dirty > self.dirty_bg_limit() {
            let mut over = dirty - (self.dirty_bg_limit() - self.dirty_bg_limit() / 4);
            let mut others = others;
            others.sort_by_key(|&(id, at, _)| (at, id.0));
            let mut chosen: Vec<FileId> = Vec::new();
            for (id, _, blocks) in others {
                if over == 0 {
                    break;
                }
                over = over.saturating_sub(blocks);
                chosen.push(id);
            }
            chosen.sort_unstable_by_key(|id| id.0);
            if !self.flush_background(&chosen) {
                return;
            }
        }
        // Closed files written back: one sync round (at most one per period) makes their data
        // durable and lets their descriptors go. Errors are remembered by their files.
        if self.sync_due() {
            let _ = self.sync_written(crate::sync_batch::Scope::Closed);
        }
        if self.lower().is_some() {
            self.clean_lower_round();
        }
        self.bound_closed_fds();
        // What this round wrote leaves no pages behind (an uncached BACKING device).
        self.device().settle();
    }

    /// Background write-back of `files` in this order; `false` when the flusher is stopping.
    fn flush_background(&self, files: &[FileId]) -> bool {
        for &file in files {
            if self.wake().stopping() {
                return false;
            }
            // Errors are logged and remembered by flush_file.
            let _ = self.flush_file(file, Why::Background);
        }
        true
    }

    /// Lets a writer help write back while dirty blocks exceed the dirty ratio. Holds no lock
    /// on entry; gives up (and lets the write go on) when write-back makes no progress.
    pub(crate) fn throttle(&self) {
        let mut helped = false;
        for _ in 0..MAX_THROTTLE_ROUNDS {
            let target = {
                let eng = self.lock();
                if eng.dirty_blocks() <= self.dirty_limit() {
                    return;
                }
                eng.files()
                    .dirty_files()
                    .min_by_key(|(_, f)| f.dirtied_at())
                    .map(|(id, _)| *id)
            };
            let Some(target) = target else {
                return;
            };
            if !helped {
                helped = true;
                Counters::add(&self.counters().throttled_writes, 1);
                self.kick_flusher();
            }
            match self.flush_file(target, Why::Throttle) {
                Ok(n) if n > 0 => {}
                _ => return,
            }
        }
    }

    /// `fsync`: writes back `file`'s dirty blocks and syncs BACKING.
    pub(crate) fn fsync(&self, file: FileId, datasync: bool) -> io::Result<()> {
        let remembered = {
            let mut eng = self.lock();
            let f = eng
                .files_mut()
                .get_mut(&file)
                .ok_or_else(|| unknown_file(file))?;
            f.take_error()
        };
        self.flush_file(file, Why::Sync(datasync))?;
        match remembered {
            Some(e) => Err(e.to_io()),
            None => Ok(()),
        }
    }

    /// Writes back and syncs every file with dirty or unsynced data; returns the first error
    /// (also one remembered from the background), after trying every file.
    pub(crate) fn flush_all(&self) -> io::Result<()> {
        let files: Vec<FileId> = {
            let eng = self.lock();
            eng.files()
                .iter()
                .filter(|(_, f)| {
                    !f.dirty().is_empty()
                        || !f.lower_dirty().is_empty()
                        || f.needs_sync()
                        || f.error().is_some()
                })
                .map(|(id, _)| *id)
                .collect()
        };
        let mut first: Option<io::Error> = None;
        for file in files {
            let remembered = self
                .lock()
                .files_mut()
                .get_mut(&file)
                .and_then(|f| f.take_error());
            if let Err(e) = self.flush_file(file, Why::FlushAll) {
                first.get_or_insert(e);
            }
            if let Some(e) = remembered {
                first.get_or_insert(e.to_io());
            }
        }
        // What a persistent tier below still holds dirty goes to BACKING too: after `flush`
        // (and a clean unmount) BACKING is current; the tier keeps clean copies.
        let below: Vec<(FileId, Arc<crate::file_state::FileShared>)> = self.files_below();
        let mut cleaned_any = false;
        for (file, shared) in below {
            let _io = lock(&shared.io);
            let same = self.lock().files().is_same(&file, &shared);
            if !same {
                continue; // replaced meanwhile (its cleaning is its own)
            }
            match self.clean_lower_locked(file) {
                Ok(n) => cleaned_any |= n > 0,
                Err(e) => {
                    first.get_or_insert(e);
                }
            }
            if let Err(e) = self.flush_locked(file, Why::FlushAll) {
                first.get_or_insert(e);
            }
            let fd = self.lock().gc_file(file);
            drop(fd);
        }
        if cleaned_any {
            if let Some(t) = self.lower().and_then(|l| l.dirty_tier()) {
                if let Err(e) = t.sync() {
                    first.get_or_insert(io::Error::from(e));
                }
            }
        }
        // Everything written back, made durable: one syncfs per file system of BACKING
        // (a file whose own sync fails after a failed syncfs remembers it too).
        if let Err(e) = self.sync_written(crate::sync_batch::Scope::All) {
            first.get_or_insert(e);
        }
        self.device().settle();
        first.map_or(Ok(()), Err)
    }
}
