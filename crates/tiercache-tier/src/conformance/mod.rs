//! The [`DataTier`] contract as checks every implementation runs (feature `conformance`, for
//! tests only: each implementing crate enables it from `[dev-dependencies]` and calls every
//! check from its `tests/data_tier_conformance.rs`, one `#[test]` per check).
//!
//! Each check takes a factory of fresh [`Subject`]s (a new, empty tier; or, for a tier opened
//! to be drained, one holding [`Subject::held_dirty`]). Capability-dependent parts run where
//! [`TierInfo`] says the capability exists (`accepts_dirty`, `persistent`, `can_spill`) —
//! and [`roles_are_offered_as_info_says`] checks that the tier offers [`Cleaning`] and
//! [`crate::Persistence`] where those capabilities say so;
//! the calling test asserts the capabilities it expects, so nothing is skipped unseen.
//! Checks panic (with what was wrong) on a violation.
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::cleaning::Cleaning;
use crate::key::{FileKey, TierKey};
use crate::persistence::{FileHandle, FileMeta};
use crate::spill::SpillLog;
use crate::tier::{Admit, DataTier, Lookup, StoreExt, TierInfo};
use std::any::Any;
use std::sync::Arc;
use tiercache_core::Class;

mod dirty;
pub use dirty::*;

/// A check's panic when the tier fails a request the contract says it serves.
const TIER_FAILED: &str = "the tier failed a request the contract says it serves";
/// A check's panic when a dirty copy the contract keeps is gone.
const NO_DIRTY_COPY: &str = "no dirty copy where the contract keeps one";

/// A tier under test and what the checks need to know about it beyond [`TierInfo`].
pub struct Subject {
    pub tier: Arc<dyn DataTier>,
    /// Whether it takes stores at all (`false`: a tier opened only to be drained, which
    /// turns every store down).
    pub takes_stores: bool,
    /// Dirty blocks it holds from the start (a persistent tier opened after a crash): key,
    /// version, bytes.
    pub held_dirty: Vec<(TierKey, u64, Vec<u8>)>,
    /// Whether it keeps each block's class (`false`: it spills every block as
    /// [`Class::NORMAL`], as [`crate::Spilled`] allows).
    pub keeps_class: bool,
    /// Waits until every store made so far is visible to reads (a tier that stores in the
    /// background); default: nothing to wait for.
    settle: Box<dyn Fn()>,
    /// Opens the same medium again after the tier was dropped (persistent tiers).
    reopen: Option<Box<dyn Fn() -> Arc<dyn DataTier>>>,
    /// What must live as long as the tier (a server, a temporary directory).
    _keep: Vec<Box<dyn Any>>,
}

impl Subject {
    pub fn new(tier: Arc<dyn DataTier>) -> Self {
        Self {
            tier,
            takes_stores: true,
            held_dirty: Vec::new(),
            keeps_class: true,
            settle: Box::new(|| {}),
            reopen: None,
            _keep: Vec::new(),
        }
    }
    /// Stores complete in the background: `settle` waits for them.
    pub fn settle_with(mut self, settle: impl Fn() + 'static) -> Self {
        self.settle = Box::new(settle);
        self
    }
    /// A persistent tier: `reopen` opens its medium again once the tier was dropped.
    pub fn reopen_with(mut self, reopen: impl Fn() -> Arc<dyn DataTier> + 'static) -> Self {
        self.reopen = Some(Box::new(reopen));
        self
    }
    /// A tier that keeps no class per block.
    pub fn without_class(mut self) -> Self {
        self.keeps_class = false;
        self
    }
    /// A tier that takes no store, holding `held` dirty blocks from the start.
    pub fn draining(mut self, held: Vec<(TierKey, u64, Vec<u8>)>) -> Self {
        self.takes_stores = false;
        self.held_dirty = held;
        self
    }
    /// Keeps `thing` alive as long as the subject.
    pub fn keep(mut self, thing: impl Any) -> Self {
        self._keep.push(Box::new(thing));
        self
    }
    fn info(&self) -> &TierInfo {
        self.tier.info()
    }
    fn settle(&self) {
        (self.settle)();
    }
    /// Whether the checks can get dirty blocks into (or out of) this tier.
    pub fn has_dirty(&self) -> bool {
        self.info().accepts_dirty || !self.held_dirty.is_empty()
    }
}

impl std::fmt::Debug for Subject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subject")
            .field("tier", &self.tier)
            .field("takes_stores", &self.takes_stores)
            .field("held_dirty", &self.held_dirty.len())
            .field("reopen", &self.reopen.is_some())
            .finish_non_exhaustive()
    }
}

/// One `#[test]` per named check, each calling it with the factory `make`:
/// `conformance_tests!(make; another_version_misses_and_drops_a_clean_copy, ...);`
#[macro_export]
macro_rules! conformance_tests {
    ($make:path; $($check:ident),+ $(,)?) => {
        $(
            #[test]
            fn $check() {
                $crate::conformance::$check(&$make);
            }
        )+
    };
}

/// A factory of fresh subjects.
pub type Make<'a> = &'a dyn Fn() -> Subject;

const V: u64 = 11;

/// A key of a file the checks use (`ino` tells files apart).
pub fn key(ino: u64, block: u64) -> TierKey {
    TierKey::new(file(ino), block)
}

pub fn file(ino: u64) -> FileKey {
    FileKey {
        dev: 0xC0F,
        ino,
        birth: 1_000 + ino,
    }
}

/// Bytes that differ per key, version and `seed`.
pub fn bytes(k: &TierKey, version: u64, seed: u64, bs: usize) -> Vec<u8> {
    let mut x = k.file.ino * 1_000_003 + k.block.0 * 7919 + version * 65_537 + seed * 104_729 + 1;
    (0..bs)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn yes() -> bool {
    true
}

fn no() -> bool {
    false
}

fn bs(s: &Subject) -> usize {
    s.info().block_size
}

fn fill(s: &Subject, k: &TierKey, v: u64) -> Vec<u8> {
    let d = bytes(k, v, 0, bs(s));
    let a = s
        .tier
        .fill(k, v, Class::NORMAL, &d, &yes)
        .expect(TIER_FAILED);
    assert_eq!(
        a,
        Admit::Stored,
        "{}: a fill of {k:?} into an empty tier",
        s.info().name
    );
    d
}

fn read(s: &Subject, k: &TierKey, v: u64) -> (Lookup, Vec<u8>) {
    let mut buf = vec![0x5Au8; bs(s)];
    let l = s.tier.read(k, v, &mut buf).expect(TIER_FAILED);
    (l, buf)
}

/// The tier's [`Cleaning`], which a check that gets dirty blocks into it needs.
fn cleaning(s: &Subject) -> &dyn Cleaning {
    s.tier
        .cleaning()
        .unwrap_or_else(|| panic!("{}: holds dirty blocks, offers no cleaning", s.info().name))
}

/// A dirty copy of `k`: `None` too when the tier offers no cleaning (it holds no dirty block).
fn read_dirty(s: &Subject, k: &TierKey, v: u64) -> Option<(u64, Vec<u8>)> {
    let mut buf = vec![0x5Au8; bs(s)];
    s.tier
        .cleaning()?
        .read_dirty(k, v, &mut buf)
        .expect(TIER_FAILED)
        .map(|seq| (seq, buf))
}

/// `n` dirty blocks: written now (a tier that accepts dirty blocks, file 50, blocks 0..n) or
/// the ones it held from the start. `None` when it has none.
fn dirty(s: &Subject, n: usize) -> Option<Vec<(TierKey, u64, Vec<u8>)>> {
    if s.info().accepts_dirty {
        let out = (0..n as u64)
            .map(|b| {
                let k = key(50, b);
                let d = bytes(&k, V, 1, bs(s));
                let a = s
                    .tier
                    .write_dirty(&k, V, Class::NORMAL, &d)
                    .expect(TIER_FAILED);
                assert_eq!(a, Admit::Stored, "{}: write_dirty of {k:?}", s.info().name);
                (k, V, d)
            })
            .collect();
        return Some(out);
    }
    if s.held_dirty.is_empty() {
        return None;
    }
    assert!(
        s.held_dirty.len() >= n.min(2),
        "{}: too few held dirty blocks",
        s.info().name
    );
    Some(s.held_dirty.iter().take(n).cloned().collect())
}

fn is_listed_dirty(s: &Subject, k: &TierKey) -> bool {
    s.tier
        .cleaning()
        .is_some_and(|c| c.dirty_blocks(usize::MAX).iter().any(|d| d.key == *k))
}

/// A read with another version misses and drops a clean copy; a dirty copy stays.
pub fn another_version_misses_and_drops_a_clean_copy(make: Make<'_>) {
    let s = make();
    let name = &s.info().name;
    if s.takes_stores {
        let k = key(1, 3);
        let d = fill(&s, &k, V);
        s.settle();
        assert_eq!(
            read(&s, &k, V),
            (Lookup::Hit { dirty: false }, d),
            "{name}: read back"
        );
        assert_eq!(
            read(&s, &k, V + 1).0,
            Lookup::Miss,
            "{name}: another version"
        );
        assert!(
            !s.tier.contains(&k),
            "{name}: the old clean copy is dropped"
        );
        assert_eq!(read(&s, &k, V).0, Lookup::Miss, "{name}: dropped");
    }
    if let Some(d) = dirty(&s, 1) {
        let (k, v, b) = &d[0];
        assert_eq!(
            read(&s, k, v + 1).0,
            Lookup::Miss,
            "{name}: dirty, another version"
        );
        assert!(s.tier.contains(k), "{name}: a dirty copy stays");
        assert_eq!(
            read_dirty(&s, k, *v).map(|x| x.1).as_ref(),
            Some(b),
            "{name}: dirty kept"
        );
    }
}

/// A clean store whose `current` check fails is `Rejected` and leaves nothing visible.
pub fn a_store_no_longer_current_is_rejected_and_invisible(make: Make<'_>) {
    let s = make();
    let name = &s.info().name;
    let before = s.tier.stats().rejected;
    let (a, b) = (key(2, 0), key(2, 1));
    let da = bytes(&a, V, 0, bs(&s));
    let db = bytes(&b, V, 0, bs(&s));
    assert_eq!(
        s.tier
            .fill(&a, V, Class::NORMAL, &da, &no)
            .expect(TIER_FAILED),
        Admit::Rejected
    );
    assert_eq!(
        s.tier
            .demote(&b, V, Class::NORMAL, &db, &no)
            .expect(TIER_FAILED),
        Admit::Rejected
    );
    s.settle();
    for k in [a, b] {
        assert!(!s.tier.contains(&k), "{name}: a rejected store is not held");
        assert_eq!(
            read(&s, &k, V).0,
            Lookup::Miss,
            "{name}: a rejected store reads as a miss"
        );
    }
    if s.takes_stores {
        assert_eq!(
            s.tier.stats().rejected,
            before + 2,
            "{name}: rejected counts both"
        );
    }
}

/// A tier that takes no store turns every store down and holds nothing new.
pub fn a_tier_taking_no_store_rejects_every_store(make: Make<'_>) {
    let s = make();
    assert!(!s.takes_stores);
    let k = key(3, 0);
    let d = bytes(&k, V, 0, bs(&s));
    assert_eq!(
        s.tier
            .fill(&k, V, Class::NORMAL, &d, &yes)
            .expect(TIER_FAILED),
        Admit::Rejected
    );
    assert_eq!(
        s.tier
            .demote(&k, V, Class::NORMAL, &d, &yes)
            .expect(TIER_FAILED),
        Admit::Rejected
    );
    let w = s.tier.write_dirty(&k, V, Class::NORMAL, &d);
    assert!(
        !matches!(w, Ok(Admit::Stored)),
        "write_dirty into a draining tier"
    );
    assert!(!s.tier.contains(&k));
}

/// Reads fill the whole buffer with the stored bytes or miss; a buffer shorter than a block
/// is an error or a miss, never a hit or a panic.
pub fn reads_are_whole_or_a_miss(make: Make<'_>) {
    let s = make();
    let name = &s.info().name;
    let mut held = Vec::new();
    if s.takes_stores {
        for b in 0..4 {
            let k = key(4, b);
            held.push((k, fill(&s, &k, V)));
        }
        s.settle();
        for (k, d) in &held {
            assert_eq!(
                read(&s, k, V),
                (Lookup::Hit { dirty: false }, d.clone()),
                "{name}: {k:?}"
            );
        }
    }
    if let Some(d) = dirty(&s, 2) {
        for (k, v, b) in d {
            let (l, buf) = read(&s, &k, v);
            match l {
                Lookup::Hit { dirty } => assert!(dirty && buf == b, "{name}: dirty read {k:?}"),
                Lookup::Miss => {}
            }
            assert_eq!(
                read_dirty(&s, &k, v).map(|x| x.1),
                Some(b),
                "{name}: read_dirty {k:?}"
            );
            held.push((k, Vec::new()));
        }
    }
    assert_eq!(
        read(&s, &key(4, 999), V).0,
        Lookup::Miss,
        "{name}: never stored"
    );
    for (k, _) in &held {
        let mut short = vec![0u8; bs(&s) / 2];
        let r = s.tier.read(k, V, &mut short);
        assert!(
            !matches!(r, Ok(Lookup::Hit { .. })),
            "{name}: a short buffer hit {k:?}"
        );
        let r = s.tier.cleaning().map(|c| c.read_dirty(k, V, &mut short));
        assert!(
            !matches!(r, Some(Ok(Some(_)))),
            "{name}: a short buffer read dirty {k:?}"
        );
    }
}

/// `take` hands the bytes up and removes a clean copy; a dirty copy stays.
pub fn take_removes_clean_and_keeps_dirty(make: Make<'_>) {
    let s = make();
    let name = &s.info().name;
    if s.takes_stores {
        let k = key(5, 0);
        let d = fill(&s, &k, V);
        s.settle();
        let mut buf = vec![0u8; bs(&s)];
        assert_eq!(
            s.tier.take(&k, V, &mut buf).expect(TIER_FAILED),
            Lookup::Hit { dirty: false }
        );
        assert_eq!(buf, d, "{name}: take's bytes");
        assert!(!s.tier.contains(&k), "{name}: take removes a clean copy");
        assert_eq!(read(&s, &k, V).0, Lookup::Miss, "{name}: taken");
    }
    if let Some(d) = dirty(&s, 1) {
        let (k, v, b) = &d[0];
        let mut buf = vec![0u8; bs(&s)];
        match s.tier.take(k, *v, &mut buf).expect(TIER_FAILED) {
            Lookup::Hit { dirty } => assert!(dirty && buf == *b, "{name}: take of a dirty copy"),
            Lookup::Miss => {}
        }
        assert!(s.tier.contains(k), "{name}: take keeps a dirty copy");
        assert!(
            read_dirty(&s, k, *v).is_some(),
            "{name}: still dirty after take"
        );
    }
}

/// `invalidate` (and a `try_invalidate` that says done) drops a clean copy and keeps a
/// dirty one; `discard` drops a dirty one.
pub fn invalidate_keeps_dirty_and_discard_drops_it(make: Make<'_>) {
    let s = make();
    let name = &s.info().name;
    if s.takes_stores {
        let (a, b) = (key(7, 0), key(7, 1));
        fill(&s, &a, V);
        fill(&s, &b, V);
        s.settle();
        s.tier.invalidate(&a);
        assert!(
            !s.tier.contains(&a),
            "{name}: invalidate drops a clean copy"
        );
        assert_eq!(read(&s, &a, V).0, Lookup::Miss);
        if s.tier.try_invalidate(&b) {
            assert!(!s.tier.contains(&b), "{name}: try_invalidate said done");
            assert_eq!(read(&s, &b, V).0, Lookup::Miss);
        }
    }
    if let Some(d) = dirty(&s, 2) {
        let before = s.tier.stats().dirty_blocks;
        let (k, v, b) = &d[0];
        s.tier.invalidate(k);
        let _ = s.tier.try_invalidate(k);
        assert!(s.tier.contains(k), "{name}: invalidate keeps a dirty copy");
        assert_eq!(read_dirty(&s, k, *v).map(|x| x.1).as_ref(), Some(b));
        s.tier.discard(k);
        assert!(!s.tier.contains(k), "{name}: discard drops a dirty copy");
        assert!(read_dirty(&s, k, *v).is_none() && !is_listed_dirty(&s, k));
        assert_eq!(read(&s, k, *v).0, Lookup::Miss);
        assert_eq!(
            s.tier.stats().dirty_blocks,
            before - 1,
            "{name}: dirty count"
        );
        assert!(
            read_dirty(&s, &d[1].0, d[1].1).is_some(),
            "{name}: the other one stays"
        );
    }
}

/// `invalidate_file` drops a file's blocks from `from_block` on, dirty ones too, and keeps
/// its blocks before it and other files' blocks.
pub fn invalidate_file_drops_from_a_block_on(make: Make<'_>) {
    let s = make();
    let name = &s.info().name;
    if s.takes_stores {
        for b in 0..8 {
            fill(&s, &key(8, b), V);
        }
        fill(&s, &key(9, 6), V);
        s.settle();
        s.tier.invalidate_file(&file(8), 4);
        for b in 0..8 {
            assert_eq!(
                s.tier.contains(&key(8, b)),
                b < 4,
                "{name}: clean block {b}"
            );
            let want = if b < 4 {
                Lookup::Hit { dirty: false }
            } else {
                Lookup::Miss
            };
            assert_eq!(read(&s, &key(8, b), V).0, want, "{name}: clean block {b}");
        }
        assert!(s.tier.contains(&key(9, 6)), "{name}: another file's block");
    }
    if let Some(d) = dirty(&s, 8) {
        let f = d[0].0.file;
        let mut blocks: Vec<u64> = d
            .iter()
            .filter(|x| x.0.file == f)
            .map(|x| x.0.block.0)
            .collect();
        blocks.sort_unstable();
        assert!(blocks.len() >= 2, "{name}: two dirty blocks of one file");
        let from = blocks[blocks.len() / 2];
        s.tier.invalidate_file(&f, from);
        for (k, v, _) in d.iter().filter(|x| x.0.file == f) {
            let kept = k.block.0 < from;
            assert_eq!(s.tier.contains(k), kept, "{name}: dirty {k:?}");
            assert_eq!(read_dirty(&s, k, *v).is_some(), kept, "{name}: dirty {k:?}");
            assert_eq!(is_listed_dirty(&s, k), kept, "{name}: listed {k:?}");
        }
    }
}

/// A spilling store hands over only clean victims, each with the exact bytes, version and
/// class it was stored with, and no longer holds them.
pub fn spills_hand_over_clean_victims_exactly(make: Make<'_>) {
    let s = make();
    let name = s.info().name.clone();
    assert!(s.tier.can_spill());
    let dirty_keys: Vec<TierKey> = dirty(&s, 3)
        .unwrap_or_default()
        .into_iter()
        .map(|x| x.0)
        .collect();
    let mut stored: std::collections::HashMap<TierKey, (u64, Class, Vec<u8>)> = Default::default();
    let log = SpillLog::new();
    s.tier.set_spill_hook(log.clone()).expect(TIER_FAILED);
    assert!(
        s.tier.set_spill_hook(SpillLog::new()).is_err(),
        "{name}: a second spill hook was taken"
    );
    let n = s.info().capacity_blocks * 3;
    for i in 0..n {
        let k = key(200 + i / 32, i % 32);
        let v = V + (i / 32) % 3;
        let class = Class::BUILT_IN[(i % 2) as usize];
        let d = bytes(&k, v, 0, bs(&s));
        let a = if i % 2 == 0 {
            s.tier.fill_spilling(&k, v, class, &d, &yes)
        } else {
            s.tier.demote_spilling(&k, v, class, &d, &yes)
        };
        if a.expect(TIER_FAILED) == Admit::Stored {
            stored.insert(k, (v, class, d));
        }
    }
    let spilled: Vec<_> = log
        .take()
        .into_iter()
        .map(|x| (x.key, x.version, x.class, x.data))
        .collect();
    assert!(
        !spilled.is_empty(),
        "{name}: {n} stores into {} blocks spilled nothing",
        s.info().capacity_blocks
    );
    for (k, v, class, d) in &spilled {
        assert!(
            !dirty_keys.contains(k),
            "{name}: a dirty block {k:?} was spilled"
        );
        let (sv, sc, sd) = stored
            .get(k)
            .unwrap_or_else(|| panic!("{name}: spilled {k:?} never stored"));
        let sc = if s.keeps_class { *sc } else { Class::NORMAL };
        assert_eq!(
            (v, class),
            (sv, &sc),
            "{name}: spilled version and class of {k:?}"
        );
        assert!(
            d == sd,
            "{name}: spilled bytes of {k:?} differ from the stored ones"
        );
    }
    // Every store is of a new key: a victim is never stored again, so it is gone.
    for (k, v, ..) in &spilled {
        assert!(!s.tier.contains(k), "{name}: spilled {k:?} still held");
        assert_eq!(
            read(&s, k, *v).0,
            Lookup::Miss,
            "{name}: spilled {k:?} still reads"
        );
    }
    for k in &dirty_keys {
        assert!(
            s.tier.contains(k),
            "{name}: dirty {k:?} kept through spilling"
        );
    }
}

/// The counters of `stats` move as [`crate::TierSnapshot`] documents them.
pub fn stats_counters_move_as_documented(make: Make<'_>) {
    let s = make();
    let name = &s.info().name;
    let st = s.tier.stats();
    assert_eq!(
        (&st.name, st.capacity_blocks),
        (name, s.info().capacity_blocks)
    );
    assert_eq!(st.kind, s.info().kind.to_string());
    if !s.takes_stores {
        assert_eq!(
            st.dirty_blocks,
            s.held_dirty.len() as u64,
            "{name}: held dirty blocks"
        );
        return;
    }
    let (a, b, c) = (key(11, 0), key(11, 1), key(11, 2));
    fill(&s, &a, V);
    let db = bytes(&b, V, 0, bs(&s));
    assert_eq!(
        s.tier
            .demote(&b, V, Class::NORMAL, &db, &yes)
            .expect(TIER_FAILED),
        Admit::Stored
    );
    let dc = bytes(&c, V, 0, bs(&s));
    assert_eq!(
        s.tier
            .fill(&c, V, Class::NORMAL, &dc, &no)
            .expect(TIER_FAILED),
        Admit::Rejected
    );
    s.settle();
    let st1 = s.tier.stats();
    assert_eq!(st1.fills, st.fills + 1, "{name}: fills");
    assert_eq!(
        st1.demotions_in,
        st.demotions_in + 1,
        "{name}: demotions_in"
    );
    assert_eq!(st1.rejected, st.rejected + 1, "{name}: rejected");
    assert_eq!(st1.used_blocks, st.used_blocks + 2, "{name}: used_blocks");
    assert_eq!(read(&s, &a, V).0, Lookup::Hit { dirty: false });
    assert_eq!(read(&s, &key(11, 99), V).0, Lookup::Miss);
    let st2 = s.tier.stats();
    assert_eq!(st2.hits, st1.hits + 1, "{name}: hits");
    assert_eq!(st2.misses, st1.misses + 1, "{name}: misses");
    let mut buf = vec![0u8; bs(&s)];
    assert_eq!(
        s.tier.take(&b, V, &mut buf).expect(TIER_FAILED),
        Lookup::Hit { dirty: false }
    );
    let st3 = s.tier.stats();
    assert_eq!(
        st3.promotions_out,
        st2.promotions_out + 1,
        "{name}: promotions_out"
    );
    assert_eq!(
        st3.used_blocks,
        st2.used_blocks - 1,
        "{name}: used_blocks after take"
    );
    if s.info().accepts_dirty {
        let k = key(11, 5);
        let d = bytes(&k, V, 0, bs(&s));
        assert_eq!(
            s.tier
                .write_dirty(&k, V, Class::NORMAL, &d)
                .expect(TIER_FAILED),
            Admit::Stored
        );
        let st4 = s.tier.stats();
        assert_eq!(
            st4.writebacks_in,
            st3.writebacks_in + 1,
            "{name}: writebacks_in"
        );
        assert_eq!(
            st4.dirty_blocks,
            st3.dirty_blocks + 1,
            "{name}: dirty_blocks"
        );
        let (seq, _) = read_dirty(&s, &k, V).expect(NO_DIRTY_COPY);
        assert!(cleaning(&s).mark_clean(&k, seq));
        let st5 = s.tier.stats();
        assert_eq!(st5.cleaned, st4.cleaned + 1, "{name}: cleaned");
        assert_eq!(
            st5.dirty_blocks, st3.dirty_blocks,
            "{name}: dirty_blocks after cleaning"
        );
    }
}
