//! The on-disk format (specified byte by byte in the repository's `docs/design.md` §6): geometry, the two
//! superblock copies, the two metadata record slots per cache set, the per-set checksum
//! tables and the block checksum.
//!
//! Invariants: every structure is a whole number of sectors at a sector-aligned offset; every
//! superblock and record ends with a CRC32C of the bytes before it; integers are
//! little-endian. Format 3 (this one) added the checksum tables and the records' in-place
//! bitmap; format 2 is still read (by `crate::legacy`) to write its dirty blocks back before
//! it is reformatted.

use crate::error::FlashError;
use tiercache_tier::{FileHandle, FileKey, FileMeta, MAX_HANDLE_BYTES};

pub const SB_MAGIC: &[u8; 8] = b"TCFLASH\0";
/// Magic of the formatting marker: superblock slot 0 while `create` formats the device (the
/// superblock replaces it last), so that an interrupted format is told from other data.
pub const FORMATTING_MAGIC: &[u8; 8] = b"TCFLFMT\0";
pub const REC_MAGIC: &[u8; 4] = b"TCSR";
pub const FORMAT_VERSION: u32 = 3;
/// The older format a mount still upgrades (dirty blocks written back, then reformatted).
pub const UPGRADABLE_VERSION: u32 = 2;
/// Superblock flag: the tier was closed cleanly (every record matches memory).
pub const SB_CLEAN: u32 = 1;
/// Record flag: the set is mapped to the backing set in the tag.
pub const REC_MAPPED: u32 = 1;
/// Record flag: the file-meta fields after the bitmaps are meaningful (format 2).
pub const REC_META: u32 = 2;
/// Bytes of the file-meta fields after the bitmaps: size, mtime, meta_gen, handle type,
/// handle length, 128 handle bytes.
pub const REC_META_BYTES: usize = 32 + MAX_HANDLE_BYTES;
/// Bytes of a superblock that carry content (the rest of its sector is zero).
pub const SB_BYTES: usize = 76;
/// Record header bytes before the bitmaps.
pub const REC_HEADER: usize = 72;
/// Bytes of one block checksum in a set's checksum table.
pub const SUM_BYTES: usize = 4;

/// Where everything is on the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// The format version this layout is of ([`FORMAT_VERSION`], or
    /// [`UPGRADABLE_VERSION`] for a cache to upgrade).
    pub version: u32,
    /// log2 of the block size in bytes.
    pub block_shift: u8,
    /// log2 of the blocks per set.
    pub set_shift: u8,
    pub sector: u32,
    pub sets: u32,
    /// Bytes per record slot (a multiple of `sector`).
    pub rec_size: u32,
    pub meta_off: u64,
    /// Where the checksum tables start (format 3; format 2 has none: `data_off`).
    pub sums_off: u64,
    /// Bytes per set's checksum table (a multiple of `sector`; 0 in format 2).
    pub sums_size: u32,
    pub data_off: u64,
}

/// `x` rounded up to a multiple of `to`; `None` on overflow or `to == 0`.
fn round_up(x: u64, to: u64) -> Option<u64> {
    x.checked_next_multiple_of(to)
}

impl Geometry {
    pub fn block_size(&self) -> usize {
        1 << self.block_shift
    }
    pub fn set_blocks(&self) -> usize {
        1 << self.set_shift
    }
    pub fn set_bytes(&self) -> u64 {
        1u64 << (self.block_shift + self.set_shift)
    }
    /// Bytes of one bitmap in a record.
    pub fn bitmap_bytes(&self) -> usize {
        self.set_blocks().div_ceil(64) * 8
    }
    /// Bitmaps in a record: valid, dirty and (format 3) in-place.
    fn bitmaps(&self) -> usize {
        if self.version >= 3 {
            3
        } else {
            2
        }
    }
    pub fn sb_off(&self, slot: u64) -> u64 {
        slot * u64::from(self.sector)
    }
    pub fn rec_off(&self, set: u32, slot: u64) -> u64 {
        self.meta_off + (u64::from(set) * 2 + slot) * u64::from(self.rec_size)
    }
    /// Where set `set`'s checksum table is (format 3).
    pub fn sums_at(&self, set: u32) -> u64 {
        self.sums_off + u64::from(set) * u64::from(self.sums_size)
    }
    pub fn block_off(&self, set: u32, block: usize) -> u64 {
        self.data_off
            + ((u64::from(set) << self.set_shift) + block as u64) * self.block_size() as u64
    }
    pub fn capacity_blocks(&self) -> u64 {
        u64::from(self.sets) << self.set_shift
    }

    /// The largest layout of this format that fits `len` bytes.
    pub fn compute(
        len: u64,
        sector: usize,
        block_shift: u8,
        set_shift: u8,
    ) -> Result<Self, FlashError> {
        Self::compute_for(FORMAT_VERSION, len, sector, block_shift, set_shift)
    }

    /// The largest layout of format `version` (3, or 2 to read a cache to upgrade) that fits
    /// `len` bytes.
    pub fn compute_for(
        version: u32,
        len: u64,
        sector: usize,
        block_shift: u8,
        set_shift: u8,
    ) -> Result<Self, FlashError> {
        let sector = sector.max(512);
        if !sector.is_power_of_two() || !(9..=24).contains(&block_shift) || set_shift > 16 {
            return Err(FlashError::Geometry(format!(
                "sector {sector}, block 2^{block_shift}, set 2^{set_shift} blocks: unsupported"
            )));
        }
        if (1usize << block_shift) < sector {
            return Err(FlashError::Geometry(format!(
                "block of {} bytes is smaller than the sector ({sector})",
                1usize << block_shift
            )));
        }
        // Every step checked: `len` may come from a hostile superblock.
        let overflow = || FlashError::Geometry(format!("{len} bytes: layout overflows"));
        let sector64 = u64::try_from(sector).map_err(|_| overflow())?;
        let bitmap = (1u64 << set_shift).div_ceil(64) * 8;
        let maps = if version >= 3 { 3 } else { 2 };
        let rec_size = round_up(
            REC_HEADER as u64 + maps * bitmap + REC_META_BYTES as u64 + 4,
            sector64,
        )
        .ok_or_else(overflow)?;
        let rec_size32 = u32::try_from(rec_size).map_err(|_| overflow())?;
        let sums_size = if version >= 3 {
            round_up((SUM_BYTES as u64) << set_shift, sector64).ok_or_else(overflow)?
        } else {
            0
        };
        let meta_off = sector64.checked_mul(2).ok_or_else(overflow)?;
        let set_bytes = 1u64 << (block_shift + set_shift);
        // (sums_off, data_off, end of data) for `sets` sets; `None` when past a u64.
        let layout = |sets: u64| -> Option<(u64, u64, u64)> {
            let sums_off = meta_off.checked_add(sets.checked_mul(2)?.checked_mul(rec_size)?)?;
            let sums_end = sums_off.checked_add(sets.checked_mul(sums_size)?)?;
            let data_off = round_up(sums_end, 1 << block_shift)?;
            let end = data_off.checked_add(sets.checked_mul(set_bytes)?)?;
            Some((sums_off, data_off, end))
        };
        let per_set = set_bytes
            .checked_add(2 * rec_size + sums_size)
            .ok_or_else(overflow)?;
        let mut sets = (len.saturating_sub(meta_off) / per_set).min(u64::from(u32::MAX - 1));
        // The estimate is over by at most a block's rounding: a few steps at most.
        while sets > 0 && layout(sets).is_none_or(|(_, _, end)| end > len) {
            sets -= 1;
        }
        if sets == 0 {
            return Err(FlashError::Geometry(format!(
                "{len} bytes hold no set of {set_bytes} bytes"
            )));
        }
        let (sums_off, data_off, _) = layout(sets).ok_or_else(overflow)?;
        let sets = u32::try_from(sets).map_err(|_| FlashError::Geometry("too many sets".into()))?;
        Ok(Self {
            version,
            block_shift,
            set_shift,
            sector: u32::try_from(sector).map_err(|_| overflow())?,
            sets,
            rec_size: rec_size32,
            meta_off,
            sums_off,
            sums_size: u32::try_from(sums_size).map_err(|_| overflow())?,
            data_off,
        })
    }
}

/// A block's checksum (format 3): CRC32C of its identity — the tier instance, the cache set
/// and block index it is stored at, the backing file and set it belongs to, its content
/// version — followed by its bytes. So bytes that landed at another block's place (a
/// misdirected write), or another cache's, or another version's never check out.
pub fn block_sum(
    instance: u64,
    set: u32,
    block: usize,
    tag: (FileKey, u64),
    version: u64,
    data: &[u8],
) -> u32 {
    let mut id = [0u8; 56];
    id[0..8].copy_from_slice(&instance.to_le_bytes());
    id[8..12].copy_from_slice(&set.to_le_bytes());
    id[12..16].copy_from_slice(&(block as u32).to_le_bytes());
    id[16..24].copy_from_slice(&tag.0.dev.to_le_bytes());
    id[24..32].copy_from_slice(&tag.0.ino.to_le_bytes());
    id[32..40].copy_from_slice(&tag.0.birth.to_le_bytes());
    id[40..48].copy_from_slice(&tag.1.to_le_bytes());
    id[48..56].copy_from_slice(&version.to_le_bytes());
    crc32c::crc32c_append(crc32c::crc32c(&id), data)
}

/// The formatting marker (one sector of `sector` bytes): [`FORMATTING_MAGIC`], the format
/// version being made (u32), zeros, and at bytes 72..76 a CRC32C of bytes 0..72 — a
/// superblock's shape with another magic, so no reader takes it for a superblock.
pub fn formatting_marker(sector: usize) -> Vec<u8> {
    let mut b = vec![0u8; sector.max(SB_BYTES)];
    b[0..8].copy_from_slice(FORMATTING_MAGIC);
    b[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    let crc = crc32c::crc32c(&b[..72]);
    b[72..76].copy_from_slice(&crc.to_le_bytes());
    b
}

/// Whether `b` (a sector read at offset 0) is a formatting marker (magic and CRC).
pub fn is_formatting_marker(b: &[u8]) -> bool {
    b.len() >= SB_BYTES && &b[0..8] == FORMATTING_MAGIC && crc32c::crc32c(&b[..72]) == u32_at(b, 72)
}

/// The superblock (two copies, slot = `gen & 1`; the valid one with the higher `gen` wins).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Superblock {
    pub flags: u32,
    pub gen: u64,
    pub geo: Geometry,
    pub device_len: u64,
    /// Random at creation; records carry it, so records of an earlier format are ignored.
    pub instance: u64,
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[o..o + 4]);
    u32::from_le_bytes(a)
}
fn u64_at(b: &[u8], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(a)
}

impl Superblock {
    /// One sector.
    pub fn encode(&self) -> Vec<u8> {
        let g = &self.geo;
        let mut b = vec![0u8; g.sector as usize];
        b[0..8].copy_from_slice(SB_MAGIC);
        b[8..12].copy_from_slice(&g.version.to_le_bytes());
        b[12..16].copy_from_slice(&self.flags.to_le_bytes());
        b[16..24].copy_from_slice(&self.gen.to_le_bytes());
        b[24] = g.block_shift;
        b[25] = g.set_shift;
        b[28..32].copy_from_slice(&g.sector.to_le_bytes());
        b[32..36].copy_from_slice(&g.sets.to_le_bytes());
        b[36..40].copy_from_slice(&g.rec_size.to_le_bytes());
        b[40..48].copy_from_slice(&g.meta_off.to_le_bytes());
        b[48..56].copy_from_slice(&g.data_off.to_le_bytes());
        b[56..64].copy_from_slice(&self.device_len.to_le_bytes());
        b[64..72].copy_from_slice(&self.instance.to_le_bytes());
        let crc = crc32c::crc32c(&b[..72]);
        b[72..76].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// The format version of a superblock with a good magic and checksum, whatever the
    /// version (to tell a cache of another tiercache version from garbage).
    pub fn version_of(b: &[u8]) -> Option<u32> {
        (b.len() >= SB_BYTES && &b[0..8] == SB_MAGIC && crc32c::crc32c(&b[..72]) == u32_at(b, 72))
            .then(|| u32_at(b, 8))
    }

    /// The sector size of the cache whose first bytes are `head`: of a valid superblock (any
    /// version) in slot 0, or else in slot 1 where its own sector size puts it.
    pub fn sector_in_head(head: &[u8]) -> Option<u32> {
        let at = |off: usize| {
            head.get(off..)
                .filter(|b| Self::version_of(b).is_some())
                .map(|b| u32_at(b, 28))
        };
        at(0).or_else(|| {
            (9..=16)
                .map(|shift| 1usize << shift)
                .find_map(|s| at(s).filter(|&got| got as usize == s))
        })
    }

    /// `Err` names why the bytes are not a valid superblock of this format.
    pub fn decode(b: &[u8]) -> Result<Self, BadSuperblock> {
        Self::decode_version(b, FORMAT_VERSION)
    }

    /// As [`Superblock::decode`], for format `want`. The checksum tables' place is not
    /// stored: it follows from the other fields (0 when they overflow; the reader compares
    /// the whole geometry with one recomputed from the device length anyway).
    pub fn decode_version(b: &[u8], want: u32) -> Result<Self, BadSuperblock> {
        if b.len() < SB_BYTES {
            return Err(BadSuperblock::Short);
        }
        if &b[0..8] != SB_MAGIC {
            return Err(BadSuperblock::Magic);
        }
        if crc32c::crc32c(&b[..72]) != u32_at(b, 72) {
            return Err(BadSuperblock::Checksum);
        }
        let version = u32_at(b, 8);
        if version != want {
            return Err(BadSuperblock::Version {
                found: version,
                want,
            });
        }
        let (set_shift, sector, sets) = (b[25], u32_at(b, 28), u32_at(b, 32));
        let (rec_size, meta_off) = (u32_at(b, 36), u64_at(b, 40));
        let sums_size = (version >= 3)
            .then(|| {
                let n = (SUM_BYTES as u64).checked_shl(u32::from(set_shift))?;
                u32::try_from(round_up(n, u64::from(sector))?).ok()
            })
            .flatten()
            .unwrap_or(0);
        let sums_off = u64::from(sets)
            .checked_mul(2 * u64::from(rec_size))
            .and_then(|m| m.checked_add(meta_off))
            .unwrap_or(0);
        Ok(Self {
            flags: u32_at(b, 12),
            gen: u64_at(b, 16),
            geo: Geometry {
                version,
                block_shift: b[24],
                set_shift,
                sector,
                sets,
                rec_size,
                meta_off,
                sums_off,
                sums_size,
                data_off: u64_at(b, 48),
            },
            device_len: u64_at(b, 56),
            instance: u64_at(b, 64),
        })
    }
}

/// Why bytes are not a valid superblock ([`Superblock::decode`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BadSuperblock {
    #[error("short")]
    Short,
    #[error("bad magic")]
    Magic,
    #[error("bad checksum")]
    Checksum,
    #[error("format version {found}, expected {want}")]
    Version { found: u32, want: u32 },
}

/// One set's metadata record as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub set: u32,
    pub seq: u64,
    /// `None`: the set is free.
    pub tag: Option<(FileKey, u64)>,
    pub version: u64,
    pub valid: Vec<u64>,
    pub dirty: Vec<u64>,
    /// Dirty blocks an in-place overwrite may have been under way for when this record was
    /// the newest durable one (format 3; ⊆ `dirty`; see `crate::sums`): after a crash their
    /// bytes may be old or new sector by sector, and are not checked against their checksum.
    pub in_place: Vec<u64>,
    /// The tag's file's meta and the tier-wide `meta_gen` it was written with (format 2).
    pub meta: Option<(FileMeta, u64)>,
}

/// How a record slot read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Slot {
    /// All zero: never written.
    Empty,
    /// Not a valid record of this set and instance (torn, damaged, or foreign).
    Bad,
    Good(Record),
}

impl Record {
    /// The mask of word `i` of a bitmap of a set of `set_blocks` blocks.
    fn word_mask(i: usize, set_blocks: usize) -> u64 {
        let bits = set_blocks.saturating_sub(i * 64);
        if bits >= 64 {
            u64::MAX
        } else {
            (1u64 << bits) - 1
        }
    }

    /// Whether some dirty bit is not valid (`dirty ⊆ valid` broken).
    pub fn dirty_not_valid(&self) -> bool {
        self.valid.iter().zip(&self.dirty).any(|(v, d)| d & !v != 0)
    }

    /// Whether some bit is set past the set's last block.
    pub fn stray_bits(&self, set_blocks: usize) -> bool {
        let m = |(i, w): (usize, &u64)| w & !Self::word_mask(i, set_blocks) != 0;
        self.valid.iter().enumerate().any(m) || self.dirty.iter().enumerate().any(m)
    }

    /// Clears bits past the set's end and makes every dirty block valid (a dirty bit is never
    /// dropped: it may name the only copy of newer bytes). Returns whether anything changed.
    /// In-place bits outside `dirty` mean nothing and are cleared too (not counted).
    pub fn sanitize(&mut self, set_blocks: usize) -> bool {
        let before = (self.valid.clone(), self.dirty.clone());
        for (i, (v, d)) in self.valid.iter_mut().zip(self.dirty.iter_mut()).enumerate() {
            let m = Self::word_mask(i, set_blocks);
            *d &= m;
            *v = (*v | *d) & m;
        }
        for (p, d) in self.in_place.iter_mut().zip(&self.dirty) {
            *p &= d;
        }
        before != (self.valid.clone(), self.dirty.clone())
    }

    /// The record in `geo`'s format (format 2 only to make caches to upgrade, in tests).
    pub fn encode(&self, geo: &Geometry, instance: u64) -> Vec<u8> {
        let mut b = vec![0u8; geo.rec_size as usize];
        b[0..4].copy_from_slice(REC_MAGIC);
        b[4..8].copy_from_slice(&self.set.to_le_bytes());
        b[8..16].copy_from_slice(&instance.to_le_bytes());
        b[16..24].copy_from_slice(&self.seq.to_le_bytes());
        let (file, si, mut flags) = match self.tag {
            Some((f, si)) => (f, si, REC_MAPPED),
            None => (
                FileKey {
                    dev: 0,
                    ino: 0,
                    birth: 0,
                },
                0,
                0,
            ),
        };
        b[24..32].copy_from_slice(&file.dev.to_le_bytes());
        b[32..40].copy_from_slice(&file.ino.to_le_bytes());
        b[40..48].copy_from_slice(&file.birth.to_le_bytes());
        b[48..56].copy_from_slice(&si.to_le_bytes());
        b[56..64].copy_from_slice(&self.version.to_le_bytes());
        let mut o = REC_HEADER;
        let in_place: Vec<u64> = (0..self.dirty.len())
            .map(|i| self.in_place.get(i).copied().unwrap_or(0) & self.dirty[i])
            .collect();
        let third = if geo.bitmaps() == 3 {
            &in_place[..]
        } else {
            &[]
        };
        for w in self.valid.iter().chain(self.dirty.iter()).chain(third) {
            b[o..o + 8].copy_from_slice(&w.to_le_bytes());
            o += 8;
        }
        // A free set carries no meta (it names no file).
        if let (Some((m, gen)), Some(_)) = (&self.meta, self.tag) {
            let n = m.handle.bytes.len().min(MAX_HANDLE_BYTES);
            flags |= REC_META;
            b[o..o + 8].copy_from_slice(&m.size.to_le_bytes());
            b[o + 8..o + 16].copy_from_slice(&m.mtime_ns.to_le_bytes());
            b[o + 16..o + 24].copy_from_slice(&gen.to_le_bytes());
            b[o + 24..o + 28].copy_from_slice(&m.handle.kind.to_le_bytes());
            b[o + 28..o + 32].copy_from_slice(&(n as u32).to_le_bytes());
            b[o + 32..o + 32 + n].copy_from_slice(&m.handle.bytes[..n]);
        }
        o += REC_META_BYTES;
        b[64..68].copy_from_slice(&flags.to_le_bytes());
        let crc = crc32c::crc32c(&b[..o]);
        b[o..o + 4].copy_from_slice(&crc.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8], geo: &Geometry, set: u32, instance: u64) -> Slot {
        if b.iter().all(|&x| x == 0) {
            return Slot::Empty;
        }
        let words = geo.bitmap_bytes() / 8;
        let bits_end = REC_HEADER + geo.bitmaps() * words * 8;
        let end = bits_end + REC_META_BYTES;
        if b.len() < end + 4
            || &b[0..4] != REC_MAGIC
            || crc32c::crc32c(&b[..end]) != u32_at(b, end)
            || u32_at(b, 4) != set
            || u64_at(b, 8) != instance
        {
            return Slot::Bad;
        }
        let flags = u32_at(b, 64);
        let o = bits_end;
        let handle_len = u32_at(b, o + 28) as usize;
        if flags & REC_META != 0 && (flags & REC_MAPPED == 0 || handle_len > MAX_HANDLE_BYTES) {
            // A checksummed record no writer makes: not trusted.
            return Slot::Bad;
        }
        let meta = (flags & REC_META != 0).then(|| {
            let mtime = i64::from_le_bytes(b[o + 8..o + 16].try_into().unwrap_or([0; 8]));
            let kind = i32::from_le_bytes(b[o + 24..o + 28].try_into().unwrap_or([0; 4]));
            (
                FileMeta {
                    size: u64_at(b, o),
                    mtime_ns: mtime,
                    handle: FileHandle {
                        kind,
                        bytes: b[o + 32..o + 32 + handle_len].to_vec(),
                    },
                },
                u64_at(b, o + 16),
            )
        });
        let tag = (flags & REC_MAPPED != 0).then(|| {
            (
                FileKey {
                    dev: u64_at(b, 24),
                    ino: u64_at(b, 32),
                    birth: u64_at(b, 40),
                },
                u64_at(b, 48),
            )
        });
        let word = |i: usize| u64_at(b, REC_HEADER + i * 8);
        let valid: Vec<u64> = (0..words).map(word).collect();
        let dirty: Vec<u64> = (words..2 * words).map(word).collect();
        let in_place: Vec<u64> = if geo.bitmaps() == 3 {
            (2 * words..3 * words).map(word).collect()
        } else {
            vec![0; words]
        };
        Slot::Good(Record {
            set,
            seq: u64_at(b, 16),
            tag,
            version: u64_at(b, 56),
            valid,
            dirty,
            in_place,
            meta,
        })
    }
}

/// The newest good record of two slots, and how many slots were bad (torn or damaged).
pub fn newest(a: Slot, b: Slot) -> (Option<Record>, u32) {
    let bad = u32::from(a == Slot::Bad) + u32::from(b == Slot::Bad);
    let pick = match (a, b) {
        (Slot::Good(x), Slot::Good(y)) => Some(if y.seq > x.seq { y } else { x }),
        (Slot::Good(x), _) | (_, Slot::Good(x)) => Some(x),
        _ => None,
    };
    (pick, bad)
}
