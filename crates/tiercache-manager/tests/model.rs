#![allow(clippy::unwrap_used)]
//! Randomized operation sequences checked byte for byte against a shadow `Vec<u8>` per file,
//! with a tiny cache so that evictions, Retry, bypass reads and write-throughs happen; after
//! `flush_all` the backing files must equal the shadows.

mod common;

use common::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use std::time::Duration;
use tiercache_core::placement::Placement;
use tiercache_manager::{Class, FileId, LowerTier, MemCache, MemConfig, MemStats, RealBacking};
use tiercache_tier::DataTier;

struct Shadow {
    path: std::path::PathBuf,
    id: FileId,
    data: Vec<u8>,
    class: Class,
}

fn apply_write(model: &mut Vec<u8>, off: usize, data: &[u8]) {
    if model.len() < off + data.len() {
        model.resize(off + data.len(), 0);
    }
    model[off..off + data.len()].copy_from_slice(data);
}

fn expected_read(model: &[u8], off: usize, len: usize) -> &[u8] {
    if off >= model.len() {
        return &[];
    }
    &model[off..(off + len).min(model.len())]
}

/// Runs one random sequence; returns (bypass blocks, write-through blocks) seen.
fn run(seed: u64, cfg: MemConfig, ops: usize, deterministic: bool) -> (u64, u64) {
    let s = run_over(seed, cfg, Vec::new(), ops, deterministic);
    (s.paths.bypass_blocks, s.paths.write_through_blocks)
}

/// Runs one random sequence over `lower` tiers; returns the final stats.
fn run_over(
    seed: u64,
    cfg: MemConfig,
    lower: Vec<LowerTier>,
    ops: usize,
    deterministic: bool,
) -> MemStats {
    let mut rng = SmallRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let cache = MemCache::with_tiers(cfg, Arc::new(RealBacking), lower).unwrap();
    let mut files = Vec::new();
    for i in 0..2 {
        let len = rng.gen_range(0..6000);
        let content: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
        let path = make_file(dir.path(), &format!("f{i}"), &content);
        let class = if i == 0 {
            Class::PRIORITY
        } else {
            Class::NORMAL
        };
        let id = open(&cache, &path, class);
        files.push(Shadow {
            path,
            id,
            data: content,
            class,
        });
    }
    let mut history: Vec<String> = Vec::new();
    for step in 0..ops {
        let f = &mut files[rng.gen_range(0..2)];
        let what = rng.gen_range(0..100);
        let ctx = format!("seed {seed} step {step} op {what}");

        match what {
            0..=34 => {
                let off = rng.gen_range(0..12_000usize);
                let len = rng.gen_range(1..2_000usize);
                let data: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
                history.push(format!("{ctx}: file {} write {off}+{len}", f.id.0));
                let n = cache.write(f.id, off as u64, &data).unwrap();
                assert_eq!(n, len, "{ctx}");
                apply_write(&mut f.data, off, &data);
            }
            35..=74 => {
                // Mostly sequential-ish reads so read-ahead triggers, sometimes random.
                let off = if rng.gen_bool(0.5) {
                    rng.gen_range(0..14_000usize)
                } else {
                    rng.gen_range(0..4usize) * 512
                };
                let len = rng.gen_range(0..3_000usize);
                history.push(format!("{ctx}: file {} read {off}+{len}", f.id.0));
                let got = cache.read(f.id, off as u64, len).unwrap();
                if got != expected_read(&f.data, off, len) {
                    eprintln!("{}", history.join("\n"));
                }
                assert_bytes(
                    &got,
                    expected_read(&f.data, off, len),
                    &format!("{ctx} read {off}+{len}"),
                );
                // And the continuation, sequentially.
                let got = cache.read(f.id, (off + len) as u64, 700).unwrap();
                if got != expected_read(&f.data, off + len, 700) {
                    eprintln!(
                        "{}\ncontinuation read {}+700",
                        history.join("\n"),
                        off + len
                    );
                }
                assert_bytes(&got, expected_read(&f.data, off + len, 700), &ctx);
            }
            75..=82 => {
                let new_len = rng.gen_range(0..12_000usize);
                history.push(format!("{ctx}: file {} truncate {new_len}", f.id.0));
                cache.truncate(f.id, new_len as u64).unwrap();
                f.data.resize(new_len, 0);
                assert_eq!(
                    std::fs::metadata(&f.path).unwrap().len(),
                    new_len as u64,
                    "{ctx}"
                );
            }
            83..=86 => {
                history.push(format!("{ctx}: file {} fsync", f.id.0));
                cache.fsync(f.id, rng.gen()).unwrap();
                assert_eq!(cache.file_blocks(f.id).1, 0, "{ctx}: dirty after fsync");
                if read_file(&f.path) != f.data {
                    eprintln!("{}", history.join("\n"));
                }
                assert_bytes(
                    &read_file(&f.path),
                    &f.data,
                    &format!("{ctx}: backing after fsync"),
                );
            }
            87..=88 => {
                history.push(format!("{ctx}: flush_all"));
                cache.flush_all().unwrap();
            }
            89..=91 => {
                history.push(format!("{ctx}: file {} invalidate", f.id.0));
                cache.invalidate(f.id);
            }
            92..=94 => {
                f.class = if f.class == Class::PRIORITY {
                    Class::NORMAL
                } else {
                    Class::PRIORITY
                };
                cache.set_class(f.id, f.class);
            }
            _ => {
                history.push(format!("{ctx}: file {} reopen", f.id.0));
                cache.release(f.id);
                let out = reopen(&cache, &f.path, f.id, f.class);
                history.push(format!("{ctx}: file {} reopened: {out:?}", f.id.0));
                if deterministic {
                    assert_eq!(out.dropped_blocks, 0, "{ctx}: own writes taken as stale");
                }
            }
        }
        // The logical size the FUSE layer would report.
        let backing_len = std::fs::metadata(&f.path).unwrap().len();
        let reported = cache.logical_size(f.id).unwrap_or(backing_len);
        if deterministic {
            assert_eq!(reported, f.data.len() as u64, "{ctx}: size");
            cache
                .check_invariants()
                .unwrap_or_else(|e| panic!("{ctx}: {e}"));
        }
    }
    for f in &files {
        let got = cache.read(f.id, 0, f.data.len() + 100).unwrap();
        assert_bytes(&got, &f.data, &format!("seed {seed}: final read"));
    }
    cache.flush_all().unwrap();
    let s = cache.stats();
    assert_eq!(s.dirty_blocks, 0);
    for f in &files {
        if read_file(&f.path) != f.data {
            eprintln!("{}", history.join("\n"));
        }
        assert_bytes(
            &read_file(&f.path),
            &f.data,
            &format!("seed {seed}: backing after flush_all"),
        );
    }
    s
}

#[test]
fn random_ops_match_shadow_model() {
    let (mut bypass, mut through) = (0, 0);
    for seed in 0..40 {
        let cap = [4, 8, 16][seed as usize % 3];
        let (b, t) = run(seed, small_config(cap), 300, true);
        bypass += b;
        through += t;
    }
    // The tiny caches must have exercised the no-slot paths.
    eprintln!("bypass blocks {bypass}, write-through blocks {through}");
    assert!(bypass > 0, "no bypass read happened");
    assert!(through > 0, "no write-through happened");
}

#[test]
fn random_ops_match_with_background_flusher_and_dirprio() {
    use tiercache_core::partition::{PartitionConfig, PartitionKind};
    for seed in 100..110 {
        let mut cfg = small_config(12);
        cfg.flusher_threads = 2;
        cfg.flush_interval = Duration::from_millis(2);
        cfg.dirty_expire = Duration::ZERO;
        cfg.partition = PartitionConfig {
            kind: PartitionKind::Dirprio,
            params: tiercache_core::partition::DirprioParams::guidance(12, true).into(),
        };
        run(seed, cfg, 300, false);
    }
}

#[test]
fn writes_past_eof_leave_a_zero_hole() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_file(dir.path(), "h", b"abc");
    let cache = MemCache::with_real_device(small_config(8)).unwrap();
    let id = open(&cache, &path, Class::NORMAL);
    cache.write(id, 2000, b"xyz").unwrap();
    assert_eq!(cache.logical_size(id), Some(2003));
    let got = cache.read(id, 0, 5000).unwrap();
    let mut want = vec![0u8; 2003];
    want[..3].copy_from_slice(b"abc");
    want[2000..].copy_from_slice(b"xyz");
    assert_eq!(got, want);
    cache.fsync(id, true).unwrap();
    assert_eq!(cache.logical_size(id), None);
    assert_eq!(read_file(&path), want);
}

#[test]
fn truncate_shrinks_backing_at_once_and_zeroes_the_tail() {
    let dir = tempfile::tempdir().unwrap();
    let content = pattern(0, 3000, 1);
    let path = make_file(dir.path(), "t", &content);
    let cache = MemCache::with_real_device(small_config(16)).unwrap();
    let id = open(&cache, &path, Class::NORMAL);
    assert_eq!(cache.read(id, 0, 3000).unwrap(), content);
    cache.write(id, 100, b"dirty").unwrap();
    cache.truncate(id, 700).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 700);
    cache.truncate(id, 1500).unwrap();
    let mut want = content[..700].to_vec();
    want[100..105].copy_from_slice(b"dirty");
    want.resize(1500, 0);
    assert_eq!(cache.read(id, 0, 4000).unwrap(), want);
    cache.flush_all().unwrap();
    assert_eq!(read_file(&path), want);
}

#[test]
fn random_ops_match_shadow_model_over_an_exclusive_lower_tier() {
    let (mut hits, mut demoted) = (0, 0);
    for seed in 200..230 {
        let t = test_tier(24);
        let lower = vec![LowerTier::new(t.clone(), Placement::Exclusive)];
        let s = run_over(seed, small_config(6), lower, 300, true);
        t.check_invariants().unwrap();
        hits += s.lower.as_ref().unwrap().hits;
        demoted += t.stats().demotions_in;
        assert_eq!(s.tiers.len(), 2);
        assert_eq!(s.tiers[1].kind, "test");
    }
    eprintln!("lower hits {hits}, demotions {demoted}");
    assert!(demoted > 0, "nothing was demoted");
    assert!(hits > 0, "no read was served by the lower tier");
}

/// What the first tier evicts goes on into the second (slow, so spills wait in transit while
/// writes, truncations and invalidations race them).
#[test]
fn random_ops_match_shadow_model_over_two_exclusive_lower_tiers() {
    let (mut spilled, mut hits) = (0, 0);
    for seed in 700..730 {
        let a = test_tier(8);
        let mut cb = tiercache_memtier::TestTierConfig::new("b", 24, 512);
        cb.write_latency = std::time::Duration::from_micros(300);
        let b = Arc::new(tiercache_memtier::TestTier::new(cb).unwrap());
        let lower = vec![
            LowerTier::new(a.clone(), Placement::Exclusive),
            LowerTier::new(b.clone(), Placement::Exclusive),
        ];
        run_over(seed, small_config(6), lower, 300, true);
        a.check_invariants().unwrap();
        b.check_invariants().unwrap();
        spilled += b.stats().demotions_in;
        hits += b.stats().hits;
    }
    eprintln!("spilled into the second tier {spilled}, hits there {hits}");
    assert!(spilled > 0, "nothing cascaded into the second tier");
    assert!(hits > 0, "no read was served by the second tier");
}

#[test]
fn random_ops_match_shadow_model_over_an_inclusive_lower_tier() {
    let mut fills = 0;
    for seed in 300..330 {
        let t = test_tier(24);
        let lower = vec![LowerTier::new(t.clone(), Placement::Inclusive)];
        run_over(seed, small_config(6), lower, 300, true);
        t.check_invariants().unwrap();
        fills += t.stats().fills;
    }
    assert!(fills > 0, "nothing was filled into the inclusive tier");
}

#[test]
fn a_failing_lower_tier_costs_speed_never_bytes() {
    for seed in 400..410 {
        let t = test_tier(24);
        t.fail_reads(seed % 2 == 0);
        t.fail_writes(seed % 2 == 1);
        let lower = vec![LowerTier::new(t.clone(), Placement::Exclusive)];
        let s = run_over(seed, small_config(6), lower, 200, true);
        // Every failure was met (and the bytes were still right: `run_over` checks them).
        let errors = s.lower.unwrap().errors;
        assert!(errors > 0, "seed {seed}: the faults were never hit");
    }
}

/// Write-back goes into the tier below (throttled writers here: no flusher thread), reads of
/// blocks only there come from it, fsync and truncation clean it to BACKING first, and after
/// `flush_all` BACKING matches the model.
#[test]
fn random_ops_match_shadow_model_writing_back_into_a_lower_tier() {
    let (mut stored, mut cleaned, mut hits) = (0, 0, 0);
    for seed in 500..540 {
        let t = dirty_tier(32);
        let lower = vec![LowerTier::new(t.clone(), Placement::Exclusive)];
        let mut cfg = small_config(8);
        cfg.dirty_ratio = 0.25;
        cfg.dirty_background_ratio = 0.1;
        let s = run_over(seed, cfg, lower, 300, true);
        t.check_invariants().unwrap();
        let ts = t.stats();
        assert_eq!(
            ts.dirty_blocks, 0,
            "seed {seed}: dirty left below after flush_all"
        );
        stored += ts.writebacks_in;
        cleaned += ts.cleaned;
        hits += s.lower.unwrap().hits;
    }
    eprintln!("written back below {stored}, cleaned {cleaned}, lower hits {hits}");
    assert!(stored > 0, "no write-back went into the lower tier");
    assert!(cleaned > 0, "nothing was cleaned from the lower tier");
}

/// Write-back into an exclusive tier whose evictions (clean blocks, some cleaned while memory
/// holds newer bytes) cascade into an exclusive tier below it.
#[test]
fn random_ops_match_writing_back_into_a_lower_tier_that_spills_into_another() {
    let mut spilled = 0;
    for seed in 800..830 {
        let a = dirty_tier(12);
        let b = test_tier(32);
        let lower = vec![
            LowerTier::new(a.clone(), Placement::Exclusive),
            LowerTier::new(b.clone(), Placement::Exclusive),
        ];
        let mut cfg = small_config(8);
        cfg.dirty_ratio = 0.25;
        cfg.dirty_background_ratio = 0.1;
        run_over(seed, cfg, lower, 300, true);
        a.check_invariants().unwrap();
        b.check_invariants().unwrap();
        assert_eq!(a.stats().dirty_blocks, 0, "seed {seed}: dirty left below");
        spilled += b.stats().demotions_in;
    }
    assert!(spilled > 0, "nothing cascaded below the dirty tier");
}

/// The same with background flushers and cleaning rounds racing the operations.
#[test]
fn random_ops_match_writing_back_into_a_lower_tier_with_background_flusher() {
    let mut stored = 0;
    for seed in 600..610 {
        let t = dirty_tier(32);
        let lower = vec![LowerTier::new(t.clone(), Placement::Exclusive)];
        let mut cfg = small_config(12);
        cfg.flusher_threads = 2;
        cfg.flush_interval = Duration::from_millis(2);
        cfg.dirty_expire = Duration::ZERO;
        run_over(seed, cfg, lower, 300, false);
        stored += t.stats().writebacks_in;
    }
    assert!(stored > 0, "no write-back went into the lower tier");
}
