//! What is mounted where, from `/proc/self/mountinfo`: which mounts are tiercache's, and why a
//! path given to `stats`/`unmount`/`flush`/`priority` is not one (no such path, not a mount
//! point, a subdirectory of a mount, another file system).

use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

/// The source (`fs_name`) tiercache mounts with (`tiercache_fuse::MountOptions::default`).
pub const FS_NAME: &str = "tiercache";

/// One line of `/proc/self/mountinfo` (octal escapes decoded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    pub mount_point: PathBuf,
    pub fs_type: String,
    pub source: String,
}

impl MountEntry {
    /// A tiercache mount: FUSE (`fuse`, or `fuse.tiercache` when mounted through fusermount3)
    /// with tiercache's fsname as its source.
    pub fn is_tiercache(&self) -> bool {
        (self.fs_type == "fuse" || self.fs_type == "fuse.tiercache") && self.source == FS_NAME
    }

    /// `tmpfs (source tmpfs)`, for messages.
    pub fn describe(&self) -> String {
        format!("a {} file system (source {})", self.fs_type, self.source)
    }
}

/// Parses mountinfo text: `ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - TYPE SOURCE
/// SUPEROPTS`. Malformed lines are skipped.
pub fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    text.lines()
        .filter_map(|l| {
            let fields: Vec<&str> = l.split(' ').collect();
            let mp = fields.get(4)?;
            let dash = fields.iter().position(|f| *f == "-")?;
            let fs_type = fields.get(dash + 1)?;
            let source = fields.get(dash + 2)?;
            Some(MountEntry {
                mount_point: PathBuf::from(<std::ffi::OsString as OsStringExt>::from_vec(
                    tiercache_fuse::unescape_mountinfo(mp),
                )),
                fs_type: String::from_utf8_lossy(&tiercache_fuse::unescape_mountinfo(fs_type))
                    .into_owned(),
                source: String::from_utf8_lossy(&tiercache_fuse::unescape_mountinfo(source))
                    .into_owned(),
            })
        })
        .collect()
}

/// The mounts of this process's namespace, in mount order (empty if mountinfo is unreadable).
pub fn mounts() -> Vec<MountEntry> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .map(|t| parse_mountinfo(&t))
        .unwrap_or_default()
}

/// The mount visible at `path` (the last one mounted there), if `path` is a mount point.
pub fn mount_at(path: &Path) -> Option<MountEntry> {
    mounts().into_iter().rev().find(|m| m.mount_point == path)
}

/// Whether `path` is a mount point now.
pub fn is_mounted(path: &Path) -> bool {
    mount_at(path).is_some()
}

/// Why `given` (canonical form `canon`) is not a tiercache mount point, as one line; `None` if
/// it is one (its daemon may still be dead or hung).
pub fn not_a_tiercache_mount(given: &Path, canon: &Path) -> Option<String> {
    let all = mounts();
    if let Some(m) = all.iter().rev().find(|m| m.mount_point == canon) {
        return (!m.is_tiercache()).then(|| {
            format!(
                "{}: not a tiercache mount ({} is mounted there)",
                given.display(),
                m.describe()
            )
        });
    }
    // Not a mount point: a missing path, a plain directory, or a directory inside a mount.
    if let Err(e) = std::fs::symlink_metadata(canon) {
        if e.kind() == std::io::ErrorKind::NotFound {
            return Some(format!("{}: no such file or directory", given.display()));
        }
    }
    let inside = all
        .iter()
        .rev()
        .filter(|m| m.is_tiercache() && canon.starts_with(&m.mount_point))
        .max_by_key(|m| m.mount_point.as_os_str().len());
    Some(match inside {
        Some(m) => format!(
            "{}: a subdirectory of the tiercache mount {}; give the mount point itself",
            given.display(),
            m.mount_point.display()
        ),
        None => format!(
            "{}: not a mount point (no tiercache mount there)",
            given.display()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_type_source_and_escapes() {
        let text = "36 35 98:0 / /mnt/a\\040b rw,noatime master:1 - ext4 /dev/sda1 rw\n\
                    40 36 0:50 / /srv/fast rw,nosuid,nodev - fuse tiercache rw,user_id=0\n\
                    41 36 0:51 / /tmp/x rw - tmpfs tmpfs rw,size=1024k\n\
                    garbage\n";
        let m = parse_mountinfo(text);
        assert_eq!(m.len(), 3);
        assert_eq!(m[0].mount_point, PathBuf::from("/mnt/a b"));
        assert_eq!(
            (m[0].fs_type.as_str(), m[0].source.as_str()),
            ("ext4", "/dev/sda1")
        );
        assert!(m[1].is_tiercache());
        assert!(!m[2].is_tiercache());
        let other_fuse = MountEntry {
            mount_point: "/x".into(),
            fs_type: "fuse.sshfs".into(),
            source: "tiercache".into(),
        };
        assert!(!other_fuse.is_tiercache());
    }
}
