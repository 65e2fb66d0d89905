//! Op-sequence property test of the memory tier (`MemoryTier`, and `TestTier` built on it)
//! against a map model: a hit returns exactly the
//! bytes last stored for that key and version, a dirty block is never lost until it is marked
//! clean, a stale version is never served, a clean store hands over exactly the clean blocks it
//! evicts (with their version and bytes), and the tier's invariants hold after every step.

#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use std::collections::HashMap;
use tiercache_core::Class;
use tiercache_memtier::{MemoryTier, MemoryTierConfig, TestTier, TestTierConfig};
use tiercache_tier::StoreExt as _;
use tiercache_tier::{Admit, Cleaning, DataTier, FileKey, Lookup, SpillLog, TierKey};

/// The tiers of the model take dirty blocks: each offers cleaning.
fn cleaning(t: &dyn DataTier) -> &dyn Cleaning {
    t.cleaning()
        .expect("a tier that accepts dirty blocks offers cleaning")
}

const BS: usize = 16;

#[derive(Debug, Clone)]
enum Op {
    Fill(u8, u64, u8, u8),
    Demote(u8, u64, u8, u8),
    Dirty(u8, u64, u8, u8),
    Read(u8, u64, u8),
    Take(u8, u64, u8),
    Invalidate(u8, u64),
    Discard(u8, u64),
    ReadDirty(u8, u64, u8),
    InvalidateFile(u8, u64),
    Clean(usize),
}

fn op() -> impl Strategy<Value = Op> {
    let f = 0u8..3;
    let b = 0u64..6;
    let v = 0u8..2;
    prop_oneof![
        (f.clone(), b.clone(), v.clone(), any::<u8>())
            .prop_map(|(f, b, v, d)| Op::Fill(f, b, v, d)),
        (f.clone(), b.clone(), v.clone(), any::<u8>())
            .prop_map(|(f, b, v, d)| Op::Demote(f, b, v, d)),
        (f.clone(), b.clone(), v.clone(), any::<u8>())
            .prop_map(|(f, b, v, d)| Op::Dirty(f, b, v, d)),
        (f.clone(), b.clone(), v.clone()).prop_map(|(f, b, v)| Op::Read(f, b, v)),
        (f.clone(), b.clone(), v.clone()).prop_map(|(f, b, v)| Op::Take(f, b, v)),
        (f.clone(), b.clone()).prop_map(|(f, b)| Op::Invalidate(f, b)),
        (f.clone(), b.clone()).prop_map(|(f, b)| Op::Discard(f, b)),
        (f.clone(), b.clone(), v.clone()).prop_map(|(f, b, v)| Op::ReadDirty(f, b, v)),
        (f, b).prop_map(|(f, b)| Op::InvalidateFile(f, b)),
        (1usize..4).prop_map(Op::Clean),
    ]
}

fn key(f: u8, b: u64) -> TierKey {
    TierKey::new(
        FileKey {
            dev: 7,
            ino: u64::from(f),
            birth: 1,
        },
        b,
    )
}

/// Model entry: version, fill byte, dirty.
type Model = HashMap<TierKey, (u64, u8, bool)>;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn memory_tier_matches_model(ops in prop::collection::vec(op(), 1..200)) {
        let mut cfg = MemoryTierConfig::new("m", 8, BS);
        cfg.accepts_dirty = true;
        let t = MemoryTier::new(&cfg).unwrap();
        prop_assert_eq!(t.info().kind, tiercache_tier::TierKind::Memory);
        check_against_model(&t, &|| t.check_invariants(), ops)?;
    }

    #[test]
    fn test_tier_matches_model(ops in prop::collection::vec(op(), 1..200)) {
        let mut cfg = TestTierConfig::new("t", 8, BS);
        cfg.accepts_dirty = true;
        let t = TestTier::new(cfg).unwrap();
        check_against_model(&t, &|| t.check_invariants(), ops)?;
    }
}

fn check_against_model(
    t: &dyn DataTier,
    invariants: &dyn Fn() -> Result<(), tiercache_core::InvariantViolation>,
    ops: Vec<Op>,
) -> Result<(), TestCaseError> {
    let mut model: Model = HashMap::new();
    let mut buf = [0u8; BS];
    let mut spills = 0u64;
    let log = SpillLog::new();
    t.set_spill_hook(log.clone()).unwrap();
    for op in ops {
        match op {
            Op::Fill(f, b, v, d) | Op::Demote(f, b, v, d) | Op::Dirty(f, b, v, d) => {
                let k = key(f, b);
                let dirty = matches!(op, Op::Dirty(..));
                let held: Vec<TierKey> = model.keys().filter(|x| t.contains(x)).copied().collect();
                let r = match op {
                    Op::Fill(..) => {
                        t.fill_spilling(&k, u64::from(v), Class::NORMAL, &[d; BS], &|| true)
                    }
                    Op::Demote(..) => {
                        t.demote_spilling(&k, u64::from(v), Class::NORMAL, &[d; BS], &|| true)
                    }
                    _ => t.write_dirty(&k, u64::from(v), Class::NORMAL, &[d; BS]),
                }
                .unwrap();
                let spilled: Vec<_> = log
                    .take()
                    .into_iter()
                    .map(|s| (s.key, s.version, s.data))
                    .collect();
                // What a clean store evicts is handed over: a clean block of the model, with
                // its version and bytes, and gone from the tier.
                if !dirty {
                    for x in held.iter().filter(|&&x| x != k && !t.contains(&x)) {
                        prop_assert!(spilled.iter().any(|s| s.0 == *x), "evicted, not spilled");
                    }
                }
                for (sk, sv, sd) in spilled {
                    prop_assert_ne!(sk, k, "spilled the block being stored");
                    let (mv, md, mdirty) = model
                        .get(&sk)
                        .copied()
                        .ok_or_else(|| TestCaseError::fail("spilled a block never stored"))?;
                    prop_assert!(!mdirty, "spilled a dirty block");
                    prop_assert_eq!(sv, mv, "spilled with another version");
                    prop_assert_eq!(sd, vec![md; BS], "spilled other bytes");
                    prop_assert!(!t.contains(&sk), "spilled but still held");
                    spills += 1;
                }
                let held_dirty = model.get(&k).is_some_and(|e| e.2);
                if r == Admit::Stored {
                    prop_assert!(dirty || !held_dirty, "a clean store replaced a dirty block");
                    model.insert(k, (u64::from(v), d, dirty || held_dirty));
                }
            }
            Op::Read(f, b, v) | Op::Take(f, b, v) => {
                let k = key(f, b);
                let take = matches!(op, Op::Take(..));
                let r = if take {
                    t.take(&k, u64::from(v), &mut buf)
                } else {
                    t.read(&k, u64::from(v), &mut buf)
                }
                .unwrap();
                match (r, model.get(&k).copied()) {
                    (Lookup::Hit { dirty }, Some((mv, md, mdirty))) => {
                        prop_assert_eq!(mv, u64::from(v), "served another version");
                        prop_assert_eq!(buf, [md; BS]);
                        prop_assert_eq!(dirty, mdirty);
                        if take && !dirty {
                            model.remove(&k);
                        }
                    }
                    (Lookup::Hit { .. }, None) => {
                        prop_assert!(false, "hit on a block never stored")
                    }
                    (Lookup::Miss, Some((mv, _, mdirty))) => {
                        prop_assert!(!(mdirty && mv == u64::from(v)), "dirty block lost");
                        if !mdirty {
                            model.remove(&k);
                        }
                    }
                    (Lookup::Miss, None) => {}
                }
            }
            Op::Invalidate(f, b) => {
                let k = key(f, b);
                if b % 2 == 0 {
                    t.invalidate(&k);
                } else {
                    // Same contract; RAM only, so it never has to say "not now".
                    prop_assert!(t.try_invalidate(&k));
                }
                if model.get(&k).is_some_and(|e| !e.2) {
                    model.remove(&k);
                }
            }
            Op::Discard(f, b) => {
                let k = key(f, b);
                t.discard(&k);
                model.remove(&k);
            }
            Op::ReadDirty(f, b, v) => {
                let k = key(f, b);
                let r = cleaning(t).read_dirty(&k, u64::from(v), &mut buf).unwrap();
                match model.get(&k).copied() {
                    Some((mv, md, true)) if mv == u64::from(v) => {
                        let seq = r.ok_or_else(|| TestCaseError::fail("dirty block not read"))?;
                        prop_assert_eq!(buf, [md; BS]);
                        // Its sequence cleans it.
                        prop_assert!(cleaning(t).mark_clean(&k, seq));
                        if let Some(e) = model.get_mut(&k) {
                            e.2 = false;
                        }
                    }
                    _ => prop_assert_eq!(r, None),
                }
            }
            Op::InvalidateFile(f, b) => {
                t.invalidate_file(&key(f, 0).file, b);
                model.retain(|k, _| !(k.file.ino == u64::from(f) && k.block.0 >= b));
            }
            Op::Clean(n) => {
                for d in cleaning(t).dirty_blocks(n) {
                    prop_assert!(cleaning(t).mark_clean(&d.key, d.seq));
                    if let Some(e) = model.get_mut(&d.key) {
                        e.2 = false;
                    }
                }
            }
        }
        invariants().map_err(|e| TestCaseError::fail(e.to_string()))?;
        // Every dirty block of the model is still there (clean ones may have been evicted).
        let dirty_now = model.values().filter(|e| e.2).count() as u64;
        prop_assert_eq!(t.stats().dirty_blocks, dirty_now);
        model.retain(|k, e| e.2 || t.contains(k));
    }
    // A store into a full tier evicts at most one block.
    prop_assert!(spills <= t.stats().fills + t.stats().demotions_in);
    Ok(())
}

#[test]
fn injected_faults_are_errors_and_latency_is_slept() {
    let mut cfg = TestTierConfig::new("t", 4, BS);
    cfg.read_latency = std::time::Duration::from_millis(20);
    let t = TestTier::new(cfg).unwrap();
    let k = key(0, 0);
    assert_eq!(
        t.fill(&k, 1, Class::NORMAL, &[3; BS], &|| true).unwrap(),
        Admit::Stored
    );
    // A store whose bytes went stale meanwhile is turned down, and leaves nothing behind.
    let stale = t.fill(&key(0, 3), 1, Class::NORMAL, &[3; BS], &|| false);
    assert_eq!(stale.unwrap(), Admit::Rejected);
    assert!(!t.contains(&key(0, 3)));
    let mut buf = [0u8; BS];
    let start = std::time::Instant::now();
    assert_eq!(
        t.read(&k, 1, &mut buf).unwrap(),
        Lookup::Hit { dirty: false }
    );
    assert!(start.elapsed() >= std::time::Duration::from_millis(20));
    t.fail_reads(true);
    assert!(t.read(&k, 1, &mut buf).is_err());
    t.fail_reads(false);
    t.fail_writes(true);
    assert!(t
        .demote(&key(0, 1), 1, Class::NORMAL, &[4; BS], &|| true)
        .is_err());
    assert_eq!(t.stats().errors, 2);
    // A dirty store to a tier that does not take dirty data is turned down, not an error.
    t.fail_writes(false);
    assert_eq!(
        t.write_dirty(&k, 1, Class::NORMAL, &[5; BS]).unwrap(),
        Admit::Rejected
    );
}
