//! One mount per BACKING: each mount is a write-back cache, so two over one tree — the same
//! directory, or one inside the other — would each write back their own view and lose the
//! other's writes.
//!
//! A running mount is found in the mount table: its source records its canonical BACKING
//! (`mountinfo::fs_name_for`), readable by every user. Any user can make a FUSE mount with such
//! a source, so only mounts made by root or by the daemon's own user count (the `user_id=` the
//! kernel shows for a FUSE mount; another user's mount, real or fake, neither blocks nor is
//! checked). A new mount's BACKING conflicts with a counted mount's when the canonical paths
//! are equal or one lies beneath the other (whole components), or when their places in their
//! file system are (same device in the mount table, and one path from that file system's root
//! beneath the other — which sees through bind mounts). The check and the FUSE mount are one
//! step for the other daemons of the same user: a lock only that user can take
//! ([`super::mount_lock`]) is held from before the check until the new mount is in the table.
//! Daemons of different users are not ordered by it; none is needed: a daemon run by root
//! counts only root's mounts, and one run by another user counts root's mounts and its own.
//! The mount table belongs to a mount namespace: daemons in other namespaces are not seen.

use super::mount_lock::{self, MountLock};
use super::mountinfo::{self, MountEntry};
use std::path::{Path, PathBuf};

/// How a new BACKING relates to a running mount's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Overlap {
    Same,
    /// The new BACKING lies inside the running mount's.
    Inside,
    /// The new BACKING holds the running mount's.
    Above,
}

/// The right to mount BACKING: no running mount caches it or any directory above or beneath
/// it. Hold it until the FUSE mount exists; dropping it lets the next daemon check.
#[derive(Debug)]
pub struct Claim {
    _lock: MountLock,
}

/// Takes the lock and checks the canonical `backing` against every running tiercache mount
/// made by root or this user; the error names the mount in the way (its mount point and
/// BACKING).
pub fn claim(backing: &Path) -> Result<Claim, super::error::DaemonError> {
    let lock = mount_lock::take(&super::control::runtime_dir(), backing)?;
    let all = mountinfo::mounts();
    // SAFETY: getuid has no preconditions and cannot fail.
    let me = unsafe { libc::getuid() };
    if let Some((m, theirs, how)) = conflict(&all, me, backing) {
        let relation = match how {
            Overlap::Same => "is the BACKING of",
            Overlap::Inside => "lies inside the BACKING",
            Overlap::Above => "holds the BACKING",
        };
        let of = if how == Overlap::Same { "" } else { " of" };
        return Err(super::error::DaemonError::refused(format!(
            "BACKING {}: {relation}{of} the tiercache mount on {} (BACKING {}); two caches \
             over one tree lose each other's writes: unmount it first (`tiercache unmount {}`; \
             add --force if its daemon is gone)",
            backing.display(),
            m.mount_point.display(),
            theirs.display(),
            m.mount_point.display()
        )));
    }
    Ok(Claim { _lock: lock })
}

/// The first running tiercache mount made by root or by `uid` whose BACKING overlaps the
/// canonical `ours`, with its BACKING and how.
fn conflict(all: &[MountEntry], uid: u32, ours: &Path) -> Option<(MountEntry, PathBuf, Overlap)> {
    let our_place = mountinfo::fs_location(all, ours);
    all.iter().find_map(|m| {
        if !matches!(m.fuse_owner, Some(o) if o == 0 || o == uid) {
            return None;
        }
        let theirs = m.backing()?;
        let their_place = mountinfo::fs_location(all, &theirs);
        let how = overlap(ours, &theirs).or_else(|| match (&our_place, &their_place) {
            (Some((d1, p1)), Some((d2, p2))) if d1 == d2 => overlap(p1, p2),
            _ => None,
        })?;
        Some((m.clone(), theirs, how))
    })
}

/// How `ours` relates to `theirs` by whole path components.
fn overlap(ours: &Path, theirs: &Path) -> Option<Overlap> {
    if ours == theirs {
        Some(Overlap::Same)
    } else if ours.starts_with(theirs) {
        Some(Overlap::Inside)
    } else if theirs.starts_with(ours) {
        Some(Overlap::Above)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mount table with tiercache mounts made by root of `(BACKING, mount point)`.
    fn table(backings: &[(&str, &str)]) -> Vec<MountEntry> {
        let owned: Vec<_> = backings.iter().map(|&(b, mp)| (b, mp, 0)).collect();
        table_by(&owned)
    }

    /// The same with each mount made by the uid given.
    fn table_by(backings: &[(&str, &str, u32)]) -> Vec<MountEntry> {
        let mut text = String::from(
            "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n\
             2 1 8:1 /data/sub /mnt/bind rw - ext4 /dev/sda1 rw\n",
        );
        for (i, (b, mp, uid)) in backings.iter().enumerate() {
            let name = mountinfo::fs_name_for(Path::new(b)).expect("fits");
            text.push_str(&format!(
                "{} 1 0:{} / {mp} rw - fuse {name} rw,user_id={uid},group_id={uid}\n",
                10 + i,
                40 + i
            ));
        }
        mountinfo::parse_mountinfo(&text)
    }

    #[test]
    fn same_inside_and_above_conflict_and_siblings_do_not() {
        let all = table(&[("/data/a", "/srv/fast")]);
        let how =
            |p: &str| conflict(&all, 0, Path::new(p)).map(|(m, b, how)| (m.mount_point, b, how));
        let hit = |o| Some((PathBuf::from("/srv/fast"), PathBuf::from("/data/a"), o));
        assert_eq!(how("/data/a"), hit(Overlap::Same));
        assert_eq!(how("/data/a/b/c"), hit(Overlap::Inside));
        assert_eq!(how("/data"), hit(Overlap::Above));
        assert_eq!(how("/"), hit(Overlap::Above));
        assert_eq!(how("/data/ab"), None, "a sibling sharing a prefix");
        assert_eq!(how("/data/b"), None);
    }

    #[test]
    fn a_bind_mount_of_the_same_tree_conflicts() {
        // /mnt/bind shows /data/sub of the root file system.
        let all = table(&[("/data", "/srv/fast")]);
        let (m, _, how) = conflict(&all, 0, Path::new("/mnt/bind/x")).expect("conflict");
        assert_eq!(
            (m.mount_point.as_path(), how),
            (Path::new("/srv/fast"), Overlap::Inside)
        );
        let all = table(&[("/mnt/bind", "/srv/fast")]);
        assert_eq!(
            conflict(&all, 0, Path::new("/data/sub")).map(|c| c.2),
            Some(Overlap::Same)
        );
        assert_eq!(
            conflict(&all, 0, Path::new("/data")).map(|c| c.2),
            Some(Overlap::Above)
        );
        assert_eq!(
            conflict(&all, 0, Path::new("/data/other")).map(|c| c.2),
            None
        );
    }

    #[test]
    fn mounts_that_record_no_backing_and_other_file_systems_are_ignored() {
        let text = "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n\
                    2 1 0:40 / /srv/old rw - fuse tiercache rw,user_id=0\n\
                    3 1 0:41 / /srv/sshfs rw - fuse.sshfs tiercache:/data rw,user_id=0\n";
        let all = mountinfo::parse_mountinfo(text);
        assert!(conflict(&all, 0, Path::new("/data")).is_none());
    }

    #[test]
    fn only_mounts_made_by_root_or_this_user_count() {
        let all = table_by(&[("/data/a", "/srv/u", 1000), ("/data/b", "/srv/n", 65534)]);
        let at = |uid, p: &str| conflict(&all, uid, Path::new(p)).map(|c| c.0.mount_point);
        assert_eq!(
            at(0, "/data/a"),
            None,
            "root does not count uid 1000's mount"
        );
        assert_eq!(at(1000, "/data/a"), Some(PathBuf::from("/srv/u")));
        assert_eq!(at(1000, "/data/b"), None, "nor uid 1000 uid 65534's");
        let all = table_by(&[("/data/a", "/srv/r", 0)]);
        assert_eq!(
            conflict(&all, 1000, Path::new("/data")).map(|c| c.0.mount_point),
            Some(PathBuf::from("/srv/r")),
            "root's mount counts for everyone"
        );
        // A FUSE mount whose super options show no single owner counts for nobody.
        let name = mountinfo::fs_name_for(Path::new("/data/a")).expect("fits");
        let text = format!(
            "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n\
             5 1 0:50 / /srv/x rw - fuse {name} rw,user_id=1000,user_id=0\n\
             6 1 0:51 / /srv/y rw - fuse {name} rw\n"
        );
        let all = mountinfo::parse_mountinfo(&text);
        assert!(conflict(&all, 0, Path::new("/data/a")).is_none());
    }
}
