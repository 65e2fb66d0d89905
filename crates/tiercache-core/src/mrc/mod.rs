//! Miss-ratio curves of an LRU cache: the miss ratio at every cache size, from one pass over
//! the accesses (Mattson's stack algorithm: an access hits in an LRU cache of `c` blocks iff
//! fewer than `c` distinct blocks were touched since the previous access to the same block —
//! its *reuse distance*).
//!
//! - [`ExactMrc`] computes every access's reuse distance: memory grows with the distinct blocks
//!   seen; the offline reference.
//! - [`Shards`] estimates the curve online in fixed memory with spatially hashed sampling
//!   (SHARDS: Waldspurger, Park, Garthwaite, Ahmad, FAST '15, fixed-size variant with the
//!   `adj` correction): only blocks whose hash falls under a threshold are tracked, their
//!   distances scaled up by the sampling rate; when more than `max_samples` blocks are tracked,
//!   the threshold drops to the largest tracked hash and those blocks are forgotten. Given a
//!   horizon (the largest cache size the curve is read at), it also forgets blocks whose
//!   scaled reuse distance is already past it, least recent first: its tracker then holds
//!   about `horizon × rate` blocks and stays in the first-level caches.
//!
//! Both only *observe*: they decide nothing and do no I/O, so the simulator and the mount can
//! feed them the very same accesses.
//!
//! Invariants: a `ReuseTracker` holds at most one live mark per tracked block, at that
//! block's last access; `Shards` tracks at most `max_samples` blocks, all with hash < the
//! current threshold, and at most `recent` of them, the most recently accessed; while
//! `recent > max_samples` its heap by hash holds every tracked block (and at most
//! `2 × max_samples` entries); an estimated curve's histogram has at most [`MAX_BUCKETS`]
//! buckets.

mod alloc;
mod tracker;

pub use alloc::{allocate, Allocation, ClassDemand};
use std::collections::BinaryHeap;
use tracker::ReuseTracker;

/// A histogram of reuse distances in buckets of `bucket` blocks; what a curve is made of.
#[derive(Debug, Clone, PartialEq)]
pub struct MissRatioCurve {
    bucket: u64,
    /// Weight of accesses whose distance falls in each bucket (`[i·bucket, (i+1)·bucket)`).
    hist: Vec<f64>,
    /// Weight of cold accesses (first touch: a miss at every size).
    cold: f64,
    total: f64,
}

impl MissRatioCurve {
    fn new(bucket: u64) -> Self {
        Self {
            bucket: bucket.max(1),
            hist: Vec::new(),
            cold: 0.0,
            total: 0.0,
        }
    }

    fn record(&mut self, distance: Option<f64>, weight: f64) {
        match distance {
            None => {
                self.total += weight;
                self.cold += weight;
            }
            Some(d) => self.record_at((d.max(0.0) / self.bucket as f64) as usize, weight),
        }
    }

    /// Counts `weight` of accesses farther than the histogram reaches: misses at every size it
    /// answers for.
    #[inline]
    fn record_far(&mut self, weight: f64) {
        self.total += weight;
    }

    /// Adds `weight` to bucket `i`.
    #[inline]
    fn record_at(&mut self, i: usize, weight: f64) {
        self.total += weight;
        if i >= self.hist.len() {
            self.hist.resize(i + 1, 0.0);
        }
        self.hist[i] += weight;
    }

    /// The curve of the accesses recorded after `earlier`, an earlier state of the same
    /// exact curve: each access's distance depends only on what came before it, so the
    /// difference of the histograms is the later accesses' own (a curve with a warm-up).
    pub fn since(&self, earlier: &MissRatioCurve) -> MissRatioCurve {
        let mut c = self.clone();
        for (h, e) in c.hist.iter_mut().zip(&earlier.hist) {
            *h = (*h - e).max(0.0);
        }
        c.cold = (c.cold - earlier.cold).max(0.0);
        c.total = (c.total - earlier.total).max(0.0);
        c
    }

    /// Accesses (weighted) the curve was built from.
    pub fn accesses(&self) -> f64 {
        self.total
    }

    /// The bucket width in blocks: sizes are resolved to multiples of it.
    pub fn bucket(&self) -> u64 {
        self.bucket
    }

    /// The miss ratio of an LRU cache of `blocks` blocks (1.0 with no accesses). An access of
    /// distance `d` hits iff `d < blocks`; within a bucket, sizes round down to its start.
    pub fn miss_ratio(&self, blocks: u64) -> f64 {
        if self.total <= 0.0 {
            return 1.0;
        }
        let full = (blocks / self.bucket) as usize;
        let hits: f64 = self.hist.iter().take(full).sum();
        (1.0 - hits / self.total).clamp(0.0, 1.0)
    }

    /// `(blocks, miss ratio)` at every bucket boundary up to `max_blocks` (one pass).
    pub fn points(&self, max_blocks: u64) -> Vec<(u64, f64)> {
        let mut hits = 0.0;
        (0..=max_blocks / self.bucket)
            .map(|i| {
                if i > 0 {
                    hits += self.hist.get(i as usize - 1).copied().unwrap_or(0.0);
                }
                let m = if self.total <= 0.0 {
                    1.0
                } else {
                    (1.0 - hits / self.total).clamp(0.0, 1.0)
                };
                (i * self.bucket, m)
            })
            .collect()
    }

    /// Miss ratios at every multiple of `bucket` from 0, as a table answering any size in O(1)
    /// (what an allocation asks thousands of times).
    pub(crate) fn table(&self, max_blocks: u64) -> CurveTable {
        CurveTable {
            bucket: self.bucket,
            miss: self
                .points(max_blocks)
                .into_iter()
                .map(|(_, m)| m)
                .collect(),
        }
    }

    /// The fewest blocks whose miss ratio is at most `1 - hit_ratio`, searched up to
    /// `max_blocks`; `None` if no size up to there reaches it (an unreachable target).
    pub fn blocks_for_hit_ratio(&self, hit_ratio: f64, max_blocks: u64) -> Option<u64> {
        self.points(max_blocks)
            .into_iter()
            .find(|&(_, m)| m <= 1.0 - hit_ratio + 1e-12)
            .map(|(b, _)| b)
    }

    /// Mean absolute difference of the two curves' miss ratios at each bucket boundary of
    /// `self` up to `max_blocks` (SHARDS' error measure).
    pub fn mean_abs_error(&self, other: &MissRatioCurve, max_blocks: u64) -> f64 {
        let pts = self.points(max_blocks);
        let n = pts.len().max(1) as f64;
        pts.iter()
            .map(|&(b, m)| (m - other.miss_ratio(b)).abs())
            .sum::<f64>()
            / n
    }
}

/// A curve's miss ratios at its bucket boundaries, up to a size (see [`MissRatioCurve::table`]).
#[derive(Debug, Clone)]
pub(crate) struct CurveTable {
    bucket: u64,
    miss: Vec<f64>,
}

impl CurveTable {
    /// As [`MissRatioCurve::miss_ratio`]; sizes past the table answer its last value.
    pub(crate) fn miss_ratio(&self, blocks: u64) -> f64 {
        let i = usize::try_from(blocks / self.bucket).unwrap_or(usize::MAX);
        self.miss
            .get(i)
            .or(self.miss.last())
            .copied()
            .unwrap_or(1.0)
    }
}

/// The exact curve: every access's reuse distance.
#[derive(Debug)]
pub struct ExactMrc {
    tracker: ReuseTracker,
    curve: MissRatioCurve,
}

impl ExactMrc {
    /// Buckets of `bucket` blocks.
    pub fn new(bucket: u64) -> Self {
        Self {
            tracker: ReuseTracker::new(),
            curve: MissRatioCurve::new(bucket),
        }
    }

    /// Records an access to block `key`.
    pub fn access(&mut self, key: u64) {
        let d = self.tracker.access(key);
        self.curve.record(d.map(|d| d as f64), 1.0);
    }

    pub fn curve(&self) -> &MissRatioCurve {
        &self.curve
    }
}

/// The hash space SHARDS samples in: a block is tracked iff `hash(key) mod P < threshold`.
const P: u64 = 1 << 24;

/// A fixed 64-bit mix (splitmix64's finalizer): spatial sampling needs the same decision for
/// every access to one block, and no randomness.
#[inline]
fn spatial_hash(key: u64) -> u64 {
    let mut z = key.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) % P
}

/// Buckets an estimated curve holds: a sampled distance past them counts as a miss at every
/// size (the `mrc` partitioner's buckets are a 256th of the tier and its horizon the tier, so
/// it uses about 256; `sim --curves` reads up to 4 times it in buckets of a 25th). Without a bound, a
/// small rate scales the distances of a large working set far out and the histogram's tail —
/// touched on every sampled access — leaves the cache.
pub const MAX_BUCKETS: usize = 4096;

/// The online estimate: fixed-size SHARDS.
#[derive(Debug)]
pub struct Shards {
    tracker: ReuseTracker,
    curve: MissRatioCurve,
    /// Tracked blocks by hash, largest evicted first when over `max_samples`; kept only while
    /// `recent > max_samples` (below, the recency bound keeps the tracked blocks within
    /// `max_samples`, so the rate never drops). Then no block is forgotten by recency (the
    /// tracked ones never exceed `max_samples < recent`), so it holds exactly the tracked ones.
    by_hash: BinaryHeap<(u64, u64)>,
    /// Tracked blocks kept by recency: the sampled blocks of the last `recent` distinct ones
    /// accessed. A block further back has a scaled reuse distance past the horizon, a miss at
    /// every size the curve is read at, whether tracked or not (LRU inclusion).
    recent: usize,
    threshold: u64,
    /// `1 / rate()`, kept with `threshold` (a sampled access's weight).
    weight: f64,
    /// `weight / bucket`: a sampled distance times this is its bucket.
    per_bucket: f64,
    max_samples: usize,
    /// Accesses seen in all, and sampled ones (weighted by 1/rate at their time); both
    /// scaled down by [`Shards::decay`] with the histogram.
    seen: f64,
    /// Accesses since the last decay, not yet in `seen` (an integer add per access, not a
    /// float one on the hot path's dependency chain).
    seen_new: u64,
    sampled_weight: f64,
    /// Sampled accesses not yet processed (keys and hashes, in order): `access` appends
    /// without a branch on the sampling decision, which is random by design and would be
    /// mispredicted on a quarter of the accesses at a 25 % rate. Processed when full and
    /// before anything reads or ages the counts. `pending_len < PENDING` between calls.
    pending: [(u64, u64); PENDING],
    pending_len: usize,
}

/// Sampled accesses `Shards` holds before processing them.
const PENDING: usize = 32;

impl Shards {
    /// Tracks at most `max_samples` blocks (memory is proportional to it); starts at
    /// `initial_rate` (e.g. 0.01, SHARDS' 1 %) and lowers the rate as needed to stay within
    /// `max_samples`. Buckets of `bucket` blocks.
    pub fn new(max_samples: usize, initial_rate: f64, bucket: u64) -> Self {
        let threshold = ((initial_rate.clamp(1e-6, 1.0) * P as f64) as u64).max(1);
        Self {
            tracker: ReuseTracker::with_capacity(max_samples.clamp(1, 1024) + 1),
            curve: MissRatioCurve::new(bucket),
            by_hash: BinaryHeap::new(),
            recent: usize::MAX,
            threshold,
            weight: P as f64 / threshold as f64,
            per_bucket: P as f64 / threshold as f64 / bucket.max(1) as f64,
            max_samples: max_samples.max(1),
            seen: 0.0,
            seen_new: 0,
            sampled_weight: 0.0,
            pending: [(0, 0); PENDING],
            pending_len: 0,
        }
    }

    /// The curve is read only up to `blocks` (an LRU cache of at most that size): blocks whose
    /// scaled reuse distance is past it are forgotten, so the tracker holds about
    /// `blocks × rate` blocks however large the working set (fewer cache misses on the
    /// sampled path). Sizes past the horizon read as misses. A larger horizon later (a tier
    /// that grows) fills in as blocks are reused. While `blocks × rate` (rounded up, plus one)
    /// is within `max_samples` the rate then stays where it started — the fixed-size rule that
    /// lowers it is never needed, memory being bounded by the recency rule — which keeps the
    /// estimate up to the horizon as sampled as it started (without a horizon, a working set
    /// past `max_samples / rate` blocks lowers the rate and the estimate's sample).
    pub fn with_horizon(mut self, blocks: u64) -> Self {
        self.set_horizon(blocks);
        self
    }

    /// As [`Shards::with_horizon`], on a running sampler.
    pub fn set_horizon(&mut self, blocks: u64) {
        self.flush();
        let need = ((blocks as f64 * self.rate()).ceil() as usize).saturating_add(1);
        let was_bounded = self.recent <= self.max_samples;
        self.recent = need.max(1);
        // Forgotten blocks stay in the tracker's map until its next compaction, which comes
        // after at most 3 × tracked accesses: room for that many, no rehash on the way.
        self.tracker.reserve(4 * self.recent.min(self.max_samples));
        while self.tracker.tracked() > self.recent {
            self.tracker.forget_oldest();
        }
        if was_bounded && self.recent > self.max_samples {
            self.rebuild_by_hash();
        } else if self.recent <= self.max_samples {
            self.by_hash = BinaryHeap::new();
        }
    }

    /// `by_hash` from the blocks tracked now: O(n).
    fn rebuild_by_hash(&mut self) {
        let tracked: Vec<(u64, u64)> = self
            .tracker
            .tracked_keys()
            .map(|k| (spatial_hash(k), k))
            .collect();
        self.by_hash = BinaryHeap::from(tracked);
    }

    /// The current sampling rate.
    pub fn rate(&self) -> f64 {
        self.threshold as f64 / P as f64
    }

    /// Blocks tracked now (≤ `max_samples`).
    pub fn tracked(&self) -> usize {
        self.tracker.tracked()
    }

    /// Records an access to block `key`: one hash, and a store and a count with no branch on
    /// the sampling decision (inlined into the caller; the sampled path is not).
    #[inline]
    pub fn access(&mut self, key: u64) {
        self.seen_new += 1;
        let h = spatial_hash(key);
        // Written always, kept only if sampled (the index stays below PENDING: full is
        // processed at once).
        self.pending[self.pending_len % PENDING] = (key, h);
        self.pending_len += usize::from(h < self.threshold);
        if self.pending_len == PENDING {
            self.flush();
        }
    }

    /// Processes the sampled accesses held back by [`Shards::access`], in order. Reading
    /// [`Shards::curve`] without it leaves them out (as if not yet made).
    #[inline(never)]
    pub fn flush(&mut self) {
        for k in 0..self.pending_len {
            let (key, h) = self.pending[k];
            // The threshold may have dropped since (fixed-size SHARDS).
            if h < self.threshold {
                self.sampled(key, h);
            }
        }
        self.pending_len = 0;
    }

    /// An access to a sampled block (hash `h`).
    #[inline]
    fn sampled(&mut self, key: u64, h: u64) {
        let w = self.weight;
        let d = self.tracker.access(key);
        if d.is_none() && self.recent > self.max_samples {
            // First access since tracked (a block forgotten is untracked in both).
            self.by_hash.push((h, key));
        }
        match d {
            // The bucket of the scaled distance, by one multiply (no division on this path).
            Some(d) => {
                let i = (d as f64 * self.per_bucket) as usize;
                if i < MAX_BUCKETS {
                    self.curve.record_at(i, w);
                } else {
                    self.curve.record_far(w);
                }
            }
            None => self.curve.record(None, w),
        }
        self.sampled_weight += w;
        if self.tracker.tracked() > self.recent {
            self.tracker.forget_oldest();
        }
        while self.tracker.tracked() > self.max_samples && self.lower_threshold() {}
    }

    /// Drops the tracked blocks with the largest hash and makes it the new threshold; `false`
    /// if no block was left to drop.
    fn lower_threshold(&mut self) -> bool {
        let Some(&(h, _)) = self.by_hash.peek() else {
            return false;
        };
        while let Some(&(hh, k)) = self.by_hash.peek() {
            if hh < h {
                break;
            }
            self.by_hash.pop();
            self.tracker.forget(k);
        }
        self.threshold = h.max(1);
        self.weight = P as f64 / self.threshold as f64;
        self.per_bucket = self.weight / self.curve.bucket as f64;
        true
    }

    /// Ages what was counted so far by `keep` (0..=1): an online user (the `mrc` partitioner)
    /// calls it once per window, so the curve follows a phase change within a few windows.
    /// The reuse distances of the tracked blocks are kept: only the weights age.
    pub fn decay(&mut self, keep: f64) {
        self.flush();
        let keep = keep.clamp(0.0, 1.0);
        self.curve.hist.iter_mut().for_each(|w| *w *= keep);
        self.curve.cold *= keep;
        self.curve.total *= keep;
        self.seen = (self.seen + self.seen_new as f64) * keep;
        self.seen_new = 0;
        self.sampled_weight *= keep;
    }

    /// The estimated curve, with SHARDS' `adj` correction: the difference between the
    /// accesses seen and the sampled weight is credited to the first bucket (an excess of
    /// sampled weight comes off the shortest distances, bucket after bucket), which removes
    /// the bias a lucky or unlucky sample puts on every size. Accesses held back since the
    /// last [`Shards::flush`] (fewer than 32 sampled ones) are left out.
    pub fn curve(&self) -> MissRatioCurve {
        let mut c = self.curve.clone();
        // Held-back accesses count as not yet seen: their weight is not sampled yet either.
        let seen =
            (self.seen + self.seen_new as f64 - self.pending_len as f64 * self.weight).max(0.0);
        let mut diff = seen - self.sampled_weight;
        if c.hist.is_empty() {
            c.hist.push(0.0);
        }
        if diff >= 0.0 {
            c.hist[0] += diff;
        } else {
            // Over-sampled (hot blocks that happen to hash low): the excess comes off the
            // shortest distances first, bucket after bucket, not clipped at the first.
            for w in c.hist.iter_mut() {
                let take = w.min(-diff);
                *w -= take;
                diff += take;
                if diff >= 0.0 {
                    break;
                }
            }
        }
        c.total = seen;
        c
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Keys whose spatial hash falls under (`true`) or above a sampler's threshold.
    fn keys_sampled(s: &Shards, sampled: bool, n: usize) -> Vec<u64> {
        (0u64..)
            .filter(|&k| (spatial_hash(k) < s.threshold) == sampled)
            .take(n)
            .collect()
    }

    /// SHARDS' `adj` correction used to be clipped at the first bucket: when the sampled
    /// blocks outweighed what was seen (hot blocks that happen to hash low) and the first bucket
    /// was small (fine buckets), the excess stayed in the curve and the estimate promised hits
    /// that never happen (issue 20's 0.07 curve error).
    #[test]
    fn an_over_sampled_curve_takes_its_excess_off_the_shortest_distances() {
        let mut est = Shards::new(8192, 0.5, 1);
        let mut exact = ExactMrc::new(1);
        let hot = keys_sampled(&est, true, 50);
        let once = keys_sampled(&est, false, 50);
        // 50 blocks touched once, then a loop over 50 sampled ones: the sample weighs
        // 2 × 500 against 550 accesses seen.
        for &k in once.iter().chain((0..10).flat_map(|_| hot.iter())) {
            est.access(k);
            exact.access(k);
        }
        est.flush();
        let (e, x) = (est.curve(), exact.curve());
        // (Sampled distances are scaled by 1 / rate: the loop of 50 shows at 100.)
        for size in [100, 200, 1000] {
            assert!(
                (e.miss_ratio(size) - x.miss_ratio(size)).abs() < 0.01,
                "at {size}: estimate {} exact {}",
                e.miss_ratio(size),
                x.miss_ratio(size)
            );
        }
    }
}
