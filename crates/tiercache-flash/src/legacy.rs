//! [`LegacyTier`]: a cache of format 2 (before block checksums), opened only so that its dirty
//! blocks can be written back to BACKING before the device is reformatted as format 3 (the
//! upgrade path, `docs/design.md` §6). It reads the format-2 superblock and records as the
//! format-2 open did after a crash (only dirty blocks are kept: a clean block has no checksum
//! to be trusted by, and the reformat drops it anyway), serves them to the manager's recovery
//! (`recovered_files`, `dirty_blocks`, `read_dirty`, `mark_clean`, `discard`), and writes
//! nothing: if the upgrade stops half way, the device still holds every dirty block and the
//! next mount starts it again (writing the same bytes to BACKING twice is harmless).
//!
//! Format-2 blocks carry no checksum: their bytes are taken as the format-2 tier would have
//! served them.

use crate::check::CheckReport;
use crate::device::FlashDevice;
use crate::error::FlashError;
use crate::format::{Geometry, UPGRADABLE_VERSION};
use crate::meta::NewestMeta;
use crate::recovery::{read_superblock_of, scan_records};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tiercache_tier::{
    Admit, Cleaning, DataTier, DirtyBlock, FileKey, FileMeta, Lookup, Persistence, RecoveredFile,
    TierError, TierInfo, TierKey, TierKind, TierSnapshot,
};

/// Where a dirty block is: cache set, block in the set, content version.
type Place = (u32, usize, u64);

/// A format-2 cache opened for its upgrade; see the module docs.
#[derive(Debug)]
pub struct LegacyTier {
    info: TierInfo,
    dev: Arc<dyn FlashDevice>,
    geo: Geometry,
    dirty: Mutex<BTreeMap<TierKey, Place>>,
    files: Vec<RecoveredFile>,
    report: CheckReport,
}

impl LegacyTier {
    /// Reads a format-2 cache (its superblock and records; nothing is written). Two records
    /// both holding dirty blocks of one backing set are refused, as format 2 refused them.
    pub fn open(dev: Arc<dyn FlashDevice>, name: &str) -> Result<Self, FlashError> {
        let (sb, superblocks_valid) = read_superblock_of(dev.as_ref(), UPGRADABLE_VERSION)?;
        let geo = sb.geo;
        let mut dirty = BTreeMap::new();
        let mut metas = NewestMeta::default();
        let mut seen: HashMap<(FileKey, u64), u32> = HashMap::new();
        let mut twice = None;
        let mut report = CheckReport {
            format_version: UPGRADABLE_VERSION,
            superblocks_valid,
            clean_shutdown: sb.flags & crate::format::SB_CLEAN != 0,
            block_size: geo.block_size() as u64,
            set_blocks: geo.set_blocks() as u64,
            sets: geo.sets,
            ..CheckReport::default()
        };
        scan_records(dev.as_ref(), &sb, |set, rec, bad| {
            report.torn_records += bad;
            let Some(mut rec) = rec else { return };
            let Some((file, si)) = rec.tag else { return };
            metas.see(file, &rec.meta);
            report.mapped_sets += 1;
            rec.sanitize(geo.set_blocks());
            let blocks: Vec<usize> = (0..geo.set_blocks())
                .filter(|&b| rec.dirty[b / 64] >> (b % 64) & 1 == 1)
                .collect();
            if blocks.is_empty() {
                return;
            }
            if let Some(other) = seen.insert((file, si), set) {
                twice = Some((other, set));
            }
            for b in blocks {
                let key = TierKey::new(file, (si << geo.set_shift) | b as u64);
                dirty.insert(key, (set, b, rec.version));
            }
        })?;
        if let Some((a, b)) = twice {
            return Err(FlashError::Mismatch(format!(
                "format-2 sets {a} and {b} both hold dirty blocks of one backing set: refusing \
                 to guess which is newer"
            )));
        }
        let mut per: BTreeMap<(FileKey, u64), u64> = BTreeMap::new();
        for (k, &(_, _, version)) in &dirty {
            *per.entry((k.file, version)).or_default() += 1;
        }
        let files: Vec<RecoveredFile> = per
            .into_iter()
            .map(|((file, version), n)| RecoveredFile {
                file,
                version,
                meta: metas.get(&file).cloned(),
                dirty_blocks: n,
            })
            .collect();
        let with_dirty: HashSet<FileKey> = files.iter().map(|f| f.file).collect();
        report.dirty_blocks = dirty.len() as u64;
        report.usable_blocks = dirty.len() as u64;
        report.files_with_dirty = with_dirty.len() as u32;
        report.files_with_dirty_meta = files.iter().filter(|f| f.meta.is_some()).count() as u32;
        Ok(Self {
            info: TierInfo {
                name: name.to_string(),
                kind: TierKind::Flash,
                capacity_blocks: geo.capacity_blocks(),
                block_size: geo.block_size(),
                accepts_dirty: false,
                persistent: true,
            },
            dev,
            geo,
            dirty: Mutex::new(dirty),
            files,
            report,
        })
    }

    /// What `flash check` shows for it (format 2 has no block checksums to check).
    pub fn check_report(&self) -> CheckReport {
        self.report.clone()
    }

    /// Dirty blocks not yet written back (or dropped).
    pub fn dirty_left(&self) -> u64 {
        self.lock().len() as u64
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<TierKey, Place>> {
        self.dirty.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Only what recovery uses does anything: nothing is stored, nothing is written.
impl DataTier for LegacyTier {
    fn info(&self) -> &TierInfo {
        &self.info
    }
    fn contains(&self, key: &TierKey) -> bool {
        self.lock().contains_key(key)
    }
    fn read(&self, _: &TierKey, _: u64, _: &mut [u8]) -> Result<Lookup, TierError> {
        Ok(Lookup::Miss)
    }
    fn take(&self, _: &TierKey, _: u64, _: &mut [u8]) -> Result<Lookup, TierError> {
        Ok(Lookup::Miss)
    }
    /// Takes no store: the device is only drained before its reformat.
    fn store(
        &self,
        _: &tiercache_tier::Store<'_>,
        _: &dyn Fn() -> bool,
    ) -> Result<Admit, TierError> {
        Ok(Admit::Rejected)
    }
    fn invalidate(&self, _: &TierKey) {}
    fn try_invalidate(&self, _: &TierKey) -> bool {
        true // holds no clean copies
    }
    fn discard(&self, key: &TierKey) {
        self.lock().remove(key);
    }
    fn invalidate_file(&self, file: &FileKey, from_block: u64) {
        self.lock()
            .retain(|k, _| k.file != *file || k.block.0 < from_block);
    }
    /// Nothing to make durable: the device is not written (the reformat follows).
    fn sync(&self) -> Result<(), TierError> {
        Ok(())
    }
    fn stats(&self) -> TierSnapshot {
        TierSnapshot {
            name: self.info.name.clone(),
            kind: TierKind::Flash.to_string(),
            capacity_blocks: self.info.capacity_blocks,
            dirty_blocks: self.dirty_left(),
            ..TierSnapshot::default()
        }
    }

    /// It holds the dirty blocks to be drained.
    fn cleaning(&self) -> Option<&dyn Cleaning> {
        Some(self)
    }

    fn persistence(&self) -> Option<&dyn Persistence> {
        Some(self)
    }
}

impl Persistence for LegacyTier {
    /// Keeps nothing: it stores no dirty block (the device is drained, then reformatted).
    fn set_file_meta(&self, _: &FileKey, _: &FileMeta) {}
    fn recovered_files(&self) -> Vec<RecoveredFile> {
        self.files.clone()
    }
}

impl Cleaning for LegacyTier {
    fn read_dirty(
        &self,
        key: &TierKey,
        version: u64,
        buf: &mut [u8],
    ) -> Result<Option<u64>, TierError> {
        let bs = self.geo.block_size();
        crate::tier::check_len(&self.info.name, buf.len() >= bs, buf.len(), bs)?;
        let Some(&(set, b, v)) = self.lock().get(key) else {
            return Ok(None);
        };
        if v != version {
            return Ok(None);
        }
        self.dev
            .read_at(&mut buf[..bs], self.geo.block_off(set, b))
            .map_err(|source| TierError::Io {
                tier: self.info.name.clone(),
                source,
            })?;
        Ok(Some(1))
    }
    fn dirty_blocks(&self, max: usize) -> Vec<DirtyBlock> {
        self.lock()
            .iter()
            .take(max)
            .map(|(k, &(_, _, version))| DirtyBlock {
                key: *k,
                version,
                seq: 1,
            })
            .collect()
    }
    fn mark_clean(&self, key: &TierKey, _seq: u64) -> bool {
        self.lock().remove(key).is_some()
    }
}
