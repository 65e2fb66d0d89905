//! Conversion between backing `struct stat` values and FUSE attributes.
//!
//! Invariant: the attributes reported for an inode are the backing file's,
//! except `ino` (the FUSE node id, see `inode.rs`), and `size`, `mtime` and
//! `ctime`, which the data path may override while it holds writes the
//! backing file does not have yet (or has, but got later than the
//! application made them).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{FileAttr, FileType, INodeNo, TimeOrNow};

use crate::data::TimesOverride;

/// Maps the `S_IFMT` bits of a mode to a FUSE file type.
pub(crate) fn kind_from_mode(mode: u32) -> FileType {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFIFO => FileType::NamedPipe,
        libc::S_IFSOCK => FileType::Socket,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFBLK => FileType::BlockDevice,
        _ => FileType::RegularFile,
    }
}

/// Converts seconds + nanoseconds since the epoch (possibly negative) to `SystemTime`.
pub(crate) fn system_time(sec: i64, nsec: i64) -> SystemTime {
    let nsec = u32::try_from(nsec.clamp(0, 999_999_999)).unwrap_or(0);
    if sec >= 0 {
        UNIX_EPOCH + Duration::new(sec.unsigned_abs(), nsec)
    } else {
        // e.g. -1.25 s is stored as sec = -2, nsec = 750_000_000
        UNIX_EPOCH - Duration::new(sec.unsigned_abs(), 0) + Duration::new(0, nsec)
    }
}

/// Builds the FUSE attributes of node `nodeid` from a backing `stat` and the
/// data path's overrides.
pub(crate) fn file_attr(
    nodeid: u64,
    st: &libc::stat,
    size_override: Option<u64>,
    times: TimesOverride,
) -> FileAttr {
    let size = u64::try_from(st.st_size).unwrap_or(0);
    FileAttr {
        ino: INodeNo(nodeid),
        size: size_override.unwrap_or(size),
        blocks: u64::try_from(st.st_blocks).unwrap_or(0),
        atime: system_time(st.st_atime, st.st_atime_nsec),
        mtime: times
            .mtime
            .unwrap_or_else(|| system_time(st.st_mtime, st.st_mtime_nsec)),
        ctime: times
            .ctime
            .unwrap_or_else(|| system_time(st.st_ctime, st.st_ctime_nsec)),
        crtime: UNIX_EPOCH,
        kind: kind_from_mode(st.st_mode),
        perm: (st.st_mode & 0o7777) as u16,
        nlink: u32::try_from(st.st_nlink).unwrap_or(u32::MAX),
        uid: st.st_uid,
        gid: st.st_gid,
        // FUSE carries a 32-bit rdev in the new (major:12/minor:20) encoding.
        rdev: u32::try_from(st.st_rdev).unwrap_or(0),
        blksize: u32::try_from(st.st_blksize).unwrap_or(4096),
        flags: 0,
    }
}

/// Converts a setattr time argument to a `timespec` for `utimensat`.
pub(crate) fn timespec(t: Option<TimeOrNow>) -> libc::timespec {
    match t {
        None => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        Some(TimeOrNow::Now) => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_NOW,
        },
        Some(TimeOrNow::SpecificTime(t)) => match t.duration_since(UNIX_EPOCH) {
            Ok(d) => libc::timespec {
                tv_sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
                tv_nsec: i64::from(d.subsec_nanos()),
            },
            Err(e) => {
                // before the epoch: normalise to a non-negative nanosecond field
                let d = e.duration();
                let mut sec = -i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
                let mut nsec = i64::from(d.subsec_nanos());
                if nsec > 0 {
                    sec -= 1;
                    nsec = 1_000_000_000 - nsec;
                }
                libc::timespec {
                    tv_sec: sec,
                    tv_nsec: nsec,
                }
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negative_times_round_trip() {
        let t = system_time(-2, 750_000_000);
        let ts = timespec(Some(TimeOrNow::SpecificTime(t)));
        assert_eq!((ts.tv_sec, ts.tv_nsec), (-2, 750_000_000));
        let t = system_time(5, 1);
        let ts = timespec(Some(TimeOrNow::SpecificTime(t)));
        assert_eq!((ts.tv_sec, ts.tv_nsec), (5, 1));
        assert_eq!(timespec(None).tv_nsec, libc::UTIME_OMIT);
        assert_eq!(timespec(Some(TimeOrNow::Now)).tv_nsec, libc::UTIME_NOW);
    }

    #[test]
    fn kinds() {
        assert_eq!(kind_from_mode(libc::S_IFDIR | 0o755), FileType::Directory);
        assert_eq!(kind_from_mode(libc::S_IFIFO), FileType::NamedPipe);
        assert_eq!(kind_from_mode(libc::S_IFLNK), FileType::Symlink);
        assert_eq!(kind_from_mode(libc::S_IFREG), FileType::RegularFile);
    }

    #[test]
    fn size_override_wins() {
        // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        st.st_size = 10;
        st.st_mode = libc::S_IFREG | 0o4755;
        let none = TimesOverride::default();
        assert_eq!(file_attr(3, &st, None, none).size, 10);
        assert_eq!(file_attr(3, &st, Some(99), none).size, 99);
        assert_eq!(file_attr(3, &st, None, none).perm, 0o4755);
    }

    #[test]
    fn times_override_wins() {
        // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        st.st_mode = libc::S_IFREG | 0o644;
        st.st_mtime = 10;
        st.st_ctime = 20;
        let a = file_attr(3, &st, None, TimesOverride::default());
        assert_eq!((a.mtime, a.ctime), (system_time(10, 0), system_time(20, 0)));
        let times = TimesOverride {
            mtime: Some(system_time(30, 5)),
            ctime: None,
        };
        let a = file_attr(3, &st, None, times);
        assert_eq!((a.mtime, a.ctime), (system_time(30, 5), system_time(20, 0)));
        let times = TimesOverride {
            mtime: None,
            ctime: Some(system_time(15, 0)),
        };
        let a = file_attr(3, &st, None, times);
        assert_eq!((a.mtime, a.ctime), (system_time(10, 0), system_time(15, 0)));
    }
}
