//! Formatting, opening (recovery and warm restart), clean close, and the offline check.

use crate::cleaner::Cleaner;
use crate::device::{FileDevice, FlashDevice};
use crate::error::FlashError;
use crate::format::{
    formatting_marker, is_formatting_marker, newest, Geometry, Record, Superblock, FORMAT_VERSION,
    SB_CLEAN,
};
use crate::index::{Index, F_META_DIRTY, F_RETAGGED};
use crate::meta::NewestMeta;
use crate::pagecache::IoChoice;
use crate::sums::Sums;
use crate::tier::{unavailable, FlashConfig, FlashStats, FlashTier, State};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tiercache_tier::RecoveredFile;
use tiercache_tier::{TierInfo, TierKind, TierSnapshot};

/// Largest sector size probed for superblock slot 1 when slot 0 is not valid.
const MAX_PROBE_SECTOR: u64 = 64 * 1024;

/// Reads one superblock candidate at `off` (`None`: past the end or not valid, `why` says).
/// A read error is an error (never a reason to take the other copy).
fn read_sb_at(
    dev: &dyn FlashDevice,
    off: u64,
    want: u32,
    why: &mut Vec<String>,
    other_version: &mut Option<u32>,
) -> Result<Option<Superblock>, FlashError> {
    let n = dev.sector_size().max(512);
    if off.checked_add(n as u64).is_none_or(|end| end > dev.len()) {
        why.push(format!("offset {off}: device too small"));
        return Ok(None);
    }
    let mut b = vec![0u8; n];
    dev.read_at(&mut b, off)?;
    if let Some(v) = Superblock::version_of(&b).filter(|&v| v != want) {
        *other_version = Some(v);
    }
    Ok(Superblock::decode_version(&b, want)
        .map_err(|e| why.push(format!("offset {off}: {e}")))
        .ok())
}

/// Reads both superblock copies; the valid one with the higher generation wins.
///
/// Slot 1 sits one sector of the *format's* sector size in (which may differ from this
/// device's, e.g. formatted with O_DIRECT at 4096 and opened without): it is read at slot 0's
/// sector size, or, when slot 0 is not valid, at each power of two up to 64 KiB and taken only
/// where its own sector size names that offset. Never an older copy for want of the newer.
pub(crate) fn read_superblock(dev: &dyn FlashDevice) -> Result<(Superblock, u32), FlashError> {
    read_superblock_of(dev, FORMAT_VERSION)
}

/// [`read_superblock`] for format `want` (another version found is `FormatVersion`).
pub(crate) fn read_superblock_of(
    dev: &dyn FlashDevice,
    want: u32,
) -> Result<(Superblock, u32), FlashError> {
    let mut why = Vec::new();
    let mut other = None;
    let slot0 = read_sb_at(dev, 0, want, &mut why, &mut other)?;
    let slot1 = match slot0 {
        Some(sb0) => {
            let s = u64::from(sb0.geo.sector);
            if s >= 512 && s.is_power_of_two() {
                read_sb_at(dev, s, want, &mut why, &mut other)?
                    .filter(|sb| u64::from(sb.geo.sector) == s)
            } else {
                None
            }
        }
        None => {
            let min = (dev.sector_size().max(512) as u64).next_power_of_two();
            let mut found = None;
            let mut s = min;
            while found.is_none() && s <= MAX_PROBE_SECTOR {
                found = read_sb_at(dev, s, want, &mut why, &mut other)?
                    .filter(|sb| u64::from(sb.geo.sector) == s);
                s *= 2;
            }
            found
        }
    };
    let valid = u32::from(slot0.is_some()) + u32::from(slot1.is_some());
    let sb = match (slot0, slot1) {
        (Some(a), Some(b)) => {
            if b.gen > a.gen {
                b
            } else {
                a
            }
        }
        (Some(x), None) | (None, Some(x)) => x,
        (None, None) => {
            return Err(match other {
                Some(found) => FlashError::FormatVersion { found },
                None if format_interrupted(dev)? => FlashError::FormatInterrupted,
                None => FlashError::NotFormatted(why.join("; ")),
            })
        }
    };
    let g = &sb.geo;
    let mismatch = || {
        FlashError::Mismatch(format!(
            "superblock geometry {g:?} (device of {} bytes) does not fit this device ({} bytes, sector {})",
            sb.device_len,
            dev.len(),
            dev.sector_size()
        ))
    };
    // Before any arithmetic on the superblock's numbers.
    if dev.len() < sb.device_len
        || g.sector == 0
        || !(g.sector as usize).is_multiple_of(dev.sector_size().max(1))
    {
        return Err(mismatch());
    }
    let check = Geometry::compute_for(
        want,
        sb.device_len,
        g.sector as usize,
        g.block_shift,
        g.set_shift,
    )
    .map_err(|e| FlashError::NotFormatted(e.to_string()))?;
    if check != *g {
        return Err(mismatch());
    }
    Ok((sb, valid))
}

/// Whether superblock slot 0 holds the formatting marker (`create` was interrupted).
fn format_interrupted(dev: &dyn FlashDevice) -> Result<bool, FlashError> {
    let n = dev.sector_size().max(512);
    if n as u64 > dev.len() {
        return Ok(false);
    }
    let mut b = vec![0u8; n];
    dev.read_at(&mut b, 0)?;
    Ok(is_formatting_marker(&b))
}

/// Calls `f(set, newest good record, bad slots)` for every set, reading the metadata in chunks.
pub(crate) fn scan_records(
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
        accepts_dirty: !cfg.clean_only,
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

/// What `FlashTier::open` learns from the records, one set at a time (`Scan::record`).
struct Scan {
    geo: Geometry,
    /// The last close was clean: every valid block is served again (else only dirty ones).
    clean: bool,
    idx: Index,
    fs: FlashStats,
    /// Sets dropped because another set caches the same backing set.
    duplicates: Vec<u32>,
    /// Pairs of sets both holding dirty blocks of one backing set (the open is refused).
    dirty_twice: Vec<(u32, u32)>,
    free: Vec<u32>,
    metas: NewestMeta,
    in_place: Vec<(u32, Vec<u64>)>,
}

impl Scan {
    fn new(geo: Geometry, clean: bool) -> Self {
        let mut idx = Index::new(geo.sets, geo.set_blocks());
        idx.free.clear();
        Self {
            geo,
            clean,
            idx,
            fs: FlashStats {
                opened_clean: clean,
                ..FlashStats::default()
            },
            duplicates: Vec::new(),
            dirty_twice: Vec::new(),
            free: Vec::new(),
            metas: NewestMeta::default(),
            in_place: Vec::new(),
        }
    }

    /// Takes set `set`'s newest good record (`None`: none), `bad` torn ones seen on the way.
    fn record(&mut self, set: u32, rec: Option<Record>, bad: u32) {
        self.fs.torn_records += bad;
        if let Some((file, _)) = rec.as_ref().and_then(|r| r.tag) {
            self.metas
                .see(file, &rec.as_ref().and_then(|r| r.meta.clone()));
        }
        let Some(mut rec) = rec else {
            // No good record: nothing on the device can be trusted here.
            self.free.push(set);
            self.idx.note_meta(set);
            return;
        };
        self.idx.sets[set as usize].rec_seq = rec.seq;
        let r = self.idx.range(set);
        self.idx.disk_dirty[r.clone()].copy_from_slice(&rec.dirty);
        let insane = rec.sanitize(self.geo.set_blocks());
        if insane {
            log::error!(
                "flash set {set}: record with dirty bits not valid or past the set; repaired"
            );
        }
        let bad = bad + u32::from(insane);
        let keep: Vec<u64> = if self.clean {
            rec.valid.clone()
        } else {
            rec.dirty.clone()
        };
        if bad > 0 || keep != rec.valid {
            self.idx.note_meta(set);
        }
        let Some((file, si)) = rec.tag else {
            self.free.push(set);
            return;
        };
        if keep.iter().all(|&w| w == 0) {
            self.free.push(set);
            if rec.valid.iter().any(|&w| w != 0) {
                self.idx.note_meta(set);
            }
            return;
        }
        if let Some(other) = self.idx.find(&file, si) {
            // Two records name one backing set: keep the one holding dirty blocks.
            let mine = rec.dirty.iter().any(|&w| w != 0);
            match (self.idx.set_dirty_any(other), mine) {
                (true, true) => {
                    self.dirty_twice.push((other, set));
                    return;
                }
                (false, true) => {
                    log::error!(
                        "flash set {other}: backing set also cached (dirty) by set {set}; dropped"
                    );
                    for b in 0..self.geo.set_blocks() {
                        self.idx.drop_block(other, b);
                    }
                    self.idx.unmap(other);
                    self.duplicates.push(other);
                    self.free.push(other);
                }
                _ => {
                    log::error!(
                        "flash set {set}: backing set already cached by set {other}; dropped"
                    );
                    self.duplicates.push(set);
                    self.free.push(set);
                    return;
                }
            }
        }
        self.idx.map(set, file, si, rec.version);
        for b in 0..self.geo.set_blocks() {
            if Index::bit(&keep, 0, self.idx.words, b) {
                let dirty = Index::bit(&rec.dirty, 0, self.idx.words, b);
                self.idx.set_block(set, b, dirty);
                if dirty {
                    self.fs.recovered_dirty_blocks += 1;
                }
            }
        }
        self.idx.written[r].fill(0);
        if rec.in_place.iter().any(|&w| w != 0) {
            self.in_place.push((set, rec.in_place.clone()));
        }
        if !(bad > 0 || keep != rec.valid) {
            // RAM equals the record: not pending after all.
            self.idx.sets[set as usize].flags &= !F_META_DIRTY;
        }
    }
}

impl FlashTier {
    /// Formats `dev` (everything on it is lost) and opens the empty tier.
    ///
    /// Order: the formatting marker in superblock slot 0 and slot 1 zeroed, synced (a crash
    /// from now on leaves a device whose format was interrupted, which `open_or_create`
    /// formats again — never old records taken as new, never a device refused as other
    /// data), then every record slot (slot 0: an empty record, seq 0; slot 1: zero), synced,
    /// then the superblock (generation 2, in slot 0 over the marker), synced.
    pub fn create(dev: Arc<dyn FlashDevice>, cfg: FlashConfig) -> Result<Self, FlashError> {
        let geo = Geometry::compute(dev.len(), dev.sector_size(), cfg.block_shift, cfg.set_shift)?;
        let sector = geo.sector as usize;
        let mut head = vec![0u8; 2 * sector];
        head[..sector].copy_from_slice(&formatting_marker(sector));
        dev.write_at(&head, 0)?;
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
                    in_place: vec![0; words],
                    meta: None,
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
            // Slot 0: the superblock replaces the marker in one sector write.
            gen: 2,
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
            Vec::new(),
        ))
    }

    /// Opens the tier on `dev`, formatting it first only when it holds no tiercache flash
    /// superblock at all (a new file or a wiped device), or when a format of it was
    /// interrupted (the formatting marker and no superblock: it holds no cache; logged). A
    /// cache of another format version, a geometry mismatch or a damaged superblock is an
    /// error, never silently formatted. Returns whether it was created.
    pub fn open_or_create(
        dev: Arc<dyn FlashDevice>,
        cfg: FlashConfig,
    ) -> Result<(Self, bool), FlashError> {
        match Self::open(dev.clone(), cfg.clone()) {
            Ok(t) => Ok((t, false)),
            Err(FlashError::NotFormatted(_)) if !has_superblock_bytes(dev.as_ref())? => {
                Ok((Self::create(dev, cfg)?, true))
            }
            Err(FlashError::FormatInterrupted) => {
                log::warn!(
                    "flash tier {}: the device's format was interrupted (a crash while it was \
                     being made; it holds no cache yet): formatting it again",
                    cfg.name
                );
                Ok((Self::create(dev, cfg)?, true))
            }
            Err(e) => Err(e),
        }
    }

    /// Opens the cache file or block device at `path` (never through a symlink, refused unless
    /// private: see [`FileDevice::open_locked`], whose `flock` the tier keeps): a missing
    /// or empty regular file is created at `size` bytes (mode 0600, preallocated) and formatted; an
    /// existing one is opened **as it is** — never resized, since it may hold the only copy
    /// of dirty blocks (a size other than `size` is logged; remove the file once it is clean
    /// to resize it); a block device keeps its size. Errors as [`FlashTier::open_or_create`].
    /// Returns whether it was created.
    pub fn open_path(
        path: &Path,
        size: u64,
        io: IoChoice,
        cfg: FlashConfig,
    ) -> Result<(Self, bool), FlashError> {
        let (dev, fresh) = FileDevice::open_locked(path, Some(size), io)?;
        if !fresh && dev.metadata()?.is_file() && dev.len() != size {
            log::warn!(
                "flash cache {}: {} bytes, not the {size} asked for; kept as it is (remove the \
                 file once it is clean to resize it)",
                path.display(),
                dev.len()
            );
        }
        Self::open_or_create(Arc::new(dev), cfg)
    }

    fn assemble(
        dev: Arc<dyn FlashDevice>,
        mut cfg: FlashConfig,
        geo: Geometry,
        sb: Superblock,
        idx: Index,
        fs: FlashStats,
        recovered: Vec<RecoveredFile>,
    ) -> Self {
        cfg.cleaner.free_floor = Self::floor_for(cfg.cleaner.free_floor, geo.sets);
        // Superblock, records and checksum tables: read and rewritten by every store.
        dev.keep_hot(geo.data_off);
        Self {
            origin: Instant::now(),
            spill_hook: tiercache_tier::SpillSlot::new(),
            info: info(&cfg, &geo),
            state: Mutex::new(State {
                idx,
                snap: snap(&cfg, &geo),
                fs,
                sb,
                closed: false,
                unsynced: false,
                cleaner: Cleaner::new(cfg.cleaner.clone()),
                bypassed: 0,
                recovered,
                sums: Sums::new(&geo),
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
        let mut scan = Scan::new(geo, sb.flags & SB_CLEAN != 0);
        scan_records(dev.as_ref(), &sb, |set, rec, bad| {
            scan.record(set, rec, bad)
        })?;
        let Scan {
            mut idx,
            mut fs,
            duplicates,
            dirty_twice,
            mut free,
            metas,
            in_place,
            clean,
            ..
        } = scan;
        if let Some((a, b)) = dirty_twice.first() {
            return Err(FlashError::Mismatch(format!(
                "sets {a} and {b} both hold dirty blocks of one backing set ({} such pairs): \
                 refusing to guess which is newer",
                dirty_twice.len()
            )));
        }
        idx.pending
            .retain(|&id| idx.sets[id as usize].flags & F_META_DIRTY != 0);
        // Lowest set numbers are allocated first.
        free.sort_unstable_by(|a, b| b.cmp(a));
        for &id in &free {
            // Its newest record may name a backing set and carry that file's meta.
            idx.sets[id as usize].flags |= F_RETAGGED;
        }
        idx.free = free;
        let recovered = metas.restore(&mut idx, geo.set_blocks());
        fs.recovered_files = recovered.len() as u64;
        // Leave "clean" before anything changes.
        sb.flags &= !SB_CLEAN;
        sb.gen += 1;
        dev.write_at(&sb.encode(), geo.sb_off(sb.gen & 1))?;
        dev.sync()?;
        let tier = Self::assemble(dev, cfg, geo, sb, idx, fs, recovered);
        tier.restore_in_place(in_place, clean);
        if !duplicates.is_empty() {
            // The freed duplicates may carry a file's newest meta: the carriers first.
            let mut st = tier.st();
            tier.sync_locked(&mut st)
                .map_err(|e| FlashError::Io(std::io::Error::from(e)))?;
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
        if st.fs.tainted {
            // Never claim a clean shutdown: the device may not hold what RAM says.
            return Err(unavailable(
                &self.info.name,
                "close: tainted (an earlier device sync or drop record failed)",
            ));
        }
        self.sync_locked(&mut st)
            .map_err(|e| unavailable(&self.info.name, &format!("close: {e}")))?;
        if !st.idx.pending.is_empty() {
            // Records that carried in-place bits (`crate::inplace`): nothing goes in place
            // after this, so one more round (right after the sync) drops them all.
            st.sums.in_place.forget_all();
            let ids = st.idx.pending.clone();
            self.persist(&mut st, &ids)
                .map_err(|e| unavailable(&self.info.name, &format!("close: {e}")))?;
        }
        if !st.idx.pending.is_empty() {
            return Err(unavailable(&self.info.name, "close: records still pending"));
        }
        // Every checksum matches after a clean close, whatever was left in the table cache.
        self.flush_all_sums(&mut st)?;
        if st.unsynced {
            self.dev_sync(&mut st)?;
        }
        let mut sb = st.sb;
        sb.flags |= SB_CLEAN;
        sb.gen += 1;
        self.dev
            .write_at(&sb.encode(), self.geo.sb_off(sb.gen & 1))?;
        self.dev_sync(&mut st)?;
        st.sb = sb;
        st.closed = true;
        Ok(())
    }

    /// Drops the tier without writing anything, as a crash would (tests; or a daemon that
    /// must not touch a failing device again). The next `open` recovers.
    pub fn abandon(self) {
        self.st().closed = true;
    }
}

/// Whether a device holds a valid superblock, of this format version or another, or an
/// interrupted format of one (e.g. to decide between `open` and `create`: `open` then
/// refuses another version with a clear error instead of the data being formatted away).
/// [`FlashTier::open_or_create`] decides more carefully (and formats an interrupted one).
pub fn is_formatted(dev: &dyn FlashDevice) -> bool {
    matches!(
        read_superblock(dev),
        Ok(_) | Err(FlashError::FormatVersion { .. } | FlashError::FormatInterrupted)
    )
}

/// Whether the superblock area (the first 128 KiB, or less on a smaller device) holds any
/// non-zero byte: then it is not a new file, and `open_or_create` does not format it.
fn has_superblock_bytes(dev: &dyn FlashDevice) -> Result<bool, FlashError> {
    let n = dev.len().min(2 * MAX_PROBE_SECTOR);
    let sector = dev.sector_size().max(512) as u64;
    let n = n - n % sector;
    let mut b = vec![0u8; n as usize];
    dev.read_at(&mut b, 0)?;
    Ok(b.iter().any(|&x| x != 0))
}
