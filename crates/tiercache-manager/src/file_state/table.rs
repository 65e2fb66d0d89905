//! The file table: every file's [`FileState`] by id, and the one place where a row's cached
//! and dirty block sets change.
//!
//! Invariants (under the engine lock, which guards the table):
//! - `dirty_blocks` = Σ |dirty| over the rows: every change of a dirty set goes through
//!   [`FileTable::dirtied`], [`FileTable::cleaned`], or a row leaving ([`FileTable::remove`],
//!   a replacing [`FileTable::insert`]), which keep the count;
//! - a row's `dirty ⊆ blocks`: [`FileTable::gone`] cleans a block before forgetting it.
//!
//! The engine calls the block transitions together with the change of the core tier's slot
//! (`Engine`'s invariant: a block is in a row's `blocks` iff the tier holds it); no other
//! module can, as `FileState`'s block-set methods are private to this module tree.

use super::{FileShared, FileState};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;
use tiercache_core::{BlockKey, FileId};

/// The per-file states, by file.
#[derive(Debug, Default)]
pub(crate) struct FileTable {
    rows: HashMap<FileId, FileState>,
    /// Σ |dirty| over the rows.
    dirty_blocks: usize,
}

impl FileTable {
    pub(crate) fn get(&self, id: &FileId) -> Option<&FileState> {
        self.rows.get(id)
    }

    /// A row to change. The block sets are not changed this way (`FileState`'s methods for
    /// them are private here): only the table's own transitions below do.
    pub(crate) fn get_mut(&mut self, id: &FileId) -> Option<&mut FileState> {
        self.rows.get_mut(id)
    }

    pub(crate) fn contains(&self, id: &FileId) -> bool {
        self.rows.contains_key(id)
    }

    /// Whether the row of `id` is still the state whose locks are `shared` (not forgotten and
    /// opened anew meanwhile).
    pub(crate) fn is_same(&self, id: &FileId, shared: &Arc<FileShared>) -> bool {
        self.rows
            .get(id)
            .is_some_and(|f| Arc::ptr_eq(f.shared(), shared))
    }

    /// The per-file locks of `id`'s row.
    pub(crate) fn shared(&self, id: &FileId) -> Option<Arc<FileShared>> {
        self.rows.get(id).map(|f| Arc::clone(f.shared()))
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&FileId, &FileState)> {
        self.rows.iter()
    }

    /// Puts `state` in the row of `id`; returns the state it replaced (whose dirty blocks
    /// leave the count with it).
    pub(crate) fn insert(&mut self, id: FileId, state: FileState) -> Option<FileState> {
        self.dirty_blocks += state.dirty().len();
        let old = self.rows.insert(id, state);
        if let Some(old) = &old {
            self.dirty_blocks -= old.dirty().len();
        }
        old
    }

    /// Takes the row of `id` out (its dirty blocks, if any, leave the count with it).
    pub(crate) fn remove(&mut self, id: &FileId) -> Option<FileState> {
        let old = self.rows.remove(id)?;
        self.dirty_blocks -= old.dirty().len();
        Some(old)
    }

    /// Dirty blocks over all rows.
    pub(crate) fn dirty_blocks(&self) -> usize {
        self.dirty_blocks
    }

    /// The files with dirty blocks in memory.
    pub(crate) fn dirty_files(&self) -> impl Iterator<Item = (&FileId, &FileState)> {
        self.rows.iter().filter(|(_, f)| !f.dirty().is_empty())
    }

    // ---- block transitions (`Engine` only: with the core tier's change) ----

    /// `key` got a slot in memory.
    pub(crate) fn cached(&mut self, key: BlockKey) {
        if let Some(f) = self.rows.get_mut(&key.file) {
            f.note_cached(key.block.0);
        }
    }

    /// `key` left memory; dirty bytes of it (meaningless data dropped on purpose) are
    /// forgotten first.
    pub(crate) fn gone(&mut self, key: BlockKey) {
        self.cleaned(key);
        if let Some(f) = self.rows.get_mut(&key.file) {
            f.note_gone(key.block.0);
        }
    }

    /// A write landed in the cached `key` at `now`.
    pub(crate) fn dirtied(&mut self, key: BlockKey, now: Instant) {
        if let Some(f) = self.rows.get_mut(&key.file) {
            if !f.dirty().contains(&key.block.0) {
                self.dirty_blocks += 1;
            }
            f.mark_dirty(key.block.0, now);
        }
    }

    /// `key` is clean (written back, or dropped with its meaningless data).
    pub(crate) fn cleaned(&mut self, key: BlockKey) {
        if let Some(f) = self.rows.get_mut(&key.file) {
            if f.dirty().contains(&key.block.0) {
                self.dirty_blocks -= 1;
                f.mark_clean(key.block.0);
            }
        }
    }
}
