//! Replays a request stream through a hierarchy and collects the report and time series.
//!
//! The same engine (`tiercache_core::hierarchy`) the live cache is built on; metadata only.
//! `requests_per_second` times the replay loop alone: generation and parsing happen before.
//! Stacks with `remote` tiers route each request through [`crate::remote`]'s sequential-run
//! bypass; stacks without take the plain path, untouched by it. A `flash` tier's index is a
//! [`SetIndex`] (set-mapped, set-level LRU); every other tier's a [`Tier`]; the replay loop
//! does not tell them apart.

use crate::remote::{RemoteCounts, SeqBypass, TierKind};
use crate::report::{ClassReport, Report, TierReport};
use crate::timeseries::WindowRow;
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Instant;
use tiercache_core::hierarchy::{Hierarchy, LevelConfig, Placement};
use tiercache_core::index::TierIndex;
use tiercache_core::partition::PartitionConfig;
use tiercache_core::policy::PolicyKind;
use tiercache_core::setindex::{SetIndex, DEFAULT_SET_BLOCKS};
use tiercache_core::stats::HitCounts;
use tiercache_core::tier::{Tier, TierConfig};
use tiercache_core::ParseError;
use tiercache_core::{Access, Class, CoreError};

/// `NAME:BLOCKS:POLICY[:PLACEMENT]`, one `--tier`. The name gives the kind: `remote` (or
/// `remote2`, …) is a remote tier, `flash` (`flash2`, …) a set-mapped flash tier (POLICY
/// `lru` only: it replaces whole sets), anything else a local one.
#[derive(Debug, Clone, PartialEq)]
pub struct TierSpec {
    pub name: String,
    pub kind: TierKind,
    pub blocks: usize,
    pub policy: PolicyKind,
    pub placement: Placement,
    /// Flash tiers: blocks per set, a power of two (default 256); BLOCKS is rounded down to
    /// whole sets. Ignored by other kinds.
    pub set_blocks: usize,
}

impl FromStr for TierSpec {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parts: Vec<&str> = s.split(':').collect();
        if !(3..=4).contains(&parts.len()) || parts[0].is_empty() {
            return Err(ParseError::invalid_in(
                "tier",
                s,
                "expected NAME:BLOCKS:POLICY[:PLACEMENT]",
            ));
        }
        let blocks = parts[1]
            .parse::<usize>()
            .ok()
            .filter(|&b| b > 0 && b < u32::MAX as usize)
            .ok_or_else(|| {
                ParseError::invalid_in(
                    "tier",
                    s,
                    format!("BLOCKS `{}` must be a positive block count", parts[1]),
                )
            })?;
        let policy = parts[2]
            .parse()
            .map_err(|e| ParseError::part("tier", s, e))?;
        let kind = TierKind::of_name(parts[0]);
        if kind == TierKind::Flash && policy != PolicyKind::Lru {
            return Err(ParseError::invalid_in(
                "tier",
                s,
                "a flash tier replaces whole sets by LRU (paper 001): POLICY must be lru",
            ));
        }
        let placement = match parts.get(3) {
            Some(p) => p.parse().map_err(|e| ParseError::part("tier", s, e))?,
            None => Placement::Inclusive,
        };
        Ok(TierSpec {
            name: parts[0].to_string(),
            kind,
            blocks,
            policy,
            placement,
            set_blocks: DEFAULT_SET_BLOCKS,
        })
    }
}

impl fmt::Display for TierSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}:{}",
            self.name, self.blocks, self.policy, self.placement
        )
    }
}

/// A hierarchy to replay: tiers top first, the partitioner applying to the top tier.
#[derive(Debug, Clone)]
pub struct Setup {
    pub label: String,
    pub tiers: Vec<TierSpec>,
    pub partition: PartitionConfig,
    /// Paper 002's `n` for the remote tiers: reads in a sequential run of at least this many
    /// blocks bypass them (resolved: `auto` was already turned into a number).
    pub remote_threshold: u64,
}

impl Setup {
    /// Bit i set: tier i is remote.
    pub fn remote_mask(&self) -> u32 {
        self.tiers
            .iter()
            .enumerate()
            .filter(|(_, t)| t.kind == TierKind::Remote)
            .fold(0, |m, (i, _)| m | 1 << i)
    }

    /// The tiers' indexes, top first: a [`SetIndex`] for a flash tier, a [`Tier`] otherwise.
    pub fn indexes(&self) -> Result<Vec<Box<dyn TierIndex>>, CoreError> {
        self.levels()
            .iter()
            .zip(&self.tiers)
            .map(|(l, t)| -> Result<Box<dyn TierIndex>, CoreError> {
                Ok(match t.kind {
                    TierKind::Flash => Box::new(SetIndex::new(
                        t.name.clone(),
                        t.blocks,
                        t.set_blocks,
                        t.policy,
                    )?),
                    TierKind::Local | TierKind::Remote => Box::new(Tier::new(&l.tier)?),
                })
            })
            .collect()
    }

    pub fn levels(&self) -> Vec<LevelConfig> {
        self.tiers
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let mut tier = TierConfig::new(t.name.clone(), t.blocks, t.policy);
                if i == 0 {
                    tier.partition = self.partition.clone();
                }
                LevelConfig {
                    tier,
                    placement: t.placement,
                }
            })
            .collect()
    }
}

/// What to collect besides the final report.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReplayOptions {
    /// Record a time-series row every this many requests.
    pub window: Option<u64>,
    /// Draw a progress bar on stderr.
    pub progress: bool,
}

/// A finished replay.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub report: Report,
    pub series: Vec<WindowRow>,
    /// The classes of `WindowRow::classes`, by name (empty with paper 000's two classes).
    pub series_classes: Vec<String>,
}

/// Replays `requests` through a fresh hierarchy built from `setup`.
pub fn replay(
    setup: &Setup,
    requests: &[Access],
    opts: ReplayOptions,
) -> Result<Outcome, CoreError> {
    let mask = setup.remote_mask();
    if mask & 1 != 0 {
        return Err(CoreError::config(
            "tier",
            "a remote tier cannot be the top tier (put a local tier above it)",
        ));
    }
    if setup.tiers.first().map(|t| t.kind) == Some(TierKind::Flash) {
        return Err(CoreError::config(
            "tier",
            "a flash tier cannot be the top tier (put a memory tier above it)",
        ));
    }
    let placement: Vec<Placement> = setup.tiers.iter().map(|t| t.placement).collect();
    let mut h = Hierarchy::with_indexes(setup.indexes()?, &placement)?;
    // Only a stack with remote tiers pays for run tracking.
    let mut seq =
        (mask != 0).then(|| SeqBypass::new(mask, setup.remote_threshold, setup.tiers.len()));
    let bar = opts.progress.then(|| {
        let b = ProgressBar::new(requests.len() as u64);
        b.set_style(
            ProgressStyle::with_template(
                "{msg} {bar:40} {human_pos}/{human_len} requests (eta {eta})",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        b.set_message(setup.label.clone());
        b
    });
    let window = opts.window.unwrap_or(u64::MAX).max(1) as usize;
    // Chunks bound the cost of windows and progress to once per chunk, not per request.
    let chunk = window.min(1 << 16);
    let mut series = Vec::new();
    let classes = series_classes(&h);
    let mut last = Snapshot::of(&h);
    let mut in_window = 0usize;
    let start = Instant::now();
    let mut done = 0;
    let prefetch = h.tiers().iter().any(|t| t.wants_prefetch());
    for part in requests.chunks(chunk) {
        let rest = &requests[done..];
        match &mut seq {
            Some(s) => serve_part(&mut h, s, part, rest, prefetch),
            None => serve_part(&mut h, &mut Direct, part, rest, prefetch),
        }
        done += part.len();
        in_window += part.len();
        if in_window >= window {
            in_window = 0;
            let now = Snapshot::of(&h);
            series.push(now.row_since(&last, &h, &classes));
            last = now;
        }
        if let Some(b) = &bar {
            b.inc(part.len() as u64);
        }
    }
    let secs = start.elapsed().as_secs_f64();
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    Ok(Outcome {
        report: report(setup, &h, secs, seq.map(|s| s.counts)),
        series,
        series_classes: classes.into_iter().map(|(_, n)| n).collect(),
    })
}

/// The classes a time series follows: with more than paper 000's two, every class of the
/// top tier's table but an unused `priority`.
fn series_classes(h: &Hierarchy) -> Vec<(Class, String)> {
    let Some(top) = h.tiers().first() else {
        return Vec::new();
    };
    let table = top.partitioner().classes();
    if table.len() <= 2 {
        return Vec::new();
    }
    table
        .iter()
        .filter(|(c, s)| *c != Class::PRIORITY || s.target.is_some())
        .map(|(c, s)| (c, s.name.clone()))
        .collect()
}

/// How one request goes through the hierarchy.
pub(crate) trait Route {
    fn serve(&mut self, h: &mut Hierarchy, a: Access);
}

/// Straight through: no remote tiers.
struct Direct;

impl Route for Direct {
    #[inline(always)]
    fn serve(&mut self, h: &mut Hierarchy, a: Access) {
        h.access(a);
    }
}

/// Serves `part`, the first requests of `rest`.
#[inline(always)]
fn serve_part<R: Route>(
    h: &mut Hierarchy,
    r: &mut R,
    part: &[Access],
    rest: &[Access],
    prefetch: bool,
) {
    if prefetch {
        for (i, &a) in part.iter().enumerate() {
            // Replay knows what comes next: fetch each big tier's index bucket of the request
            // AHEAD positions on and the slot entry of the one AHEAD / 2 on (whose bucket came
            // in meanwhile), so that memory latency overlaps the requests in between. Tiers
            // too small to gain from it ignore the hints.
            let ahead = rest.get(i + AHEAD);
            let half = rest.get(i + AHEAD / 2);
            for t in h.tiers() {
                if let Some(f) = ahead {
                    t.prefetch(&f.key);
                }
                if let Some(f) = half {
                    t.prefetch_resident(&f.key);
                }
            }
            r.serve(h, a);
        }
    } else {
        for &a in part {
            r.serve(h, a);
        }
    }
}

/// How many requests ahead the replay loop prefetches (see [`replay`]).
const AHEAD: usize = 16;

/// Counters at a window boundary.
struct Snapshot {
    requests: u64,
    top_classes: [HitCounts; tiercache_core::class::MAX_CLASSES],
    tiers: Vec<(u64, u64)>,
}

impl Snapshot {
    fn of(h: &Hierarchy) -> Self {
        let top = h.tiers()[0].stats();
        Snapshot {
            requests: h.requests(),
            top_classes: top.classes,
            tiers: h
                .tiers()
                .iter()
                .map(|t| (t.stats().requests, t.stats().hits))
                .collect(),
        }
    }
    fn row_since(
        &self,
        earlier: &Snapshot,
        h: &Hierarchy,
        classes: &[(Class, String)],
    ) -> WindowRow {
        let class = |c: Class| {
            self.top_classes[c.index()]
                .since(&earlier.top_classes[c.index()])
                .ratio()
        };
        let top = &h.tiers()[0];
        WindowRow {
            request: self.requests,
            h_p: class(Class::PRIORITY),
            h_n: class(Class::NORMAL),
            s_target: top.s_target(),
            s_cur: top.s_cur(),
            tier_hit_ratio: self
                .tiers
                .iter()
                .zip(&earlier.tiers)
                .map(|(&(r, hi), &(r0, h0))| (r > r0).then(|| (hi - h0) as f64 / (r - r0) as f64))
                .collect(),
            classes: classes
                .iter()
                .map(|&(c, _)| (class(c), top.class_blocks(c) as u64))
                .collect(),
        }
    }
}

/// Every class of the top tier's table that had requests or has a target.
fn class_reports(h: &Hierarchy) -> BTreeMap<String, ClassReport> {
    let Some(top) = h.tiers().first() else {
        return BTreeMap::new();
    };
    let part = top.partitioner();
    part.classes()
        .iter()
        .filter(|(c, spec)| spec.target.is_some() || h.class(*c).requests() > 0)
        .map(|(c, spec)| {
            let hc = h.class(c);
            let pool = part.pool_of(c);
            let report = ClassReport {
                requests: hc.requests(),
                hits: hc.hits,
                hit_ratio: hc.ratio(),
                target_reachable: part.target_reachable(c),
                target: spec.target,
                target_blocks: part.target_blocks(c),
                blocks: top.class_blocks(c) as u64,
                pool_target: (pool.class() == c).then(|| part.target(pool)).flatten(),
            };
            (spec.name.clone(), report)
        })
        .collect()
}

fn report(setup: &Setup, h: &Hierarchy, secs: f64, remote: Option<RemoteCounts>) -> Report {
    let tiers = h
        .tiers()
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let s = t.stats();
            let partitioned =
                i == 0 && t.partitioner().kind() != tiercache_core::partition::PartitionKind::None;
            let is_remote = setup.tiers[i].kind == TierKind::Remote;
            let count = |v: Option<&Vec<u64>>| {
                is_remote.then(|| v.and_then(|v| v.get(i).copied()).unwrap_or(0))
            };
            let sets = t.set_stats();
            TierReport {
                name: t.name().to_string(),
                kind: setup.tiers[i].kind.to_string(),
                capacity_blocks: t.capacity() as u64,
                policy: t.policy().to_string(),
                placement: h.placement(i).to_string(),
                requests: s.requests,
                hits: s.hits,
                hit_ratio: s.hit_ratio(),
                duplication: s.duplication(),
                demotions: s.demotions,
                promotions: s.promotions,
                partition: (i == 0).then(|| t.partitioner().kind().to_string()),
                s_target: if partitioned { t.s_target() } else { None },
                s_cur: partitioned.then(|| t.s_cur()),
                threshold: is_remote.then_some(setup.remote_threshold),
                bypassed: count(remote.as_ref().map(|r| &r.bypassed)),
                invalidations: count(remote.as_ref().map(|r| &r.invalidations)),
                set_blocks: sets.map(|s| s.set_blocks),
                sets: sets.map(|s| s.sets),
                set_evictions: sets.map(|s| s.set_evictions),
                ram_bytes_per_block: sets.map(|s| s.ram_bytes_per_block),
            }
        })
        .collect();
    let classes = class_reports(h);
    Report {
        label: setup.label.clone(),
        requests: h.requests(),
        overall_hit_ratio: h.hit_ratio(),
        requests_per_second: if secs > 0.0 {
            h.requests() as f64 / secs
        } else {
            0.0
        },
        tiers,
        classes,
    }
}
