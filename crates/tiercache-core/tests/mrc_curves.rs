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
        est.flush();
        let err = exact.curve().mean_abs_error(&est.curve(), 200_000);
        assert!(err <= 0.02, "alpha {alpha}: mean absolute error {err}");
    }
}

#[test]
fn a_small_sample_budget_lowers_the_rate_and_keeps_memory_fixed() {
    // Without a horizon, and with one whose recency bound (about 25,000 blocks) is above the
    // budget: the fixed-size rule applies the same way.
    for (horizon, seed) in [(None, 4), (Some(50_000), 5)] {
        let trace = zipf(100_000, 0.9, 400_000, seed);
        let mut est = Shards::new(512, 0.5, 500);
        if let Some(h) = horizon {
            est = est.with_horizon(h);
        }
        for &k in &trace {
            est.access(k);
        }
        assert!(est.tracked() <= 512, "{horizon:?}");
        assert!(
            est.rate() < 0.5,
            "{horizon:?}: rate stayed at {}",
            est.rate()
        );
        let mut exact = ExactMrc::new(500);
        trace.iter().for_each(|&k| exact.access(k));
        est.flush();
        let err = exact
            .curve()
            .mean_abs_error(&est.curve(), horizon.unwrap_or(100_000));
        assert!(err <= 0.05, "{horizon:?}: error {err} with 512 samples");
    }
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

proptest! {
    /// A horizon only forgets what the curve never reads: up to it, the bounded estimate is
    /// the unbounded one to the last bit (while neither lowers its rate).
    #[test]
    fn a_horizon_leaves_the_curve_below_it_unchanged(
        trace in prop::collection::vec(0u64..3000, 1..6000),
        horizon in 1u64..2000,
        rate in 0.05f64..1.0,
    ) {
        let mut full = Shards::new(1 << 16, rate, 1);
        let mut bounded = Shards::new(1 << 16, rate, 1).with_horizon(horizon);
        for &k in &trace {
            full.access(k);
            bounded.access(k);
        }
        prop_assert!(bounded.tracked() <= (horizon as f64 * rate).ceil() as usize + 1);
        full.flush();
        bounded.flush();
        let (f, b) = (full.curve(), bounded.curve());
        for size in (0..=horizon).step_by(7).chain([horizon]) {
            prop_assert_eq!(f.miss_ratio(size), b.miss_ratio(size), "size {}", size);
        }
    }
}

#[test]
fn a_horizon_set_later_bounds_a_running_sampler() {
    let trace = zipf(50_000, 0.9, 200_000, 6);
    let mut est = Shards::new(8192, 0.2, 100);
    let mut exact = ExactMrc::new(100);
    for (i, &k) in trace.iter().enumerate() {
        if i == 100_000 {
            // A tier that shrinks: the tracker drops to its new bound at once.
            est.set_horizon(10_000);
            assert!(est.tracked() <= 2_001, "tracked {}", est.tracked());
        }
        est.access(k);
        exact.access(k);
    }
    assert!(est.tracked() <= 2_001, "tracked {}", est.tracked());
    est.flush();
    let err = exact.curve().mean_abs_error(&est.curve(), 10_000);
    assert!(err <= 0.03, "error {err}");
}
