//! Each class's LRU miss-ratio curve over a request stream: exact (every access's reuse
//! distance) and SHARDS' fixed-memory estimate side by side, with the estimate's error — what
//! `tiercache sim --curves` writes, to choose a class's size or hit-ratio target from its own
//! workload (the `mrc` partitioner keeps the same estimate online, per pool).

use std::io::{self, Write};
use tiercache_core::mrc::{ExactMrc, MissRatioCurve, Shards};
use tiercache_core::partition::{initial_rate, sample_id, MAX_SAMPLES};
use tiercache_core::{Access, Class};

/// One class's curves.
#[derive(Debug, Clone)]
pub struct ClassCurves {
    pub class: Class,
    pub accesses: u64,
    pub exact: MissRatioCurve,
    pub estimate: MissRatioCurve,
    /// SHARDS' sampling rate at the end.
    pub rate: f64,
    /// Mean absolute difference of the two curves up to `max_blocks`.
    pub error: f64,
}

/// A block's key as the curves see it: the `mrc` partitioner's, so the estimate here is the
/// one it would make (SHARDS' starting rate and budget are its too).
pub fn key(a: &Access) -> u64 {
    sample_id(&a.key)
}

/// Curves of every class that has accesses in `requests`, with buckets of `bucket` blocks;
/// errors measured up to `max_blocks`. The estimate samples as `mrc` does for a tier of
/// `capacity` blocks.
pub fn class_curves(
    requests: &[Access],
    bucket: u64,
    max_blocks: u64,
    capacity: u64,
) -> Vec<ClassCurves> {
    Class::all()
        .filter_map(|class| {
            let mut exact = ExactMrc::new(bucket);
            let mut est = Shards::new(MAX_SAMPLES, initial_rate(capacity), bucket)
                .with_horizon(max_blocks.max(capacity));
            let mut n = 0u64;
            for a in requests.iter().filter(|a| a.class == class) {
                exact.access(key(a));
                est.access(key(a));
                n += 1;
            }
            est.flush();
            (n > 0).then(|| {
                let estimate = est.curve();
                ClassCurves {
                    class,
                    accesses: n,
                    error: exact.curve().mean_abs_error(&estimate, max_blocks),
                    exact: exact.curve().clone(),
                    estimate,
                    rate: est.rate(),
                }
            })
        })
        .collect()
}

/// CSV: `class,blocks,exact_miss_ratio,estimated_miss_ratio`, one row per class (named by
/// `name`) and bucket boundary up to `max_blocks`.
pub fn write_csv(
    w: &mut dyn Write,
    curves: &[ClassCurves],
    max_blocks: u64,
    name: &dyn Fn(Class) -> String,
) -> io::Result<()> {
    writeln!(w, "class,blocks,exact_miss_ratio,estimated_miss_ratio")?;
    for c in curves {
        for (b, m) in c.exact.points(max_blocks) {
            let n = name(c.class);
            writeln!(w, "{n},{b},{m:.6},{:.6}", c.estimate.miss_ratio(b))?;
        }
    }
    Ok(())
}
