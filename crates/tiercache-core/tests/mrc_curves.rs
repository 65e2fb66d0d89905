#![allow(clippy::unwrap_used)]
//! Miss-ratio curves: the exact curve is LRU's miss ratio at every size (checked against a
//! plain LRU list), and SHARDS' fixed-memory estimate stays within SHARDS' error on skewed
//! workloads.

use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use tiercache_core::mrc::{ExactMrc, Shards};

/// Misses of an LRU cache of `size` blocks over `trace`, by brute force.
fn lru_misses(trace: &[u64], size: usize) -> usize {
    let mut lru: Vec<u64> = Vec::new();
    let mut misses = 0;
    for &k in trace {
        if let Some(i) = lru.iter().position(|&x| x == k) {
            lru.remove(i);
        } else {
            misses += 1;
            if lru.len() == size {
                lru.remove(0);
            }
        }
        lru.push(k);
    }
    misses
}

proptest! {
    #[test]
    fn exact_curve_is_lru_at_every_size(trace in prop::collection::vec(0u64..40, 1..2500)) {
        let mut m = ExactMrc::new(1);
        for &k in &trace {
            m.access(k);
        }
        for size in [1usize, 2, 3, 5, 8, 13, 21, 34, 40] {
            let want = lru_misses(&trace, size) as f64 / trace.len() as f64;
            prop_assert!((m.curve().miss_ratio(size as u64) - want).abs() < 1e-9, "size {size}");
        }
    }
}

/// A Zipf-like stream over `n` blocks (inverse CDF), seeded.
fn zipf(n: usize, alpha: f64, len: usize, seed: u64) -> Vec<u64> {
    let mut cdf = Vec::with_capacity(n);
    let mut s = 0.0;
    for i in 1..=n {
        s += 1.0 / (i as f64).powf(alpha);
        cdf.push(s);
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..len)
        .map(|_| {
            let u = rng.gen::<f64>() * s;
            // Scatter ranks over the key space so neighbouring ranks hash apart.
            (cdf.partition_point(|&c| c < u) as u64).wrapping_mul(0x9e37_79b9) ^ 0x5bd1
        })
        .collect()
}

#[test]
fn shards_estimate_is_within_two_points_of_the_exact_curve() {
    for (alpha, seed) in [(0.8, 1), (1.0, 2), (1.2, 3)] {
        let trace = zipf(200_000, alpha, 1_000_000, seed);
        let mut exact = ExactMrc::new(1000);
        let mut est = Shards::new(8192, 0.01, 1000);
        for &k in &trace {
            exact.access(k);
            est.access(k);
        }
        assert!(est.tracked() <= 8192, "fixed memory: {}", est.tracked());
        let err = exact.curve().mean_abs_error(&est.curve(), 200_000);
        assert!(err <= 0.02, "alpha {alpha}: mean absolute error {err}");
    }
}

#[test]
fn a_small_sample_budget_lowers_the_rate_and_keeps_memory_fixed() {
    let trace = zipf(100_000, 0.9, 400_000, 4);
    let mut est = Shards::new(512, 0.5, 500);
    for &k in &trace {
        est.access(k);
    }
    assert!(est.tracked() <= 512);
    assert!(est.rate() < 0.5, "rate stayed at {}", est.rate());
    let mut exact = ExactMrc::new(500);
    trace.iter().for_each(|&k| exact.access(k));
    let err = exact.curve().mean_abs_error(&est.curve(), 100_000);
    assert!(err <= 0.05, "error {err} with 512 samples");
}

#[test]
fn targets_map_to_the_fewest_blocks_or_are_reported_unreachable() {
    // 100 blocks cycled: LRU below 100 blocks misses everything, at 100 only the cold misses.
    let mut m = ExactMrc::new(1);
    for _ in 0..10 {
        for k in 0..100u64 {
            m.access(k);
        }
    }
    let c = m.curve();
    assert_eq!(c.miss_ratio(99), 1.0);
    assert!((c.miss_ratio(100) - 0.1).abs() < 1e-9);
    assert_eq!(c.blocks_for_hit_ratio(0.9, 1000), Some(100));
    assert_eq!(c.blocks_for_hit_ratio(0.95, 1000), None);
}
