//! Clearing set-user-ID and set-group-ID when a file is written, as the kernel does for a
//! local file system.
//!
//! Who does it depends on the I/O mode. Through the page cache (`--kernel-cache`) the kernel
//! calls `file_remove_privs` before a write and, since we negotiate neither
//! `FUSE_HANDLE_KILLPRIV` nor `FUSE_HANDLE_KILLPRIV_V2`, sends a SETATTR with the reduced mode;
//! truncate, `open(O_TRUNC)` and chown work the same way in both modes. A direct-I/O write
//! (our default) is sent as is, with `FUSE_WRITE_KILL_SUIDGID` in its write flags when the
//! writer lacks `CAP_FSETID`, and the server must clear the bits. `write()` does that here,
//! before the data is written, with the kernel's rule (`setattr_should_drop_suidgid`):
//! set-user-ID always; set-group-ID when group-execute is set, or when the writer is not in
//! the file's group (a set-group-ID file without group-execute, a mandatory-locking marker, is
//! kept for group members). Only regular files.
//!
//! We do not negotiate KILLPRIV_V2 because fuser 0.18 does not pass on the two other flags it
//! relies on (`FUSE_OPEN_KILL_SUIDGID` in open, `FATTR_KILL_SUIDGID` in setattr); without it
//! the kernel keeps those cases to itself, which is what we want.

use crate::data::{BackingStamp, DataPath};
use std::fs::{File, Permissions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

/// The mode bits a write by a caller without `CAP_FSETID` must clear from a file with mode
/// `mode` and group `file_gid`; `in_group(gid)` tells whether the caller is in group `gid`
/// (asked only for a set-group-ID file without group-execute).
pub(crate) fn bits_to_clear(mode: u32, file_gid: u32, in_group: impl FnOnce(u32) -> bool) -> u32 {
    if mode & libc::S_IFMT != libc::S_IFREG {
        return 0;
    }
    let mut clear = mode & libc::S_ISUID;
    if mode & libc::S_ISGID != 0 && (mode & libc::S_IXGRP != 0 || !in_group(file_gid)) {
        clear |= libc::S_ISGID;
    }
    clear
}

/// Clears, through `data` (so a caching data path records the change as its own), the
/// set-ID bits that a write by a caller without `CAP_FSETID` must clear from the open regular
/// `file` (node `ino`); `in_group(gid)` tells whether the writer is in group `gid`. For every
/// writer that does not come through the kernel's write path (zero-copy clients' commits).
pub fn clear_setid_for_write(
    data: &dyn DataPath,
    ino: u64,
    file: &File,
    in_group: &dyn Fn(u32) -> bool,
) -> io::Result<()> {
    let m = file.metadata()?;
    let clear = bits_to_clear(m.mode(), m.gid(), in_group);
    if clear == 0 {
        return Ok(());
    }
    let mode = Permissions::from_mode(m.mode() & 0o7777 & !clear);
    data.change_metadata(ino, &mut || file.set_permissions(mode.clone()), &mut || {
        crate::sys::fstat(file.as_raw_fd()).map(|st| BackingStamp::of(&st))
    })
}

/// Whether the process (thread) `pid`, whose fsgid is `fsgid`, is in group `gid`: its fsgid or
/// one of its supplementary groups (from `/proc/PID/status`). When they cannot be read the
/// answer is no, so the bit is cleared: the safe side.
fn caller_in_group(pid: u32, fsgid: u32, gid: u32) -> bool {
    if fsgid == gid {
        return true;
    }
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .is_some_and(|groups| {
            groups
                .split_whitespace()
                .any(|g| g.parse::<u32>().ok() == Some(gid))
        })
}

/// Clears what a write by the caller `(pid, fsgid)`, which the kernel flagged with
/// `FUSE_WRITE_KILL_SUIDGID`, must clear from the open regular `file` (node `ino`).
pub(crate) fn clear_for_caller(
    data: &dyn DataPath,
    ino: u64,
    file: &File,
    pid: u32,
    fsgid: u32,
) -> io::Result<()> {
    clear_setid_for_write(data, ino, file, &|gid| caller_in_group(pid, fsgid, gid))
}

#[cfg(test)]
mod tests {
    use super::*;

    const REG: u32 = libc::S_IFREG;

    #[test]
    fn suid_always_sgid_with_group_exec_or_outside_the_group() {
        let member = |_| true;
        let outsider = |_| false;
        assert_eq!(bits_to_clear(REG | 0o4777, 0, member), libc::S_ISUID);
        assert_eq!(bits_to_clear(REG | 0o2777, 0, member), libc::S_ISGID);
        assert_eq!(bits_to_clear(REG | 0o6777, 0, member), 0o6000);
        // set-group-ID without group-execute: kept for members, cleared for others
        assert_eq!(bits_to_clear(REG | 0o2767, 0, member), 0);
        assert_eq!(bits_to_clear(REG | 0o2767, 0, outsider), libc::S_ISGID);
        assert_eq!(bits_to_clear(REG | 0o0777, 0, outsider), 0);
        assert_eq!(bits_to_clear(libc::S_IFDIR | 0o6777, 0, outsider), 0);
    }

    #[test]
    fn a_caller_is_in_its_fsgid_and_its_supplementary_groups() {
        let pid = std::process::id();
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let groups: Vec<u32> = status
            .lines()
            .find_map(|l| l.strip_prefix("Groups:"))
            .map(|g| {
                g.split_whitespace()
                    .filter_map(|g| g.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        for g in &groups {
            assert!(caller_in_group(pid, 4_000_000_000, *g), "group {g}");
        }
        assert!(caller_in_group(pid, 777, 777));
        assert!(!caller_in_group(pid, 777, 4_000_000_001));
        assert!(!caller_in_group(u32::MAX, 1, 2));
    }
}
