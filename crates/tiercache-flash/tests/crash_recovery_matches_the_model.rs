//! Model-based: random op sequences against a map model on a power-cut device (writes since
//! the last sync are lost, reordered or torn at a crash), with torn and silently dropped
//! writes injected. After every crash + recovery: nothing the tier returns differs from what
//! the model allows (never stale: each sector of a recovered block comes from a value written
//! since it was last durable), and every dirty block acknowledged by `sync()` and not
//! cleaned or dropped since is still there. File meta (format 2): before each dirty store the
//! model sets the file's meta, as the manager does, and `SetMeta` changes it at random; after
//! every recovery each file holding dirty blocks is listed by `recovered_files()` with a meta
//! equal to the one set before the last completed `sync()` or one set later — never older,
//! never missing, never garbage — and with its exact dirty block count.
//!
//! Block checksums (format 3): a crash never makes a block fail its checksum, torn and
//! dropped writes included (no write after them lands, so no durable record names bytes that
//! were lost), and neither do write errors in the middle of a sync or a close (a record round,
//! checksum tables, parked overwrites going in place) — the tier goes on and the next sync
//! retries; an overwrite in place cut by a crash reads back old or new sector by sector, as
//! before. (Writes lost while later ones land are caught by the checksums:
//! `block_checksums_catch_rot_lost_and_misdirected_writes.rs`.)
//!
//! Two shapes: a few sets (no checksum table is cached: each is read and written through),
//! and more than 32 sets (tables are cached and evicted, in-place bits of a set are forgotten
//! over their cap).
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use proptest::prelude::*;
use std::collections::HashMap;
use std::sync::Arc;
use tiercache_core::Class;
use tiercache_flash::{FaultyDevice, FlashDevice, FlashTier};
use tiercache_tier::StoreExt as _;
use tiercache_tier::{Admit, DataTier, FileHandle, FileMeta, Lookup, TierKey};
use tiercache_tier::{Cleaning, Persistence};

const FILES: u64 = 3;

/// Blocks per file and the device length: 12 blocks (3 sets per file) on 64 KiB (6 sets: sets
/// are reused), or 48 blocks (12 sets per file) on 330 KiB (34 sets: one checksum table is
/// cached, one set keeps in-place bits).
const FEW_SETS: (u64, u64) = (12, 64 << 10);
const MANY_SETS: (u64, u64) = (48, 330 << 10);

/// The model's tier: never degraded by the errors it injects (they are what is tested).
fn model_config() -> tiercache_flash::FlashConfig {
    let mut c = small_config();
    c.max_errors = u64::MAX;
    c
}

#[derive(Debug, Clone)]
enum Op {
    Fill(u64, u64, u64, bool),
    Write(u64, u64, u64),
    Read(u64, u64),
    Take(u64, u64),
    ReadOtherVersion(u64, u64),
    Invalidate(u64, u64),
    Discard(u64, u64),
    InvalidateFile(u64, u64),
    Clean(usize),
    CleanRacingAWrite(u64),
    Sync,
    Crash,
    CloseReopen,
    /// A sync whose writes fail after `n` more (nothing it did is acknowledged).
    SyncFailing(u64),
    /// A close whose writes fail after `n` more (then a crash, when it failed), reopened.
    CloseFailing(u64),
    Tear(u64),
    DropWrites(u64),
    SetMeta(u64),
}

fn op(blocks: u64) -> impl Strategy<Value = Op> {
    let f = 0..FILES;
    let b = 0..blocks;
    prop_oneof![
        4 => (f.clone(), b.clone(), 0..1000u64, prop::bool::weighted(0.9))
            .prop_map(|(f, b, s, c)| Op::Fill(f, b, s, c)),
        6 => (f.clone(), b.clone(), 0..1000u64).prop_map(|(f, b, s)| Op::Write(f, b, s)),
        3 => (f.clone(), b.clone()).prop_map(|(f, b)| Op::Read(f, b)),
        1 => (f.clone(), b.clone()).prop_map(|(f, b)| Op::Take(f, b)),
        1 => (f.clone(), b.clone()).prop_map(|(f, b)| Op::ReadOtherVersion(f, b)),
        1 => (f.clone(), b.clone()).prop_map(|(f, b)| Op::Invalidate(f, b)),
        1 => (f.clone(), b.clone()).prop_map(|(f, b)| Op::Discard(f, b)),
        1 => (f.clone(), 0..blocks).prop_map(|(f, b)| Op::InvalidateFile(f, b)),
        2 => (1..6usize).prop_map(Op::Clean),
        1 => (0..1000u64).prop_map(Op::CleanRacingAWrite),
        3 => Just(Op::Sync),
        2 => Just(Op::Crash),
        1 => Just(Op::CloseReopen),
        1 => (0..8u64).prop_map(Op::SyncFailing),
        1 => (0..8u64).prop_map(Op::CloseFailing),
        1 => (0..6u64).prop_map(Op::Tear),
        1 => (0..6u64).prop_map(Op::DropWrites),
        2 => (0..FILES).prop_map(Op::SetMeta),
    ]
}

#[derive(Debug, Default, Clone)]
struct M {
    value: Option<Vec<u8>>,
    dirty: bool,
    /// Dirty and acknowledged by sync, not cleaned or dropped since.
    must_exist: bool,
    /// Values a crash may bring back (dirty), sector by sector.
    acceptable: Vec<Vec<u8>>,
}

/// The model of one file's meta.
#[derive(Debug, Default, Clone)]
struct MetaModel {
    /// Metas made so far (each differs).
    made: u64,
    /// The newest meta set.
    current: Option<FileMeta>,
    /// The newest meta set before the last completed sync.
    synced: Option<FileMeta>,
    /// Metas set since the last completed sync.
    later: Vec<FileMeta>,
}

/// A meta that differs per file and per `n`, handles of every length 0..=128.
fn meta_of(f: u64, n: u64) -> FileMeta {
    FileMeta {
        size: n * 1000 + f,
        mtime_ns: n as i64 * 7_000_000_007 + f as i64,
        handle: FileHandle {
            kind: f as i32 + 1,
            bytes: (0..(n * 37 + f) % 129).map(|i| (i + n + f) as u8).collect(),
        },
    }
}

struct World {
    dev: Arc<FaultyDevice>,
    metas: HashMap<u64, MetaModel>,
    tier: Option<FlashTier>,
    m: HashMap<TierKey, M>,
    bs: usize,
    sector: usize,
    /// Blocks per file.
    blocks: u64,
}

impl World {
    fn t(&self) -> &FlashTier {
        self.tier.as_ref().unwrap()
    }

    /// A torn or dropped write cut the power: acknowledgements mean nothing until a crash.
    fn cut(&self) -> bool {
        self.dev.lost_writes() > 0
    }

    fn m(&mut self, k: &TierKey) -> &mut M {
        self.m.entry(*k).or_default()
    }

    fn drop_durably(&mut self, k: &TierKey) {
        *self.m(k) = M::default();
    }

    /// A drop issued as the power went: it may or may not have become durable.
    fn drop_maybe(&mut self, k: &TierKey) {
        if self.cut() {
            self.m(k).must_exist = false;
        } else {
            self.drop_durably(k);
        }
    }

    /// `set_file_meta` with a new meta (`fresh`) or the newest one again.
    fn set_meta(&mut self, f: u64, fresh: bool) {
        let mm = self.metas.entry(f).or_default();
        if fresh || mm.current.is_none() {
            mm.made += 1;
            let m = meta_of(f, mm.made);
            mm.current = Some(m.clone());
            mm.later.push(m);
        }
        let m = mm.current.clone().unwrap();
        self.tier.as_ref().unwrap().set_file_meta(&file(f), &m);
    }

    fn sector_wise_from(&self, got: &[u8], acceptable: &[Vec<u8>]) -> bool {
        got.chunks(self.sector).enumerate().all(|(i, s)| {
            acceptable
                .iter()
                .any(|a| &a[i * self.sector..(i + 1) * self.sector] == s)
        })
    }

    /// A crash, or a close (whose writes fail after `fail_after` more, if given) and a
    /// reopen; a close that fails is followed by a crash.
    fn crash(&mut self, clean_close: bool, fail_after: Option<u64>) -> Result<(), TestCaseError> {
        let tier = self.tier.take().unwrap();
        if clean_close && !self.cut() {
            self.dev.fail_writes_after(fail_after);
        }
        let clean = clean_close && !self.cut() && tier.close().is_ok() && !self.cut();
        self.dev.fail_writes_after(None);
        if clean {
            drop(tier);
        } else {
            tier.abandon();
            self.dev.crash().unwrap();
        }
        let dev: Arc<dyn FlashDevice> = self.dev.clone();
        let t = FlashTier::open(dev, model_config()).unwrap();
        // A crash that lost the superblock write of the open after a clean close (nothing
        // after it was durable, and the model skipped every op since) is a clean restart.
        let clean = clean || t.flash_stats().opened_clean;
        if clean {
            // The close synced every meta.
            for mm in self.metas.values_mut() {
                mm.synced = mm.current.clone();
                mm.later.clear();
            }
        }
        let recovered = t.recovered_files();
        let mut dirty_per_file: HashMap<u64, u64> = HashMap::new();
        let mut buf = vec![0u8; self.bs];
        let blocks = self.blocks;
        let keys: Vec<TierKey> = (0..FILES)
            .flat_map(|f| (0..blocks).map(move |b| key(f, b)))
            .collect();
        for k in keys {
            let e = self.m.get(&k).cloned().unwrap_or_default();
            let rd = t.read_dirty(&k, V, &mut buf).map_err(|err| {
                TestCaseError::fail(format!("{k:?} failed its checksum after a crash: {err}"))
            })?;
            if rd.is_some() {
                *dirty_per_file.entry(k.file.ino).or_default() += 1;
            }
            if clean {
                // Clean close: every dirty block exactly as written; clean ones may hit.
                prop_assert_eq!(rd.is_some(), e.dirty, "dirty state of {:?}", k);
                if rd.is_some() {
                    prop_assert!(Some(&buf) == e.value.as_ref(), "dirty bytes of {:?}", k);
                }
                let l = t.read(&k, V, &mut buf).unwrap();
                if let Lookup::Hit { dirty } = l {
                    prop_assert_eq!(dirty, e.dirty);
                    prop_assert!(Some(&buf) == e.value.as_ref(), "warm bytes of {:?}", k);
                } else {
                    prop_assert!(!e.dirty);
                    self.drop_durably(&k);
                }
                let em = self.m(&k);
                em.must_exist = em.dirty;
                em.acceptable = if em.dirty { vec![buf.clone()] } else { vec![] };
                continue;
            }
            match rd {
                Some(_) => {
                    prop_assert!(
                        self.sector_wise_from(&buf, &e.acceptable),
                        "recovered {:?} holds bytes never written since it was durable",
                        k
                    );
                    let em = self.m(&k);
                    em.value = Some(buf.clone());
                    em.dirty = true;
                    em.must_exist = true;
                    em.acceptable = vec![buf.clone()];
                }
                None => {
                    prop_assert!(!e.must_exist, "synced dirty block {:?} lost", k);
                    self.drop_durably(&k);
                }
            }
            // After a crash only dirty blocks are served.
            let l = t.read(&k, V, &mut buf).unwrap();
            match l {
                Lookup::Hit { dirty } => {
                    prop_assert!(dirty);
                    prop_assert!(Some(&buf) == self.m[&k].value.as_ref());
                }
                Lookup::Miss => prop_assert!(rd.is_none()),
            }
        }
        // Every file holding dirty blocks is listed once, with its count and an allowed meta.
        let listed: HashMap<u64, u64> = recovered
            .iter()
            .map(|r| (r.file.ino, r.dirty_blocks))
            .collect();
        prop_assert_eq!(listed.len(), recovered.len(), "a file listed twice");
        prop_assert_eq!(t.flash_stats().checksum_errors, 0);
        prop_assert_eq!(&listed, &dirty_per_file, "recovered_files vs dirty blocks");
        for r in &recovered {
            prop_assert_eq!(r.file, file(r.file.ino));
            prop_assert_eq!(r.version, V);
            let mm = self.metas.entry(r.file.ino).or_default();
            let Some(got) = &r.meta else {
                return Err(TestCaseError::fail(format!(
                    "file {} recovered with dirty blocks and no meta",
                    r.file.ino
                )));
            };
            let ok = mm.synced.as_ref() == Some(got) || mm.later.contains(got);
            prop_assert!(
                ok,
                "file {}: recovered meta {:?}, synced {:?}, set later {:?}",
                r.file.ino,
                got,
                mm.synced,
                mm.later
            );
            // What the tier now holds in RAM and durably.
            mm.current = Some(got.clone());
            mm.synced = Some(got.clone());
            mm.later.clear();
        }
        self.tier = Some(t);
        Ok(())
    }

    /// A sync succeeded: what it acknowledged.
    fn synced(&mut self) {
        if self.cut() {
            return;
        }
        for mm in self.metas.values_mut() {
            mm.synced = mm.current.clone();
            mm.later.clear();
        }
        for e in self.m.values_mut() {
            if e.dirty {
                e.must_exist = true;
                e.acceptable = vec![e.value.clone().unwrap_or_default()];
            } else {
                e.must_exist = false;
                e.acceptable.clear();
            }
        }
    }

    fn apply(&mut self, op: &Op) -> Result<(), TestCaseError> {
        if self.cut() && !matches!(op, Op::Crash | Op::CloseReopen | Op::CloseFailing(_)) {
            return Ok(());
        }
        let bs = self.bs;
        match *op {
            Op::Fill(f, b, s, current) => {
                let k = key(f, b);
                let d = data(&k, s, bs);
                let r = self
                    .t()
                    .fill(&k, V, Class::NORMAL, &d, &|| current)
                    .unwrap();
                if !current {
                    prop_assert_eq!(r, Admit::Rejected);
                }
                if self.cut() {
                    return Ok(());
                }
                let was_dirty = self.m(&k).dirty;
                if was_dirty {
                    prop_assert_eq!(r, Admit::Rejected, "clean fill over a dirty block");
                }
                if r == Admit::Stored {
                    let e = self.m(&k);
                    *e = M::default();
                    e.value = Some(d);
                }
            }
            Op::Write(f, b, s) => {
                // As the manager: the file's meta (changed now and then) before its store.
                self.set_meta(f, s % 3 == 0);
                let k = key(f, b);
                let d = data(&k, s, bs);
                let r = self.t().write_dirty(&k, V, Class::NORMAL, &d).unwrap();
                if self.cut() {
                    // The torn write may be this one.
                    self.m(&k).acceptable.push(d);
                    return Ok(());
                }
                if r == Admit::Stored {
                    let e = self.m(&k);
                    e.value = Some(d.clone());
                    e.dirty = true;
                    e.acceptable.push(d);
                } else {
                    prop_assert!(!self.m(&k).dirty, "write_dirty of a dirty block rejected");
                    // The manager writes to BACKING, then discards the older copy.
                    self.t().discard(&k);
                    self.drop_maybe(&k);
                }
            }
            Op::Read(f, b) | Op::Take(f, b) => {
                let k = key(f, b);
                let take = matches!(op, Op::Take(..));
                let mut buf = vec![0u8; bs];
                let l = if take {
                    self.t().take(&k, V, &mut buf).unwrap()
                } else {
                    self.t().read(&k, V, &mut buf).unwrap()
                };
                if self.cut() {
                    return Ok(());
                }
                let e = self.m(&k).clone();
                match l {
                    Lookup::Hit { dirty } => {
                        prop_assert!(Some(&buf) == e.value.as_ref(), "wrong bytes for {:?}", k);
                        prop_assert_eq!(dirty, e.dirty);
                        if take && !dirty {
                            self.drop_durably(&k);
                        }
                    }
                    Lookup::Miss => {
                        prop_assert!(!e.dirty, "dirty block {:?} missing", k);
                        if e.value.is_some() {
                            self.drop_durably(&k);
                        }
                    }
                }
            }
            Op::ReadOtherVersion(f, b) => {
                let k = key(f, b);
                let mut buf = vec![0u8; bs];
                let l = self.t().read(&k, V + 1, &mut buf).unwrap();
                prop_assert_eq!(l, Lookup::Miss);
                if !self.cut() && !self.m(&k).dirty {
                    self.drop_durably(&k);
                }
            }
            Op::Invalidate(f, b) => {
                let k = key(f, b);
                self.t().invalidate(&k);
                if !self.cut() && !self.m(&k).dirty {
                    self.drop_durably(&k);
                }
            }
            Op::Discard(f, b) => {
                let k = key(f, b);
                self.t().discard(&k);
                self.drop_maybe(&k);
            }
            Op::InvalidateFile(f, from) => {
                self.t().invalidate_file(&file(f), from);
                for b in from..self.blocks {
                    self.drop_maybe(&key(f, b));
                }
            }
            Op::Clean(n) => {
                let list = self.t().dirty_blocks(n);
                prop_assert!(list.len() <= n);
                for d in list {
                    let mut buf = vec![0u8; bs];
                    let seq = self.t().read_dirty(&d.key, d.version, &mut buf).unwrap();
                    if self.cut() {
                        return Ok(());
                    }
                    let e = self.m(&d.key).clone();
                    prop_assert!(e.dirty, "dirty_blocks lists clean {:?}", d.key);
                    prop_assert!(Some(&buf) == e.value.as_ref());
                    let seq = seq.unwrap();
                    prop_assert!(self.t().mark_clean(&d.key, seq));
                    // Lazily durable: it may come back dirty after a crash (same bytes).
                    let em = self.m(&d.key);
                    em.dirty = false;
                    em.must_exist = false;
                }
            }
            Op::CleanRacingAWrite(s) => {
                let Some(d) = self.t().dirty_blocks(1).pop() else {
                    return Ok(());
                };
                let mut buf = vec![0u8; bs];
                let seq = self.t().read_dirty(&d.key, d.version, &mut buf).unwrap();
                let nd = data(&d.key, s + 5000, bs);
                let r = self.t().write_dirty(&d.key, V, Class::NORMAL, &nd).unwrap();
                if self.cut() {
                    self.m(&d.key).acceptable.push(nd);
                    return Ok(());
                }
                prop_assert_eq!(r, Admit::Stored);
                prop_assert!(
                    !self.t().mark_clean(&d.key, seq.unwrap()),
                    "a block written during its cleaning was marked clean"
                );
                let e = self.m(&d.key);
                e.value = Some(nd.clone());
                e.acceptable.push(nd);
            }
            Op::Sync => {
                self.t().sync().unwrap();
                self.synced();
            }
            Op::SyncFailing(n) => {
                self.dev.fail_writes_after(Some(n));
                let r = self.t().sync();
                self.dev.fail_writes_after(None);
                if r.is_ok() {
                    self.synced();
                } else {
                    // Not tainted by write errors alone: the next sync retries.
                    prop_assert!(!self.t().flash_stats().tainted, "{:?}", r);
                }
            }
            Op::Crash => self.crash(false, None)?,
            Op::CloseReopen => self.crash(true, None)?,
            Op::CloseFailing(n) => self.crash(true, Some(n))?,
            Op::Tear(n) => self.dev.tear_write_after(Some(n)),
            Op::DropWrites(n) => self.dev.drop_writes_after(Some(n)),
            Op::SetMeta(f) => self.set_meta(f, true),
        }
        Ok(())
    }
}

fn run(seed: u64, ops: &[Op], (blocks, len): (u64, u64)) -> Result<(), TestCaseError> {
    let dev = faulty(len, seed);
    let d: Arc<dyn FlashDevice> = dev.clone();
    let t = FlashTier::create(d, model_config()).unwrap();
    dev.set_volatile(true).unwrap();
    let mut w = World {
        bs: t.info().block_size,
        sector: dev.sector_size(),
        tier: Some(t),
        dev,
        metas: HashMap::new(),
        m: HashMap::new(),
        blocks,
    };
    for op in ops {
        w.apply(op)?;
    }
    w.crash(false, None)?;
    Ok(())
}

#[test]
fn the_shapes_are_fewer_and_more_than_32_sets() {
    for ((_, len), few) in [(FEW_SETS, true), (MANY_SETS, false)] {
        let g = tiercache_flash::Geometry::compute(len, 512, 11, 2).unwrap();
        assert_eq!(g.sets < 32, few, "{g:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, .. ProptestConfig::default() })]
    #[test]
    fn crash_recovery_never_serves_stale_bytes_nor_loses_synced_dirty_blocks(
        seed in any::<u64>(),
        ops in prop::collection::vec(op(FEW_SETS.0), 1..80),
    ) {
        run(seed, &ops, FEW_SETS)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, .. ProptestConfig::default() })]
    #[test]
    fn with_cached_checksum_tables_too(
        seed in any::<u64>(),
        ops in prop::collection::vec(op(MANY_SETS.0), 1..120),
    ) {
        run(seed, &ops, MANY_SETS)?;
    }
}
