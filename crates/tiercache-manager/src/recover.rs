//! Dirty blocks a persistent tier kept across a restart or a crash, written to BACKING before
//! the mount is served.
//!
//! Each file with dirty blocks in the tier comes with the [`FileMeta`] made durable with them
//! (logical size, mtime, BACKING file handle; see `Persistence::set_file_meta`). The file is
//! opened by its handle (so a rename since does not matter), its blocks are written in offset
//! order, the last one clipped at the logical size, the file extended to that size if it is
//! shorter, synced, its mtime set to the time of the writes; then the blocks are marked clean
//! and the tier synced. Data, size and sync go through the mount's [`BackingIo`], as every
//! other BACKING write does (so recovery leaves no page cache behind either). A file deleted since (`ESTALE`, or no link left) has nowhere to take
//! them: they are dropped. Nothing here goes through the memory tier: no file is open yet.
//!
//! Nothing read from the cache decides where root writes: before anything is written, each
//! record's handle is opened `O_PATH` (no device is opened for real) and the inode it gives
//! must be a regular file, the inode the record names (inode number, and birth time when the
//! record has one), and beneath the BACKING directory (`beneath`: a link to it reached from
//! BACKING without symlinks or other mounts); and no block number may place bytes beyond the
//! largest file offset (`block × block size` is computed checked: wrapped around, it would
//! name another part of the file). A record that fails is refused: its blocks are
//! dropped unwritten, counted (`files_refused`, `blocks_refused`) and logged as an error. When
//! records name files outside BACKING and none names one inside, the cache was most likely
//! used with another BACKING on the same file system: nothing is dropped and the mount is
//! refused, as for a cache whose files are on another device.

use crate::backing::BackingIo;
use crate::beneath::{Backing, Ident};
use crate::handle::open_by_handle;
use std::collections::{BTreeMap, HashSet};
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::path::PathBuf;
use tiercache_tier::TierError;
use tiercache_tier::{DataTier, DirtyBlock, FileKey, RecoveredFile};

/// What recovery did, for the log and `stats`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct RecoveryReport {
    pub files: u64,
    /// Blocks written to BACKING.
    pub blocks_written: u64,
    /// Blocks of files deleted since (or past their logical end): nothing to write.
    pub blocks_dropped: u64,
    /// Blocks of files no handle was kept for: dropped, and logged as an error.
    pub blocks_unplaced: u64,
    /// Blocks the device could not return (they stay dirty there; the mount is refused).
    pub blocks_unreadable: u64,
    /// Files whose record failed the check (its handle opens no regular file beneath BACKING,
    /// or not the inode the record names, or a block lies beyond the largest file offset):
    /// dropped unwritten, and logged as an error.
    pub files_refused: u64,
    /// Their blocks.
    pub blocks_refused: u64,
}

/// Where a recovered file's blocks may go, decided before anything is written.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Verdict {
    /// This inode: a regular file, the one the record names, beneath BACKING.
    Write(Ident),
    /// The record's inode and a regular file, not yet found beneath BACKING (its path did not
    /// lead there): the walk of BACKING decides.
    Walk(Ident),
    /// Not found beneath BACKING.
    Outside(Ident),
    /// Fails the check for the reason given.
    Refused(String),
    /// Deleted since: its handle no longer opens, or no link to it is left.
    Deleted,
    /// No handle was kept.
    NoHandle,
}

/// Why [`clean_recovered`] stopped the mount. Each message starts with the tier's name.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecoverError {
    /// BACKING's root could not be opened or examined.
    #[error("tier {tier}: recovering dirty blocks: {}: {source}", path.display())]
    Backing {
        tier: String,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A recovered file could not be checked or written.
    #[error("tier {tier}: recovering dirty blocks: {source}")]
    File {
        tier: String,
        #[source]
        source: FileError,
    },
    /// The tier could not make its bookkeeping durable.
    #[error("tier {tier}: recovering dirty blocks: {source}")]
    Sync {
        tier: String,
        #[source]
        source: TierError,
    },
    /// Some dirty blocks could not be read from the cache device.
    #[error(
        "tier {tier}: recovering dirty blocks: {blocks} dirty blocks could not be read from \
         the cache device (the rest were written to BACKING); not mounting, so their older \
         bytes on BACKING are not served. `tiercache flash check` the cache; to give those \
         blocks up, remove the cache file"
    )]
    Unreadable { tier: String, blocks: u64 },
}

/// What stopped the recovery of one file (or of the set of them); `file` names it as
/// `file (dev D, inode I)`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FileError {
    /// No recovered file lies beneath BACKING while some lie elsewhere on its file system.
    #[error(
        "none of the files with dirty blocks in the cache lies beneath BACKING ({outside} \
         lie elsewhere on its file system): the cache was used with another BACKING (or its \
         file was tampered with); nothing was written. Mount it over the BACKING it was used \
         with; to give those blocks up, remove the cache file"
    )]
    NoneBeneath { outside: usize },
    /// No handle opens and the files are on another device: another BACKING's cache.
    #[error(
        "{file}: the cache holds dirty blocks of files none of which BACKING knows \
         (open_by_handle_at: {source}), on another device than BACKING's; mount it over the \
         BACKING it was used with"
    )]
    Foreign {
        file: String,
        #[source]
        source: io::Error,
    },
    /// Opening by handle is not permitted.
    #[error(
        "{file}: open_by_handle_at: {source} (reopening files by handle needs \
         CAP_DAC_READ_SEARCH: run tiercache as root)"
    )]
    NeedsCapability {
        file: String,
        #[source]
        source: io::Error,
    },
    /// A system call on the file failed; `step` names it (`open_by_handle_at`, `fstat`,
    /// `writing block N`, `extending to N bytes`, `fsync`).
    #[error("{file}: {step}: {source}")]
    Io {
        file: String,
        step: String,
        #[source]
        source: io::Error,
    },
    /// The record has no file meta.
    #[error("{file}: no file meta")]
    NoMeta { file: String },
    /// The handle opens another inode than the one checked before.
    #[error(
        "{file}: its handle now opens another inode than the one checked; refusing to write \
         there"
    )]
    Moved { file: String },
    /// A block no file can have (checked before anything is written).
    #[error("{file}: block {block} lies beyond any offset")]
    BeyondOffset { file: String, block: u64 },
}

impl FileError {
    fn io(file: &str, step: impl Into<String>) -> impl FnOnce(io::Error) -> Self + '_ {
        let step = step.into();
        move |source| FileError::Io {
            file: file.to_string(),
            step,
            source,
        }
    }
}

/// Writes every dirty block `tier` found at open to BACKING (rooted at `root`) through
/// `device`. An error that leaves dirty data unwritten (BACKING refuses, the daemon may not open
/// by handle) stops the mount: serving BACKING's older bytes would lose acknowledged writes.
pub fn clean_recovered(
    tier: &dyn DataTier,
    root: &Path,
    device: &dyn BackingIo,
) -> Result<RecoveryReport, RecoverError> {
    let mut report = RecoveryReport::default();
    let files = tier
        .persistence()
        .map(|p| p.recovered_files())
        .unwrap_or_default();
    if files.is_empty() {
        return Ok(report);
    }
    let name = tier.info().name.clone();
    let bs = tier.info().block_size as u64;
    let at_root = |source| RecoverError::Backing {
        tier: name.clone(),
        path: root.to_path_buf(),
        source,
    };
    let at = |source| RecoverError::File {
        tier: name.clone(),
        source,
    };
    let root_dir = File::open(root).map_err(at_root)?;
    let root_dev = root_dir.metadata().map_err(at_root)?.dev();
    let backing = Backing::new(root_dir);
    // A cache used with another BACKING: none of its handles opens here, and its files are on
    // another device. (One handle that opens, or a file on BACKING's device, says otherwise:
    // then a handle that does not open is a file deleted since — e.g. in a btrfs subvolume,
    // whose device number differs from BACKING's root.)
    let opens = |rf: &RecoveredFile| {
        rf.meta
            .as_ref()
            .is_some_and(|m| open_by_handle(backing.dir(), &m.handle, libc::O_PATH).is_ok())
    };
    let foreign = !files.iter().any(|rf| rf.file.dev == root_dev || opens(rf));
    let verdicts = check_all(&backing, foreign, &files).map_err(&at)?;
    let mut by_file: BTreeMap<FileKey, Vec<DirtyBlock>> = BTreeMap::new();
    let dirty = tier.cleaning().map(|c| c.dirty_blocks(usize::MAX));
    for b in dirty.unwrap_or_default() {
        by_file.entry(b.key.file).or_default().push(b);
    }
    log::warn!(
        "tier {name}: {} files have dirty blocks from before the restart; writing them to BACKING",
        files.len()
    );
    for (rf, verdict) in files.iter().zip(verdicts) {
        let mut blocks = by_file.remove(&rf.file).unwrap_or_default();
        blocks.sort_by_key(|b| b.key.block);
        report.files += 1;
        let verdict = match (verdict, beyond_any_offset(&blocks, bs)) {
            (Verdict::Write(_), Some(n)) => Verdict::Refused(format!(
                "its dirty block {n} lies beyond the largest file offset (block {n} of {bs} \
                 bytes); the record is corrupt"
            )),
            (v, _) => v,
        };
        match verdict {
            Verdict::Write(ident) => {
                let to = Target {
                    root: backing.dir(),
                    ident,
                    device,
                };
                clean_one(tier, &to, rf, &blocks, &mut report).map_err(&at)?;
            }
            other => give_up(tier, rf, other, &blocks, &mut report),
        }
    }
    finish(tier, &name, &by_file, report)
}

/// After the recovered files: drops the dirty blocks no recovered file claims, syncs the
/// tier, and fails if a block could not be read (serving BACKING's older bytes for it would
/// lose acknowledged writes).
fn finish(
    tier: &dyn DataTier,
    name: &str,
    by_file: &BTreeMap<FileKey, Vec<DirtyBlock>>,
    mut report: RecoveryReport,
) -> Result<RecoveryReport, RecoverError> {
    // Dirty blocks of files not in the list (a tier that reports them only by block).
    let orphans: u64 = by_file.values().map(|v| v.len() as u64).sum();
    if orphans > 0 {
        log::error!("tier {name}: {orphans} dirty blocks belong to no recovered file; dropped");
        for b in by_file.values().flatten() {
            tier.discard(&b.key);
        }
        report.blocks_unplaced += orphans;
    }
    tier.sync().map_err(|source| RecoverError::Sync {
        tier: name.to_string(),
        source,
    })?;
    if report.blocks_unreadable > 0 {
        // Serving BACKING's older bytes for them would lose acknowledged writes.
        return Err(RecoverError::Unreadable {
            tier: name.to_string(),
            blocks: report.blocks_unreadable,
        });
    }
    log::warn!(
        "tier {name}: recovery wrote {} blocks of {} files to BACKING ({} dropped: file deleted \
         or past its end; {} without a file handle; {} of {} files refused: not the regular file \
         beneath BACKING their record names)",
        report.blocks_written,
        report.files,
        report.blocks_dropped,
        report.blocks_unplaced,
        report.blocks_refused,
        report.files_refused
    );
    Ok(report)
}

/// The byte offset of block `block` of `bs` bytes; `None` when no file can have it (beyond
/// the largest file offset, or not even a 64-bit number).
fn block_offset(block: u64, bs: u64) -> Option<u64> {
    block.checked_mul(bs).filter(|&o| o <= i64::MAX as u64)
}

/// The first of `blocks` no file can have ([`block_offset`]): the record holding it is corrupt
/// (or forged), and nothing of it is written.
fn beyond_any_offset(blocks: &[DirtyBlock], bs: u64) -> Option<u64> {
    blocks
        .iter()
        .map(|b| b.key.block.0)
        .find(|&n| block_offset(n, bs).is_none())
}

/// `file (dev D, inode I)`, for messages.
fn describe(rf: &RecoveredFile) -> String {
    format!("file (dev {}, inode {})", rf.file.dev, rf.file.ino)
}

/// The verdict on every recovered file: each record's handle opened and its inode checked,
/// then one walk of BACKING for those whose path did not show them beneath it. Refuses (an
/// error) a cache none of whose files lies beneath BACKING while some lie outside it.
fn check_all(
    backing: &Backing,
    foreign: bool,
    files: &[RecoveredFile],
) -> Result<Vec<Verdict>, FileError> {
    let mut verdicts = files
        .iter()
        .map(|rf| check_one(backing, foreign, rf))
        .collect::<Result<Vec<_>, _>>()?;
    let want: HashSet<Ident> = verdicts
        .iter()
        .filter_map(|v| match v {
            Verdict::Walk(i) => Some(*i),
            _ => None,
        })
        .collect();
    if !want.is_empty() {
        log::info!(
            "{} files with dirty blocks are not placed beneath BACKING by their path; looking \
             for them in BACKING's tree",
            want.len()
        );
        let found = backing.walk(&want);
        for v in &mut verdicts {
            if let Verdict::Walk(i) = *v {
                *v = match found.contains(&i) {
                    true => Verdict::Write(i),
                    false => Verdict::Outside(i),
                };
            }
        }
    }
    let outside = verdicts
        .iter()
        .filter(|v| matches!(v, Verdict::Outside(_)))
        .count();
    if outside > 0 && !verdicts.iter().any(|v| matches!(v, Verdict::Write(_))) {
        return Err(FileError::NoneBeneath { outside });
    }
    Ok(verdicts)
}

/// Opens `rf`'s handle `O_PATH` and checks what it gives: a regular file, the inode the record
/// names, with a link left; then whether its path shows it beneath BACKING. An error stops
/// the mount (the cache belongs to another BACKING, or handles cannot be opened at all).
fn check_one(backing: &Backing, foreign: bool, rf: &RecoveredFile) -> Result<Verdict, FileError> {
    let id = describe(rf);
    let Some(meta) = rf.meta.as_ref().filter(|m| !m.handle.bytes.is_empty()) else {
        return Ok(Verdict::NoHandle);
    };
    let f = match open_by_handle(backing.dir(), &meta.handle, libc::O_PATH) {
        Ok(f) => f,
        Err(e) if matches!(e.raw_os_error(), Some(libc::ESTALE | libc::ENOENT)) && foreign => {
            // Not "deleted": the cache was used with another BACKING.
            return Err(FileError::Foreign {
                file: id,
                source: e,
            });
        }
        Err(e) if matches!(e.raw_os_error(), Some(libc::ESTALE | libc::ENOENT)) => {
            return Ok(Verdict::Deleted)
        }
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
            return Err(FileError::NeedsCapability {
                file: id,
                source: e,
            })
        }
        // A handle the file system cannot even decode: a damaged or forged record.
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            return Ok(Verdict::Refused(format!(
                "its file handle does not decode (open_by_handle_at: {e})"
            )))
        }
        Err(e) => return Err(FileError::io(&id, "open_by_handle_at")(e)),
    };
    let st = f.metadata().map_err(FileError::io(&id, "fstat"))?;
    if !st.file_type().is_file() {
        return Ok(Verdict::Refused(format!(
            "its handle opens a {}, not a regular file",
            kind_of(st.mode())
        )));
    }
    let now = crate::stamp::file_key(&f, crate::stamp::birth_time(&f))
        .map_err(FileError::io(&id, "fstat"))?;
    if now.ino != rf.file.ino {
        return Ok(Verdict::Refused(format!(
            "its handle opens inode {} instead",
            now.ino
        )));
    }
    if rf.file.birth != 0 && now.birth != rf.file.birth {
        return Ok(Verdict::Refused(format!(
            "its handle opens an inode born at {} ns, not at {} ns as recorded",
            now.birth, rf.file.birth
        )));
    }
    if st.nlink() == 0 {
        return Ok(Verdict::Deleted);
    }
    if now.dev != rf.file.dev {
        // Device numbers of some devices (device mapper, btrfs subvolumes, FUSE) are not kept
        // across a reboot; the handle itself only ever opens BACKING's file system.
        log::info!("{id}: now on device {} (numbered anew since)", now.dev);
    }
    let ident = Ident {
        dev: now.dev,
        ino: now.ino,
    };
    Ok(match backing.by_path(&f, ident) {
        true => Verdict::Write(ident),
        false => Verdict::Walk(ident),
    })
}

/// `directory`, `symlink`, ... for messages.
fn kind_of(mode: u32) -> &'static str {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => "directory",
        libc::S_IFLNK => "symlink",
        libc::S_IFCHR => "character device",
        libc::S_IFBLK => "block device",
        libc::S_IFIFO => "fifo",
        libc::S_IFSOCK => "socket",
        _ => "file of unknown type",
    }
}

/// Drops the blocks of a file they cannot be written to, counted by why.
fn give_up(
    tier: &dyn DataTier,
    rf: &RecoveredFile,
    verdict: Verdict,
    blocks: &[DirtyBlock],
    report: &mut RecoveryReport,
) {
    let id = describe(rf);
    let n = blocks.len() as u64;
    match verdict {
        Verdict::Write(_) | Verdict::Walk(_) => return,
        Verdict::Deleted => {
            log::info!("{id}: deleted since; its {n} dirty blocks are dropped");
            report.blocks_dropped += n;
        }
        Verdict::NoHandle => {
            log::error!(
                "{id}: {n} dirty blocks were kept without a file handle; they cannot be placed \
                 and are dropped"
            );
            report.blocks_unplaced += n;
        }
        Verdict::Outside(_) | Verdict::Refused(_) => {
            let why = match verdict {
                Verdict::Refused(why) => why,
                _ => "its handle opens a file that is not beneath BACKING".to_string(),
            };
            log::error!(
                "{id}: {why}; refusing to write there: its {n} dirty blocks are dropped (the \
                 cache file may have been tampered with)"
            );
            report.files_refused += 1;
            report.blocks_refused += n;
        }
    }
    for b in blocks {
        tier.discard(&b.key);
    }
}

/// Where a checked record's blocks go.
struct Target<'a> {
    /// BACKING's root, to open handles from.
    root: &'a File,
    /// The inode [`check_all`] approved.
    ident: Ident,
    device: &'a dyn BackingIo,
}

/// Writes `rf`'s blocks to the inode `to.ident`, reopened read-write by its handle.
fn clean_one(
    tier: &dyn DataTier,
    to: &Target<'_>,
    rf: &RecoveredFile,
    blocks: &[DirtyBlock],
    report: &mut RecoveryReport,
) -> Result<(), FileError> {
    let (root, ident, device) = (to.root, to.ident, to.device);
    let id = describe(rf);
    let Some(meta) = rf.meta.as_ref() else {
        return Err(FileError::NoMeta { file: id });
    };
    let f = match open_by_handle(root, &meta.handle, libc::O_RDWR) {
        Ok(f) => f,
        Err(e) if matches!(e.raw_os_error(), Some(libc::ESTALE | libc::ENOENT)) => {
            // Deleted since it was checked.
            give_up(tier, rf, Verdict::Deleted, blocks, report);
            return Ok(());
        }
        Err(e) => return Err(FileError::io(&id, "open_by_handle_at")(e)),
    };
    let st = f.metadata().map_err(FileError::io(&id, "fstat"))?;
    let file = tiercache_core::FileId(st.ino());
    if Ident::of(&f).ok() != Some(ident) {
        return Err(FileError::Moved { file: id });
    }
    let bs = tier.info().block_size as u64;
    let mut buf = vec![0u8; bs as usize];
    let mut done = Vec::with_capacity(blocks.len());
    let mut end = 0u64;
    for b in blocks {
        // Checked by the caller (`beyond_any_offset`) before anything was written.
        let Some(start) = block_offset(b.key.block.0, bs) else {
            return Err(FileError::BeyondOffset {
                file: id,
                block: b.key.block.0,
            });
        };
        let read = tier
            .cleaning()
            .map_or(Ok(None), |c| c.read_dirty(&b.key, b.version, &mut buf));
        let seq = match read {
            Ok(Some(seq)) => seq,
            Ok(None) => continue,
            Err(e) => {
                log::error!("{id}: block {}: {e}", b.key.block.0);
                report.blocks_unreadable += 1;
                continue;
            }
        };
        if start >= meta.size {
            report.blocks_dropped += 1; // past the logical end: meaningless
        } else {
            let n = (meta.size - start).min(bs);
            device
                .write_at(file, &f, &buf[..n as usize], start)
                .map_err(FileError::io(
                    &id,
                    format!("writing block {}", b.key.block.0),
                ))?;
            end = end.max(start + n);
            report.blocks_written += 1;
        }
        done.push((b.key, seq));
    }
    // Grown only as far as the blocks written reach (a size kept from before a truncation
    // that later records did not see must not grow the file back).
    let want_len = end.min(meta.size);
    if st.len() < want_len {
        device
            .set_len(file, &f, want_len)
            .map_err(FileError::io(&id, format!("extending to {want_len} bytes")))?;
    }
    if let Err(e) = set_mtime_ns(&f, meta.mtime_ns) {
        log::warn!("{id}: setting the mtime after recovery failed: {e}");
    }
    // Data, size and mtime durable before the tier lets its copies go.
    device
        .sync(file, &f, false)
        .map_err(FileError::io(&id, "fsync"))?;
    if let Some(c) = tier.cleaning() {
        for (key, seq) in done {
            c.mark_clean(&key, seq);
        }
    }
    Ok(())
}

/// Sets the mtime (ns since the epoch), leaving the atime.
fn set_mtime_ns(f: &File, ns: i64) -> io::Result<()> {
    let times = [
        libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        libc::timespec {
            tv_sec: ns.div_euclid(1_000_000_000),
            tv_nsec: ns.rem_euclid(1_000_000_000),
        },
    ];
    // SAFETY: `times` is two valid timespecs that outlive the call; `f` keeps its fd open.
    let rc = unsafe { libc::futimens(f.as_raw_fd(), times.as_ptr()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
