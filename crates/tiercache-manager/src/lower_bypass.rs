//! Sequential-run bypass of lower tiers (paper 002): reads within a sequential run of at least
//! `n` blocks skip a tier that has a threshold (a remote tier) — BACKING streams them faster —
//! and are not stored there either. The decision is `tiercache_core::seqrun`'s, shared with the
//! simulator; this module holds the live thresholds and, for `auto`, measures the costs it
//! needs: BACKING's positioning time and per-block streaming time, and each tier's per-block
//! read time (moving averages), and re-chooses `n` every [`RECHOOSE_EVERY`] samples.
//!
//! A BACKING read counts as *positioned* (a streaming sample) when it starts where the file's
//! previous BACKING read ended, else as a positioning sample (its time minus the streaming
//! share). `n` is re-chosen only once both BACKING costs and the tier's cost have samples;
//! until then it stays at the default. Only hits sample the tier (a miss costs no round trip:
//! the tier's index answers it).
//!
//! Cost: one relaxed load per tier with a threshold per read request; the meter (a mutex) is
//! touched only when some tier is `auto`.

use crate::locks::lock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;
use tiercache_core::seqrun::{choose_threshold, Costs, Threshold};

/// Samples between two choices of `n` in `auto` mode.
const RECHOOSE_EVERY: u64 = 32;
/// Weight of a new sample in the moving averages.
const ALPHA: f64 = 0.1;
/// No threshold: the tier is never bypassed.
const NEVER: u64 = u64::MAX;

#[derive(Debug, Default, Clone, Copy)]
struct Avg(Option<f64>);

/// `auto`'s measurements (moving averages), in µs; `None`: no sample yet.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct MeasuredCosts {
    pub backing_seek_us: Option<f64>,
    pub backing_block_us: Option<f64>,
    pub tier_block_us: Option<f64>,
}

impl Avg {
    fn add(&mut self, x: f64) {
        self.0 = Some(match self.0 {
            None => x,
            Some(a) => a + ALPHA * (x - a),
        });
    }
}

#[derive(Debug, Default)]
struct Meter {
    seek: Avg,
    block: Avg,
    tiers: Vec<Avg>,
    /// Per tier: the costs its current `n` was chosen from (`None`: not chosen yet).
    chosen: Vec<Option<MeasuredCosts>>,
    /// Per tier: `n` is chosen from measurements (`auto`).
    auto: Vec<bool>,
    samples: u64,
}

/// Thresholds of the lower tiers (index = position in the lower stack, top first).
#[derive(Debug)]
pub(crate) struct Bypass {
    n: Vec<AtomicU64>,
    any: bool,
    /// Some tier is `auto` (the costs are measured); set, never cleared, by a reload.
    any_auto: AtomicBool,
    /// Blocks read while a tier was bypassed (per tier).
    bypassed: Vec<AtomicU64>,
    meter: Mutex<Meter>,
}

impl Bypass {
    pub fn new(thresholds: &[Option<Threshold>]) -> Self {
        let n = thresholds
            .iter()
            .map(|t| {
                AtomicU64::new(match t {
                    None => NEVER,
                    Some(Threshold::Fixed(n)) => *n,
                    Some(Threshold::Auto) => Threshold::DEFAULT,
                })
            })
            .collect();
        let auto: Vec<bool> = thresholds
            .iter()
            .map(|t| matches!(t, Some(Threshold::Auto)))
            .collect();
        Self {
            n,
            any: thresholds.iter().any(Option::is_some),
            any_auto: AtomicBool::new(auto.iter().any(|a| *a)),
            bypassed: thresholds.iter().map(|_| AtomicU64::new(0)).collect(),
            meter: Mutex::new(Meter {
                tiers: vec![Avg::default(); thresholds.len()],
                chosen: vec![None; thresholds.len()],
                auto,
                ..Meter::default()
            }),
        }
    }

    /// Whether any tier has a threshold (else the run need not be tracked).
    pub fn any(&self) -> bool {
        self.any
    }

    /// Whether the costs must be measured.
    pub fn measuring(&self) -> bool {
        self.any_auto.load(Relaxed)
    }

    /// Whether lower tier `k`'s `n` is chosen from measurements.
    pub fn is_auto(&self, k: usize) -> bool {
        lock(&self.meter).auto.get(k).copied().unwrap_or(false)
    }

    /// A new threshold for lower tier `k`, which has one (a reload); false if it has none.
    pub fn set_threshold(&self, k: usize, t: Threshold) -> bool {
        let Some(n) = self.n.get(k).filter(|n| n.load(Relaxed) != NEVER) else {
            return false;
        };
        let mut m = lock(&self.meter);
        let auto = matches!(t, Threshold::Auto);
        if let Some(a) = m.auto.get_mut(k) {
            *a = auto;
        }
        if auto {
            self.any_auto.store(true, Relaxed);
        } else {
            if let Threshold::Fixed(v) = t {
                n.store(v, Relaxed);
            }
            if let Some(c) = m.chosen.get_mut(k) {
                *c = None;
            }
        }
        true
    }

    /// Planner skip mask for a read of `blocks` blocks in a run of `run`: bit `k + 1` for lower
    /// tier `k` bypassed (bit 0 is memory, never skipped).
    pub fn skip_mask(&self, run: u64, blocks: u64) -> u32 {
        if !self.any {
            return 0;
        }
        let mut mask = 0;
        for (k, n) in self.n.iter().enumerate() {
            if Threshold::bypasses(n.load(Relaxed), run) {
                mask |= 1 << (k + 1);
                self.bypassed[k].fetch_add(blocks, Relaxed);
            }
        }
        mask
    }

    /// Current threshold of lower tier `k` (`None`: never bypassed).
    pub fn threshold(&self, k: usize) -> Option<u64> {
        self.n
            .get(k)
            .map(|n| n.load(Relaxed))
            .filter(|&n| n != NEVER)
    }

    /// The costs `auto` chose lower tier `k`'s current `n` from, in µs: BACKING positioning,
    /// BACKING streaming per block, the tier per block (`None` until `n` was first chosen, or
    /// for a fixed threshold). Averages keep moving between choices; these do not, so
    /// `choose_threshold` of them is exactly the `n` in force.
    pub fn measured(&self, k: usize) -> Option<MeasuredCosts> {
        lock(&self.meter).chosen.get(k).copied().flatten()
    }

    pub fn bypassed(&self, k: usize) -> u64 {
        self.bypassed.get(k).map_or(0, |b| b.load(Relaxed))
    }

    /// A BACKING read of `blocks` blocks took `took`; `positioned`: it continued a sequential
    /// run (the disk head was already there), so it measures streaming only.
    pub fn backing_sample(&self, blocks: u64, took: Duration, positioned: bool) {
        if !self.measuring() || blocks == 0 {
            return;
        }
        let t = took.as_secs_f64();
        let mut m = lock(&self.meter);
        if positioned {
            m.block.add(t / blocks as f64);
        } else {
            let streaming = m.block.0.unwrap_or(0.0) * blocks as f64;
            m.seek.add((t - streaming).max(0.0));
        }
        self.sampled(&mut m);
    }

    /// Lower tier `k` served one block in `took`.
    pub fn tier_sample(&self, k: usize, took: Duration) {
        if !self.measuring() {
            return;
        }
        let mut m = lock(&self.meter);
        if !m.auto.get(k).copied().unwrap_or(false) {
            return;
        }
        if let Some(a) = m.tiers.get_mut(k) {
            a.add(took.as_secs_f64());
        }
        self.sampled(&mut m);
    }

    fn sampled(&self, m: &mut Meter) {
        m.samples += 1;
        if !m.samples.is_multiple_of(RECHOOSE_EVERY) {
            return;
        }
        // Both BACKING costs measured first: a missing streaming cost would be taken as 0.
        let (Some(seek), Some(block)) = (m.seek.0, m.block.0) else {
            return;
        };
        for k in 0..m.auto.len() {
            let Some(tier_block) = m.tiers.get(k).and_then(|a| a.0) else {
                continue;
            };
            if m.auto[k] {
                let n = choose_threshold(&Costs {
                    backing_seek: seek,
                    backing_block: block,
                    tier_block,
                });
                self.n[k].store(n, Relaxed);
                m.chosen[k] = Some(MeasuredCosts {
                    backing_seek_us: Some(seek * 1e6),
                    backing_block_us: Some(block * 1e6),
                    tier_block_us: Some(tier_block * 1e6),
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_thresholds_skip_long_runs_only() {
        let b = Bypass::new(&[None, Some(Threshold::Fixed(32))]);
        assert_eq!(b.skip_mask(31, 1), 0);
        assert_eq!(b.skip_mask(32, 4), 0b100);
        assert_eq!(b.bypassed(1), 4);
        assert_eq!(b.threshold(0), None);
        assert_eq!(b.threshold(1), Some(32));
    }

    #[test]
    fn auto_rechooses_from_measured_costs() {
        let b = Bypass::new(&[Some(Threshold::Auto)]);
        assert_eq!(b.threshold(0), Some(Threshold::DEFAULT));
        // Streaming 30 µs per block, 12 ms positioning, tier 130 µs per block: n = 120.
        for _ in 0..20 {
            b.backing_sample(8, Duration::from_micros(240), true);
            b.backing_sample(1, Duration::from_micros(12_030), false);
            b.tier_sample(0, Duration::from_micros(130));
        }
        let n = b.threshold(0).unwrap();
        assert!((100..=140).contains(&n), "{n}");
        let c = b.measured(0).unwrap();
        let us = |x: Option<f64>| x.unwrap() / 1e6;
        let again = choose_threshold(&Costs {
            backing_seek: us(c.backing_seek_us),
            backing_block: us(c.backing_block_us),
            tier_block: us(c.tier_block_us),
        });
        assert!(again.abs_diff(n) <= 1, "{n} vs {again} from {c:?}");
    }

    #[test]
    fn set_threshold_changes_only_a_tier_that_has_one() {
        let b = Bypass::new(&[None, Some(Threshold::Fixed(32))]);
        assert!(!b.set_threshold(0, Threshold::Fixed(8)));
        assert_eq!(b.threshold(0), None);
        assert!(b.set_threshold(1, Threshold::Fixed(64)));
        assert_eq!(b.threshold(1), Some(64));
        assert!(!b.measuring());
        assert!(b.set_threshold(1, Threshold::Auto));
        assert!(b.is_auto(1) && b.measuring());
    }
}
