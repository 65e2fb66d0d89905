//! Paper 004's two-level experiment: 10,000 blocks, 1,000,000 uniform random requests, upper
//! cache 100 or 1000 blocks, lower/upper size ratio 0.5–4. Inclusive LRU at both levels leaves
//! the lower level nearly useless (hit ratio ≈ 0, duplication ≈ 100 % at ratio ≤ 1, ≈ 1/r above);
//! an exclusive lower level reaches the combined capacity, (c1 + c2) / N.
#![allow(clippy::unwrap_used)]

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tiercache_core::hierarchy::{Hierarchy, LevelConfig, Placement};
use tiercache_core::policy::PolicyKind;
use tiercache_core::tier::TierConfig;
use tiercache_core::{Access, BlockKey, Class};

const N: u64 = 10_000;
const REQUESTS: usize = 1_000_000;

struct Run {
    upper_hit: f64,
    lower_hit: f64,
    lower_dup: f64,
    overall: f64,
}

fn run(c1: usize, c2: usize, placement: Placement) -> Run {
    let mut h = Hierarchy::new(&[
        LevelConfig {
            tier: TierConfig::new("upper", c1, PolicyKind::Lru),
            placement: Placement::Inclusive,
        },
        LevelConfig {
            tier: TierConfig::new("lower", c2, PolicyKind::Lru),
            placement,
        },
    ])
    .unwrap();
    let mut rng = SmallRng::seed_from_u64(4);
    for _ in 0..REQUESTS {
        h.access(Access::read(
            BlockKey::new(0, rng.gen_range(0..N)),
            Class::NORMAL,
        ));
    }
    for t in h.tiers() {
        t.check_invariants().unwrap();
    }
    let (u, l) = (h.tiers()[0].stats(), h.tiers()[1].stats());
    Run {
        upper_hit: u.hit_ratio(),
        lower_hit: l.hit_ratio(),
        lower_dup: l.duplication(),
        overall: h.hit_ratio(),
    }
}

const RATIOS: [f64; 5] = [0.5, 1.0, 2.0, 3.0, 4.0];

#[test]
fn inclusive_lru_lower_level_is_nearly_useless() {
    for c1 in [100usize, 1000] {
        for r in RATIOS {
            let c2 = (c1 as f64 * r) as usize;
            let x = run(c1, c2, Placement::Inclusive);
            let expect_upper = c1 as f64 / N as f64;
            assert!(
                (x.upper_hit - expect_upper).abs() < 0.01,
                "c1={c1} r={r}: upper {}",
                x.upper_hit
            );
            if r <= 1.0 {
                assert!(
                    x.lower_hit < 0.01,
                    "c1={c1} r={r}: lower hit {}",
                    x.lower_hit
                );
                assert!(
                    x.lower_dup > 0.9,
                    "c1={c1} r={r}: duplication {}",
                    x.lower_dup
                );
            } else {
                // Only the part beyond the upper cache's copy helps.
                let expect = (c2 - c1) as f64 / (N as f64 - c1 as f64);
                assert!(
                    (x.lower_hit - expect).abs() < 0.02,
                    "c1={c1} r={r}: lower {} vs {expect}",
                    x.lower_hit
                );
                assert!(
                    (x.lower_dup - 1.0 / r).abs() < 0.03,
                    "c1={c1} r={r}: duplication {}",
                    x.lower_dup
                );
            }
        }
    }
}

#[test]
fn exclusive_lower_level_reaches_combined_capacity() {
    for c1 in [100usize, 1000] {
        for r in RATIOS {
            let c2 = (c1 as f64 * r) as usize;
            let x = run(c1, c2, Placement::Exclusive);
            let expect = (c1 + c2) as f64 / N as f64;
            assert!(
                (x.overall - expect).abs() < 0.01,
                "c1={c1} r={r}: overall {} vs {expect}",
                x.overall
            );
            assert_eq!(
                x.lower_dup, 0.0,
                "c1={c1} r={r}: exclusive tier duplicated blocks"
            );
        }
    }
}

#[test]
fn pinned_lower_level_hits_its_range() {
    // 004 §4.2: pin half of the data in the lower level: its hit ratio approaches 1/2 of what
    // passes the upper level.
    let x = run(1000, 5000, Placement::Pinned { first: 0 });
    assert!(
        x.lower_hit > 0.40 && x.lower_hit < 0.52,
        "pinned lower hit {}",
        x.lower_hit
    );
}
