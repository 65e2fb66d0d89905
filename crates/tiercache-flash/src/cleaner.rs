//! The cleaning policy as decisions, with no I/O. [`FlashTier`](crate::FlashTier) feeds it
//! from its own index (`on_request`/`on_tick`, see `advice.rs`) and hands the decisions to
//! the manager as `CleanAdvice`; the manager does the I/O (read the blocks with
//! `read_dirty`, write them to BACKING in the order [`plan_runs`] gives, `mark_clean`, then
//! `sync` the tier).
//!
//! `idle` (paper 001's contribution): states `normal → wait → writeback`.
//! - `normal`: enough sets without dirty blocks (`free_sets ≥ free_floor`), or nothing dirty.
//! - `wait`: cleaning is needed; it starts only once no request arrived for `wait`.
//! - `writeback`: each tick cleans up to `max_sets_at_once` sets from the LRU end until
//!   `free_sets ≥ free_floor`; a request arriving interrupts and returns to `wait`.
//! - With no free set left, requests are told to `Bypass` (go to BACKING) rather than clean
//!   in the request path.
//! - Safety valve (001 has none): above `dirty_max` dirty, a tick cleans even when busy, at
//!   most `max_sets_at_once` sets per `busy_interval`.
//!
//! `eager` (001's old scheme, for comparison): a request that finds `free_sets < free_floor`
//! cleans the LRU dirty set in the request path; ticks do nothing.

use crate::index::SetId;
use serde::Serialize;
use std::time::Duration;
use tiercache_tier::{DirtyBlock, FileKey};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CleanerMode {
    Idle,
    Eager,
}

/// Shown by `stats` as `flash.state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CleanerState {
    #[default]
    Normal,
    Wait,
    Writeback,
}

#[derive(Debug, Clone)]
pub struct CleanerConfig {
    pub mode: CleanerMode,
    /// Quiet time before cleaning starts (default 1 s).
    pub wait: Duration,
    /// Cleaning runs until this many sets hold no dirty block.
    pub free_floor: u32,
    /// Sets cleaned per decision (default 4).
    pub max_sets_at_once: usize,
    /// Dirty fraction above which cleaning runs even when busy (default 0.8).
    pub dirty_max: f64,
    /// Minimum time between busy (valve) cleanings (default 100 ms).
    pub busy_interval: Duration,
}

impl CleanerConfig {
    pub fn new(mode: CleanerMode, free_floor: u32) -> Self {
        Self {
            mode,
            wait: Duration::from_secs(1),
            free_floor,
            max_sets_at_once: 4,
            dirty_max: 0.8,
            busy_interval: Duration::from_millis(100),
        }
    }
}

/// What the tier looks like now (from `FlashTier::reclaimable_sets`, `dirty_fraction`,
/// `lru_dirty_sets`).
#[derive(Debug, Clone, Copy)]
pub struct View<'a> {
    /// Sets holding no dirty block (free or reusable at once).
    pub free_sets: u32,
    pub dirty_fraction: f64,
    /// Sets with dirty blocks, least recently used first.
    pub lru_dirty: &'a [SetId],
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Idle,
    /// Clean these sets (LRU end first) now.
    CleanSets(Vec<SetId>),
    /// No set can take new blocks: send this request to BACKING.
    Bypass,
}

/// The state machine; time is any monotonic clock as a `Duration` since an origin.
#[derive(Debug, Clone)]
pub struct Cleaner {
    cfg: CleanerConfig,
    state: CleanerState,
    last_request: Option<Duration>,
    last_forced: Option<Duration>,
    bypassed: u64,
}

impl Cleaner {
    pub fn new(cfg: CleanerConfig) -> Self {
        Self {
            cfg,
            state: CleanerState::Normal,
            last_request: None,
            last_forced: None,
            bypassed: 0,
        }
    }

    pub fn state(&self) -> CleanerState {
        self.state
    }

    /// Requests told to bypass so far.
    pub fn bypassed(&self) -> u64 {
        self.bypassed
    }

    fn needs(&self, v: &View<'_>) -> bool {
        v.free_sets < self.cfg.free_floor && !v.lru_dirty.is_empty()
    }

    fn batch(&self, v: &View<'_>, n: usize) -> Decision {
        Decision::CleanSets(v.lru_dirty.iter().take(n).copied().collect())
    }

    /// A request arrived at `now`.
    pub fn on_request(&mut self, now: Duration, v: &View<'_>) -> Decision {
        self.last_request = Some(now);
        match self.cfg.mode {
            CleanerMode::Eager => {
                if self.needs(v) {
                    self.batch(v, 1)
                } else {
                    Decision::Idle
                }
            }
            CleanerMode::Idle => {
                if self.state == CleanerState::Writeback
                    || (self.state == CleanerState::Normal && self.needs(v))
                {
                    self.state = CleanerState::Wait;
                }
                if v.free_sets == 0 {
                    self.bypassed += 1;
                    Decision::Bypass
                } else {
                    Decision::Idle
                }
            }
        }
    }

    /// Time passed (the manager ticks often, e.g. every 10 ms, and right after a batch).
    pub fn on_tick(&mut self, now: Duration, v: &View<'_>) -> Decision {
        if self.cfg.mode == CleanerMode::Eager {
            return Decision::Idle;
        }
        if self.state == CleanerState::Normal {
            if !self.needs(v) {
                return Decision::Idle;
            }
            self.state = CleanerState::Wait;
        }
        if self.state == CleanerState::Wait {
            let quiet = self
                .last_request
                .is_none_or(|t| now.saturating_sub(t) >= self.cfg.wait);
            if !quiet {
                return self.valve(now, v);
            }
            self.state = CleanerState::Writeback;
        }
        // Writeback.
        if !self.needs(v) {
            self.state = CleanerState::Normal;
            return Decision::Idle;
        }
        self.batch(v, self.cfg.max_sets_at_once)
    }

    /// Busy, but too dirty: clean at a bounded rate.
    fn valve(&mut self, now: Duration, v: &View<'_>) -> Decision {
        let due = self
            .last_forced
            .is_none_or(|t| now.saturating_sub(t) >= self.cfg.busy_interval);
        if v.dirty_fraction > self.cfg.dirty_max && due && !v.lru_dirty.is_empty() {
            self.last_forced = Some(now);
            return self.batch(v, self.cfg.max_sets_at_once);
        }
        Decision::Idle
    }
}

/// Blocks to write to BACKING in one `pwrite`: same file, contiguous.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CleanRun {
    pub file: FileKey,
    pub first_block: u64,
    pub blocks: Vec<DirtyBlock>,
}

/// Sorts dirty blocks into file/offset order and merges adjacent ones (same file and
/// version) into runs of at most `max_blocks`.
pub fn plan_runs(mut blocks: Vec<DirtyBlock>, max_blocks: usize) -> Vec<CleanRun> {
    blocks.sort_by_key(|d| (d.key.file, d.key.block.0));
    let mut runs: Vec<CleanRun> = Vec::new();
    for d in blocks {
        if let Some(r) = runs.last_mut() {
            let last = r.blocks.last().map(|x| (x.key.block.0, x.version));
            if r.file == d.key.file
                && last == Some((d.key.block.0.wrapping_sub(1), d.version))
                && r.blocks.len() < max_blocks.max(1)
            {
                r.blocks.push(d);
                continue;
            }
        }
        runs.push(CleanRun {
            file: d.key.file,
            first_block: d.key.block.0,
            blocks: vec![d],
        });
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;
    use tiercache_tier::TierKey;

    const S: fn(u64) -> Duration = Duration::from_millis;

    fn idle(floor: u32) -> Cleaner {
        Cleaner::new(CleanerConfig::new(CleanerMode::Idle, floor))
    }
    fn sets(n: u32) -> Vec<SetId> {
        (0..n).map(SetId).collect()
    }
    fn view(free: u32, dirty: f64, lru: &[SetId]) -> View<'_> {
        View {
            free_sets: free,
            dirty_fraction: dirty,
            lru_dirty: lru,
        }
    }

    #[test]
    fn normal_stays_normal_while_free_sets_reach_the_floor() {
        let mut c = idle(10);
        let l = sets(3);
        assert_eq!(c.on_tick(S(0), &view(10, 0.1, &l)), Decision::Idle);
        assert_eq!(c.on_request(S(1), &view(10, 0.1, &l)), Decision::Idle);
        assert_eq!(c.state(), CleanerState::Normal);
    }

    #[test]
    fn normal_stays_normal_below_the_floor_when_nothing_is_dirty() {
        let mut c = idle(10);
        assert_eq!(c.on_tick(S(0), &view(3, 0.0, &[])), Decision::Idle);
        assert_eq!(c.state(), CleanerState::Normal);
    }

    #[test]
    fn request_below_the_floor_moves_normal_to_wait() {
        let mut c = idle(10);
        let l = sets(3);
        assert_eq!(c.on_request(S(0), &view(5, 0.5, &l)), Decision::Idle);
        assert_eq!(c.state(), CleanerState::Wait);
    }

    #[test]
    fn wait_does_not_clean_before_the_quiet_time() {
        let mut c = idle(10);
        let l = sets(3);
        c.on_request(S(0), &view(5, 0.5, &l));
        assert_eq!(c.on_tick(S(999), &view(5, 0.5, &l)), Decision::Idle);
        assert_eq!(c.state(), CleanerState::Wait);
    }

    #[test]
    fn each_request_restarts_the_wait() {
        let mut c = idle(10);
        let l = sets(3);
        c.on_request(S(0), &view(5, 0.5, &l));
        c.on_request(S(900), &view(5, 0.5, &l));
        assert_eq!(c.on_tick(S(1500), &view(5, 0.5, &l)), Decision::Idle);
        assert_eq!(c.state(), CleanerState::Wait);
    }

    #[test]
    fn quiet_wait_moves_to_writeback_and_cleans_four_sets_from_the_lru_end() {
        let mut c = idle(10);
        let l = sets(6);
        c.on_request(S(0), &view(5, 0.5, &l));
        assert_eq!(
            c.on_tick(S(1000), &view(5, 0.5, &l)),
            Decision::CleanSets(sets(4))
        );
        assert_eq!(c.state(), CleanerState::Writeback);
    }

    #[test]
    fn tick_below_the_floor_with_no_request_ever_goes_straight_to_writeback() {
        let mut c = idle(10);
        let l = sets(2);
        assert_eq!(
            c.on_tick(S(0), &view(5, 0.5, &l)),
            Decision::CleanSets(sets(2))
        );
        assert_eq!(c.state(), CleanerState::Writeback);
    }

    #[test]
    fn writeback_continues_until_the_floor_then_returns_to_normal() {
        let mut c = idle(10);
        let l = sets(6);
        c.on_tick(S(0), &view(5, 0.5, &l));
        assert_eq!(
            c.on_tick(S(10), &view(9, 0.4, &l[4..])),
            Decision::CleanSets(vec![SetId(4), SetId(5)])
        );
        assert_eq!(c.on_tick(S(20), &view(10, 0.3, &[])), Decision::Idle);
        assert_eq!(c.state(), CleanerState::Normal);
    }

    #[test]
    fn writeback_ends_when_nothing_dirty_is_left_even_below_the_floor() {
        let mut c = idle(10);
        let l = sets(1);
        c.on_tick(S(0), &view(5, 0.1, &l));
        assert_eq!(c.on_tick(S(5), &view(5, 0.0, &[])), Decision::Idle);
        assert_eq!(c.state(), CleanerState::Normal);
    }

    #[test]
    fn request_interrupts_writeback_and_returns_to_wait() {
        let mut c = idle(10);
        let l = sets(6);
        c.on_tick(S(0), &view(5, 0.5, &l));
        assert_eq!(c.state(), CleanerState::Writeback);
        assert_eq!(c.on_request(S(10), &view(6, 0.5, &l)), Decision::Idle);
        assert_eq!(c.state(), CleanerState::Wait);
        assert_eq!(c.on_tick(S(20), &view(6, 0.5, &l)), Decision::Idle);
    }

    #[test]
    fn no_free_set_makes_requests_bypass_instead_of_cleaning() {
        let mut c = idle(10);
        let l = sets(6);
        assert_eq!(c.on_request(S(0), &view(0, 0.5, &l)), Decision::Bypass);
        assert_eq!(c.bypassed(), 1);
        assert_eq!(c.state(), CleanerState::Wait);
    }

    #[test]
    fn above_dirty_max_cleaning_runs_when_busy_at_a_bounded_rate() {
        let mut c = idle(10);
        let l = sets(6);
        c.on_request(S(0), &view(0, 0.9, &l));
        assert_eq!(
            c.on_tick(S(1), &view(0, 0.9, &l)),
            Decision::CleanSets(sets(4))
        );
        assert_eq!(c.state(), CleanerState::Wait);
        c.on_request(S(2), &view(0, 0.9, &l));
        assert_eq!(c.on_tick(S(50), &view(0, 0.9, &l)), Decision::Idle);
        c.on_request(S(60), &view(0, 0.9, &l));
        assert_eq!(
            c.on_tick(S(101), &view(0, 0.9, &l)),
            Decision::CleanSets(sets(4))
        );
    }

    #[test]
    fn below_dirty_max_busy_wait_does_not_clean() {
        let mut c = idle(10);
        let l = sets(6);
        c.on_request(S(0), &view(2, 0.5, &l));
        assert_eq!(c.on_tick(S(1), &view(2, 0.5, &l)), Decision::Idle);
    }

    #[test]
    fn eager_cleans_the_lru_set_in_the_request_path_below_the_floor() {
        let mut c = Cleaner::new(CleanerConfig::new(CleanerMode::Eager, 10));
        let l = sets(3);
        assert_eq!(
            c.on_request(S(0), &view(5, 0.5, &l)),
            Decision::CleanSets(vec![SetId(0)])
        );
        assert_eq!(c.on_request(S(1), &view(10, 0.5, &l)), Decision::Idle);
        assert_eq!(c.on_tick(S(5000), &view(5, 0.5, &l)), Decision::Idle);
        assert_eq!(c.state(), CleanerState::Normal);
    }

    #[test]
    fn runs_are_in_file_and_offset_order_and_merge_adjacent_blocks() {
        let f = |ino| FileKey {
            dev: 1,
            ino,
            birth: 0,
        };
        let d = |ino, b, v| DirtyBlock {
            key: TierKey::new(f(ino), b),
            version: v,
            seq: 1,
        };
        let runs = plan_runs(
            vec![
                d(2, 5, 1),
                d(1, 3, 1),
                d(1, 1, 1),
                d(1, 2, 1),
                d(2, 6, 1),
                d(2, 7, 9),
                d(1, 4, 1),
            ],
            3,
        );
        let shape: Vec<(u64, u64, usize)> = runs
            .iter()
            .map(|r| (r.file.ino, r.first_block, r.blocks.len()))
            .collect();
        assert_eq!(shape, vec![(1, 1, 3), (1, 4, 1), (2, 5, 2), (2, 7, 1)]);
    }
}
