//! One mount per BACKING: each mount is a write-back cache, so two over one tree — the same
//! directory, or one inside the other — would each write back their own view and lose the
//! other's writes.
//!
//! A running mount is found in the mount table: its source records its canonical BACKING
//! (`mountinfo::fs_name_for`), readable by every user. A new mount's BACKING conflicts with a
//! running mount's when the canonical paths are equal or one lies beneath the other (whole
//! components), or when their places in their file system are (same device in the mount table,
//! and one path from that file system's root beneath the other — which sees through bind
//! mounts). The check and the FUSE mount are one step for every other starting daemon: a lock
//! any user can take (binding an abstract Unix socket; the kernel frees it when its holder
//! exits, however it exits) is held from before the check until the new mount is in the table.
//! Abstract sockets belong to a network namespace and the mount table to a mount namespace:
//! daemons in other namespaces are not seen.

use super::mountinfo::{self, MountEntry};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The lock's abstract socket name.
const LOCK_NAME: &str = "tiercache-mount-lock";

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
    _lock: UnixDatagram,
}

/// Takes the lock and checks the canonical `backing` against every running tiercache mount;
/// the error names the mount in the way (its mount point and BACKING).
pub fn claim(backing: &Path) -> Result<Claim, String> {
    let lock = take_lock()?;
    let all = mountinfo::mounts();
    if let Some((m, theirs, how)) = conflict(&all, backing) {
        let relation = match how {
            Overlap::Same => "is the BACKING of",
            Overlap::Inside => "lies inside the BACKING",
            Overlap::Above => "holds the BACKING",
        };
        let of = if how == Overlap::Same { "" } else { " of" };
        return Err(format!(
            "BACKING {}: {relation}{of} the tiercache mount on {} (BACKING {}); two caches \
             over one tree lose each other's writes: unmount it first (`tiercache unmount {}`; \
             add --force if its daemon is gone)",
            backing.display(),
            m.mount_point.display(),
            theirs.display(),
            m.mount_point.display()
        ));
    }
    Ok(Claim { _lock: lock })
}

/// The first running tiercache mount whose BACKING overlaps the canonical `ours`, with its
/// BACKING and how.
fn conflict(all: &[MountEntry], ours: &Path) -> Option<(MountEntry, PathBuf, Overlap)> {
    let our_place = mountinfo::fs_location(all, ours);
    all.iter().find_map(|m| {
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

/// Binds the lock's abstract socket, waiting while another daemon holds it (it is held from a
/// daemon's check until its mount exists, which includes writing back an SSD tier's dirty
/// blocks from before a crash).
fn take_lock() -> Result<UnixDatagram, String> {
    let addr = SocketAddr::from_abstract_name(LOCK_NAME.as_bytes())
        .map_err(|e| format!("the mount lock @{LOCK_NAME}: {e}"))?;
    let start = Instant::now();
    let mut next_note = Duration::from_secs(1);
    loop {
        match UnixDatagram::bind_addr(&addr) {
            Ok(s) => return Ok(s),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                if start.elapsed() >= next_note {
                    log::info!(
                        "waiting {} s for another tiercache mount that is starting (mounts are \
                         checked against each other one at a time: abstract socket \
                         @{LOCK_NAME})",
                        start.elapsed().as_secs()
                    );
                    next_note *= 4;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(format!("the mount lock @{LOCK_NAME}: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(backings: &[(&str, &str)]) -> Vec<MountEntry> {
        let mut text = String::from(
            "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n\
             2 1 8:1 /data/sub /mnt/bind rw - ext4 /dev/sda1 rw\n",
        );
        for (i, (b, mp)) in backings.iter().enumerate() {
            let name = mountinfo::fs_name_for(Path::new(b)).expect("fits");
            text.push_str(&format!(
                "{} 1 0:{} / {mp} rw - fuse {name} rw\n",
                10 + i,
                40 + i
            ));
        }
        mountinfo::parse_mountinfo(&text)
    }

    #[test]
    fn same_inside_and_above_conflict_and_siblings_do_not() {
        let all = table(&[("/data/a", "/srv/fast")]);
        let how = |p: &str| conflict(&all, Path::new(p)).map(|(m, b, how)| (m.mount_point, b, how));
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
        let (m, _, how) = conflict(&all, Path::new("/mnt/bind/x")).expect("conflict");
        assert_eq!(
            (m.mount_point.as_path(), how),
            (Path::new("/srv/fast"), Overlap::Inside)
        );
        let all = table(&[("/mnt/bind", "/srv/fast")]);
        assert_eq!(
            conflict(&all, Path::new("/data/sub")).map(|c| c.2),
            Some(Overlap::Same)
        );
        assert_eq!(
            conflict(&all, Path::new("/data")).map(|c| c.2),
            Some(Overlap::Above)
        );
        assert_eq!(conflict(&all, Path::new("/data/other")).map(|c| c.2), None);
    }

    #[test]
    fn mounts_that_record_no_backing_and_other_file_systems_are_ignored() {
        let text = "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n\
                    2 1 0:40 / /srv/old rw - fuse tiercache rw\n\
                    3 1 0:41 / /srv/sshfs rw - fuse.sshfs tiercache:/data rw\n";
        let all = mountinfo::parse_mountinfo(text);
        assert!(conflict(&all, Path::new("/data")).is_none());
    }
}
