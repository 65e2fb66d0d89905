//! `tiercache bench …`: the measurements README quotes, side by side in one run.
//!
//! `bench sim`: metadata-only replay speed of the engine: single-tier LRU, dirprio and a
//! two-tier exclusive hierarchy on the same 10^7-request zipf stream (one core).

use super::progress;
use clap::{Args, Subcommand};
use serde::Serialize;
use tiercache_core::partition::{DirprioParams, PartitionConfig, PartitionKind};
use tiercache_core::seqrun::Threshold;
use tiercache_sim::replay::{replay, ReplayOptions, Setup, TierSpec};
use tiercache_sim::workload::{generate, StreamSpec};

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Engine replay speed (requests/s): LRU vs dirprio vs two tiers.
    Sim(SimBenchArgs),
    /// fio through tiercache vs bindfs vs the native directory (needs fio, bindfs, root).
    Fuse(crate::bench::fuse::FuseBenchArgs),
    /// Walk of a big tree (list + stat) through tiercache vs bindfs vs native, cold and warm.
    Meta(crate::bench::meta::MetaBenchArgs),
    /// Paper 002: random and sequential reads behind the HDD model, with and without a
    /// remote-memory tier on loopback memcached (needs memcached, root).
    Remote(crate::bench::remote::RemoteBenchArgs),
    /// Paper 001: sequential and random writes and reads behind the HDD model with an SSD tier
    /// (idle vs eager cleaning), without one, and on the raw device (needs root).
    Flash(crate::bench::flash::FlashBenchArgs),
    /// Paper 003: the zero-copy client vs pread on the mount vs native, Figs. 2–5.
    Zerocopy(crate::bench::zerocopy::ZeroCopyBenchArgs),
    /// Issue 20: N classes sized by `mrc` (miss-ratio curves) vs N-class `dirprio`, in the
    /// simulator: targets met, blocks vs the offline optimum, best-effort hits, sampling cost.
    Classes(crate::bench::classes::ClassesBenchArgs),
    /// Paper 000's web scenario: nginx serving priority pages while tar backups stream, behind
    /// the HDD model; tiercache vs one LRU vs the kernel page cache (needs nginx, wrk, root).
    Web(crate::bench::web::WebBenchArgs),
}

#[derive(Args, Debug)]
pub struct SimBenchArgs {
    /// Requests per scenario.
    #[arg(long, default_value_t = 10_000_000)]
    pub requests: usize,
    /// Blocks in the top tier (the workload spans ten times as many).
    #[arg(long, default_value_t = 10_000)]
    pub cache_blocks: usize,
    /// Replays per scenario; the median rate is reported (the machine may be shared).
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize, Debug)]
struct SimBench {
    requests: usize,
    cache_blocks: usize,
    workload: String,
    lru_rps: f64,
    dirprio_rps: f64,
    two_tier_rps: f64,
    dirprio_vs_lru: f64,
    two_tier_vs_lru: f64,
    lru_hit_ratio: f64,
}

pub fn run(cmd: BenchCommand) -> Result<(), String> {
    match cmd {
        BenchCommand::Sim(a) => sim(a),
        BenchCommand::Fuse(a) => crate::bench::fuse::run(a).map_err(line),
        BenchCommand::Meta(a) => crate::bench::meta::run(a).map_err(line),
        BenchCommand::Remote(a) => crate::bench::remote::run(a).map_err(line),
        BenchCommand::Flash(a) => crate::bench::flash::run(a).map_err(line),
        BenchCommand::Zerocopy(a) => crate::bench::zerocopy::run(a).map_err(line),
        BenchCommand::Web(a) => crate::bench::web::run(a).map_err(line),
        BenchCommand::Classes(a) => crate::bench::classes::run(a).map_err(line),
    }
}

/// A scenario's error as the CLI's one line.
fn line(e: crate::bench::BenchError) -> String {
    e.to_string()
}

fn sim(a: SimBenchArgs) -> Result<(), String> {
    if a.cache_blocks == 0 || a.requests == 0 || a.repeat == 0 {
        return Err("--cache-blocks, --requests and --repeat must be positive".into());
    }
    let universe = a.cache_blocks * 10;
    let specs: Vec<StreamSpec> = [
        format!(
            "zipf:blocks={},alpha=0.9,class=priority,weight=1",
            universe / 2
        ),
        format!("zipf:blocks={},alpha=0.9,weight=3", universe / 2),
    ]
    .iter()
    .map(|s| s.parse::<StreamSpec>())
    .collect::<Result<_, _>>()
    .map_err(|e| e.to_string())?;
    let requests = generate(&specs, a.requests, 7).map_err(|e| e.to_string())?;
    let setups = sim_setups(a.cache_blocks)?;
    let (rps, lru_hit) = sim_medians(&a, &setups, &requests)?;
    let r = SimBench {
        requests: a.requests,
        cache_blocks: a.cache_blocks,
        workload: specs
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join(" + "),
        lru_rps: rps[0],
        dirprio_rps: rps[1],
        two_tier_rps: rps[2],
        dirprio_vs_lru: rps[1] / rps[0],
        two_tier_vs_lru: rps[2] / rps[0],
        lru_hit_ratio: lru_hit,
    };
    print_sim(&r, &a)
}

/// The three set-ups compared: single-tier LRU, dirprio, and two tiers (the lower exclusive).
fn sim_setups(cache_blocks: usize) -> Result<[Setup; 3], String> {
    let tier = |name: &str, blocks: usize, placement: &str| -> Result<TierSpec, String> {
        format!("{name}:{blocks}:lru:{placement}")
            .parse()
            .map_err(|e: tiercache_core::ParseError| e.to_string())
    };
    let none = PartitionConfig::none();
    let dirprio = PartitionConfig {
        kind: PartitionKind::Dirprio,
        params: DirprioParams::guidance(cache_blocks as u64, true).into(),
    };
    Ok([
        Setup {
            label: "lru".into(),
            tiers: vec![tier("mem", cache_blocks, "inclusive")?],
            partition: none.clone(),
            remote_threshold: Threshold::DEFAULT,
        },
        Setup {
            label: "dirprio".into(),
            tiers: vec![tier("mem", cache_blocks, "inclusive")?],
            partition: dirprio,
            remote_threshold: Threshold::DEFAULT,
        },
        Setup {
            label: "two-tier".into(),
            tiers: vec![
                tier("mem", cache_blocks, "inclusive")?,
                tier("lower", cache_blocks * 4, "exclusive")?,
            ],
            partition: none,
            remote_threshold: Threshold::DEFAULT,
        },
    ])
}

/// Each set-up's median requests per second over `a.repeat` replays, and LRU's hit ratio.
fn sim_medians(
    a: &SimBenchArgs,
    setups: &[Setup],
    requests: &[tiercache_core::Access],
) -> Result<(Vec<f64>, f64), String> {
    let mut rps = Vec::new();
    let mut lru_hit = 0.0;
    let bar = progress::steps((setups.len() * a.repeat) as u64, a.json);
    for s in setups {
        let mut runs = Vec::with_capacity(a.repeat);
        for i in 0..a.repeat {
            progress::step(&bar, format!("{} replay {}/{}", s.label, i + 1, a.repeat));
            let o = replay(s, requests, ReplayOptions::default()).map_err(|e| e.to_string())?;
            progress::done(&bar);
            if s.label == "lru" {
                lru_hit = o.report.overall_hit_ratio;
            }
            runs.push(o.report.requests_per_second);
        }
        runs.sort_by(f64::total_cmp);
        rps.push(runs[runs.len() / 2]);
    }
    progress::finish(bar);
    Ok((rps, lru_hit))
}

/// Prints the result: JSON with `--json`, else one line per set-up.
fn print_sim(r: &SimBench, a: &SimBenchArgs) -> Result<(), String> {
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(r).map_err(|e| e.to_string())?
        );
    } else {
        println!(
            "{} requests, top tier {} blocks, median of {} replays, workload {}",
            r.requests, r.cache_blocks, a.repeat, r.workload
        );
        println!(
            "single-tier LRU   {:>8.1} M requests/s  (hit ratio {:.4})",
            r.lru_rps / 1e6,
            r.lru_hit_ratio
        );
        println!(
            "dirprio           {:>8.1} M requests/s  ({:.2}× LRU)",
            r.dirprio_rps / 1e6,
            r.dirprio_vs_lru
        );
        println!(
            "two tiers (excl.) {:>8.1} M requests/s  ({:.2}× LRU)",
            r.two_tier_rps / 1e6,
            r.two_tier_vs_lru
        );
    }
    Ok(())
}
