//! `tiercache sim`: replay workloads or traces, print a table or JSON, write series and plots.

use super::partition_flags::{ClassFlag, PartitionFlags};
use clap::Args;
use std::fs::File;
use std::io::{BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};
use tiercache_core::partition::PartitionKind;
use tiercache_core::partition::{Amount, ClassSpec, ClassTable};
use tiercache_core::policy::PolicyKind;
use tiercache_core::seqrun::Threshold;
use tiercache_core::setindex::{DEFAULT_SET_BLOCKS, MAX_SET_BLOCKS};
use tiercache_core::{Access, BlockSize};
use tiercache_sim::remote::{CostModel, TierKind};
use tiercache_sim::replay::{replay, Outcome, ReplayOptions, Setup, TierSpec};
use tiercache_sim::report::{compare_table, single_table};
use tiercache_sim::timeseries::write_csv;
use tiercache_sim::trace::{read_trace, TraceFormat, TraceOptions};
use tiercache_sim::workload::{generate, resolve_classes, StreamSpec};

#[derive(Args, Debug)]
pub struct SimArgs {
    /// A synthetic stream KIND:key=value,... (uniform|zipf|exponential|loop|scan; keys blocks,
    /// class, weight, file, alpha, mean, from, until — the fractions of the run it is active
    /// in, for a phase change). Repeatable: streams interleave at random by weight.
    #[arg(long = "workload", value_name = "SPEC")]
    pub workloads: Vec<StreamSpec>,
    /// Replay a block trace instead of a workload.
    #[arg(long, value_name = "PATH", conflicts_with = "workloads")]
    pub trace: Option<PathBuf>,
    /// Trace format: csv (libCacheSim), msr (MSR Cambridge), oracle-general (libCacheSim binary,
    /// plain or .zst). Default: oracle-general for .bin/.zst, else csv.
    #[arg(long, value_name = "FORMAT")]
    pub format: Option<TraceFormat>,
    /// Block size for byte-addressed traces (msr), a power of two.
    #[arg(long, value_name = "BYTES", default_value = "4096")]
    pub block_size: u64,
    /// Requests to generate (workloads) or to read at most (traces).
    #[arg(long, value_name = "N")]
    pub requests: Option<usize>,
    /// Seed of the workload generator.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// A tier, top first (policy lru|fifo|clock|sieve|s3fifo|arc,
    /// placement inclusive|exclusive|pinned[=FIRST]). Default: one tier mem:1000:lru. The name
    /// `remote` (`remote2`, …) makes a remote tier (paper 002): not the top tier; sequential
    /// runs and writes bypass it. The name `flash` (`flash2`, …) makes a set-mapped flash tier
    /// (paper 001): not the top tier; POLICY lru (whole sets are replaced, LRU first); BLOCKS
    /// rounded down to whole sets.
    #[arg(long = "tier", value_name = "NAME:BLOCKS:POLICY[:PLACEMENT]")]
    pub tiers: Vec<TierSpec>,
    /// Flash tiers: blocks per set, a power of two up to 65536 [default: 256, 1 MiB of 4 KiB
    /// blocks]. A backing set (file, block index / N) maps to one cache set.
    #[arg(long, value_name = "N")]
    pub flash_set_blocks: Option<usize>,
    /// Remote tiers: reads in a sequential run of at least N blocks bypass them [default: 32];
    /// `auto` chooses N from --remote-model.
    #[arg(long, value_name = "N|auto")]
    pub remote_threshold: Option<Threshold>,
    /// The cost model --remote-threshold auto minimises over (a model, nothing is measured):
    /// BACKING positioning in ms, BACKING streaming in MB/s, remote time per block in ms
    /// [default: 12,150,0.25: `--emulate hdd`'s disk, a 0.25 ms remote round trip].
    #[arg(long, value_name = "SEEK_MS,MB_PER_S,REMOTE_MS")]
    pub remote_model: Option<CostModel>,
    /// Partitioner of the top tier and its parameters.
    #[command(flatten)]
    pub part: PartitionFlags,
    /// A class of the top tier, NAME::TARGET with optional :min=N and :max=N (TARGET a
    /// hit-ratio fraction, empty for best effort; N blocks or P% of the top tier). Repeatable; workloads name
    /// classes with `class=NAME`. Without any: paper 000's `priority` and `normal`.
    #[arg(long = "class", value_name = "NAME::TARGET")]
    pub classes: Vec<ClassFlag>,
    /// Replay the same requests under several partitioners or policies, e.g. none,basic,dirprio
    /// or lru,arc,s3fifo (a policy applies to every tier but flash tiers, which stay lru).
    #[arg(long, value_name = "A,B,...", value_delimiter = ',')]
    pub compare: Vec<String>,
    /// Print JSON (an array with --compare).
    #[arg(long)]
    pub json: bool,
    /// Write per-window rows to a CSV file (one per setup with --compare: NAME-SETUP.csv).
    #[arg(long, value_name = "FILE.csv")]
    pub timeseries: Option<PathBuf>,
    /// Draw hit ratios and pool sizes over time to a PNG (one per setup with --compare).
    #[arg(long, value_name = "FILE.png")]
    pub plot: Option<PathBuf>,
    /// Window length of the time series in requests (default: ω, else the top tier's capacity).
    #[arg(long, value_name = "N")]
    pub window: Option<u64>,
    /// Write each class's LRU miss-ratio curve to a CSV file (FILE.png: a plot): the exact curve and SHARDS'
    /// fixed-memory estimate as `mrc` makes it (starting at 1,000 / the top tier's blocks, between 0.1 %
    /// and 25 %, lower once more than 8,192 blocks per class are tracked), at every
    /// 1/100 of 4× the top tier's capacity; each class's accesses, final sampling rate and mean
    /// absolute error go to stderr.
    #[arg(long, value_name = "FILE.csv")]
    pub curves: Option<PathBuf>,
}

const DEFAULT_REQUESTS: usize = 1_000_000;

pub fn run(args: SimArgs) -> Result<(), String> {
    // Setups first: a bad --tier fails before a big trace is read.
    let setups = setups(&args)?;
    let requests = load_requests(&args, &setups[0].partition.params.classes)?;
    let top_capacity = setups[0].tiers[0].blocks as u64;
    let want_series = args.timeseries.is_some() || args.plot.is_some();
    let window = args
        .window
        .or(args.part.omega)
        .unwrap_or(top_capacity)
        .max(1);
    if args.window == Some(0) {
        return Err("--window: must be at least 1".into());
    }
    let opts = ReplayOptions {
        window: want_series.then_some(window),
        progress: std::io::stderr().is_terminal(),
    };
    let mut outcomes = Vec::with_capacity(setups.len());
    for s in &setups {
        outcomes.push(replay(s, &requests, opts).map_err(|e| format!("{}: {e}", s.label))?);
    }
    for o in &outcomes {
        write_series(&args, o, outcomes.len() > 1)?;
    }
    if let Some(p) = &args.curves {
        write_curves(
            p,
            &requests,
            top_capacity,
            &setups[0].partition.params.classes,
        )?;
    }
    let out = std::io::stdout();
    let mut out = out.lock();
    let reports: Vec<_> = outcomes.iter().map(|o| &o.report).collect();
    let text = if args.json {
        let v = if args.compare.is_empty() {
            serde_json::to_string_pretty(reports[0])
        } else {
            serde_json::to_string_pretty(&reports)
        };
        v.map_err(|e| format!("JSON: {e}"))? + "\n"
    } else if args.compare.is_empty() {
        single_table(reports[0])
    } else {
        compare_table(
            &outcomes
                .iter()
                .map(|o| o.report.clone())
                .collect::<Vec<_>>(),
        )
    };
    out.write_all(text.as_bytes())
        .map_err(|e| format!("stdout: {e}"))
}

fn load_requests(args: &SimArgs, classes: &ClassTable) -> Result<Vec<Access>, String> {
    if let Some(path) = &args.trace {
        let format = args.format.unwrap_or_else(|| {
            let name = path.to_string_lossy();
            if name.ends_with(".bin") || name.ends_with(".zst") {
                TraceFormat::OracleGeneral
            } else {
                TraceFormat::Csv
            }
        });
        let block_size = BlockSize::new(args.block_size).ok_or_else(|| {
            format!(
                "--block-size: {} is not a power of two in 512..1MiB",
                args.block_size
            )
        })?;
        let opts = TraceOptions {
            block_size,
            limit: args.requests,
        };
        let reqs = read_trace(path, format, &opts).map_err(|e| e.to_string())?;
        if reqs.is_empty() {
            return Err(format!("{}: the trace holds no requests", path.display()));
        }
        Ok(reqs)
    } else {
        if args.format.is_some() {
            return Err("--format: only applies with --trace".into());
        }
        let n = args.requests.unwrap_or(DEFAULT_REQUESTS);
        fits_in_memory(n)?;
        let mut streams = args.workloads.clone();
        resolve_classes(&mut streams, classes).map_err(|e| format!("--workload: {e}"))?;
        generate(&streams, n, args.seed).map_err(|e| format!("--workload: {e}"))
    }
}

/// The request stream is held in memory (so `--compare` replays the very same one): refuse a
/// count whose stream would not fit in half of the memory available now.
fn fits_in_memory(requests: usize) -> Result<(), String> {
    check_memory(
        "--requests",
        requests as u64 * std::mem::size_of::<Access>() as u64,
    )
}

/// Metadata bytes per cached block, generously (slot, two pool nodes, map bucket, ghosts).
const BYTES_PER_BLOCK: u64 = 160;

/// Errors naming `flag` when `need` bytes exceed half of MemAvailable.
fn check_memory(flag: &str, need: u64) -> Result<(), String> {
    let avail = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        m.lines()
            .find(|l| l.starts_with("MemAvailable:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<u64>().ok())
            .map(|kb| kb * 1024)
    });
    match avail {
        Some(a) if need > a / 2 => Err(format!(
            "{flag}: needs {} MiB of memory, more than half of the {} MiB available",
            need >> 20,
            a >> 20
        )),
        _ => Ok(()),
    }
}

/// The base setup, then one per `--compare` item.
fn setups(args: &SimArgs) -> Result<Vec<Setup>, String> {
    let mut tiers = if args.tiers.is_empty() {
        vec!["mem:1000:lru"
            .parse::<TierSpec>()
            .map_err(|e| e.to_string())?]
    } else {
        args.tiers.clone()
    };
    flash_geometry(args, &mut tiers)?;
    let blocks: u64 = tiers.iter().map(|t| t.blocks as u64).sum();
    check_memory("--tier", blocks * BYTES_PER_BLOCK)?;
    let mut names: Vec<&str> = tiers.iter().map(|t| t.name.as_str()).collect();
    names.sort_unstable();
    if names.windows(2).any(|w| w[0] == w[1]) {
        return Err("--tier: tier names must be distinct".into());
    }
    let remote_threshold = remote_threshold(args, &tiers)?;
    let partition = args.part.resolve_classes(
        &PartitionFlags::default(),
        PartitionKind::None,
        tiers[0].blocks as u64,
        &class_specs(&args.classes)?,
        args.workloads.iter().any(|w| w.class_name == "priority"),
    )?;
    let base = Setup {
        label: partition.kind.to_string(),
        tiers,
        partition,
        remote_threshold,
    };
    if args.compare.is_empty() {
        return Ok(vec![base]);
    }
    args.compare
        .iter()
        .map(|item| {
            let mut s = base.clone();
            s.label = item.clone();
            if let Ok(kind) = item.parse::<PartitionKind>() {
                s.partition.kind = kind;
            } else if let Ok(policy) = item.parse::<PolicyKind>() {
                // A flash tier's replacement is set-level LRU whatever the others run.
                for t in s.tiers.iter_mut().filter(|t| t.kind != TierKind::Flash) {
                    t.policy = policy;
                }
            } else {
                return Err(format!(
                    "--compare: `{item}` is neither a partitioner (none|basic|dirprio|static|mrc) nor a policy (lru|fifo|clock|sieve|s3fifo|arc)"
                ));
            }
            Ok(s)
        })
        .collect()
}

/// The `--class` flags as class specs: no directories in a simulation, bounds in blocks or
/// percentages of the top tier.
pub fn class_specs(flags: &[ClassFlag]) -> Result<Vec<ClassSpec>, String> {
    flags
        .iter()
        .map(|f| {
            if !f.dirs.is_empty() {
                return Err(format!(
                    "--class {}: a simulation has no directories; write {}::TARGET",
                    f.name, f.name
                ));
            }
            f.spec(|v| v.parse::<Amount>().map_err(|e| e.to_string()))
                .map_err(|e| format!("--class {}: {e}", f.name))
        })
        .collect()
}

/// Applies `--flash-set-blocks` to the flash tiers and checks their geometry (at least one
/// whole set each); refuses a flash top tier and the flag without a flash tier.
fn flash_geometry(args: &SimArgs, tiers: &mut [TierSpec]) -> Result<(), String> {
    if tiers.first().is_some_and(|t| t.kind == TierKind::Flash) {
        return Err(format!(
            "--tier {}: a flash tier cannot be the top tier (put a memory tier such as mem:1000:lru first)",
            tiers[0]
        ));
    }
    let any_flash = tiers.iter().any(|t| t.kind == TierKind::Flash);
    if args.flash_set_blocks.is_some() && !any_flash {
        return Err("--flash-set-blocks: applies to a flash tier (--tier flash:BLOCKS:lru)".into());
    }
    let n = args.flash_set_blocks.unwrap_or(DEFAULT_SET_BLOCKS);
    if !n.is_power_of_two() || n > MAX_SET_BLOCKS {
        return Err(format!(
            "--flash-set-blocks: {n} is not a power of two in 1..={MAX_SET_BLOCKS}"
        ));
    }
    for t in tiers.iter_mut().filter(|t| t.kind == TierKind::Flash) {
        t.set_blocks = n;
        if t.blocks < n {
            return Err(format!(
                "--tier {t}: {} blocks is less than one set of {n} blocks (see --flash-set-blocks)",
                t.blocks
            ));
        }
    }
    Ok(())
}

/// Paper 002's `n` for the remote tiers; refuses a remote top tier and remote flags without a
/// remote tier.
fn remote_threshold(args: &SimArgs, tiers: &[TierSpec]) -> Result<u64, String> {
    let any_remote = tiers.iter().any(|t| t.kind == TierKind::Remote);
    if tiers.first().is_some_and(|t| t.kind == TierKind::Remote) {
        return Err(format!(
            "--tier {}: a remote tier cannot be the top tier (put a local tier such as mem:1000:lru first)",
            tiers[0]
        ));
    }
    if !any_remote && (args.remote_threshold.is_some() || args.remote_model.is_some()) {
        return Err(
            "--remote-threshold/--remote-model: apply to a remote tier (--tier remote:BLOCKS:POLICY)"
                .into(),
        );
    }
    let threshold = args.remote_threshold.unwrap_or_default();
    if args.remote_model.is_some() && threshold != Threshold::Auto {
        return Err("--remote-model: only used with --remote-threshold auto".into());
    }
    let model = args.remote_model.unwrap_or_default();
    let n = model.resolve(threshold, args.block_size);
    if threshold == Threshold::Auto {
        // On stderr: stdout may be the JSON document (which carries `threshold`).
        eprintln!(
            "tiercache: --remote-threshold auto: n = {n} blocks, from the cost model {model} \
             (BACKING positioning ms, MB/s, remote ms per block; a model, not a measurement)"
        );
    }
    Ok(n)
}

/// `dir/name.ext` → `dir/name-label.ext` when several setups share one flag.
fn per_setup(path: &Path, label: &str, many: bool) -> PathBuf {
    if !many {
        return path.to_path_buf();
    }
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let ext = path
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy()))
        .unwrap_or_default();
    path.with_file_name(format!("{stem}-{label}{ext}"))
}

/// `--curves`: the classes' curves up to 4× the top tier's capacity, to `path`.
/// A path ending in `.png` gets a plot, anything else the CSV.
fn write_curves(
    path: &Path,
    requests: &[Access],
    top_capacity: u64,
    table: &ClassTable,
) -> Result<(), String> {
    use tiercache_sim::curves;
    let max_blocks = 4 * top_capacity.max(1);
    let bucket = (max_blocks / 100).max(1);
    let cs = curves::class_curves(requests, bucket, max_blocks, top_capacity);
    let name = |c: tiercache_core::Class| table.name(c).to_string();
    if path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("png"))
    {
        tiercache_sim::plot::plot_curves(path, &cs, max_blocks, &name)
            .map_err(|e| format!("--curves {e}"))?;
    } else {
        let f = File::create(path).map_err(|e| format!("--curves {}: {e}", path.display()))?;
        let mut w = BufWriter::new(f);
        curves::write_csv(&mut w, &cs, max_blocks, &name)
            .and_then(|_| w.flush())
            .map_err(|e| format!("--curves {}: {e}", path.display()))?;
    }
    for c in &cs {
        // On stderr: stdout may be the JSON document.
        eprintln!(
            "tiercache: {} curve: {} accesses, sampling rate {:.3} %, mean absolute error {:.4}",
            name(c.class),
            c.accesses,
            100.0 * c.rate,
            c.error
        );
    }
    eprintln!("tiercache: wrote {}", path.display());
    Ok(())
}

fn write_series(args: &SimArgs, o: &Outcome, many: bool) -> Result<(), String> {
    let names: Vec<String> = o.report.tiers.iter().map(|t| t.name.clone()).collect();
    if let Some(p) = &args.timeseries {
        let p = per_setup(p, &o.report.label, many);
        let f = File::create(&p).map_err(|e| format!("--timeseries {}: {e}", p.display()))?;
        let mut w = BufWriter::new(f);
        write_csv(&mut w, &names, &o.series_classes, &o.series)
            .and_then(|_| w.flush())
            .map_err(|e| format!("--timeseries {}: {e}", p.display()))?;
    }
    if let Some(p) = &args.plot {
        let p = per_setup(p, &o.report.label, many);
        let title = format!(
            "tiercache sim: {} ({} requests)",
            o.report.label, o.report.requests
        );
        tiercache_sim::plot::plot_png(&p, &title, &names, &o.series_classes, &o.series)
            .map_err(|e| format!("--plot {e}"))?;
        // On stderr: stdout may be the JSON document.
        eprintln!("tiercache: wrote {}", p.display());
    }
    Ok(())
}
