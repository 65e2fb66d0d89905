//! The steps every write to BACKING from the cache takes — the write-back of memory's dirty
//! blocks (`writeback`, for the flusher, `fsync` and `forget`) and the cleaning of a lower
//! tier's dirty blocks (`lower_wb`) alike: one copy of each, the run writer included.
//!
//! 1. Before the first `pwrite`, [`Inner::hide_backing_ctime`]: from then on BACKING's ctime
//!    is ours, not the application's; readers keep seeing the ctime as it was (see `times`).
//! 2. Runs of at most [`MAX_RUN_BYTES`] each, by the one run writer ([`Inner::write_runs`]):
//!    blocks in ascending order, adjacent ones merged, the block holding EOF clipped at EOF.
//!    Where the bytes come from and what is recorded per block is its [`RunSource`]'s: memory's
//!    pinned slots (`writeback`) or a lower tier's dirty copies (`lower_wb`).
//! 3. After them, [`Inner::restore_backing_mtime`]: our writes moved BACKING's mtime to now;
//!    the time of the application's writes is put back.
//! 4. The stamp is refreshed (`files`), then, under the engine lock, [`Engine::end_backing_write`]:
//!    our ctime maps to the hidden one, BACKING's size and its need of a sync follow.

use crate::cache::Inner;
use crate::engine::Engine;
use crate::times::{ctime_of, CtimeMap};
use crate::wb_types::RunsWritten;
use std::fs::{File, Metadata};
use std::io;
use std::time::SystemTime;
use tiercache_core::FileId;

/// Bytes per merged write request to BACKING at most.
pub(crate) const MAX_RUN_BYTES: usize = 1 << 20;

/// Where the run writer's blocks come from and what it records for each written: memory's
/// pinned slots (`writeback`) or a lower tier's dirty copies (`lower_wb`).
pub(crate) trait RunSource {
    /// One block to write, as the caller lists them (ascending block order).
    type Item;
    /// What is recorded for a block written (or counted as written).
    type Done;
    /// The block index of `item`.
    fn block(item: &Self::Item) -> u64;
    /// The first step for each block, before anything else is done with it: `Ok(Some(d))`
    /// when the source has nothing to write for it but counts it as written (`d`), `Ok(None)`
    /// to go on. An error stops the writer once the run so far is written.
    fn fetch(&mut self, item: &Self::Item) -> io::Result<Option<Self::Done>>;
    /// The record of a block past EOF (nothing to write: it counts as written).
    fn past_eof(&self, item: &Self::Item) -> Self::Done;
    /// Appends the block's first `len` bytes to `buf` and returns its record; `None` (nothing
    /// appended) when the source cannot give them: the block is left out and stays dirty.
    fn append(&mut self, item: &Self::Item, len: usize, buf: &mut Vec<u8>) -> Option<Self::Done>;
}

/// The run being gathered: records of its blocks, their bytes (`buf`, one block each but
/// the EOF block, which is clipped and ends the file), its offset and the block that joins it.
struct Run<D> {
    records: Vec<D>,
    buf: Vec<u8>,
    start: u64,
    next_block: u64,
}

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

impl Inner {
    /// Step 2: writes `items` (ascending) of `file` through `fd` in merged runs of at most
    /// [`MAX_RUN_BYTES`], clipped at the logical `size`, the bytes and records from `src`.
    /// Stops at the first error (a failed run's blocks are not recorded as written).
    pub(crate) fn write_runs<S: RunSource>(
        &self,
        file: FileId,
        fd: &File,
        size: u64,
        items: &[S::Item],
        src: &mut S,
    ) -> RunsWritten<S::Done> {
        let bs = self.bs();
        let max_run = (MAX_RUN_BYTES / bs).max(1);
        let mut run = Run {
            records: Vec::with_capacity(max_run.min(items.len())),
            buf: Vec::with_capacity(max_run.min(items.len()) * bs),
            start: 0,
            next_block: 0,
        };
        let mut out = RunsWritten {
            done: Vec::with_capacity(items.len()),
            wrote_end: 0,
            err: None,
        };
        for item in items {
            let block = S::block(item);
            let start = block << self.shift();
            match src.fetch(item) {
                Ok(None) => {}
                Ok(Some(d)) => {
                    out.done.push(d);
                    continue;
                }
                Err(e) => {
                    // The run so far is written first; if that fails, its error is the one.
                    out.err = Some(
                        self.write_run(file, fd, &mut run, &mut out)
                            .err()
                            .unwrap_or(e),
                    );
                    return out;
                }
            }
            if start >= size {
                // Past EOF (cannot normally happen): nothing to write.
                out.done.push(src.past_eof(item));
                continue;
            }
            // Only the EOF block is clipped, and no later block reaches here: the length test
            // is a guard.
            let joins = !run.records.is_empty()
                && block == run.next_block
                && run.records.len() < max_run
                && run.buf.len() == run.records.len() * bs;
            if !joins {
                if let Err(e) = self.write_run(file, fd, &mut run, &mut out) {
                    out.err = Some(e);
                    return out;
                }
            }
            let clip = usize::try_from(size - start).unwrap_or(bs).min(bs);
            let Some(d) = src.append(item, clip, &mut run.buf) else {
                continue;
            };
            if run.records.is_empty() {
                run.start = start;
            }
            run.records.push(d);
            run.next_block = block + 1;
        }
        if let Err(e) = self.write_run(file, fd, &mut run, &mut out) {
            out.err = Some(e);
        }
        out
    }

    /// Writes the gathered `run` (if any) with one `pwrite`; once written, its records move
    /// to `out.done` and the run starts afresh.
    fn write_run<D>(
        &self,
        file: FileId,
        fd: &File,
        run: &mut Run<D>,
        out: &mut RunsWritten<D>,
    ) -> io::Result<()> {
        if run.records.is_empty() {
            return Ok(());
        }
        self.dev_write(file, fd, &run.buf, run.start)?;
        out.wrote_end = out.wrote_end.max(run.start + run.buf.len() as u64);
        out.done.append(&mut run.records);
        run.buf.clear();
        Ok(())
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
