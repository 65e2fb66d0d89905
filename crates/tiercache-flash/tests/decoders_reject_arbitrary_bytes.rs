//! The SSD tier's decoders of bytes read from its cache file — superblocks, the formatting
//! marker, set records, checksum tables, format-2 caches — fed arbitrary bytes, checksummed
//! hostile fields and damaged images of real caches: no panic, no read past a buffer, no
//! allocation sized by a length field, an error (not a crash) for what is not valid, and
//! every valid encoding decoding to what was encoded.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use proptest::prelude::*;
use std::sync::{Arc, OnceLock};
use tiercache_flash::format::{
    formatting_marker, is_formatting_marker, Geometry, Record, Slot, Superblock, REC_HEADER,
    REC_MAGIC, REC_META_BYTES, SB_BYTES, SB_MAGIC,
};
use tiercache_flash::{is_formatted, FlashConfig, FlashDevice, FlashTier, LegacyTier, MemDevice};
use tiercache_tier::{Cleaning, Persistence};
use tiercache_tier::{DataTier, FileHandle, FileKey, FileMeta, Lookup, TierKey, MAX_HANDLE_BYTES};

#[path = "../../tiercache-fuse/tests/common/largest_alloc.rs"]
mod largest_alloc;
use largest_alloc::largest_alloc;

/// Device of the images: 1 MiB, 512-byte sectors; 4 KiB blocks, 4-block sets (~58 sets).
const LEN: u64 = 1 << 20;
/// No decode may allocate more than this at once: the metadata chunk read at open (≤ 1 MiB)
/// and the device-sized index are the largest, whatever a length field says.
const ALLOC_BOUND: usize = 2 << 20;

fn cfg() -> FlashConfig {
    let mut c = FlashConfig::new("fuzz");
    c.block_shift = 12;
    c.set_shift = 2;
    c
}

fn geo(version: u32) -> Geometry {
    Geometry::compute_for(version, LEN, 512, 12, 2).unwrap()
}

/// Keys and what was stored under them in [`images`].
fn clean_keys() -> Vec<TierKey> {
    (0..6).map(|b| key(1, b * 3)).collect()
}
fn dirty_keys() -> Vec<TierKey> {
    (0..6).map(|b| key(2, b * 5)).chain([key(3, 40)]).collect()
}

/// Two images of a real format-3 cache: closed cleanly, and crashed after a sync (dirty
/// blocks and file meta durable, the clean flag off).
fn images() -> &'static (Vec<u8>, Vec<u8>) {
    static IMAGES: OnceLock<(Vec<u8>, Vec<u8>)> = OnceLock::new();
    IMAGES.get_or_init(|| {
        let make = |close: bool| {
            let dev = Arc::new(MemDevice::new(LEN));
            let t = FlashTier::create(dev.clone(), cfg()).unwrap();
            let meta = FileMeta {
                size: 1 << 30,
                mtime_ns: -5,
                handle: FileHandle {
                    kind: 1,
                    bytes: vec![0xAB; MAX_HANDLE_BYTES],
                },
            };
            t.set_file_meta(&file(2), &meta);
            for k in clean_keys() {
                fill(&t, &k, 1);
            }
            for k in dirty_keys() {
                write(&t, &k, 1);
            }
            t.sync().unwrap();
            if close {
                t.close().unwrap();
            } else {
                t.abandon();
            }
            dev.snapshot()
        };
        (make(true), make(false))
    })
}

/// A device holding `bytes` (any length; 512-byte sectors).
fn device(bytes: &[u8]) -> Arc<MemDevice> {
    let d = Arc::new(MemDevice::new(bytes.len() as u64));
    d.poke(0, bytes);
    d
}

/// Every reader of a cache file on `bytes`: none panics or allocates past [`ALLOC_BOUND`]; a
/// tier that opens serves only the bytes stored (or misses, or errors).
fn every_reader(bytes: &[u8]) -> Result<(), TestCaseError> {
    let run = |what: &str, f: &dyn Fn(Arc<dyn FlashDevice>)| {
        let d: Arc<dyn FlashDevice> = device(bytes);
        let ((), largest) = largest_alloc(|| f(d));
        prop_assert!(
            largest <= ALLOC_BOUND,
            "{what}: one allocation of {largest} bytes"
        );
        Ok(())
    };
    run("check", &|d| {
        let _ = FlashTier::check(d.as_ref());
    })?;
    run("is_formatted", &|d| {
        let _ = is_formatted(d.as_ref());
    })?;
    run("legacy open", &|d| {
        if let Ok(t) = LegacyTier::open(d, "legacy") {
            let _ = t.recovered_files();
        }
    })?;
    run("open", &|d| {
        if let Ok(t) = FlashTier::open(d, cfg()) {
            served_bytes_are_right(&t);
            let _ = t.close();
        }
    })?;
    Ok(())
}

/// Whatever a tier opened on a damaged image serves is what was stored.
fn served_bytes_are_right(t: &FlashTier) {
    let bs = t.info().block_size;
    let mut buf = vec![0u8; bs];
    for k in clean_keys().into_iter().chain(dirty_keys()) {
        if let Ok(Lookup::Hit { .. }) = t.read(&k, V, &mut buf) {
            assert!(buf == data(&k, 1, bs), "{k:?}: other bytes served");
        }
    }
    for k in dirty_keys() {
        if let Ok(Some(_)) = t.read_dirty(&k, V, &mut buf) {
            assert!(buf == data(&k, 1, bs), "{k:?}: other dirty bytes");
        }
    }
}

fn crc_fix(b: &mut [u8], end: usize) {
    let crc = crc32c::crc32c(&b[..end]);
    b[end..end + 4].copy_from_slice(&crc.to_le_bytes());
}

/// Where a record's checksum is (format 3, this geometry).
fn rec_crc_at(g: &Geometry) -> usize {
    REC_HEADER + 3 * g.bitmap_bytes() + REC_META_BYTES
}

/// Values a hostile length or offset field is set to.
fn extreme() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(1),
        Just(u64::from(u32::MAX)),
        Just(u64::from(u32::MAX) + 1),
        Just(u64::MAX),
        Just(u64::MAX / 2 + 1),
        Just(LEN),
        Just(LEN + 1),
        any::<u64>(),
    ]
}

/// One damage to an image.
#[derive(Debug, Clone)]
enum Damage {
    /// One bit flipped anywhere.
    Flip { at: usize, bit: u8 },
    /// One bit flipped in the metadata (superblocks, records, checksum tables).
    MetaFlip { at: usize, bit: u8 },
    /// The device cut short.
    Truncate { len: usize },
    /// A superblock field (offset, width) set, its checksum made good again.
    SbField {
        slot: bool,
        at: usize,
        width: usize,
        value: u64,
    },
    /// A record field set, its checksum made good again.
    RecField {
        set: u32,
        slot: u64,
        at: usize,
        width: usize,
        value: u64,
    },
    /// A sector zeroed.
    Zero { sector: usize },
}

/// Superblock fields: version, flags, gen, shifts, sector, sets, rec_size, meta_off,
/// data_off, device_len, instance.
const SB_FIELDS: &[(usize, usize)] = &[
    (8, 4),
    (12, 4),
    (16, 8),
    (24, 1),
    (25, 1),
    (28, 4),
    (32, 4),
    (36, 4),
    (40, 8),
    (48, 8),
    (56, 8),
    (64, 8),
];

/// Record fields before the bitmaps, then the meta fields (relative to the bitmaps' end):
/// set, instance, seq, tag, version, flags; size, mtime, gen, handle kind, handle length.
fn rec_fields(g: &Geometry) -> Vec<(usize, usize)> {
    let m = REC_HEADER + 3 * g.bitmap_bytes();
    vec![
        (4, 4),
        (8, 8),
        (16, 8),
        (24, 8),
        (32, 8),
        (40, 8),
        (48, 8),
        (56, 8),
        (64, 4),
        (REC_HEADER, 8),
        (REC_HEADER + 8, 8),
        (REC_HEADER + 16, 8),
        (m, 8),
        (m + 8, 8),
        (m + 16, 8),
        (m + 24, 4),
        (m + 28, 4),
    ]
}

fn damage() -> impl Strategy<Value = Damage> {
    let g = geo(3);
    let meta_end = g.data_off as usize;
    let sets = g.sets;
    let fields = rec_fields(&g);
    prop_oneof![
        (0..LEN as usize, 0u8..8).prop_map(|(at, bit)| Damage::Flip { at, bit }),
        (0..meta_end, 0u8..8).prop_map(|(at, bit)| Damage::MetaFlip { at, bit }),
        (0..LEN as usize).prop_map(|len| Damage::Truncate { len }),
        (any::<bool>(), prop::sample::select(SB_FIELDS), extreme()).prop_map(
            |(slot, (at, width), value)| Damage::SbField {
                slot,
                at,
                width,
                value
            }
        ),
        (0..sets, 0u64..2, prop::sample::select(fields), extreme()).prop_map(
            |(set, slot, (at, width), value)| Damage::RecField {
                set,
                slot,
                at,
                width,
                value
            }
        ),
        (0..meta_end / 512).prop_map(|sector| Damage::Zero { sector }),
    ]
}

fn set_field(b: &mut [u8], at: usize, width: usize, value: u64) {
    b[at..at + width].copy_from_slice(&value.to_le_bytes()[..width]);
}

/// `img` with damage `d` (none where it lies past a cut-short image's end).
fn apply(img: &[u8], d: &Damage) -> Vec<u8> {
    let g = geo(3);
    let mut b = img.to_vec();
    let reach = match *d {
        Damage::Flip { at, .. } | Damage::MetaFlip { at, .. } => at + 1,
        Damage::Truncate { .. } => 0,
        Damage::SbField { slot, .. } => 512 * (1 + usize::from(slot)),
        Damage::RecField { set, slot, .. } => {
            (g.rec_off(set, slot) + u64::from(g.rec_size)) as usize
        }
        Damage::Zero { sector } => (sector + 1) * 512,
    };
    if reach > b.len() {
        return b;
    }
    match *d {
        Damage::Flip { at, bit } | Damage::MetaFlip { at, bit } => b[at] ^= 1 << bit,
        Damage::Truncate { len } => b.truncate(len),
        Damage::SbField {
            slot,
            at,
            width,
            value,
        } => {
            let o = if slot { 512 } else { 0 };
            set_field(&mut b[o..o + 512], at, width, value);
            crc_fix(&mut b[o..o + 512], 72);
        }
        Damage::RecField {
            set,
            slot,
            at,
            width,
            value,
        } => {
            let o = g.rec_off(set, slot) as usize;
            let rec = &mut b[o..o + g.rec_size as usize];
            set_field(rec, at, width, value);
            crc_fix(rec, rec_crc_at(&g));
        }
        Damage::Zero { sector } => b[sector * 512..(sector + 1) * 512].fill(0),
    }
    b
}

/// Any record a writer could make for a set of `set_blocks` blocks (bits past the set and
/// dirty bits not valid included: a record is checksummed, not trusted).
fn record(set: u32, words: usize) -> impl Strategy<Value = Record> {
    let bits = prop::collection::vec(any::<u64>(), words);
    let tag = prop::option::of((any::<(u64, u64, u64)>(), any::<u64>()));
    let meta = prop::option::of((
        any::<u64>(),
        any::<i64>(),
        any::<i32>(),
        prop::collection::vec(any::<u8>(), 0..=MAX_HANDLE_BYTES),
        any::<u64>(),
    ));
    (
        any::<u64>(),
        tag,
        any::<u64>(),
        bits.clone(),
        bits.clone(),
        bits,
        meta,
    )
        .prop_map(
            move |(seq, tag, version, valid, dirty, in_place, meta)| Record {
                set,
                seq,
                tag: tag.map(|((dev, ino, birth), si)| (FileKey { dev, ino, birth }, si)),
                version,
                valid,
                dirty,
                in_place,
                meta: meta.map(|(size, mtime_ns, kind, bytes, gen)| {
                    (
                        FileMeta {
                            size,
                            mtime_ns,
                            handle: FileHandle { kind, bytes },
                        },
                        gen,
                    )
                }),
            },
        )
}

/// What a record decodes to: in-place bits only under dirty ones (none in format 2), meta
/// only with a tag.
fn as_stored(mut r: Record, version: u32) -> Record {
    for (p, d) in r.in_place.iter_mut().zip(&r.dirty) {
        *p = if version >= 3 { *p & d } else { 0 };
    }
    if r.tag.is_none() {
        r.meta = None;
    }
    r
}

/// A geometry of either format for a random small layout.
fn any_geometry() -> impl Strategy<Value = Geometry> {
    (
        2u32..=3,
        0u8..=10,
        12u8..=16,
        prop_oneof![Just(512usize), Just(4096)],
    )
        .prop_filter_map("too small", |(v, set_shift, block_shift, sector)| {
            Geometry::compute_for(v, 64 << 20, sector, block_shift, set_shift).ok()
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Arbitrary bytes as a superblock, a formatting marker or the head of a cache.
    #[test]
    fn superblock_decoders_take_arbitrary_bytes(
        b in prop::collection::vec(any::<u8>(), 0..1200),
        want in 0u32..5,
    ) {
        let _ = Superblock::decode(&b);
        let _ = Superblock::decode_version(&b, want);
        let _ = Superblock::version_of(&b);
        let _ = Superblock::sector_in_head(&b);
        let _ = is_formatting_marker(&b);
        prop_assert!(Superblock::decode(&b[..b.len().min(SB_BYTES - 1)]).is_err());
    }

    /// Arbitrary bytes, and arbitrary checksummed bytes carrying the magic, the set number
    /// and the instance, as a record of any geometry.
    #[test]
    fn record_decoder_takes_arbitrary_bytes(
        g in any_geometry(),
        mut b in prop::collection::vec(any::<u8>(), 0..2048),
        set in any::<u32>(),
        instance in any::<u64>(),
        handle_len in extreme(),
    ) {
        let _ = Record::decode(&b, &g, set, instance);
        let maps = if g.version >= 3 { 3 } else { 2 };
        let end = REC_HEADER + maps * g.bitmap_bytes() + REC_META_BYTES;
        if b.len() >= end + 4 {
            b[0..4].copy_from_slice(REC_MAGIC);
            b[4..8].copy_from_slice(&set.to_le_bytes());
            b[8..16].copy_from_slice(&instance.to_le_bytes());
            let h = end - REC_META_BYTES + 28;
            b[h..h + 4].copy_from_slice(&(handle_len as u32).to_le_bytes());
            crc_fix(&mut b, end);
            match Record::decode(&b, &g, set, instance) {
                Slot::Good(r) => {
                    let n = r.meta.as_ref().map_or(0, |(m, _)| m.handle.bytes.len());
                    prop_assert!(n <= MAX_HANDLE_BYTES);
                    prop_assert_eq!(r.valid.len(), g.bitmap_bytes() / 8);
                }
                Slot::Bad => {}
                Slot::Empty => prop_assert!(false, "a record with a magic read as empty"),
            }
        }
    }

    /// `Geometry::compute` takes any numbers (a superblock's): an error or a layout that fits.
    #[test]
    fn geometry_of_any_numbers_fits_or_is_refused(
        version in 2u32..=3,
        len in extreme(),
        sector in prop_oneof![Just(0usize), Just(512), Just(4096), Just(3000), any::<usize>()],
        block_shift in any::<u8>(),
        set_shift in any::<u8>(),
    ) {
        if let Ok(g) = Geometry::compute_for(version, len, sector, block_shift, set_shift) {
            let end = g.data_off as u128 + u128::from(g.sets) * u128::from(g.set_bytes());
            prop_assert!(end <= u128::from(len), "{g:?} past {len}");
            prop_assert!(g.sets > 0);
        }
    }

    /// A valid superblock and record decode to what was encoded; one flipped bit anywhere in
    /// what their checksum covers (or in it) is refused.
    #[test]
    fn valid_encodings_round_trip_and_one_flipped_bit_is_refused(
        g in any_geometry(),
        flags in any::<u32>(),
        gen in any::<u64>(),
        instance in any::<u64>(),
        set in 0u32..1000,
        rec in (0u32..1000).prop_flat_map(|s| record(s, 16)),
        flip in any::<prop::sample::Index>(),
        bit in 0u8..8,
    ) {
        let sb = Superblock { flags, gen, geo: g, device_len: 64 << 20, instance };
        let enc = sb.encode();
        prop_assert_eq!(Superblock::decode_version(&enc, g.version), Ok(sb));
        let mut bad = enc.clone();
        bad[flip.index(SB_BYTES)] ^= 1 << bit;
        prop_assert!(Superblock::decode_version(&bad, g.version).is_err());

        let words = g.bitmap_bytes() / 8;
        let mut rec = rec;
        rec.set = set;
        for v in [&mut rec.valid, &mut rec.dirty, &mut rec.in_place] {
            v.resize(words, 0);
        }
        let enc = rec.encode(&g, instance);
        let want = as_stored(rec, g.version);
        prop_assert_eq!(Record::decode(&enc, &g, set, instance), Slot::Good(want));
        let maps = if g.version >= 3 { 3 } else { 2 };
        let covered = REC_HEADER + maps * g.bitmap_bytes() + REC_META_BYTES + 4;
        let mut bad = enc.clone();
        bad[flip.index(covered)] ^= 1 << bit;
        prop_assert_eq!(Record::decode(&bad, &g, set, instance), Slot::Bad);
        prop_assert_eq!(Record::decode(&enc, &g, set ^ 1, instance), Slot::Bad);
        prop_assert_eq!(Record::decode(&enc[..covered - 1], &g, set, instance), Slot::Bad);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Damaged images of a real cache (clean and crashed): bit flips, cut-short devices,
    /// hostile superblock and record fields with good checksums, zeroed sectors.
    #[test]
    fn damaged_caches_are_refused_or_serve_only_stored_bytes(
        crashed in any::<bool>(),
        damages in prop::collection::vec(damage(), 1..4),
    ) {
        let (clean, crash) = images();
        let mut img = if crashed { crash.clone() } else { clean.clone() };
        for d in &damages {
            img = apply(&img, d);
        }
        every_reader(&img)?;
    }

    /// A superblock of arbitrary content with a good magic and checksum (and a version this
    /// build reads, most of the time), over a real cache's records.
    #[test]
    fn hostile_superblocks_are_refused_without_panic(
        fields in prop::collection::vec(any::<u8>(), 64),
        version in prop_oneof![Just(2u32), Just(3), any::<u32>()],
        slot in any::<bool>(),
    ) {
        let (clean, _) = images();
        let mut img = clean.clone();
        let o = if slot { 512 } else { 0 };
        let sb = &mut img[o..o + 512];
        sb[8..72].copy_from_slice(&fields);
        sb[0..8].copy_from_slice(SB_MAGIC);
        sb[8..12].copy_from_slice(&version.to_le_bytes());
        crc_fix(sb, 72);
        every_reader(&img)?;
    }

    /// Format-2 caches of arbitrary (checksummed) records, then damaged: the upgrade's reader
    /// refuses or lists exactly the dirty blocks of the records, and reads them back.
    #[test]
    fn format_2_caches_of_any_records_are_read_or_refused(
        recs in prop::collection::vec((0u32..40, record(0, 1)), 0..12),
        damages in prop::collection::vec(damage(), 0..3),
    ) {
        let g = geo(2);
        let dev = MemDevice::new(LEN);
        let sb = Superblock { flags: 0, gen: 3, geo: g, device_len: LEN, instance: 77 };
        dev.poke(g.sb_off(1), &sb.encode());
        let mut dirty = 0u64;
        let mut sets = std::collections::BTreeMap::new();
        for (set, mut r) in recs {
            r.set = set;
            // Tags of few files and backing sets, so two sets may name one.
            r.tag = r.tag.map(|(f, si)| (FileKey { dev: 1, ino: f.ino % 3, birth: 0 }, si % 4));
            sets.insert(set, r);
        }
        for (set, r) in &sets {
            dev.poke(g.rec_off(*set, 0), &r.encode(&g, 77));
            if r.tag.is_some() {
                // Dirty bits of the set's four blocks (dirty ones made valid).
                dirty += u64::from((r.dirty[0] & 0xF).count_ones());
            }
        }
        let img = dev.snapshot();
        let d: Arc<dyn FlashDevice> = device(&img);
        if let Ok(t) = LegacyTier::open(d, "legacy") {
            let listed: u64 = t.recovered_files().iter().map(|f| f.dirty_blocks).sum();
            prop_assert_eq!(listed, dirty);
            let mut buf = vec![0u8; 4096];
            for b in t.dirty_blocks(usize::MAX) {
                prop_assert_eq!(t.read_dirty(&b.key, b.version, &mut buf).unwrap(), Some(1));
            }
            prop_assert!(t.read_dirty(&key(1, 0), 0, &mut buf[..4095]).is_err());
        }
        let mut img = img;
        for d in &damages {
            img = apply(&img, d);
        }
        every_reader(&img)?;
    }
}

/// The formatting marker is told from a superblock and back, at any sector size.
#[test]
fn formatting_marker_is_never_a_superblock() {
    for sector in [0, 76, 512, 4096] {
        let m = formatting_marker(sector);
        assert!(is_formatting_marker(&m));
        assert!(Superblock::decode(&m).is_err());
        assert_eq!(Superblock::version_of(&m), None);
        assert!(!is_formatting_marker(&m[..SB_BYTES - 1]));
    }
}
