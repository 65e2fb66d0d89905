//! What identifies a version of a backing file ([`FileStamp`]: size, mtime, ctime, inode
//! number) and an inode itself across inode-number reuse (its birth time), and what identifies a
//! file and its content version in the tiers below memory ([`FileKey`], `version_of`).
//!
//! Why the change time. Size and mtime do not show every edit: whoever writes a file may put
//! its mtime back (`touch -r`, `rsync -t`, `tar x`) and keep its size. The ctime moves with every
//! change of an inode — data, mode, owner, links, extended attributes — and no unprivileged
//! call can set it (only a change of the system clock can make it go back or repeat). Linux has
//! no other change counter userspace can read: `i_version` ("change cookie") is kept internal
//! to the kernel (nfsd, IMA; `STATX_CHANGE_COOKIE` is not in the UAPI headers). So the stamp
//! holds the ctime: an edit behind the cache's back shows at the next `open` even with the size
//! and mtime restored, and the content version lower tiers store blocks with changes with it.
//! The price: every change the cache itself makes to BACKING (write-back, restoring the mtime,
//! truncate, times, mode, owner, xattrs, links, renames) moves the ctime too, so the cache
//! records BACKING's stamp after each of them (see `versions`).

use std::fs::{File, Metadata};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::time::SystemTime;
use tiercache_tier::FileKey;

/// What identifies a version of a backing file: size, modification and change times, inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp {
    pub size: u64,
    pub mtime: SystemTime,
    /// `st_ctime` (seconds and nanoseconds).
    pub ctime: SystemTime,
    pub ino: u64,
}

impl FileStamp {
    /// The stamp of a file as `metadata` describes it.
    pub fn from_metadata(m: &Metadata) -> Self {
        Self {
            size: m.len(),
            mtime: m.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            ctime: crate::times::ctime_of(m),
            ino: m.ino(),
        }
    }

    /// `fstat` of an open file.
    pub fn of_file(f: &File) -> io::Result<Self> {
        Ok(Self::from_metadata(&f.metadata()?))
    }

    /// Whether `self`, read after a change of the cache's own, may replace the recorded `old`:
    /// the same inode, described no earlier (the ctime never goes back but with the clock). A
    /// stat taken before another change of ours, and recorded after it, would otherwise make
    /// the next `open` take our own change for one behind our back.
    pub(crate) fn supersedes(&self, old: &FileStamp) -> bool {
        self.ino == old.ino && self.ctime >= old.ctime
    }
}

/// A birth time, seconds and nanoseconds.
pub(crate) type BirthTime = (i64, u32);

/// The birth time of an open file (`statx` `STATX_BTIME`), `None` when BACKING does not report
/// one (NFS, older file systems) or `statx` fails.
pub(crate) fn birth_time(f: &File) -> Option<BirthTime> {
    // SAFETY: an all-zero `statx` is a valid value of this plain C struct.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: `f` keeps the descriptor open; with AT_EMPTY_PATH and an empty NUL-terminated path
    // statx describes that descriptor and writes only into `stx`, which outlives the call.
    let rc = unsafe {
        libc::statx(
            f.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_BTIME,
            &mut stx,
        )
    };
    (rc == 0 && stx.stx_mask & libc::STATX_BTIME != 0)
        .then_some((stx.stx_btime.tv_sec, stx.stx_btime.tv_nsec))
}

/// Whether `now` is a different inode than the one born at `then` (unknown counts as the same:
/// the stamp alone decides).
pub(crate) fn reborn(then: Option<BirthTime>, now: Option<BirthTime>) -> bool {
    then.is_some() && then != now
}

/// The content version of a file first seen with `stamp` (see `FileState::version`): a
/// fingerprint of size, mtime, ctime and inode number.
pub(crate) fn version_of(stamp: &FileStamp) -> u64 {
    let nanos = |t: SystemTime| {
        t.duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    };
    // splitmix64 over the fields, one round each: cheap, and any change moves every bit.
    let mix = |mut x: u64| {
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^ (x >> 31)
    };
    let x = mix(stamp.size ^ nanos(stamp.mtime).rotate_left(21) ^ stamp.ino.rotate_left(42));
    mix(x ^ nanos(stamp.ctime))
}

/// The identity of an open backing file in the lower tiers: device, inode, birth time.
pub(crate) fn file_key(f: &File, born: Option<BirthTime>) -> io::Result<FileKey> {
    let m = f.metadata()?;
    let birth = born.map_or(0, |(s, ns)| {
        (s.max(0) as u64).saturating_mul(1_000_000_000) + u64::from(ns)
    });
    Ok(FileKey {
        dev: m.dev(),
        ino: m.ino(),
        birth,
    })
}
