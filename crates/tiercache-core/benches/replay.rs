//! Engine replay throughput, metadata only: single-tier LRU, dirprio, and two tiers (exclusive).
//! `tiercache bench sim` runs the same scenarios at 10^7 requests for README's figures.
#![allow(clippy::unwrap_used, missing_docs)]

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tiercache_core::hierarchy::{Hierarchy, LevelConfig, Placement};
use tiercache_core::partition::{DirprioParams, PartitionConfig, PartitionKind};
use tiercache_core::policy::PolicyKind;
use tiercache_core::tier::TierConfig;
use tiercache_core::{Access, BlockKey, Class};

const REQUESTS: usize = 1_000_000;
const CACHE: usize = 10_000;

/// Skewed accesses over 10× the cache: a hot head and a long tail (zipf-like via a power law).
fn requests() -> Vec<Access> {
    let mut rng = SmallRng::seed_from_u64(7);
    (0..REQUESTS)
        .map(|_| {
            let u: f64 = rng.gen();
            let b = ((CACHE * 10) as f64 * u.powf(3.0)) as u64;
            let class = if b.is_multiple_of(4) {
                Class::PRIORITY
            } else {
                Class::NORMAL
            };
            Access::read(BlockKey::new(0, b), class)
        })
        .collect()
}

fn level(name: &str, cap: usize, placement: Placement, partition: PartitionConfig) -> LevelConfig {
    let mut tier = TierConfig::new(name, cap, PolicyKind::Lru);
    tier.partition = partition;
    LevelConfig { tier, placement }
}

fn bench(c: &mut Criterion) {
    let reqs = requests();
    let none = PartitionConfig::none();
    let dirprio = PartitionConfig {
        kind: PartitionKind::Dirprio,
        params: DirprioParams::guidance(CACHE as u64, true).into(),
    };
    let setups: [(&str, Vec<LevelConfig>); 3] = [
        (
            "lru",
            vec![level("mem", CACHE, Placement::Inclusive, none.clone())],
        ),
        (
            "dirprio",
            vec![level("mem", CACHE, Placement::Inclusive, dirprio)],
        ),
        (
            "two_tier_exclusive",
            vec![
                level("mem", CACHE, Placement::Inclusive, none.clone()),
                level("lower", CACHE * 4, Placement::Exclusive, none),
            ],
        ),
    ];
    let mut g = c.benchmark_group("replay");
    g.throughput(Throughput::Elements(REQUESTS as u64));
    g.sample_size(10);
    for (name, levels) in setups {
        g.bench_function(name, |b| {
            b.iter_batched(
                || Hierarchy::new(&levels).unwrap(),
                |mut h| {
                    for &a in &reqs {
                        h.access(a);
                    }
                    h.hits()
                },
                BatchSize::LargeInput,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
