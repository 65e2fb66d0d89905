//! Paper 000's hit-ratio controller ("dirprio"): equations (1)–(3) and the release rule,
//! applied per class in target order when there are more than two.
//!
//! Every ω recorded accesses it computes the window hit ratios H_p and H_n (a pool with no
//! accesses in the window counts as 100 %) and moves the protected target:
//! - H_p < T_p: S_target += (T_p − H_p)·A_p, capped so that B − S_target ≥ B_nmin;
//! - else H_n < T_n: S_target −= (T_n − H_n)·A_n, floored at B_pmin.
//!
//! (T − H)·A equals T·A − hits, the number of extra hits the window lacked; it is rounded up to
//! whole blocks ("at least 4 more buffers", Fig. 3), with a tolerance for float error.

use super::classes::{ClassParams, ClassTable, Resolved};
use super::target::Targets;
use super::{Access, PartitionKind, Partitioner, PoolSizes};
use crate::class::{Class, PoolId, MAX_CLASSES};
use crate::error::{CoreError, ParseError};

/// A block count given absolutely or as a share of the tier.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Amount {
    Blocks(u64),
    Percent(f64),
}

impl Amount {
    /// The blocks this amount is of a tier of `capacity` blocks.
    pub fn of(self, capacity: u64) -> u64 {
        match self {
            Amount::Blocks(n) => n,
            Amount::Percent(p) => ((capacity as f64) * p / 100.0).round() as u64,
        }
    }
}

impl std::str::FromStr for Amount {
    type Err = ParseError;
    /// `N` blocks or `P%` of the tier.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(p) = s.strip_suffix('%') {
            let v: f64 = p
                .trim()
                .parse()
                .map_err(|_| ParseError::invalid(s, "not a percentage"))?;
            if !(0.0..=100.0).contains(&v) {
                return Err(ParseError::invalid(s, "outside 0%..100%"));
            }
            Ok(Amount::Percent(v))
        } else {
            s.trim()
                .parse()
                .map(Amount::Blocks)
                .map_err(|_| ParseError::invalid(s, "not a block count or percentage"))
        }
    }
}

/// 000's five parameters as the user gives them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DirprioParams {
    /// Window length in accesses; `None` = B (§3.4.2).
    pub omega: Option<u64>,
    /// T_p, a fraction in 0..=1.
    pub t_protected: f64,
    /// T_n, a fraction in 0..=1.
    pub t_normal: f64,
    /// B_pmin: the protected target's floor (also the `static` partitioner's fixed target).
    pub b_pmin: Amount,
    /// B_nmin: the normal pool's floor, in blocks.
    pub b_nmin: u64,
}

impl DirprioParams {
    /// §3.4's guidance. `priority_reads_other`: the priority work also reads non-priority files
    /// (condition 2): T_n = 85 %, B_pmin = 30 %; otherwise T_n = 65 % (of 60–70 %) and B_pmin =
    /// 75 % (of 70–80 %). T_p = 100 %, ω = B, B_nmin = 32 (maximum read-ahead in blocks).
    pub fn guidance(_capacity: u64, priority_reads_other: bool) -> Self {
        let (t_normal, b_pmin) = if priority_reads_other {
            (0.85, 30.0)
        } else {
            (0.65, 75.0)
        };
        Self {
            omega: None,
            t_protected: 1.0,
            t_normal,
            b_pmin: Amount::Percent(b_pmin),
            b_nmin: 32,
        }
    }

    /// Resolves shares against a tier of `capacity` blocks and checks the bounds. A percentage
    /// B_pmin (or the default B_nmin) shrinks to fit a small tier; absolute values that cannot
    /// both hold are an error.
    pub fn resolved(&self, capacity: u64) -> Result<Resolved, CoreError> {
        ClassParams::from(*self).resolved(capacity)
    }
}

/// The controller state (the targets and their bounds are kept by `partition::target`).
#[derive(Debug, Clone)]
pub struct Dirprio {
    targets: Targets,
    /// Window counters, indexed by `PoolId::index`.
    accesses: [u64; MAX_CLASSES],
    hits: [u64; MAX_CLASSES],
    seen: u64,
}

impl Dirprio {
    /// Starts every pool at its floor (the paper gives no initial value; the floor is the
    /// smallest target the user accepted).
    pub fn new(params: ClassParams, capacity: u64) -> Result<Self, CoreError> {
        Ok(Self {
            targets: Targets::new(params, capacity)?,
            accesses: [0; MAX_CLASSES],
            hits: [0; MAX_CLASSES],
            seen: 0,
        })
    }

    pub fn params(&self) -> &Resolved {
        self.targets.resolved()
    }

    /// Pools of their own with a hit-ratio target, strictest target first (ties: lower index).
    fn ranked(&self) -> Vec<(PoolId, f64)> {
        let mut r: Vec<(PoolId, f64)> = self
            .params()
            .own_pools()
            .filter_map(|(p, c)| c.target.map(|t| (p, t)))
            .collect();
        r.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        r
    }

    /// Equations (1)–(3) over the window that just ended, per class in target order: the first
    /// class short of its target grows by the hits it lacked (taking from less strict classes
    /// when the rest pool is at its floor); if none is short and the rest pool is short of
    /// `normal`'s target, the classes give back, least strict first, down to their floors.
    fn end_window(&mut self) {
        let ratio = |i: usize| -> f64 {
            if self.accesses[i] == 0 {
                1.0
            } else {
                self.hits[i] as f64 / self.accesses[i] as f64
            }
        };
        let ranked = self.ranked();
        let short = ranked.iter().position(|&(p, t)| ratio(p.index()) < t);
        if let Some(at) = short {
            let (p, t) = ranked[at];
            let grow = missing_hits(t, self.accesses[p.index()], self.hits[p.index()]);
            self.grow(p, grow, &ranked[at + 1..]);
        } else {
            let ni = PoolId::NORMAL.index();
            let t_n = self.params().classes[ni].target;
            if let Some(t_n) = t_n.filter(|&t| ratio(ni) < t) {
                let mut shrink = missing_hits(t_n, self.accesses[ni], self.hits[ni]);
                for &(p, _) in ranked.iter().rev() {
                    let now = self.targets.get(p).unwrap_or(0);
                    self.targets.set(p, now.saturating_sub(shrink));
                    shrink -= now - self.targets.get(p).unwrap_or(0);
                    if shrink == 0 {
                        break;
                    }
                }
            }
        }
        self.accesses = [0; MAX_CLASSES];
        self.hits = [0; MAX_CLASSES];
        self.seen = 0;
    }

    /// Grows `pool` by `by` blocks; what the ceiling refuses comes from `weaker` (less strict
    /// classes, the least strict first) down to their floors.
    fn grow(&mut self, pool: PoolId, by: u64, weaker: &[(PoolId, f64)]) {
        let now = self.targets.get(pool).unwrap_or(0);
        self.targets.set(pool, now.saturating_add(by));
        let mut lacking = now.saturating_add(by) - self.targets.get(pool).unwrap_or(0);
        let cap = self.params().classes[pool.index()].max;
        lacking = lacking.min(cap.saturating_sub(self.targets.get(pool).unwrap_or(0)));
        for &(w, _) in weaker.iter().rev() {
            if lacking == 0 {
                break;
            }
            let had = self.targets.get(w).unwrap_or(0);
            self.targets.set(w, had.saturating_sub(lacking));
            let freed = had - self.targets.get(w).unwrap_or(0);
            let before = self.targets.get(pool).unwrap_or(0);
            self.targets.set(pool, before + freed);
            lacking -= freed;
        }
    }
}

/// (T − H)·A = T·A − hits, rounded up to whole blocks; 1e-9 absorbs float error so that
/// 0.7·10 − 3 counts as 4, not 5.
fn missing_hits(threshold: f64, accesses: u64, hits: u64) -> u64 {
    let x = threshold * accesses as f64 - hits as f64;
    if x <= 1e-9 {
        0
    } else {
        (x - 1e-9).ceil() as u64
    }
}

impl Partitioner for Dirprio {
    fn kind(&self) -> PartitionKind {
        PartitionKind::Dirprio
    }
    fn pool_of(&self, class: Class) -> PoolId {
        self.targets.params().classes.pool_of(class)
    }
    #[inline]
    fn record(&mut self, access: Access) -> bool {
        let i = access.pool.index();
        self.accesses[i] += 1;
        self.hits[i] += u64::from(access.hit);
        self.seen += 1;
        if self.seen >= self.params().omega {
            let before = self.targets.all();
            self.end_window();
            return self.targets.all() != before;
        }
        false
    }
    fn victim_pool(&self, incoming: PoolId, sizes: &PoolSizes) -> PoolId {
        self.targets.victim_pool(incoming, sizes)
    }
    fn target(&self, pool: PoolId) -> Option<u64> {
        self.targets.get(pool)
    }
    fn set_capacity(&mut self, blocks: u64) {
        self.targets.set_capacity(blocks);
    }
    /// The targets keep their values, clamped into the new bounds; the window under way goes
    /// on (a new ω applies from its next access).
    fn set_params(&mut self, params: &ClassParams, capacity: u64) -> Result<(), CoreError> {
        self.targets.set_params(params.clone(), capacity)
    }
    fn classes(&self) -> &ClassTable {
        &self.targets.params().classes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(omega: u64, t_p: f64, t_n: f64, b_pmin: u64, b_nmin: u64) -> ClassParams {
        two(omega, t_p, t_n, b_pmin, b_nmin).into()
    }

    fn two(omega: u64, t_p: f64, t_n: f64, b_pmin: u64, b_nmin: u64) -> DirprioParams {
        DirprioParams {
            omega: Some(omega),
            t_protected: t_p,
            t_normal: t_n,
            b_pmin: Amount::Blocks(b_pmin),
            b_nmin,
        }
    }

    fn feed(d: &mut Dirprio, pool: PoolId, hits: u64, misses: u64) {
        let class = match pool {
            PoolId::PROTECTED => Class::PRIORITY,
            _ => Class::NORMAL,
        };
        let access = |hit| Access {
            key: crate::ids::BlockKey {
                file: crate::ids::FileId(1),
                block: crate::ids::BlockIndex(0),
            },
            class,
            pool,
            hit,
            pool_blocks: 0,
        };
        for _ in 0..hits {
            d.record(access(true));
        }
        for _ in 0..misses {
            d.record(access(false));
        }
    }

    /// Fig. 3: T_p = 7/10, H_p = 3/10 over 10 accesses → S_target grows by 4.
    #[test]
    fn fig3_target_grows_by_four() {
        let mut d = Dirprio::new(params(10, 0.7, 0.5, 10, 0), 100).unwrap();
        assert_eq!(d.s_target(), Some(10));
        feed(&mut d, PoolId::PROTECTED, 3, 7);
        assert_eq!(d.s_target(), Some(14));
    }

    #[test]
    fn normal_shortfall_shrinks_target_when_protected_is_fine() {
        let mut d = Dirprio::new(params(20, 0.5, 0.8, 5, 0), 100).unwrap();
        d.targets.set(PoolId::PROTECTED, 50);
        feed(&mut d, PoolId::PROTECTED, 10, 0); // H_p = 100 %
        feed(&mut d, PoolId::NORMAL, 4, 6); // H_n = 40 %, T_n·A_n − hits = 8 − 4
        assert_eq!(d.s_target(), Some(46));
    }

    #[test]
    fn protected_shortfall_takes_precedence_over_normal() {
        let mut d = Dirprio::new(params(20, 0.9, 0.9, 0, 0), 100).unwrap();
        feed(&mut d, PoolId::PROTECTED, 5, 5);
        feed(&mut d, PoolId::NORMAL, 0, 10);
        assert_eq!(d.s_target(), Some(4)); // 0.9·10 − 5, no decrease
    }

    #[test]
    fn empty_window_pool_counts_as_full_hit_ratio() {
        // Only normal accesses, all misses: H_p counts as 100 %, so the target shrinks.
        let mut d = Dirprio::new(params(10, 1.0, 0.5, 0, 0), 100).unwrap();
        d.targets.set(PoolId::PROTECTED, 30);
        feed(&mut d, PoolId::NORMAL, 0, 10);
        assert_eq!(d.s_target(), Some(25));
        // Only protected accesses, all hits: H_n counts as 100 %, nothing moves.
        feed(&mut d, PoolId::PROTECTED, 10, 0);
        assert_eq!(d.s_target(), Some(25));
    }

    #[test]
    fn bounds_b_nmin_caps_growth_and_b_pmin_floors_shrink() {
        let mut d = Dirprio::new(params(100, 1.0, 1.0, 20, 30), 100).unwrap();
        feed(&mut d, PoolId::PROTECTED, 0, 100); // wants +100
        assert_eq!(d.s_target(), Some(70)); // B − B_nmin
        feed(&mut d, PoolId::NORMAL, 0, 100); // wants −100
        assert_eq!(d.s_target(), Some(20)); // B_pmin
    }

    #[test]
    fn window_resets_after_omega_accesses() {
        let mut d = Dirprio::new(params(4, 1.0, 0.0, 0, 0), 100).unwrap();
        feed(&mut d, PoolId::PROTECTED, 0, 3);
        assert_eq!(d.s_target(), Some(0)); // window not complete
        feed(&mut d, PoolId::PROTECTED, 1, 0); // A_p = 4, hits 1 → +3
        assert_eq!(d.s_target(), Some(3));
        feed(&mut d, PoolId::PROTECTED, 4, 0); // a perfect window changes nothing
        assert_eq!(d.s_target(), Some(3));
    }

    #[test]
    fn bad_parameters_are_rejected_with_their_name() {
        let e = Dirprio::new(params(10, 1.5, 0.5, 0, 0), 100).unwrap_err();
        assert!(e.to_string().contains("t-protected"), "{e}");
        let e = Dirprio::new(params(10, 1.0, 0.5, 80, 30), 100).unwrap_err();
        assert!(e.to_string().contains("b-pmin"), "{e}");
        let e = Dirprio::new(params(0, 1.0, 0.5, 0, 0), 100).unwrap_err();
        assert!(e.to_string().contains("omega"), "{e}");
    }

    #[test]
    fn guidance_fits_small_tiers() {
        let p = DirprioParams::guidance(40, false).resolved(40).unwrap();
        assert_eq!(p.rest_min(), 32);
        assert_eq!(p.classes[0].min, 8); // 75 % of 40 = 30, shrunk to B − B_nmin
        assert_eq!(p.omega, 40);
    }

    #[test]
    fn set_params_clamps_the_target_and_refuses_bad_values_whole() {
        let mut d = Dirprio::new(params(10, 1.0, 0.5, 10, 10), 100).unwrap();
        assert_eq!(d.s_target(), Some(10));
        d.set_params(&params(10, 1.0, 0.5, 40, 10), 100).unwrap();
        assert_eq!(d.s_target(), Some(40), "raised to the new floor");
        assert!(d.set_params(&params(10, 2.0, 0.5, 50, 10), 100).is_err());
        assert_eq!(d.params().classes[0].min, 40, "nothing changed");
        assert_eq!(d.params().classes[0].target, Some(1.0));
    }
}
