//! The release rule and the N-class partitioners; with two classes, `dirprio` and the release
//! rule are compared decision by decision against paper 000's two-pool controller as it was
//! written before classes were generalized (`reference` below).

use super::*;
use crate::ids::{BlockIndex, FileId};
use proptest::prelude::*;

fn sizes(v: &[usize]) -> PoolSizes {
    PoolSizes::from_slice(v)
}

fn targets(v: &[Option<u64>]) -> [Option<u64>; MAX_CLASSES] {
    std::array::from_fn(|i| v.get(i).copied().flatten())
}

fn pool(i: usize) -> PoolId {
    PoolId::new(i).unwrap()
}

fn class(i: usize) -> Class {
    Class::new(i).unwrap()
}

fn access(c: Class, pool: PoolId, hit: bool, block: u64) -> Access {
    Access {
        key: BlockKey {
            file: FileId(c.index() as u64 + 1),
            block: BlockIndex(block),
        },
        class: c,
        pool,
        hit,
        pool_blocks: 0,
    }
}

#[test]
fn release_rule_with_two_pools_is_paper_000s() {
    let two = |s: u64, cap: u64| targets(&[Some(s), Some(cap - s)]);
    let (p, n) = (PoolId::PROTECTED, PoolId::NORMAL);
    // S_cur < S_target → normal; = → incoming's pool; > → protected.
    assert_eq!(release_rule(&two(10, 10), p, &sizes(&[5, 5])), n);
    assert_eq!(release_rule(&two(5, 10), p, &sizes(&[5, 5])), p);
    assert_eq!(release_rule(&two(5, 10), n, &sizes(&[5, 5])), n);
    assert_eq!(release_rule(&two(2, 10), n, &sizes(&[5, 5])), p);
    // The chosen pool is empty → the other one.
    assert_eq!(release_rule(&two(10, 10), n, &sizes(&[5, 0])), p);
    assert_eq!(release_rule(&two(0, 10), p, &sizes(&[0, 5])), n);
}

#[test]
fn release_rule_takes_from_the_pool_furthest_above_its_target() {
    let t = targets(&[Some(10), Some(50), Some(30), Some(10)]);
    // Pool 3 is 20 over, pool 1 is 10 over: pool 3 gives.
    assert_eq!(release_rule(&t, pool(2), &sizes(&[5, 60, 5, 30])), pool(3));
    // Nobody over, pool 2 under: the rest pool gives.
    assert_eq!(
        release_rule(&t, pool(2), &sizes(&[10, 50, 20, 10])),
        pool(1)
    );
    // Everyone at target: the incoming block's own pool.
    assert_eq!(
        release_rule(&t, pool(3), &sizes(&[10, 50, 30, 10])),
        pool(3)
    );
    // An empty chosen pool: the largest other.
    let t = targets(&[Some(10), Some(60), Some(30), Some(0)]);
    assert_eq!(release_rule(&t, pool(3), &sizes(&[10, 60, 30, 0])), pool(1));
}

fn table(specs: &[(&str, Option<f64>, u64, Option<u64>)], rest_min: u64) -> ClassParams {
    let mut v: Vec<ClassSpec> = specs
        .iter()
        .map(|&(name, target, min, max)| ClassSpec {
            name: name.into(),
            target,
            min: Some(Amount::Blocks(min)),
            max: max.map(Amount::Blocks),
        })
        .collect();
    v.push(ClassSpec {
        name: "normal".into(),
        target: None,
        min: Some(Amount::Blocks(rest_min)),
        max: None,
    });
    ClassParams {
        omega: Some(10),
        classes: ClassTable::new(v).unwrap(),
    }
}

/// Three classes with targets 0.99, 0.9, 0.5: when two are short in the same window, the
/// strictest grows first, by the hits it lacked.
#[test]
fn dirprio_grows_the_strictest_short_class_first() {
    let p = table(
        &[
            ("a", Some(0.5), 0, None),
            ("b", Some(0.99), 0, None),
            ("c", Some(0.9), 0, None),
        ],
        0,
    );
    let mut d = Dirprio::new(p, 1000).unwrap();
    let (a, b) = (class(2), class(3));
    for i in 0..5 {
        d.record(access(a, pool(2), false, i));
        d.record(access(b, pool(3), i % 2 == 0, i));
    }
    // b: 0.99·5 − 3 hits → 2 blocks; a untouched though short too.
    assert_eq!(d.target(pool(3)), Some(2));
    assert_eq!(d.target(pool(2)), Some(0));
    assert_eq!(d.target(PoolId::NORMAL), Some(998));
}

/// With the rest pool at its floor, a strict class short of its target takes blocks from a
/// less strict one, never below that one's floor.
#[test]
fn dirprio_takes_from_weaker_classes_when_the_tier_is_spoken_for() {
    let p = table(
        &[("web", Some(0.99), 0, None), ("batch", Some(0.5), 20, None)],
        10,
    );
    let mut d = Dirprio::new(p, 100).unwrap();
    let (web, batch) = (class(2), class(3));
    // batch grows to the ceiling first: 90 − web's 0.
    for _ in 0..20 {
        for i in 0..10 {
            d.record(access(batch, pool(3), false, i));
        }
    }
    assert_eq!(d.target(pool(3)), Some(90));
    for i in 0..10 {
        d.record(access(web, pool(2), false, i));
    }
    assert_eq!(d.target(pool(2)), Some(10), "0.99·10 → 10 blocks");
    assert_eq!(d.target(pool(3)), Some(80));
    for _ in 0..20 {
        for i in 0..10 {
            d.record(access(web, pool(2), false, i));
        }
    }
    assert_eq!(d.target(pool(3)), Some(20), "batch keeps its floor");
    assert_eq!(d.target(pool(2)), Some(70));
    assert_eq!(d.target(PoolId::NORMAL), Some(10));
}

/// A class with a cap never gets a target above it, whatever it misses.
#[test]
fn caps_bound_targets() {
    let p = table(&[("web", Some(1.0), 0, Some(25))], 0);
    let mut d = Dirprio::new(p, 100).unwrap();
    for _ in 0..10 {
        for i in 0..10 {
            d.record(access(class(2), pool(2), false, i));
        }
    }
    assert_eq!(d.target(pool(2)), Some(25));
}

/// Three classes with their own loops: `mrc` gives each the blocks its curve says meet its
/// target and leaves the rest to the rest pool.
#[test]
fn mrc_sizes_three_classes_from_their_curves() {
    let mut p = table(
        &[
            ("a", Some(0.9), 0, None),
            ("b", Some(0.9), 0, None),
            ("c", None, 0, Some(100)),
        ],
        0,
    );
    p.omega = Some(30_000);
    let mut m = MrcPartitioner::new(p, 10_000).unwrap();
    let (a, b, c) = (class(2), class(3), class(4));
    for round in 0..20u64 {
        for i in 0..3000 {
            m.record(access(a, pool(2), false, i % 1000));
            m.record(access(b, pool(3), false, i));
            m.record(access(c, pool(4), false, round * 3000 + i));
        }
    }
    let (ta, tb, tc) = (
        m.target(pool(2)).unwrap(),
        m.target(pool(3)).unwrap(),
        m.target(pool(4)).unwrap(),
    );
    assert!((900..=1300).contains(&ta), "a: {ta}");
    assert!((2700..=3450).contains(&tb), "b: {tb}");
    assert!(tc <= 100, "c is capped: {tc}");
    assert_eq!(m.target_reachable(a), Some(true));
    assert_eq!(m.target_reachable(c), None);
    // The curve `stats` shows: `a` loops over 1,000 blocks, so it hits from 1,000 on (read
    // here at 1,500: a size rounds down to its bucket of 39 blocks, so 1,000 reads as 975).
    let curve = m.curve(a, 20).unwrap();
    assert_eq!(curve.len(), 20);
    assert_eq!(curve[0].0, 500);
    assert!(curve[0].1 <= 0.3 && curve[2].1 >= 0.9, "{curve:?}");
    assert!(curve.windows(2).all(|w| w[1].1 >= w[0].1), "{curve:?}");
    // Class 5 is in no table: its files are `normal`'s, and it has no curve of its own.
    assert!(m.curve(class(5), 10).is_none(), "no pool of its own");
}

/// Paper 000's two-pool controller and release rule as written before classes were
/// generalized: the reference the N-class code must replay exactly with two classes.
mod reference {
    #[derive(Debug)]
    pub struct Old {
        pub target: u64,
        b_pmin: u64,
        ceiling: u64,
        omega: u64,
        t: [f64; 2],
        accesses: [u64; 2],
        hits: [u64; 2],
        seen: u64,
    }

    impl Old {
        pub fn new(omega: u64, t: [f64; 2], b_pmin: u64, b_nmin: u64, cap: u64) -> Self {
            let b_nmin = b_nmin.min(cap);
            let b_pmin = b_pmin.min(cap - b_nmin);
            Self {
                target: b_pmin,
                b_pmin,
                ceiling: cap - b_nmin,
                omega,
                t,
                accesses: [0; 2],
                hits: [0; 2],
                seen: 0,
            }
        }
        pub fn record(&mut self, pool: usize, hit: bool) {
            self.accesses[pool] += 1;
            self.hits[pool] += u64::from(hit);
            self.seen += 1;
            if self.seen < self.omega {
                return;
            }
            let ratio = |i: usize| {
                if self.accesses[i] == 0 {
                    1.0
                } else {
                    self.hits[i] as f64 / self.accesses[i] as f64
                }
            };
            let missing = |t: f64, i: usize| {
                let x = t * self.accesses[i] as f64 - self.hits[i] as f64;
                if x <= 1e-9 {
                    0
                } else {
                    (x - 1e-9).ceil() as u64
                }
            };
            let v = if ratio(0) < self.t[0] {
                self.target.saturating_add(missing(self.t[0], 0))
            } else if ratio(1) < self.t[1] {
                self.target.saturating_sub(missing(self.t[1], 1))
            } else {
                self.target
            };
            self.target = v.clamp(self.b_pmin, self.ceiling);
            self.accesses = [0; 2];
            self.hits = [0; 2];
            self.seen = 0;
        }
        pub fn victim(&self, incoming: usize, sizes: [usize; 2]) -> usize {
            let chosen = match (sizes[0] as u64).cmp(&self.target) {
                std::cmp::Ordering::Less => 1,
                std::cmp::Ordering::Equal => incoming,
                std::cmp::Ordering::Greater => 0,
            };
            if sizes[chosen] == 0 {
                1 - chosen
            } else {
                chosen
            }
        }
    }
}

proptest! {
    /// With two classes, `dirprio` moves its target and picks victims exactly as paper 000's
    /// two-pool controller did.
    #[test]
    fn two_class_dirprio_replays_the_two_pool_controller(
        omega in 1u64..40,
        t_p in 0.0f64..=1.0,
        t_n in 0.0f64..=1.0,
        b_pmin in 0u64..60,
        b_nmin in 0u64..60,
        steps in proptest::collection::vec((any::<bool>(), any::<bool>(), 0usize..100, 0usize..100), 1..400),
    ) {
        let cap = 100;
        prop_assume!(b_pmin + b_nmin.min(cap) <= cap);
        let params = DirprioParams {
            omega: Some(omega),
            t_protected: t_p,
            t_normal: t_n,
            b_pmin: Amount::Blocks(b_pmin),
            b_nmin,
        };
        let mut new = Dirprio::new(params.into(), cap).unwrap();
        let mut old = reference::Old::new(omega, [t_p, t_n], b_pmin, b_nmin, cap);
        for (prio, hit, p, n) in steps {
            let (c, pl) = if prio {
                (Class::PRIORITY, PoolId::PROTECTED)
            } else {
                (Class::NORMAL, PoolId::NORMAL)
            };
            prop_assert_eq!(new.pool_of(c), pl);
            new.record(access(c, pl, hit, 0));
            old.record(pl.index(), hit);
            prop_assert_eq!(new.s_target(), Some(old.target));
            let (p, n) = (p.min(cap as usize), n.min(cap as usize - p.min(cap as usize)));
            let got = new.victim_pool(pl, &sizes(&[p, n]));
            prop_assert_eq!(got.index(), old.victim(pl.index(), [p, n]), "sizes {} {}", p, n);
        }
    }
}
