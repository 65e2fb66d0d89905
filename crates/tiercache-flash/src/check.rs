//! `tiercache flash check`: verifies a device without changing it — superblocks, records,
//! and every block an open would use against its checksum.

use crate::device::FlashDevice;
use crate::error::FlashError;
use crate::format::{block_sum, Record, SB_CLEAN, SUM_BYTES};
use crate::recovery::{read_superblock, scan_records};
use crate::tier::FlashTier;
use serde::Serialize;
use std::collections::HashSet;
use tiercache_tier::FileKey;

/// What `tiercache flash check PATH [--json]` shows.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CheckReport {
    pub format_version: u32,
    /// Valid superblock copies (of 2).
    pub superblocks_valid: u32,
    pub clean_shutdown: bool,
    pub block_size: u64,
    pub set_blocks: u64,
    pub sets: u32,
    pub mapped_sets: u32,
    /// Valid blocks per the newest good records.
    pub valid_blocks: u64,
    pub dirty_blocks: u64,
    /// Blocks an open would serve: all valid ones after a clean shutdown, else the dirty ones.
    pub usable_blocks: u64,
    /// Record slots that are torn, damaged or of another instance.
    pub torn_records: u32,
    /// Sets with no good record (both slots bad or empty).
    pub sets_without_record: u32,
    /// Mapped sets naming a backing set another set already names.
    pub duplicate_tags: u32,
    /// Records with a dirty bit that is not valid (`dirty ⊆ valid` broken).
    pub dirty_not_valid: u32,
    /// Records with bits set past the set's last block.
    pub stray_bits: u32,
    /// Files holding dirty blocks (per the newest good records).
    pub files_with_dirty: u32,
    /// Of those, files for which some record carries meta (size, mtime, handle): the
    /// manager can reopen them and restore their size and mtime after a crash.
    pub files_with_dirty_meta: u32,
    /// Usable blocks whose bytes do not match their checksum (bit rot, a torn, lost or
    /// misdirected write): a mount would re-read a clean one from BACKING, and fail a dirty
    /// one with EIO (and refuse to mount when it finds one after a crash). `check` exits 1.
    pub corrupt_blocks: u64,
    /// Usable dirty blocks that do not match their checksum but cannot be called corrupt: not
    /// shut down cleanly, and an overwrite in place may have been under way (their in-place
    /// bit): each sector holds old or new bytes, and an open takes them as they are.
    pub unverified_blocks: u64,
}

impl FlashTier {
    /// Verifies a device without changing it: reads every record and every usable block.
    pub fn check(dev: &dyn FlashDevice) -> Result<CheckReport, FlashError> {
        let (sb, superblocks_valid) = read_superblock(dev)?;
        let g = sb.geo;
        let clean = sb.flags & SB_CLEAN != 0;
        let mut r = CheckReport {
            format_version: g.version,
            superblocks_valid,
            clean_shutdown: clean,
            block_size: g.block_size() as u64,
            set_blocks: g.set_blocks() as u64,
            sets: g.sets,
            ..CheckReport::default()
        };
        let mut seen = HashSet::new();
        let mut files: HashSet<FileKey> = HashSet::new();
        let mut with_meta: HashSet<FileKey> = HashSet::new();
        let mut failed = None;
        scan_records(dev, &sb, |set, rec, bad| {
            r.torn_records += bad;
            let Some(rec) = rec else {
                r.sets_without_record += 1;
                return;
            };
            r.dirty_not_valid += u32::from(rec.dirty_not_valid());
            r.stray_bits += u32::from(rec.stray_bits(g.set_blocks()));
            let Some(tag) = rec.tag else { return };
            if rec.meta.is_some() {
                with_meta.insert(tag.0);
            }
            if rec.dirty.iter().any(|&w| w != 0) {
                files.insert(tag.0);
            }
            r.mapped_sets += 1;
            if !seen.insert(tag) {
                r.duplicate_tags += 1;
            }
            let ones = |v: &[u64]| v.iter().map(|w| u64::from(w.count_ones())).sum::<u64>();
            r.valid_blocks += ones(&rec.valid);
            r.dirty_blocks += ones(&rec.dirty);
            if failed.is_none() {
                if let Err(e) = check_blocks(dev, &sb, set, &rec, clean, &mut r) {
                    failed = Some(e);
                }
            }
        })?;
        if let Some(e) = failed {
            return Err(e);
        }
        r.files_with_dirty = files.len() as u32;
        r.files_with_dirty_meta = files.iter().filter(|f| with_meta.contains(*f)).count() as u32;
        r.usable_blocks = if clean {
            r.valid_blocks
        } else {
            r.dirty_blocks
        };
        Ok(r)
    }
}

/// Checks the blocks of one mapped set's record an open would use (all valid ones after a
/// clean shutdown, else the dirty ones) against the set's checksum table.
fn check_blocks(
    dev: &dyn FlashDevice,
    sb: &crate::format::Superblock,
    set: u32,
    rec: &Record,
    clean: bool,
    r: &mut CheckReport,
) -> Result<(), FlashError> {
    let g = &sb.geo;
    let Some(tag) = rec.tag else { return Ok(()) };
    let bit = |v: &[u64], b: usize| v.get(b / 64).is_some_and(|w| w >> (b % 64) & 1 == 1);
    let usable = if clean { &rec.valid } else { &rec.dirty };
    let blocks: Vec<usize> = (0..g.set_blocks()).filter(|&b| bit(usable, b)).collect();
    if blocks.is_empty() {
        return Ok(());
    }
    let mut table = vec![0u8; g.sums_size as usize];
    dev.read_at(&mut table, g.sums_at(set))?;
    let mut buf = vec![0u8; g.block_size()];
    for b in blocks {
        dev.read_at(&mut buf, g.block_off(set, b))?;
        let o = b * SUM_BYTES;
        let want = u32::from_le_bytes([table[o], table[o + 1], table[o + 2], table[o + 3]]);
        if block_sum(sb.instance, set, b, tag, rec.version, &buf) == want {
            continue;
        }
        if !clean && bit(&rec.in_place, b) {
            // An overwrite cut by a crash may have left it so: an open takes it as it is.
            r.unverified_blocks += 1;
        } else {
            r.corrupt_blocks += 1;
        }
    }
    Ok(())
}
