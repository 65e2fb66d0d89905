//! The `--json` report (field names are a contract: other tools read them) and text tables.

use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One replay's results.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Report {
    /// The setup's name in a comparison (`lru`, `dirprio`, …).
    pub label: String,
    pub requests: u64,
    pub overall_hit_ratio: f64,
    /// Replay loop only, excluding generation and parsing.
    pub requests_per_second: f64,
    /// Top first.
    pub tiers: Vec<TierReport>,
    /// Keyed by class name (`priority`, `normal`, and the table's); a hit in any tier counts.
    /// A class with no requests and no target (an unused `priority`) is left out.
    pub classes: BTreeMap<String, ClassReport>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TierReport {
    pub name: String,
    /// `local`, `remote` or `flash`.
    pub kind: String,
    pub capacity_blocks: u64,
    pub policy: String,
    pub placement: String,
    pub requests: u64,
    pub hits: u64,
    pub hit_ratio: f64,
    pub duplication: f64,
    pub demotions: u64,
    pub promotions: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    /// Final protected-pool target and size, for a partitioned tier.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub s_target: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub s_cur: Option<u64>,
    /// Remote tiers: paper 002's `n` (runs of at least `n` blocks bypass the tier).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threshold: Option<u64>,
    /// Remote tiers: reads in such a run that missed every tier above and skipped this one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bypassed: Option<u64>,
    /// Remote tiers: writes that removed this tier's (now stale) copy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub invalidations: Option<u64>,
    /// Flash tiers: blocks per set, cache sets, sets reused for another backing set, and index
    /// RAM per block as paper 001 counts it (valid + dirty bitmap + tag per set).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub set_blocks: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sets: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub set_evictions: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ram_bytes_per_block: Option<f64>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ClassReport {
    pub requests: u64,
    pub hits: u64,
    /// `null` when the class had no requests.
    pub hit_ratio: Option<f64>,
    /// Whether the class's hit-ratio target can be met, as the top tier's partitioner judges
    /// it (`mrc`: from the class's miss-ratio curve); `null` when it cannot tell.
    pub target_reachable: Option<bool>,
    /// The class's hit-ratio target, `null` for best effort.
    pub target: Option<f64>,
    /// Its blocks in the top tier at the end.
    pub blocks: u64,
    /// The blocks the top tier's partitioner set aside to meet the class's target (`mrc`: from
    /// its curve, before leftovers); `null` when it does not tell.
    pub target_blocks: Option<u64>,
    /// The top tier's target for the class's own pool, in blocks (`null`: none, or the class
    /// shares the rest pool).
    pub pool_target: Option<u64>,
}

fn class_ratio(r: &Report, class: &str) -> String {
    match r.classes.get(class) {
        Some(ClassReport {
            hit_ratio: Some(r), ..
        }) => format!("{r:.4}"),
        _ => "-".into(),
    }
}

/// A human-readable account of one run.
pub fn single_table(r: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} requests, overall hit ratio {:.4}, {:.1} M requests/s",
        r.requests,
        r.overall_hit_ratio,
        r.requests_per_second / 1e6
    );
    let _ = writeln!(
        s,
        "{:<10} {:>10} {:<7} {:<10} {:>10} {:>10} {:>8} {:>8} {:>9} {:>10}",
        "tier",
        "blocks",
        "policy",
        "placement",
        "requests",
        "hits",
        "hit",
        "dup",
        "demoted",
        "promoted"
    );
    for t in &r.tiers {
        let _ = writeln!(
            s,
            "{:<10} {:>10} {:<7} {:<10} {:>10} {:>10} {:>8.4} {:>8.4} {:>9} {:>10}",
            t.name,
            t.capacity_blocks,
            t.policy,
            t.placement,
            t.requests,
            t.hits,
            t.hit_ratio,
            t.duplication,
            t.demotions,
            t.promotions
        );
        if let (Some(p), Some(st), Some(sc)) = (&t.partition, t.s_target, t.s_cur) {
            let _ = writeln!(s, "{:<10} partition {p}: s_target {st}, s_cur {sc}", "");
        }
        if let (Some(n), Some(b), Some(inv)) = (t.threshold, t.bypassed, t.invalidations) {
            let _ = writeln!(
                s,
                "{:<10} remote: threshold {n} blocks, bypassed {b}, invalidated {inv}",
                ""
            );
        }
        if let (Some(sb), Some(n), Some(ev), Some(ram)) =
            (t.set_blocks, t.sets, t.set_evictions, t.ram_bytes_per_block)
        {
            let _ = writeln!(
                s,
                "{:<10} flash: {n} sets of {sb} blocks, {ev} sets reused, {ram:.4} B RAM/block",
                ""
            );
        }
    }
    for (name, c) in &r.classes {
        if let Some(ratio) = c.hit_ratio {
            let _ = write!(
                s,
                "class {name:<8} {:>10} requests, hit ratio {ratio:.4}, {} blocks",
                c.requests, c.blocks
            );
            if let Some(t) = c.target {
                let _ = write!(s, ", target {t}");
            }
            if c.target_reachable == Some(false) {
                let _ = write!(s, " (unreachable)");
            }
            let _ = writeln!(s);
        }
    }
    s
}

/// One row per setup, side by side.
pub fn compare_table(runs: &[Report]) -> String {
    let mut s = String::new();
    let tier_names: Vec<String> = runs
        .first()
        .map(|r| r.tiers.iter().map(|t| t.name.clone()).collect())
        .unwrap_or_default();
    let class_names: Vec<String> = runs
        .first()
        .map(|r| r.classes.keys().cloned().collect())
        .unwrap_or_default();
    let _ = write!(s, "{:<12} {:>9}", "setup", "overall");
    for n in &class_names {
        let _ = write!(s, " {:>9}", n);
    }
    for n in &tier_names {
        let _ = write!(s, " {:>9}", format!("{n}.hit"));
    }
    let _ = writeln!(s, " {:>9} {:>9} {:>10}", "s_target", "s_cur", "Mreq/s");
    for r in runs {
        let _ = write!(s, "{:<12} {:>9.4}", r.label, r.overall_hit_ratio);
        for n in &class_names {
            let _ = write!(s, " {:>9}", class_ratio(r, n));
        }
        for t in &r.tiers {
            let _ = write!(s, " {:>9.4}", t.hit_ratio);
        }
        let top = r.tiers.first();
        let opt = |v: Option<u64>| v.map_or("-".to_string(), |x| x.to_string());
        let _ = writeln!(
            s,
            " {:>9} {:>9} {:>10.1}",
            opt(top.and_then(|t| t.s_target)),
            opt(top.and_then(|t| t.s_cur)),
            r.requests_per_second / 1e6
        );
    }
    s
}
