//! How a file's stamp and content version follow the cache's *own* changes to BACKING.
//!
//! A file's `stamp` is BACKING's as of the cache's last change to it, so a different one at
//! `open` means someone else changed the file (see `files`); its `version` is what the tiers
//! below memory store its blocks with (see `stamp`). Every change the cache makes moves
//! BACKING's ctime, so each is followed by a fresh `fstat` whose stamp is recorded:
//! - write-back, write-through, the mtime put back after them: `refresh_stamp`;
//! - truncate, `set_times`, direct changes (fallocate): recorded with the file quiesced;
//! - changes of metadata only — mode, owner, extended attributes, links and names — made by the
//!   FUSE layer: `change_metadata` (`own_changes`), with the file's `io` lock held from the change to
//!   the record, as `open`'s staleness check takes that lock (an open in between would take the
//!   new ctime for an outside edit and drop the file's clean blocks).
//!
//! A record never replaces a newer one (`FileStamp::supersedes`): two of our changes may race
//! (a write-through and a chmod) and their `fstat`s land in either order.
//!
//! A record never launders an outside change: each of our changes takes BACKING's stamp
//! *before* it too, and the one after is recorded only when the one before is the stamp
//! recorded (else someone changed the file first: nothing is recorded, so the next `open`
//! sees the change, and a kept version goes).
//!
//! The version outlives the file's state. A state goes when the file is closed, clean and has
//! no block left in memory, while the tiers below may still hold blocks stored with its
//! version; the next `open` computes the version from BACKING's stamp, which differs when the
//! cache itself changed the file meanwhile (a write-back, a chmod). So a state that goes leaves
//! its version behind ([`KeptVersions`]), kept with the stamp BACKING had after the cache's last
//! change; the next state of the file takes it over only for that very stamp (and birth time),
//! and metadata changes made meanwhile update that stamp. Anything else — an edit behind the
//! cache's back, a truncate of the closed file (which the tiers below are not told about) —
//! leaves the stamp different and the version new. Kept versions live in memory only: after a
//! restart a file the cache changed in the previous session starts a new version.
//!
//! What cannot be told apart: an outside change made between one of the cache's own changes
//! and its `fstat` is recorded as the cache's own.

use crate::stamp::{version_of, BirthTime, FileStamp};
use std::collections::{BTreeMap, HashMap};
use tiercache_core::FileId;

/// Most versions kept for files without a state; the oldest go first.
const MAX_KEPT: usize = 1 << 16;

#[derive(Debug, Clone, Copy)]
struct Kept {
    stamp: FileStamp,
    born: Option<BirthTime>,
    version: u64,
    seq: u64,
}

/// Content versions of files whose state went (see the module docs), by file.
#[derive(Debug, Default)]
pub(crate) struct KeptVersions {
    map: HashMap<FileId, Kept>,
    /// `seq` → file, oldest first.
    order: BTreeMap<u64, FileId>,
    next: u64,
}

impl KeptVersions {
    /// A state whose blocks below memory carry `version` goes, BACKING showing `stamp`. Kept only
    /// when the stamp alone would not give that version back.
    pub fn keep(&mut self, file: FileId, stamp: FileStamp, born: Option<BirthTime>, version: u64) {
        if version == version_of(&stamp) {
            return;
        }
        self.remove(file);
        if self.map.len() >= MAX_KEPT {
            if let Some((_, oldest)) = self.order.pop_first() {
                self.map.remove(&oldest);
            }
        }
        let seq = self.next;
        self.next += 1;
        self.order.insert(seq, file);
        self.map.insert(
            file,
            Kept {
                stamp,
                born,
                version,
                seq,
            },
        );
    }

    /// The version of a new state of `file` that BACKING shows with `stamp`: the kept one for
    /// exactly that stamp and birth time, else one made from the stamp. The entry goes.
    pub fn take(&mut self, file: FileId, stamp: &FileStamp, born: Option<BirthTime>) -> u64 {
        match self.remove(file) {
            Some(k) if k.stamp == *stamp && k.born == born => k.version,
            _ => version_of(stamp),
        }
    }

    pub fn contains(&self, file: FileId) -> bool {
        self.map.contains_key(&file)
    }

    /// A metadata change of the cache's own left BACKING showing `stamp`, having found it
    /// showing `before` (`None`: not known). A change found before ours means the kept
    /// version is no longer the file's: it goes.
    pub fn note(&mut self, file: FileId, before: Option<&FileStamp>, stamp: FileStamp) {
        let Some(k) = self.map.get_mut(&file) else {
            return;
        };
        if before.is_some_and(|b| *b != k.stamp) {
            self.remove(file);
        } else if stamp.supersedes(&k.stamp) && stamp.size == k.stamp.size {
            k.stamp = stamp;
        }
    }

    fn remove(&mut self, file: FileId) -> Option<Kept> {
        let k = self.map.remove(&file)?;
        self.order.remove(&k.seq);
        Some(k)
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    fn stamp(size: u64, ctime_s: u64) -> FileStamp {
        let t = |s| SystemTime::UNIX_EPOCH + Duration::from_secs(s);
        FileStamp {
            size,
            mtime: t(100),
            ctime: t(ctime_s),
            ino: 7,
        }
    }

    #[test]
    fn a_kept_version_is_taken_over_only_for_the_same_stamp_and_birth() {
        let mut k = KeptVersions::default();
        let f = FileId(7);
        let s = stamp(10, 200);
        k.keep(f, s, Some((1, 2)), 42);
        assert_eq!(
            k.take(f, &stamp(10, 201), Some((1, 2))),
            version_of(&stamp(10, 201))
        );
        assert_eq!(k.len(), 0, "taken, whatever the outcome");
        k.keep(f, s, Some((1, 2)), 42);
        assert_eq!(k.take(f, &s, None), version_of(&s), "another birth time");
        k.keep(f, s, Some((1, 2)), 42);
        assert_eq!(k.take(f, &s, Some((1, 2))), 42);
    }

    #[test]
    fn a_version_the_stamp_gives_back_is_not_kept() {
        let mut k = KeptVersions::default();
        let s = stamp(10, 200);
        k.keep(FileId(7), s, None, version_of(&s));
        assert_eq!(k.len(), 0);
    }

    #[test]
    fn own_metadata_changes_follow_but_never_go_back_or_change_the_size() {
        let mut k = KeptVersions::default();
        let f = FileId(7);
        k.keep(f, stamp(10, 200), None, 42);
        k.note(f, None, stamp(10, 199)); // an older stat: ignored
        k.note(f, None, stamp(11, 300)); // another size: not a metadata change
        k.note(f, Some(&stamp(10, 200)), stamp(10, 250));
        assert_eq!(k.take(f, &stamp(10, 250), None), 42);
    }

    #[test]
    fn a_change_found_before_ours_drops_the_kept_version() {
        let mut k = KeptVersions::default();
        let f = FileId(7);
        k.keep(f, stamp(10, 200), None, 42);
        // Someone edited the file (ctime 220) before our chmod (ctime 230).
        k.note(f, Some(&stamp(10, 220)), stamp(10, 230));
        assert!(
            !k.contains(f),
            "the outside edit was laundered into the kept version"
        );
        assert_eq!(
            k.take(f, &stamp(10, 230), None),
            version_of(&stamp(10, 230))
        );
    }

    #[test]
    fn the_oldest_go_first_past_the_bound() {
        let mut k = KeptVersions::default();
        for i in 0..(MAX_KEPT as u64 + 1) {
            k.keep(FileId(i), stamp(10, 200), None, 42);
        }
        assert_eq!(k.len(), MAX_KEPT);
        assert!(!k.contains(FileId(0)));
        assert!(k.contains(FileId(MAX_KEPT as u64)));
        assert_eq!(k.order.len(), MAX_KEPT);
    }
}
