//! Sizing classes from their miss-ratio curves: meet every reachable hit-ratio target with the
//! fewest blocks (strictest target first), report the unreachable ones instead of chasing them,
//! then give what is left where it buys the most hits, looking past plateaus (UCP's lookahead:
//! Qureshi & Patt, MICRO '06 — the best *average* gain per block over any extension, so a class
//! whose curve has a cliff is not starved by a greedy one-step view, as Talus and Cliffhanger
//! also avoid).
//!
//! A pure decision: curves and limits in, blocks per class out.

use super::{CurveTable, MissRatioCurve};

/// What one class asks for.
#[derive(Debug, Clone, Copy)]
pub struct ClassDemand<'a> {
    /// Its estimated LRU miss-ratio curve.
    pub curve: &'a MissRatioCurve,
    /// Accesses it makes per window (weights miss ratios into hits).
    pub accesses: f64,
    /// Hit-ratio goal, or `None` for best effort.
    pub target: Option<f64>,
    /// Added to the target when sizing for it (`mrc`'s measured correction and headroom): the
    /// class is sized for `target + aim` if its curve reaches that within its room, else for
    /// `target` alone; reachability is judged on `target` alone, so a correction never makes a
    /// reachable target look unreachable.
    pub aim: f64,
    /// Floor and cap in blocks.
    pub min: u64,
    pub max: Option<u64>,
    /// The rate the curve was sampled at (1.0: exact). A sampled curve places a size `s`
    /// within about `sqrt(s·(1 − rate)/rate)` blocks (the binomial spread of the sampled
    /// blocks among `s`), so a target on a cliff gets two of those on top of what its curve
    /// says: a loop's cliff estimated a little low would otherwise miss every access.
    pub sampling_rate: f64,
}

/// The decision: blocks per class, in the order given, and whether each target is reachable.
#[derive(Debug, Clone, PartialEq)]
pub struct Allocation {
    pub blocks: Vec<u64>,
    /// What each reachable target was given to meet it (its floor included), before what was
    /// left was shared out; `None` without a target or when unreachable.
    pub for_target: Vec<Option<u64>>,
    /// `Some(false)`: the target cannot be met within the class's cap and the memory left once
    /// stricter targets are met; `None`: no target.
    pub target_reachable: Vec<Option<bool>>,
}

/// Splits `total` blocks among `classes`, in multiples of `step` blocks above each floor.
pub fn allocate(classes: &[ClassDemand<'_>], total: u64, step: u64) -> Allocation {
    let step = step.max(1);
    let cap = |c: &ClassDemand<'_>| c.max.unwrap_or(total).min(total);
    let mut blocks: Vec<u64> = classes.iter().map(|c| c.min.min(cap(c))).collect();
    let mut left = total.saturating_sub(blocks.iter().sum());
    let mut reachable: Vec<Option<bool>> =
        classes.iter().map(|c| c.target.map(|_| false)).collect();
    let mut for_target: Vec<Option<u64>> = vec![None; classes.len()];
    // Each curve once as a table: the search below asks O((total / step)²) sizes.
    let tables: Vec<CurveTable> = classes.iter().map(|c| c.curve.table(total)).collect();

    // Targets, strictest first: each gets exactly what its curve says it needs, if that fits.
    let mut order: Vec<usize> = (0..classes.len())
        .filter(|&i| classes[i].target.is_some())
        .collect();
    order.sort_by(|&a, &b| {
        let t = |i: usize| classes[i].target.unwrap_or(0.0);
        t(b).total_cmp(&t(a))
    });
    for i in order {
        let c = &classes[i];
        let Some(t) = c.target else { continue };
        let room = cap(c).min(blocks[i] + left);
        let aimed = (t + c.aim).clamp(0.0, 1.0);
        let sized = match c.curve.blocks_for_hit_ratio(aimed, room) {
            Some(need) => Some((need, aimed)),
            None => c.curve.blocks_for_hit_ratio(t, room).map(|need| (need, t)),
        };
        if let Some((need, sized_for)) = sized {
            let need = (need + margin(&tables[i], sized_for, need, c.sampling_rate)).min(room);

            let extra = need.saturating_sub(blocks[i]);
            blocks[i] += extra;
            left -= extra;
            reachable[i] = Some(true);
            for_target[i] = Some(blocks[i]);
        }
    }

    // What is left: repeatedly the class with the best average gain per block over any
    // extension it can take (lookahead), by whole extensions. Best-effort classes (no target)
    // and classes whose target is out of reach first: a met target stays met, not exceeded; an
    // unreachable one is not chased, but not starved either (it competes by its curve's gain);
    // what they cannot use goes to every class.
    let first: Vec<bool> = reachable.iter().map(|r| *r != Some(true)).collect();
    for pass_all in [false, true] {
        left = share_left(classes, &tables, &mut blocks, left, step, |i| {
            pass_all || first[i]
        });
    }
    Allocation {
        blocks,
        for_target,
        target_reachable: reachable,
    }
}

/// Shares `left` blocks among the classes `eligible` admits, by best lookahead gain per block;
/// returns what nobody could use.
fn share_left(
    classes: &[ClassDemand<'_>],
    tables: &[CurveTable],
    blocks: &mut [u64],
    mut left: u64,
    step: u64,
    eligible: impl Fn(usize) -> bool,
) -> u64 {
    let total = left + blocks.iter().sum::<u64>();
    let cap = |c: &ClassDemand<'_>| c.max.unwrap_or(total).min(total);
    while left >= step {
        let mut best: Option<(usize, u64, f64)> = None;
        for (i, c) in classes.iter().enumerate().filter(|&(i, _)| eligible(i)) {
            let room = cap(c).saturating_sub(blocks[i]).min(left);
            if let Some((k, per_block)) = best_extension(c, &tables[i], blocks[i], room, step) {
                if best.is_none_or(|(_, _, g)| per_block > g) {
                    best = Some((i, k, per_block));
                }
            }
        }
        let Some((i, k, _)) = best else { break };
        blocks[i] += k;
        left -= k;
    }
    left
}

/// How far past `need` a target's share goes: two standard deviations of a size read off a
/// curve sampled at `rate`, where being that much short would cost more than [`CLIFF`] of
/// hit ratio (a cliff, e.g. a loop just too large to fit); nothing on a smooth curve, where
/// the same error costs little.
fn margin(curve: &CurveTable, target: f64, need: u64, rate: f64) -> u64 {
    if rate >= 1.0 || rate <= 0.0 {
        return 0;
    }
    let m = (2.0 * (need as f64 * (1.0 - rate) / rate).sqrt()).ceil() as u64;
    let short = curve.miss_ratio(need.saturating_sub(m));
    if short - (1.0 - target) > CLIFF {
        m
    } else {
        0
    }
}

/// A loss of hit ratio that calls for a margin (see [`margin`]).
const CLIFF: f64 = 0.05;

/// The extension (a multiple of `step`, at most `room`) with the best positive hits per block
/// for class `c` now at `at` blocks: `(blocks, hits per block)`.
fn best_extension(
    c: &ClassDemand<'_>,
    curve: &CurveTable,
    at: u64,
    room: u64,
    step: u64,
) -> Option<(u64, f64)> {
    let base = curve.miss_ratio(at);
    let mut best: Option<(u64, f64)> = None;
    let mut k = step;
    while k <= room {
        let gain = (base - curve.miss_ratio(at + k)) * c.accesses;
        let per_block = gain / k as f64;
        if per_block > 1e-12 && best.is_none_or(|(_, g)| per_block > g) {
            best = Some((k, per_block));
        }
        k += step;
    }
    best
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::ExactMrc;
    use super::*;

    /// The curve of `rounds` loops over `ws` blocks: a cliff at `ws`.
    fn looping(ws: u64, rounds: usize) -> MissRatioCurve {
        let mut m = ExactMrc::new(1);
        for _ in 0..rounds {
            (0..ws).for_each(|k| m.access(k));
        }
        m.curve().clone()
    }

    /// A smooth curve: block k touched with weight ~ 1/(k+1).
    fn smooth(n: u64) -> MissRatioCurve {
        let mut m = ExactMrc::new(1);
        for r in 0..200u64 {
            for k in 0..n {
                if r % (k + 1) == 0 {
                    m.access(1000 + k);
                }
            }
        }
        m.curve().clone()
    }

    fn demand(curve: &MissRatioCurve, target: Option<f64>) -> ClassDemand<'_> {
        ClassDemand {
            curve,
            accesses: curve.accesses(),
            target,
            aim: 0.0,
            min: 0,
            max: None,
            sampling_rate: 1.0,
        }
    }

    #[test]
    fn reachable_targets_get_their_need_and_the_rest_goes_to_best_effort() {
        let web = looping(50, 100); // 0.99 at 50 blocks
        let db = looping(30, 20); // 0.95 at 30 blocks
        let batch = smooth(100);
        let a = allocate(
            &[
                demand(&web, Some(0.99)),
                demand(&db, Some(0.9)),
                demand(&batch, None),
            ],
            200,
            1,
        );
        assert_eq!(&a.blocks[..2], &[50, 30]);
        assert_eq!(a.target_reachable, vec![Some(true), Some(true), None]);
        assert!(a.blocks[2] > 0 && a.blocks.iter().sum::<u64>() <= 200);
    }

    #[test]
    fn an_unreachable_target_is_reported_not_chased() {
        let web = looping(50, 10); // at most 0.9: cold misses
        let batch = smooth(100);
        let a = allocate(&[demand(&web, Some(0.99)), demand(&batch, None)], 60, 1);
        assert_eq!(a.target_reachable[0], Some(false));
        // Not chased: it only gets blocks where they buy the most hits, with the others.
        assert!(a.blocks.iter().sum::<u64>() <= 60);
        let tight = allocate(&[demand(&looping(50, 100), Some(0.99))], 40, 1);
        assert_eq!(
            tight.target_reachable[0],
            Some(false),
            "40 < the 50 it needs"
        );
    }

    /// A correction that asks for more than the curve ever reaches (0.99 + 0.01 of a loop that
    /// tops out at 0.99) leaves the target reachable and sized for the target itself.
    #[test]
    fn a_correction_past_the_curve_keeps_a_reachable_target() {
        let web = looping(50, 100); // 0.99 at 50 blocks, never more
        let mut d = demand(&web, Some(0.99));
        d.aim = 0.01;
        let a = allocate(&[d], 100, 1);
        assert_eq!(a.target_reachable[0], Some(true));
        assert_eq!(a.for_target[0], Some(50));
    }

    /// A class whose target was out of reach (early in a run, when its curve still holds its
    /// cold misses) used to get only what the best-effort classes left: a uniform batch class
    /// took the whole tier and the web class fell to 2 blocks.
    #[test]
    fn an_unreachable_target_competes_with_best_effort_by_gain() {
        // `web` reaches at most 0.99: 99 hits a block once its 50 are in. `batch` is random
        // over 1,000 blocks: about 20 hits a block at any size.
        let web = looping(50, 100);
        let mut m = ExactMrc::new(1);
        let mut x = 7u64;
        for _ in 0..20_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            m.access(5000 + (x >> 33) % 1000);
        }
        let batch = m.curve().clone();
        let a = allocate(&[demand(&web, Some(0.995)), demand(&batch, None)], 300, 10);
        assert_eq!(a.target_reachable[0], Some(false));
        assert_eq!(a.blocks[0], 50, "{a:?}");
    }

    /// A sampled curve's cliff may sit a little low: a target on a cliff gets two standard
    /// deviations more; one on a smooth curve, where being short costs little, none.
    #[test]
    fn a_sampled_cliff_gets_a_margin_and_a_smooth_curve_none() {
        let cliff = looping(1000, 50);
        let mut sampled = demand(&cliff, Some(0.9));
        sampled.sampling_rate = 0.1;
        let a = allocate(&[sampled], 5000, 1);
        // 2 · sqrt(1000 · 0.9 / 0.1) = 190.
        assert_eq!(a.blocks[0], 1190, "{a:?}");
        // Uniform accesses over 10,000 blocks: the miss ratio falls by 1/10,000 per block, so
        // the ~400 blocks of a margin at 5,000 would buy 4 points: no cliff.
        let mut uniform = ExactMrc::new(1);
        let mut x = 1u64;
        for _ in 0..200_000 {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            uniform.access((x >> 33) % 10_000);
        }
        let need = uniform.curve().blocks_for_hit_ratio(0.45, 20_000).unwrap();
        let table = uniform.curve().table(20_000);
        assert_eq!(
            margin(&table, 0.45, need, 0.1),
            0,
            "no cliff at {need}, no margin"
        );
        assert!(margin(&cliff.table(5000), 0.9, 1000, 0.1) > 0);
    }

    #[test]
    fn lookahead_crosses_a_cliff_a_greedy_step_would_not() {
        // The loop gains nothing until all 80 blocks are there; then every access hits.
        let cliff = looping(80, 50);
        let trickle = smooth(400);
        let a = allocate(&[demand(&cliff, None), demand(&trickle, None)], 100, 1);
        assert_eq!(a.blocks[0], 80, "{a:?}");
    }

    #[test]
    fn caps_and_floors_hold() {
        let c = smooth(100);
        let mut backup = demand(&c, None);
        backup.max = Some(10);
        let mut web = demand(&c, Some(0.5));
        web.min = 30;
        let a = allocate(&[web, backup], 100, 1);
        assert!(a.blocks[0] >= 30);
        assert!(a.blocks[1] <= 10);
        assert!(a.blocks.iter().sum::<u64>() <= 100);
    }
}
