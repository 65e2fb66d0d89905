//! What is mounted where, from `/proc/self/mountinfo`: which mounts are tiercache's, and why a
//! path given to `stats`/`unmount`/`flush`/`priority` is not one (no such path, not a mount
//! point, a subdirectory of a mount, another file system).

use std::path::Path;

pub use crate::live::mountinfo::{mounts, MountEntry};

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
