//! The mount table (`/proc/self/mountinfo`) as tiercache reads it: which mounts are tiercache's
//! and which BACKING each caches.
//!
//! A tiercache mount's source (its FUSE `fsname`) is `tiercache:` followed by its canonical
//! BACKING path, percent-encoded ([`fs_name_for`]): bytes other than ASCII letters, digits and
//! `/._-~+=:@` become `%XX`, so the source holds no comma, space or backslash whichever way it
//! reaches the kernel (as the `mount(2)` source directly, or inside fusermount's comma-separated
//! option list). Any user can read the table, so mounts of every user are seen alike — and any
//! user may mount a FUSE file system with any source (`fusermount3 -o fsname=...`): who made a
//! FUSE mount is told by the `user_id=` the kernel shows in its super options (`fuse_show_options`
//! in the kernel's `fs/fuse/inode.c`; `fusermount3` sets it to the calling user and refuses one
//! given by the user), never by its source.

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// The source of mounts made before BACKING was recorded in it.
pub const FS_NAME: &str = "tiercache";

/// The prefix of a source that records BACKING.
const PREFIX: &str = "tiercache:";

/// The longest source the kernel takes (`mount(2)` copies at most PATH_MAX bytes, NUL
/// included).
const MAX_SOURCE: usize = 4095;

/// One line of `/proc/self/mountinfo` (octal escapes decoded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    /// The mount's ID (field 1; `statx`'s `STATX_MNT_ID` gives the same number).
    pub id: u64,
    /// `MAJ:MIN` of the mounted file system (one per superblock).
    pub dev: String,
    /// The directory of that file system that is the mount's root.
    pub root: PathBuf,
    pub mount_point: PathBuf,
    pub fs_type: String,
    pub source: String,
    /// For a FUSE mount, the user that made it: the one `user_id=` of its super options.
    /// `None` when they show none or more than one (then it is nobody's).
    pub fuse_owner: Option<u32>,
}

impl MountEntry {
    /// A tiercache mount: FUSE (`fuse`, or `fuse.tiercache` when mounted through fusermount)
    /// with tiercache's source (`tiercache`, or `tiercache:BACKING`).
    pub fn is_tiercache(&self) -> bool {
        (self.fs_type == "fuse" || self.fs_type == "fuse.tiercache")
            && (self.source == FS_NAME || self.source.starts_with(PREFIX))
    }

    /// The canonical BACKING a tiercache mount caches, when its source records one.
    pub fn backing(&self) -> Option<PathBuf> {
        if !self.is_tiercache() {
            return None;
        }
        let encoded = self.source.strip_prefix(PREFIX)?;
        percent_decode(encoded).map(|b| PathBuf::from(OsString::from_vec(b)))
    }

    /// `tmpfs (source tmpfs)`, for messages.
    pub fn describe(&self) -> String {
        format!("a {} file system (source {})", self.fs_type, self.source)
    }
}

/// The FUSE `fsname` of a mount of the canonical `backing`: `tiercache:` and the path,
/// percent-encoded. Errs when the kernel could not take it as a mount source.
pub fn fs_name_for(backing: &Path) -> Result<String, super::error::DaemonError> {
    let mut s = String::from(PREFIX);
    for &b in backing.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"/._-~+=:@".contains(&b) {
            s.push(char::from(b));
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    if s.len() > MAX_SOURCE {
        return Err(super::error::DaemonError::refused(format!(
            "BACKING {}: its path is too long to be recorded in the mount table ({} bytes \
             encoded, at most {MAX_SOURCE})",
            backing.display(),
            s.len()
        )));
    }
    Ok(s)
}

/// Decodes `%XX` escapes; `None` for a malformed one.
fn percent_decode(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Some(out)
}

/// The uid of the one `user_id=N` in a mount's super options; `None` for none, several, or
/// one that is not a number.
fn fuse_owner(super_opts: &str) -> Option<u32> {
    let mut ids = super_opts
        .split(',')
        .filter_map(|o| o.strip_prefix("user_id="));
    let id = ids.next()?.parse().ok()?;
    ids.next().is_none().then_some(id)
}

/// Parses mountinfo text: `ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - TYPE SOURCE
/// SUPEROPTS`. Malformed lines are skipped. Bytes, not text: the kernel writes names as they
/// are (only space, tab, newline and `\\` escaped), and one name that is not UTF-8 must not
/// hide the other mounts.
pub fn parse_mountinfo(text: impl AsRef<[u8]>) -> Vec<MountEntry> {
    let path = |f: &[u8]| PathBuf::from(OsString::from_vec(tiercache_fuse::unescape_mountinfo(f)));
    let text_of =
        |f: &[u8]| String::from_utf8_lossy(&tiercache_fuse::unescape_mountinfo(f)).into_owned();
    text.as_ref()
        .split(|&c| c == b'\n')
        .filter_map(|l| {
            let fields: Vec<&[u8]> = l.split(|&c| c == b' ').collect();
            let dash = fields.iter().position(|f| *f == b"-")?;
            if dash < 5 {
                return None;
            }
            let fs_type = text_of(fields.get(dash + 1)?);
            let owner = fields
                .get(dash + 3)
                .filter(|_| fs_type == "fuse" || fs_type.starts_with("fuse."))
                .and_then(|o| fuse_owner(std::str::from_utf8(o).ok()?));
            Some(MountEntry {
                id: std::str::from_utf8(fields.first()?).ok()?.parse().ok()?,
                dev: String::from_utf8_lossy(fields.get(2)?).into_owned(),
                root: path(fields.get(3)?),
                mount_point: path(fields.get(4)?),
                fs_type,
                source: text_of(fields.get(dash + 2)?),
                fuse_owner: owner,
            })
        })
        .collect()
}

/// The mounts of this process's namespace, in mount order (empty if mountinfo is unreadable).
pub fn mounts() -> Vec<MountEntry> {
    std::fs::read("/proc/self/mountinfo")
        .map(parse_mountinfo)
        .unwrap_or_default()
}

/// Where the canonical directory `path` lies in its file system: the device of the mount it is
/// under (the topmost of the longest mount point above it) and its path from that file
/// system's root. Two paths with the same device are in one file system, whatever bind mounts
/// show them under; `None` when no mount covers `path`.
pub fn fs_location(all: &[MountEntry], path: &Path) -> Option<(String, PathBuf)> {
    let m = all
        .iter()
        .enumerate()
        .filter(|(_, m)| path.starts_with(&m.mount_point))
        .max_by_key(|(i, m)| (m.mount_point.components().count(), *i))?
        .1;
    let rest = path.strip_prefix(&m.mount_point).ok()?;
    Some((m.dev.clone(), m.root.join(rest)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One mount point that is not UTF-8 used to make `mounts()` return nothing at all (the
    /// whole of mountinfo was read as text), weakening the one-mount-per-BACKING check.
    #[test]
    fn a_mount_point_that_is_not_utf8_hides_no_other() {
        let text: &[u8] = b"36 35 98:0 / /mnt/\xff rw - ext4 /dev/sda1 rw\n\
                            40 35 0:50 / /srv/fast rw - fuse tiercache rw,user_id=0\n";
        let m = parse_mountinfo(text);
        assert_eq!(m.len(), 2);
        assert_eq!(
            m[0].mount_point.as_os_str().as_encoded_bytes(),
            b"/mnt/\xff"
        );
        assert!(m[1].is_tiercache());
        assert_eq!(m[1].fuse_owner, Some(0));
    }

    #[test]
    fn parses_type_source_root_and_escapes() {
        let text = "36 35 98:0 / /mnt/a\\040b rw,noatime master:1 - ext4 /dev/sda1 rw\n\
                    40 36 0:50 / /srv/fast rw,nosuid,nodev - fuse tiercache rw,user_id=0\n\
                    41 36 0:51 / /tmp/x rw - tmpfs tmpfs rw,size=1024k\n\
                    42 36 98:0 /data/sub /mnt/bind rw - ext4 /dev/sda1 rw\n\
                    garbage\n";
        let m = parse_mountinfo(text);
        assert_eq!(m.len(), 4);
        assert_eq!(m[0].mount_point, PathBuf::from("/mnt/a b"));
        assert_eq!(
            (m[0].fs_type.as_str(), m[0].source.as_str()),
            ("ext4", "/dev/sda1")
        );
        assert!(m[1].is_tiercache());
        assert_eq!(m[1].backing(), None, "an older mount records no BACKING");
        assert_eq!((m[1].id, m[1].fuse_owner), (40, Some(0)));
        assert_eq!((m[0].id, m[0].fuse_owner), (36, None));
        assert!(!m[2].is_tiercache());
        assert_eq!(
            (m[3].dev.as_str(), m[3].root.as_path()),
            ("98:0", Path::new("/data/sub"))
        );
        let other_fuse = MountEntry {
            id: 9,
            dev: "0:9".into(),
            root: "/".into(),
            mount_point: "/x".into(),
            fs_type: "fuse.sshfs".into(),
            source: "tiercache:/srv".into(),
            fuse_owner: Some(0),
        };
        assert!(!other_fuse.is_tiercache());
        assert_eq!(other_fuse.backing(), None);
    }

    #[test]
    fn a_fuse_mounts_owner_is_its_one_user_id() {
        let line = |ty: &str, opts: &str| {
            parse_mountinfo(format!("7 1 0:9 / /m rw - {ty} tiercache:/b {opts}\n"))[0].fuse_owner
        };
        assert_eq!(line("fuse", "rw,user_id=0,group_id=0"), Some(0));
        assert_eq!(
            line("fuse.tiercache", "rw,user_id=1000,group_id=100"),
            Some(1000)
        );
        assert_eq!(line("fuse", "rw,user_id=1000,user_id=0"), None, "two");
        assert_eq!(line("fuse", "rw,user_id=x"), None);
        assert_eq!(line("fuse", "rw"), None);
        assert_eq!(line("tmpfs", "rw,user_id=0"), None, "not FUSE");
    }

    #[test]
    fn backing_paths_round_trip_through_the_source() {
        let odd = Path::new("/srv/a b,c\\d%e\u{e9}\tf");
        let name = fs_name_for(odd).expect("fits");
        assert!(!name.contains([' ', ',', '\\', '\t']), "{name}");
        // As mountinfo shows it, for a mount made directly and one made through fusermount.
        for fs_type in ["fuse", "fuse.tiercache"] {
            let line = format!("50 36 0:60 / /srv/fast rw - {fs_type} {name} rw,user_id=1000\n");
            let m = parse_mountinfo(&line);
            assert!(m[0].is_tiercache());
            assert_eq!(m[0].backing().as_deref(), Some(odd));
        }
        let long = PathBuf::from(format!("/{}", "x".repeat(5000)));
        assert!(fs_name_for(&long)
            .unwrap_err()
            .to_string()
            .contains("too long"));
    }

    #[test]
    fn a_path_is_located_in_its_file_system_through_bind_mounts() {
        let text = "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n\
                    2 1 8:2 / /data rw - ext4 /dev/sda2 rw\n\
                    3 1 8:2 /x/y /mnt/b rw - ext4 /dev/sda2 rw\n\
                    4 1 0:5 / /mnt/b rw - tmpfs t rw\n\
                    5 1 8:2 /x /mnt/bb rw - ext4 /dev/sda2 rw\n";
        let all = parse_mountinfo(text);
        let at = |p: &str| fs_location(&all, Path::new(p)).expect("covered");
        assert_eq!(at("/data/x/y/z"), ("8:2".into(), PathBuf::from("/x/y/z")));
        assert_eq!(at("/mnt/bb/y"), ("8:2".into(), PathBuf::from("/x/y")));
        // The topmost of two mounts at one mount point.
        assert_eq!(at("/mnt/b/q"), ("0:5".into(), PathBuf::from("/q")));
        assert_eq!(at("/etc"), ("8:1".into(), PathBuf::from("/etc")));
    }
}
