//! The placement planner: what happens to a block across a stack of tiers on an access and on
//! an eviction. It only *decides*; the simulator applies the decisions to metadata
//! ([`crate::hierarchy::Hierarchy`]) and the live cache does the I/O — one code path for both,
//! so what `sim` predicts is what the mount does.
//!
//! Placement of each lower tier (the top tier is always filled on a miss):
//! - `inclusive`: filled when a miss passes through it (the papers' setup, paper 004);
//! - `exclusive`: never filled on a miss; clean blocks evicted from the tier above are demoted
//!   into it, and a hit there moves the block up (a promotion) and removes it here;
//! - `pinned`: paper 004's remedy: only blocks of a fixed index range
//!   `[first, first + capacity)` are admitted, into free slots, and never evicted.

use crate::error::{CoreError, ParseError};
use std::fmt;
use std::str::FromStr;

/// How a lower tier is kept relative to the tiers above it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Placement {
    #[default]
    Inclusive,
    Exclusive,
    /// Admit blocks with index in `[first, first + capacity)`.
    Pinned {
        first: u64,
    },
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Placement::Inclusive => f.write_str("inclusive"),
            Placement::Exclusive => f.write_str("exclusive"),
            Placement::Pinned { first: 0 } => f.write_str("pinned"),
            Placement::Pinned { first } => write!(f, "pinned={first}"),
        }
    }
}

impl FromStr for Placement {
    type Err = ParseError;
    /// `inclusive`, `exclusive`, `pinned` or `pinned=FIRST_BLOCK`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "inclusive" => Ok(Placement::Inclusive),
            "exclusive" => Ok(Placement::Exclusive),
            "pinned" => Ok(Placement::Pinned { first: 0 }),
            _ => match s.strip_prefix("pinned=") {
                Some(n) => n
                    .parse()
                    .map(|first| Placement::Pinned { first })
                    .map_err(|_| ParseError::invalid(s, "pinned=FIRST needs a block number")),
                None => Err(ParseError::unknown(
                    "placement",
                    s,
                    "inclusive|exclusive|pinned[=FIRST]",
                )),
            },
        }
    }
}

/// One step of what an access does, in the order to apply it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// The block is served from tier `i` (or from BACKING when `i` is the number of tiers).
    ReadFrom(usize),
    /// Remove the block from tier `i` after reading it: it moves up (exclusive promotion).
    TakeFrom(usize),
    /// Bring the block into tier `i`, evicting by that tier's policy.
    Fill(usize),
    /// Bring the block into tier `i` only if its index is in the pinned range and a slot is free.
    FillPinned {
        tier: usize,
        /// Capacity-relative: admit when `first <= block < first + capacity of tier`.
        first: u64,
    },
}

/// At most: one read, one take, a fill per tier above the hit. Stack-allocated.
pub const MAX_TIERS: usize = 8;

/// The actions of one access, without allocation.
#[derive(Debug, Clone, Copy)]
pub struct Actions {
    items: [Action; MAX_TIERS + 2],
    len: usize,
}

impl Actions {
    fn new() -> Self {
        Self {
            items: [Action::ReadFrom(0); MAX_TIERS + 2],
            len: 0,
        }
    }
    #[inline]
    fn push(&mut self, a: Action) {
        if self.len < self.items.len() {
            self.items[self.len] = a;
            self.len += 1;
        }
    }
    pub fn as_slice(&self) -> &[Action] {
        &self.items[..self.len]
    }
}

/// Decides placement for a stack of tiers, top first.
#[derive(Debug, Clone)]
pub struct Planner {
    placement: Vec<Placement>,
}

impl Planner {
    /// `placement[0]` is forced to inclusive (the top tier takes every miss). At most
    /// [`MAX_TIERS`] tiers.
    pub fn new(placement: &[Placement]) -> Result<Self, CoreError> {
        if placement.is_empty() || placement.len() > MAX_TIERS {
            return Err(CoreError::config(
                "tier",
                format!(
                    "a tier stack has 1 to {MAX_TIERS} tiers, not {}",
                    placement.len()
                ),
            ));
        }
        let mut placement = placement.to_vec();
        placement[0] = Placement::Inclusive;
        Ok(Self { placement })
    }

    pub fn len(&self) -> usize {
        self.placement.len()
    }
    pub fn is_empty(&self) -> bool {
        self.placement.is_empty()
    }
    pub fn placement(&self, i: usize) -> Placement {
        self.placement[i]
    }

    /// Whether tier `i` is consulted on a miss above it (every lower tier is: even a pinned or
    /// exclusive tier may hold the block).
    #[inline]
    pub fn looked_up(&self, i: usize) -> bool {
        i < self.placement.len()
    }

    /// What an access does when it hit in tier `hit` (`None`: every tier missed, BACKING
    /// serves it). Fills run bottom-up so a demotion cascading down meets filled tiers.
    #[inline]
    pub fn on_access(&self, hit: Option<usize>) -> Actions {
        self.on_access_skipping(hit, 0)
    }

    /// Like [`Planner::on_access`] for an access that bypasses the tiers in `skip` (bit `i` =
    /// tier `i`; e.g. a remote tier that sequential runs skip, see [`crate::seqrun`]): they are
    /// neither read (the caller did not look them up) nor filled.
    #[inline]
    pub fn on_access_skipping(&self, hit: Option<usize>, skip: u32) -> Actions {
        let n = self.placement.len();
        let mut a = Actions::new();
        let from = hit.unwrap_or(n);
        a.push(Action::ReadFrom(from));
        if from > 0 && from < n && self.placement[from] == Placement::Exclusive {
            a.push(Action::TakeFrom(from));
        }
        for i in (0..from).rev() {
            if skip & (1 << i) != 0 {
                continue;
            }
            match self.placement[i] {
                Placement::Inclusive => a.push(Action::Fill(i)),
                Placement::Exclusive => {}
                Placement::Pinned { first } => a.push(Action::FillPinned { tier: i, first }),
            }
        }
        a
    }

    /// Where a clean block evicted from tier `from` goes: the tier right below when that one is
    /// exclusive, else nowhere (an inclusive tier below was filled on the miss; BACKING has the
    /// bytes).
    #[inline]
    pub fn on_evict(&self, from: usize) -> Option<usize> {
        let below = from + 1;
        (below < self.placement.len() && self.placement[below] == Placement::Exclusive)
            .then_some(below)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(p: &[Placement], hit: Option<usize>) -> Vec<Action> {
        Planner::new(p).unwrap().on_access(hit).as_slice().to_vec()
    }

    #[test]
    fn exclusive_hit_moves_up_and_miss_fills_only_the_top() {
        let p = [Placement::Inclusive, Placement::Exclusive];
        assert_eq!(
            plan(&p, Some(1)),
            vec![Action::ReadFrom(1), Action::TakeFrom(1), Action::Fill(0)]
        );
        assert_eq!(plan(&p, None), vec![Action::ReadFrom(2), Action::Fill(0)]);
        assert_eq!(plan(&p, Some(0)), vec![Action::ReadFrom(0)]);
        let pl = Planner::new(&p).unwrap();
        assert_eq!(pl.on_evict(0), Some(1));
        assert_eq!(pl.on_evict(1), None);
    }

    #[test]
    fn inclusive_miss_fills_bottom_up_and_evictions_are_not_demoted() {
        let p = [
            Placement::Inclusive,
            Placement::Inclusive,
            Placement::Pinned { first: 4 },
        ];
        assert_eq!(
            plan(&p, None),
            vec![
                Action::ReadFrom(3),
                Action::FillPinned { tier: 2, first: 4 },
                Action::Fill(1),
                Action::Fill(0)
            ]
        );
        assert_eq!(Planner::new(&p).unwrap().on_evict(0), None);
    }

    #[test]
    fn a_skipped_tier_is_not_filled() {
        let p = [
            Placement::Inclusive,
            Placement::Inclusive,
            Placement::Inclusive,
        ];
        let pl = Planner::new(&p).unwrap();
        assert_eq!(
            pl.on_access_skipping(None, 0b100).as_slice(),
            &[Action::ReadFrom(3), Action::Fill(1), Action::Fill(0)]
        );
        assert_eq!(
            pl.on_access_skipping(Some(1), 0b100).as_slice(),
            &[Action::ReadFrom(1), Action::Fill(0)]
        );
    }

    #[test]
    fn the_top_tier_is_always_inclusive_and_stacks_are_bounded() {
        let pl = Planner::new(&[Placement::Exclusive]).unwrap();
        assert_eq!(pl.placement(0), Placement::Inclusive);
        assert!(Planner::new(&[]).is_err());
        assert!(Planner::new(&[Placement::Inclusive; MAX_TIERS + 1]).is_err());
    }
}
