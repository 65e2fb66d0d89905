//! Pre-mount validation of BACKING and MOUNTPOINT.
//!
//! Nothing is mounted unless every check passes: both paths exist and are
//! directories, neither contains the other, the mount point is not already a
//! mount point (per `/proc/self/mountinfo`) and is empty.

use std::io;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

use crate::error::FuseError;

/// Canonical `(backing, mountpoint)` after all checks passed.
pub(crate) fn validate(backing: &Path, mountpoint: &Path) -> Result<(PathBuf, PathBuf), FuseError> {
    let io_err = |path: &Path, source: io::Error| FuseError::Io {
        path: path.to_path_buf(),
        source,
    };
    match std::fs::metadata(backing) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(FuseError::BackingNotDir(backing.to_path_buf())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(FuseError::BackingMissing(backing.to_path_buf()))
        }
        Err(e) => return Err(io_err(backing, e)),
    }
    match std::fs::metadata(mountpoint) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(FuseError::MountpointNotDir(mountpoint.to_path_buf())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(FuseError::MountpointMissing(mountpoint.to_path_buf()))
        }
        Err(e) => return Err(io_err(mountpoint, e)),
    }
    let b = backing.canonicalize().map_err(|e| io_err(backing, e))?;
    let m = mountpoint
        .canonicalize()
        .map_err(|e| io_err(mountpoint, e))?;
    if m.starts_with(&b) || b.starts_with(&m) {
        return Err(FuseError::Overlap {
            backing: b,
            mountpoint: m,
        });
    }
    let info = std::fs::read("/proc/self/mountinfo")
        .map_err(|e| io_err(Path::new("/proc/self/mountinfo"), e))?;
    if mount_points(&info).any(|p| p == m) {
        return Err(FuseError::AlreadyMounted(m));
    }
    let mut entries = std::fs::read_dir(&m).map_err(|e| io_err(&m, e))?;
    if entries.next().is_some() {
        return Err(FuseError::MountpointNotEmpty(m));
    }
    Ok((b, m))
}

/// Mount points listed in mountinfo (field 5, octal escapes decoded). Bytes: names that are
/// not UTF-8 are written as they are.
pub(crate) fn mount_points(info: &[u8]) -> impl Iterator<Item = PathBuf> + '_ {
    info.split(|&c| c == b'\n')
        .filter_map(|line| line.split(|&c| c == b' ').nth(4))
        .map(|f| PathBuf::from(std::ffi::OsString::from_vec(unescape_mountinfo(f))))
}

/// Decodes the `\ooo` escapes mountinfo uses for space, tab, newline, `\` in one field
/// (an escape above `\377` is kept as text).
pub fn unescape_mountinfo(field: impl AsRef<[u8]>) -> Vec<u8> {
    let b = field.as_ref();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = u32::from(b[i + 1] - b'0') * 64
                + u32::from(b[i + 2] - b'0') * 8
                + u32::from(b[i + 3] - b'0');
            if let Ok(v) = u8::try_from(v) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_mountinfo_with_escapes() {
        let info = "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n\
                    40 22 0:5 / /mnt/a\\040b rw,nosuid - fuse x rw\n\
                    41 22 0:6 / /x\\134y\\ rw - tmpfs t rw\n";
        let v: Vec<_> = mount_points(info.as_bytes()).collect();
        assert_eq!(
            v,
            vec![
                PathBuf::from("/"),
                PathBuf::from("/mnt/a b"),
                PathBuf::from("/x\\y\\")
            ]
        );
    }

    /// A mount point whose name is not UTF-8 (the kernel writes it as it is) used to make
    /// every mount fail: mountinfo was read as text.
    #[test]
    fn a_mount_point_that_is_not_utf8_hides_no_other() {
        let info = b"22 1 8:1 / / rw - ext4 /dev/sda1 rw\n\
                     40 22 0:5 / /mnt/\xff\xfe rw - tmpfs t rw\n\
                     41 22 0:6 / /srv/fast rw - fuse x rw\n";
        let v: Vec<_> = mount_points(info).collect();
        assert_eq!(v.len(), 3);
        assert_eq!(
            v[1].as_os_str().as_encoded_bytes(),
            b"/mnt/\xff\xfe".as_slice()
        );
        assert_eq!(v[2], PathBuf::from("/srv/fast"));
    }
}
