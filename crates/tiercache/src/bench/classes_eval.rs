//! What `bench classes` reads off one replay: per class, when its windowed hit ratio settled at
//! its target, where it settled, and the blocks it held there (a pure computation over the
//! replay's window series).

use serde::Serialize;
use tiercache_core::mrc::ExactMrc;
use tiercache_core::{Access, Class};
use tiercache_sim::replay::Outcome;

/// How close to its target a class must stay: ±1 % of hit ratio (issue 20).
pub const TOLERANCE: f64 = 0.01;
/// Windows averaged when deciding whether a class has settled (one window of a class with a
/// few thousand accesses has a standard error near 0.5 %).
const SMOOTH: usize = 3;
/// Windows after each phase start a class has to settle in (issue 20: at most 5).
pub const SETTLE: usize = 5;

/// One class under one partitioner (the JSON keys are a contract).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ClassResult {
    pub target: Option<f64>,
    /// Over the whole run.
    pub hit_ratio: Option<f64>,
    /// Mean blocks held once settled in the last phase (the last half of it without a target).
    pub blocks: u64,
    /// What the partitioner set aside for the target at the end (`mrc`; else `null`).
    pub target_blocks: Option<u64>,
    /// Settled within 5 windows of every phase start, and within ±1 % of the target after.
    pub target_met: Option<bool>,
    /// The most windows any phase took to settle (`null`: it never did, or no target).
    pub windows_to_target: Option<usize>,
    /// The windowed hit ratio once settled in the last phase.
    pub steady_hit_ratio: Option<f64>,
    /// Windows whose hit ratio fell short of the target by more than the tolerance.
    pub windows_below_target: Option<usize>,
    /// Windows past the first [`SETTLE`] of each phase where the class would fall short even
    /// with the whole tier to itself (see [`whole_tier_reach`]): no allocation meets the target
    /// there.
    pub windows_out_of_reach: Option<usize>,
}

/// Per window of `o`'s series, the hit ratio `class` would have with the whole tier to itself:
/// its own requests through one LRU of `capacity` blocks (`None`: no request in the window).
/// A partitioner gives a class an LRU pool of at most the tier, so where this falls short of a
/// target, no allocation meets it: the workload's own phase, not the partitioner.
pub fn whole_tier_reach(
    o: &Outcome,
    requests: &[Access],
    class: Class,
    capacity: u64,
) -> Vec<Option<f64>> {
    // Buckets of the tier's size: the first bucket is exactly the hits at that size.
    let mut e = ExactMrc::new(capacity.max(1));
    let mut prev = e.curve().clone();
    let mut done = 0usize;
    let mut out = Vec::with_capacity(o.series.len());
    for row in &o.series {
        let end = (row.request as usize).min(requests.len());
        for r in &requests[done.min(end)..end] {
            if r.class == class {
                e.access(tiercache_sim::curves::key(r));
            }
        }
        done = end;
        let w = e.curve().since(&prev);
        out.push((w.accesses() > 0.0).then(|| 1.0 - w.miss_ratio(capacity.max(1))));
        prev = e.curve().clone();
    }
    out
}

/// The windows of each phase: `bounds` are the requests where phases start (the first is 0).
fn phase_windows(o: &Outcome, bounds: &[u64]) -> Vec<Vec<usize>> {
    let mut phases = vec![Vec::new(); bounds.len()];
    for (i, r) in o.series.iter().enumerate() {
        // A window belongs to the phase it ends in, unless it straddles a phase start.
        let p = bounds.iter().rposition(|&b| r.request > b).unwrap_or(0);
        let start = r.request.saturating_sub(window_len(o));
        if start >= bounds[p] {
            phases[p].push(i);
        }
    }
    phases
}

fn window_len(o: &Outcome) -> u64 {
    o.series.first().map_or(1, |r| r.request.max(1))
}

/// The first window (an index into `w`) from which the `SMOOTH`-window mean stays at or above
/// `target − TOLERANCE` to the end.
fn settled_at(w: &[Option<f64>], target: f64) -> Option<usize> {
    let ok = |i: usize| {
        let xs: Vec<f64> = w[i..(i + SMOOTH).min(w.len())]
            .iter()
            .flatten()
            .copied()
            .collect();
        xs.is_empty() || xs.iter().sum::<f64>() / xs.len() as f64 >= target - TOLERANCE
    };
    let mut first = None;
    for i in (0..w.len()).rev() {
        if !ok(i) {
            break;
        }
        first = Some(i);
    }
    first
}

fn mean(xs: impl Iterator<Item = f64>) -> Option<f64> {
    let v: Vec<f64> = xs.collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// The result of class `name` (column `col` of the series) with hit-ratio `target`.
pub fn class_result(
    o: &Outcome,
    name: &str,
    target: Option<f64>,
    bounds: &[u64],
    reach: Option<&[Option<f64>]>,
) -> Option<ClassResult> {
    let col = o.series_classes.iter().position(|n| n == name)?;
    let phases = phase_windows(o, bounds);
    let hit = |i: usize| o.series[i].classes[col].0;
    let blocks = |i: usize| o.series[i].classes[col].1 as f64;
    let last = phases.last().cloned().unwrap_or_default();
    let mut worst: Option<usize> = Some(0);
    let mut steady_from = last.len() / 2;
    if let Some(t) = target {
        for (k, p) in phases.iter().enumerate() {
            let w: Vec<Option<f64>> = p.iter().map(|&i| hit(i)).collect();
            let at = settled_at(&w, t);
            worst = match (worst, at) {
                (Some(a), Some(b)) => Some(a.max(b)),
                _ => None,
            };
            if k + 1 == phases.len() {
                steady_from = at.unwrap_or(last.len() / 2);
            }
        }
    }
    let steady = &last[steady_from.min(last.len())..];
    let steady_hit = mean(steady.iter().filter_map(|&i| hit(i)));
    let held = mean(steady.iter().map(|&i| blocks(i))).unwrap_or(0.0);
    let report = o.report.classes.get(name);
    Some(ClassResult {
        target,
        hit_ratio: report.and_then(|c| c.hit_ratio),
        blocks: held.round() as u64,
        target_blocks: report.and_then(|c| c.target_blocks),
        target_met: target.map(|t| {
            worst.is_some_and(|w| w <= SETTLE)
                && steady_hit.is_some_and(|h| (h - t).abs() <= TOLERANCE)
        }),
        windows_to_target: target.and(worst),
        steady_hit_ratio: steady_hit,
        windows_below_target: target.map(|t| {
            (0..o.series.len())
                .filter(|&i| hit(i).is_some_and(|h| h < t - TOLERANCE))
                .count()
        }),
        windows_out_of_reach: target.zip(reach).map(|(t, r)| {
            phases
                .iter()
                .flat_map(|p| p.iter().skip(SETTLE))
                .filter(|&&i| {
                    r.get(i)
                        .copied()
                        .flatten()
                        .is_some_and(|h| h < t - TOLERANCE)
                })
                .count()
        }),
    })
}

/// Hits of `classes` (each with its name in the series) in the windows of `o` that start at or
/// after request `from`: each window's hit ratio times the class's requests in it, counted
/// from `requests` (a request is one lookup of one block in these scenarios).
pub fn hits_after(o: &Outcome, requests: &[Access], classes: &[(Class, &str)], from: u64) -> f64 {
    let w = window_len(o);
    let mut total = 0.0;
    for &(class, name) in classes {
        let Some(col) = o.series_classes.iter().position(|n| n == name) else {
            continue;
        };
        for row in o
            .series
            .iter()
            .filter(|r| r.request.saturating_sub(w) >= from)
        {
            let Some(h) = row.classes[col].0 else {
                continue;
            };
            let end = (row.request as usize).min(requests.len());
            let start = (row.request.saturating_sub(w) as usize).min(end);
            let n = requests[start..end]
                .iter()
                .filter(|a| a.class == class)
                .count();
            total += h * n as f64;
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_class_settles_where_its_smoothed_ratio_stays_up() {
        let w = [Some(0.2), Some(0.5), Some(0.9), Some(0.95), None, Some(0.9)];
        assert_eq!(settled_at(&w, 0.9), Some(2));
        let dip = [Some(0.9), Some(0.95), Some(0.5), Some(0.2), Some(0.95)];
        assert_eq!(settled_at(&dip, 0.9), Some(4));
        assert_eq!(settled_at(&[Some(0.1)], 0.9), None);
    }
}
