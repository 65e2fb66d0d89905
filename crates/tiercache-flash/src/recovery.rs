//! Formatting, opening (recovery and warm restart), clean close, and the offline check.

use crate::device::FlashDevice;
use crate::error::FlashError;
use crate::format::{newest, Geometry, Record, Superblock, SB_CLEAN};
use crate::index::{Index, F_META_DIRTY};
use crate::tier::{unavailable, FlashConfig, FlashStats, FlashTier, State};
use serde::Serialize;
use std::sync::{Arc, Mutex};
use tiercache_tier::{TierInfo, TierKind, TierSnapshot};

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
}

/// Reads both superblock copies; the valid one with the higher generation wins.
fn read_superblock(dev: &dyn FlashDevice) -> Result<(Superblock, u32), FlashError> {
    let sector = dev.sector_size().max(512);
    let mut best: Option<Superblock> = None;
    let mut valid = 0;
    let mut why = Vec::new();
    for slot in 0..2u64 {
        let mut b = vec![0u8; sector];
        if dev.len() < (slot + 1) * sector as u64 {
            why.push(format!("slot {slot}: device too small"));
            continue;
        }
        dev.read_at(&mut b, slot * sector as u64)?;
        // Slot 1 sits one sector in: the sector size at open must be the one at create.
        match Superblock::decode(&b) {
            Ok(sb) => {
                valid += 1;
                if best.is_none_or(|x| sb.gen > x.gen) {
                    best = Some(sb);
                }
            }
            Err(e) => why.push(format!("slot {slot}: {e}")),
        }
    }
    let sb = best.ok_or_else(|| FlashError::NotFormatted(why.join("; ")))?;
    let g = &sb.geo;
    let check = Geometry::compute(sb.device_len, g.sector as usize, g.block_shift, g.set_shift)
        .map_err(|e| FlashError::NotFormatted(e.to_string()))?;
    if check != *g
        || dev.len() < sb.device_len
        || !(g.sector as usize).is_multiple_of(dev.sector_size())
    {
        return Err(FlashError::Mismatch(format!(
            "superblock geometry {g:?} (device of {} bytes) does not fit this device ({} bytes, sector {})",
            sb.device_len,
            dev.len(),
            dev.sector_size()
        )));
    }
    Ok((sb, valid))
}

/// Calls `f(set, newest good record, bad slots)` for every set, reading the metadata in chunks.
fn scan_records(
    dev: &dyn FlashDevice,
    sb: &Superblock,
    mut f: impl FnMut(u32, Option<Record>, u32),
) -> Result<(), FlashError> {
    let g = &sb.geo;
    let per = g.rec_size as usize * 2;
    let chunk_sets = ((1usize << 20) / per).max(1) as u32;
    let mut first = 0u32;
    while first < g.sets {
        let n = chunk_sets.min(g.sets - first);
        let mut buf = vec![0u8; n as usize * per];
        dev.read_at(&mut buf, g.rec_off(first, 0))?;
        for i in 0..n {
            let set = first + i;
            let base = i as usize * per;
            let rs = g.rec_size as usize;
            let a = Record::decode(&buf[base..base + rs], g, set, sb.instance);
            let b = Record::decode(&buf[base + rs..base + per], g, set, sb.instance);
            let (rec, bad) = newest(a, b);
            f(set, rec, bad);
        }
        first += n;
    }
    Ok(())
}

fn info(cfg: &FlashConfig, geo: &Geometry) -> TierInfo {
    TierInfo {
        name: cfg.name.clone(),
        kind: TierKind::Flash,
        capacity_blocks: geo.capacity_blocks(),
        block_size: geo.block_size(),
        accepts_dirty: true,
        persistent: true,
    }
}

fn snap(cfg: &FlashConfig, geo: &Geometry) -> TierSnapshot {
    TierSnapshot {
        name: cfg.name.clone(),
        kind: TierKind::Flash.to_string(),
        capacity_blocks: geo.capacity_blocks(),
        ..TierSnapshot::default()
    }
}

impl FlashTier {
    /// Formats `dev` (everything on it is lost) and opens the empty tier.
    ///
    /// Order: both superblock copies zeroed and synced (a crash now leaves an unformatted
    /// device, never old records taken as new), then every record slot (slot 0: an empty
    /// record, seq 0; slot 1: zero), synced, then the superblock, synced.
    pub fn create(dev: Arc<dyn FlashDevice>, cfg: FlashConfig) -> Result<Self, FlashError> {
        let geo = Geometry::compute(dev.len(), dev.sector_size(), cfg.block_shift, cfg.set_shift)?;
        let sector = geo.sector as usize;
        dev.write_at(&vec![0u8; 2 * sector], 0)?;
        dev.sync()?;
        let instance = rand::random::<u64>() | 1;
        let words = geo.bitmap_bytes() / 8;
        let per = geo.rec_size as usize * 2;
        let chunk_sets = ((1usize << 20) / per).max(1) as u32;
        let mut first = 0u32;
        while first < geo.sets {
            let n = chunk_sets.min(geo.sets - first);
            let mut buf = vec![0u8; n as usize * per];
            for i in 0..n {
                let rec = Record {
                    set: first + i,
                    seq: 0,
                    tag: None,
                    version: 0,
                    valid: vec![0; words],
                    dirty: vec![0; words],
                };
                let base = i as usize * per;
                buf[base..base + geo.rec_size as usize]
                    .copy_from_slice(&rec.encode(&geo, instance));
            }
            dev.write_at(&buf, geo.rec_off(first, 0))?;
            first += n;
        }
        dev.sync()?;
        let sb = Superblock {
            flags: 0,
            gen: 1,
            geo,
            device_len: dev.len(),
            instance,
        };
        dev.write_at(&sb.encode(), geo.sb_off(sb.gen & 1))?;
        dev.sync()?;
        let idx = Index::new(geo.sets, geo.set_blocks());
        Ok(Self::assemble(
            dev,
            cfg,
            geo,
            sb,
            idx,
            FlashStats::default(),
        ))
    }

    fn assemble(
        dev: Arc<dyn FlashDevice>,
        cfg: FlashConfig,
        geo: Geometry,
        sb: Superblock,
        idx: Index,
        fs: FlashStats,
    ) -> Self {
        Self {
            info: info(&cfg, &geo),
            state: Mutex::new(State {
                idx,
                snap: snap(&cfg, &geo),
                fs,
                sb,
                closed: false,
                unsynced: false,
            }),
            cfg,
            geo,
            dev,
        }
    }

    /// Opens a formatted device. After a clean close every valid block is served again
    /// (warm restart); after a crash only dirty blocks are kept (reported by `dirty_blocks`
    /// to be cleaned). The clean-shutdown flag is cleared (durably) before this returns.
    /// The geometry comes from the device; `cfg`'s must match it.
    pub fn open(dev: Arc<dyn FlashDevice>, cfg: FlashConfig) -> Result<Self, FlashError> {
        let (mut sb, _) = read_superblock(dev.as_ref())?;
        let geo = sb.geo;
        if geo.block_shift != cfg.block_shift || geo.set_shift != cfg.set_shift {
            return Err(FlashError::Mismatch(format!(
                "device has blocks of 2^{} bytes and sets of 2^{} blocks; asked for 2^{} and 2^{}",
                geo.block_shift, geo.set_shift, cfg.block_shift, cfg.set_shift
            )));
        }
        let clean = sb.flags & SB_CLEAN != 0;
        let mut idx = Index::new(geo.sets, geo.set_blocks());
        idx.free.clear();
        let mut fs = FlashStats {
            opened_clean: clean,
            ..FlashStats::default()
        };
        let mut duplicates = Vec::new();
        let mut free = Vec::new();
        scan_records(dev.as_ref(), &sb, |set, rec, bad| {
            fs.torn_records += bad;
            let Some(rec) = rec else {
                // No good record: nothing on the device can be trusted here.
                free.push(set);
                idx.note_meta(set);
                return;
            };
            idx.sets[set as usize].rec_seq = rec.seq;
            let r = idx.range(set);
            idx.disk_dirty[r.clone()].copy_from_slice(&rec.dirty);
            let keep: Vec<u64> = if clean {
                rec.valid.clone()
            } else {
                rec.dirty.clone()
            };
            if bad > 0 || keep != rec.valid {
                idx.note_meta(set);
            }
            let Some((file, si)) = rec.tag else {
                free.push(set);
                return;
            };
            if keep.iter().all(|&w| w == 0) {
                free.push(set);
                if rec.valid.iter().any(|&w| w != 0) {
                    idx.note_meta(set);
                }
                return;
            }
            if idx.find(&file, si).is_some() {
                log::error!("flash set {set}: backing set already cached by another set; dropped");
                duplicates.push(set);
                free.push(set);
                return;
            }
            idx.map(set, file, si, rec.version);
            for b in 0..geo.set_blocks() {
                if Index::bit(&keep, 0, idx.words, b) {
                    let dirty = Index::bit(&rec.dirty, 0, idx.words, b);
                    idx.set_block(set, b, dirty);
                    if dirty {
                        fs.recovered_dirty_blocks += 1;
                    }
                }
            }
            idx.written[r].fill(0);
            if !(bad > 0 || keep != rec.valid) {
                // RAM equals the record: not pending after all.
                idx.sets[set as usize].flags &= !F_META_DIRTY;
            }
        })?;
        idx.pending
            .retain(|&id| idx.sets[id as usize].flags & F_META_DIRTY != 0);
        // Lowest set numbers are allocated first.
        free.sort_unstable_by(|a, b| b.cmp(a));
        idx.free = free;
        // Leave "clean" before anything changes.
        sb.flags &= !SB_CLEAN;
        sb.gen += 1;
        dev.write_at(&sb.encode(), geo.sb_off(sb.gen & 1))?;
        dev.sync()?;
        let tier = Self::assemble(dev, cfg, geo, sb, idx, fs);
        if !duplicates.is_empty() {
            let mut st = tier.st();
            tier.persist(&mut st, &duplicates)
                .map_err(|e| FlashError::Io(std::io::Error::other(e.to_string())))?;
        }
        Ok(tier)
    }

    /// Writes every pending record and sets the clean-shutdown flag: the next `open` serves
    /// clean blocks again. Further use of the tier is refused. Idempotent.
    pub fn close(&self) -> Result<(), FlashError> {
        let mut st = self.st();
        if st.closed {
            return Ok(());
        }
        let ids: Vec<u32> = st.idx.pending.clone();
        self.persist(&mut st, &ids)
            .map_err(|e| unavailable(&self.info.name, &format!("close: {e}")))?;
        if !st.idx.pending.is_empty() {
            return Err(unavailable(&self.info.name, "close: records still pending"));
        }
        let mut sb = st.sb;
        sb.flags |= SB_CLEAN;
        sb.gen += 1;
        self.dev
            .write_at(&sb.encode(), self.geo.sb_off(sb.gen & 1))?;
        self.dev.sync()?;
        st.sb = sb;
        st.closed = true;
        Ok(())
    }

    /// Drops the tier without writing anything, as a crash would (tests; or a daemon that
    /// must not touch a failing device again). The next `open` recovers.
    pub fn abandon(self) {
        self.st().closed = true;
    }

    /// Verifies a device without changing it.
    pub fn check(dev: &dyn FlashDevice) -> Result<CheckReport, FlashError> {
        let (sb, superblocks_valid) = read_superblock(dev)?;
        let g = sb.geo;
        let clean = sb.flags & SB_CLEAN != 0;
        let mut r = CheckReport {
            format_version: crate::format::FORMAT_VERSION,
            superblocks_valid,
            clean_shutdown: clean,
            block_size: g.block_size() as u64,
            set_blocks: g.set_blocks() as u64,
            sets: g.sets,
            ..CheckReport::default()
        };
        let mut seen = std::collections::HashSet::new();
        scan_records(dev, &sb, |_, rec, bad| {
            r.torn_records += bad;
            let Some(rec) = rec else {
                r.sets_without_record += 1;
                return;
            };
            let Some(tag) = rec.tag else { return };
            r.mapped_sets += 1;
            if !seen.insert(tag) {
                r.duplicate_tags += 1;
            }
            let ones = |v: &[u64]| v.iter().map(|w| u64::from(w.count_ones())).sum::<u64>();
            r.valid_blocks += ones(&rec.valid);
            r.dirty_blocks += ones(&rec.dirty);
        })?;
        r.usable_blocks = if clean {
            r.valid_blocks
        } else {
            r.dirty_blocks
        };
        Ok(r)
    }
}

/// Whether a device holds a valid superblock (e.g. to decide between `open` and `create`).
pub fn is_formatted(dev: &dyn FlashDevice) -> bool {
    read_superblock(dev).is_ok()
}
