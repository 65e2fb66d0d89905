//! Sizing classes from their miss-ratio curves: meet every reachable hit-ratio target with the
//! fewest blocks (strictest target first), report the unreachable ones instead of chasing them,
//! then give what is left where it buys the most hits, looking past plateaus (UCP's lookahead:
//! Qureshi & Patt, MICRO '06 — the best *average* gain per block over any extension, so a class
//! whose curve has a cliff is not starved by a greedy one-step view, as Talus and Cliffhanger
//! also avoid).
//!
//! A pure decision: curves and limits in, blocks per class out.

use super::MissRatioCurve;

/// What one class asks for.
#[derive(Debug, Clone, Copy)]
pub struct ClassDemand<'a> {
    /// Its estimated LRU miss-ratio curve.
    pub curve: &'a MissRatioCurve,
    /// Accesses it makes per window (weights miss ratios into hits).
    pub accesses: f64,
    /// Hit-ratio goal, or `None` for best effort.
    pub target: Option<f64>,
    /// Floor and cap in blocks.
    pub min: u64,
    pub max: Option<u64>,
}

/// The decision: blocks per class, in the order given, and whether each target is reachable.
#[derive(Debug, Clone, PartialEq)]
pub struct Allocation {
    pub blocks: Vec<u64>,
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
        if let Some(need) = c.curve.blocks_for_hit_ratio(t, room) {
            let extra = need.saturating_sub(blocks[i]);
            blocks[i] += extra;
            left -= extra;
            reachable[i] = Some(true);
        }
    }

    // What is left: repeatedly the class with the best average gain per block over any
    // extension it can take (lookahead), by whole extensions.
    while left >= step {
        let mut best: Option<(usize, u64, f64)> = None;
        for (i, c) in classes.iter().enumerate() {
            let room = cap(c).saturating_sub(blocks[i]).min(left);
            if let Some((k, per_block)) = best_extension(c, blocks[i], room, step) {
                if best.is_none_or(|(_, _, g)| per_block > g) {
                    best = Some((i, k, per_block));
                }
            }
        }
        let Some((i, k, _)) = best else { break };
        blocks[i] += k;
        left -= k;
    }
    Allocation {
        blocks,
        target_reachable: reachable,
    }
}

/// The extension (a multiple of `step`, at most `room`) with the best positive hits per block
/// for class `c` now at `at` blocks: `(blocks, hits per block)`.
fn best_extension(c: &ClassDemand<'_>, at: u64, room: u64, step: u64) -> Option<(u64, f64)> {
    let base = c.curve.miss_ratio(at);
    let mut best: Option<(u64, f64)> = None;
    let mut k = step;
    while k <= room {
        let gain = (base - c.curve.miss_ratio(at + k)) * c.accesses;
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
            min: 0,
            max: None,
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
