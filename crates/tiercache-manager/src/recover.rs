//! Dirty blocks a persistent tier kept across a restart or a crash, written to BACKING before
//! the mount is served.
//!
//! Each file with dirty blocks in the tier comes with the [`FileMeta`] made durable with them
//! (logical size, mtime, BACKING file handle; see `DataTier::set_file_meta`). The file is
//! opened by its handle (so a rename since does not matter), its blocks are written in offset
//! order, the last one clipped at the logical size, the file extended to that size if it is
//! shorter, synced, its mtime set to the time of the writes; then the blocks are marked clean
//! and the tier synced. A file deleted since (`ESTALE`) has nowhere to take them: they are
//! dropped. Nothing here goes through the memory tier: no file is open yet.

use crate::handle::open_by_handle;
use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
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
}

/// Writes every dirty block `tier` found at open to BACKING (rooted at `root`). An error that
/// leaves dirty data unwritten (BACKING refuses, the daemon may not open by handle) stops the
/// mount: serving BACKING's older bytes would lose acknowledged writes.
pub fn clean_recovered(tier: &dyn DataTier, root: &Path) -> Result<RecoveryReport, String> {
    let mut report = RecoveryReport::default();
    let files = tier.recovered_files();
    if files.is_empty() {
        return Ok(report);
    }
    let name = tier.info().name.clone();
    let at = |e: String| format!("tier {name}: recovering dirty blocks: {e}");
    let root_dir = File::open(root).map_err(|e| at(format!("{}: {e}", root.display())))?;
    let root_dev = root_dir
        .metadata()
        .map_err(|e| at(format!("{}: {e}", root.display())))?
        .dev();
    // A cache used with another BACKING: none of its handles opens here, and its files are on
    // another device. (One handle that opens, or a file on BACKING's device, says otherwise:
    // then a handle that does not open is a file deleted since — e.g. in a btrfs subvolume,
    // whose device number differs from BACKING's root.)
    let opens = |rf: &RecoveredFile| {
        rf.meta
            .as_ref()
            .is_some_and(|m| open_by_handle(&root_dir, &m.handle, libc::O_RDONLY).is_ok())
    };
    let foreign = !files.iter().any(|rf| rf.file.dev == root_dev || opens(rf));
    let mut by_file: BTreeMap<FileKey, Vec<DirtyBlock>> = BTreeMap::new();
    for b in tier.dirty_blocks(usize::MAX) {
        by_file.entry(b.key.file).or_default().push(b);
    }
    log::warn!(
        "tier {name}: {} files have dirty blocks from before the restart; writing them to BACKING",
        files.len()
    );
    for rf in &files {
        let mut blocks = by_file.remove(&rf.file).unwrap_or_default();
        blocks.sort_by_key(|b| b.key.block);
        report.files += 1;
        clean_one(tier, &root_dir, foreign, rf, &blocks, &mut report).map_err(&at)?;
    }
    // Dirty blocks of files not in the list (a tier that reports them only by block).
    let orphans: u64 = by_file.values().map(|v| v.len() as u64).sum();
    if orphans > 0 {
        log::error!("tier {name}: {orphans} dirty blocks belong to no recovered file; dropped");
        for b in by_file.values().flatten() {
            tier.discard(&b.key);
        }
        report.blocks_unplaced += orphans;
    }
    tier.sync().map_err(|e| at(e.to_string()))?;
    if report.blocks_unreadable > 0 {
        // Serving BACKING's older bytes for them would lose acknowledged writes.
        return Err(at(format!(
            "{} dirty blocks could not be read from the cache device (the rest were written to \
             BACKING); not mounting, so their older bytes on BACKING are not served. \
             `tiercache flash check` the cache; to give those blocks up, remove the cache file",
            report.blocks_unreadable
        )));
    }
    log::warn!(
        "tier {name}: recovery wrote {} blocks of {} files to BACKING ({} dropped: file deleted \
         or past its end; {} without a file handle)",
        report.blocks_written,
        report.files,
        report.blocks_dropped,
        report.blocks_unplaced
    );
    Ok(report)
}

fn clean_one(
    tier: &dyn DataTier,
    root: &File,
    foreign: bool,
    rf: &RecoveredFile,
    blocks: &[DirtyBlock],
    report: &mut RecoveryReport,
) -> Result<(), String> {
    let id = format!("file (dev {}, inode {})", rf.file.dev, rf.file.ino);
    let Some(meta) = rf.meta.as_ref().filter(|m| !m.handle.bytes.is_empty()) else {
        log::error!(
            "{id}: {} dirty blocks were kept without a file handle; they cannot be placed and \
             are dropped",
            blocks.len()
        );
        for b in blocks {
            tier.discard(&b.key);
        }
        report.blocks_unplaced += blocks.len() as u64;
        return Ok(());
    };
    let f = match open_by_handle(root, &meta.handle, libc::O_RDWR) {
        Ok(f) => f,
        Err(e) if matches!(e.raw_os_error(), Some(libc::ESTALE | libc::ENOENT)) && foreign => {
            // Not "deleted": the cache was used with another BACKING.
            return Err(format!(
                "{id}: the cache holds dirty blocks of files none of which BACKING knows \
                 (open_by_handle_at: {e}), on another device than BACKING's; mount it over \
                 the BACKING it was used with"
            ));
        }
        Err(e) if matches!(e.raw_os_error(), Some(libc::ESTALE | libc::ENOENT)) => {
            log::info!(
                "{id}: deleted since; its {} dirty blocks are dropped",
                blocks.len()
            );
            for b in blocks {
                tier.discard(&b.key);
            }
            report.blocks_dropped += blocks.len() as u64;
            return Ok(());
        }
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
            return Err(format!(
                "{id}: open_by_handle_at: {e} (reopening files by handle needs \
                 CAP_DAC_READ_SEARCH: run tiercache as root)"
            ))
        }
        Err(e) => return Err(format!("{id}: open_by_handle_at: {e}")),
    };
    let st = f.metadata().map_err(|e| format!("{id}: fstat: {e}"))?;
    if st.ino() != rf.file.ino {
        return Err(format!(
            "{id}: its handle opens inode {} instead; refusing to write there",
            st.ino()
        ));
    }
    let bs = tier.info().block_size as u64;
    let mut buf = vec![0u8; bs as usize];
    let mut done = Vec::with_capacity(blocks.len());
    let mut end = 0u64;
    for b in blocks {
        let start = b.key.block.0 * bs;
        let seq = match tier.read_dirty(&b.key, b.version, &mut buf) {
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
            f.write_all_at(&buf[..n as usize], start)
                .map_err(|e| format!("{id}: writing block {}: {e}", b.key.block.0))?;
            end = end.max(start + n);
            report.blocks_written += 1;
        }
        done.push((b.key, seq));
    }
    // Grown only as far as the blocks written reach (a size kept from before a truncation
    // that later records did not see must not grow the file back).
    let want_len = end.min(meta.size);
    if st.len() < want_len {
        f.set_len(want_len)
            .map_err(|e| format!("{id}: extending to {want_len} bytes: {e}"))?;
    }
    if let Err(e) = set_mtime_ns(&f, meta.mtime_ns) {
        log::warn!("{id}: setting the mtime after recovery failed: {e}");
    }
    // Data, size and mtime durable before the tier lets its copies go.
    f.sync_all().map_err(|e| format!("{id}: fsync: {e}"))?;
    for (key, seq) in done {
        tier.mark_clean(&key, seq);
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
