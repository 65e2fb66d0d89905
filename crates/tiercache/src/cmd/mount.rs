//! `tiercache mount BACKING MOUNTPOINT [...]`: flags over `--config FILE`, checked before
//! anything is mounted; then the daemon (in the background unless `--foreground`).

use super::partition_flags::PartitionFlags;
use crate::live::config::{self, FileConfig};
use crate::live::daemon::{self, Settings};
use crate::live::priority::{normalize, PriorityDirs, PriorityRule};
use crate::live::size::parse_size;
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;
use tiercache_core::partition::{Amount, PartitionKind};
use tiercache_core::policy::PolicyKind;
use tiercache_core::BlockSize;
use tiercache_mem::MemConfig;

/// Default memory tier size: enough to show the effect on a first run, small beside a server's
/// RAM. A size larger than the machine's RAM is refused.
pub const DEFAULT_MEMORY: &str = "256M";

#[derive(Args, Debug, Clone)]
pub struct MountArgs {
    /// The slow directory to cache.
    pub backing: PathBuf,
    /// Where the fast view appears (an empty directory).
    pub mountpoint: PathBuf,
    /// Memory tier size, e.g. 256M, 2G [default: 256M].
    #[arg(long, value_name = "SIZE")]
    pub memory: Option<String>,
    /// Cache block size, a power of two, e.g. 4K [default: 4K].
    #[arg(long, value_name = "SIZE")]
    pub block_size: Option<String>,
    /// A priority directory (inside the mount; files directly under it). Repeatable.
    #[arg(long = "priority", value_name = "DIR")]
    pub priority: Vec<PathBuf>,
    /// A priority directory whose whole subtree is priority. Repeatable.
    #[arg(long = "priority-recursive", value_name = "DIR")]
    pub priority_recursive: Vec<PathBuf>,
    /// Partitioner of the memory tier and its parameters.
    #[command(flatten)]
    pub part: PartitionFlags,
    /// Eviction policy in each pool: lru|fifo|clock|sieve|s3fifo|arc [default: lru].
    #[arg(long, value_name = "NAME")]
    pub policy: Option<PolicyKind>,
    /// Device MODEL on BACKING for demos and benchmarks: none|hdd|ssd [default: none].
    #[arg(long, value_name = "MODEL")]
    pub emulate: Option<String>,
    /// Let the kernel page cache cache file data too (default: direct I/O, no double caching).
    /// `--kernel-cache=false` turns off a `kernel_cache = true` from the config file.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub kernel_cache: Option<bool>,
    /// Allow other users to use the mount (the kernel still checks permissions).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub allow_other: Option<bool>,
    /// Record block accesses to FILE (CSV that `tiercache sim --trace FILE` replays).
    #[arg(long, value_name = "FILE")]
    pub trace_out: Option<PathBuf>,
    /// Serve Prometheus metrics on ADDR, e.g. 127.0.0.1:9477.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
    /// FUSE request threads [default: one per CPU, at least 2]; more help slow, concurrent BACKING.
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// How long the kernel may cache a name lookup, in seconds [default: 1]. Longer makes
    /// repeated walks faster; a name changed on BACKING behind the mount's back may then be
    /// seen late by up to that long.
    #[arg(long, value_name = "SECS")]
    pub entry_timeout: Option<f64>,
    /// How long the kernel may cache attributes (size, times, modes), in seconds [default: 1];
    /// the same trade-off for attributes changed on BACKING behind the mount's back.
    #[arg(long, value_name = "SECS")]
    pub attr_timeout: Option<f64>,
    /// Stay attached to the terminal instead of daemonizing.
    #[arg(long)]
    pub foreground: bool,
    /// TOML file with the same settings; flags override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

pub fn run(args: MountArgs) -> Result<(), String> {
    let settings = settings(&args)?;
    if args.foreground {
        daemon::run_foreground(settings)
    } else {
        daemon::spawn_background(&args, &settings)
    }
}

/// MemTotal from /proc/meminfo, in bytes.
fn mem_total() -> Option<u64> {
    let m = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb = m
        .lines()
        .find(|l| l.starts_with("MemTotal:"))?
        .split_whitespace()
        .nth(1)?;
    kb.parse::<u64>().ok().map(|k| k * 1024)
}

/// `BACKING /x: No such file or directory`: the argument named, the OS error without its number.
fn check_dir(what: &str, p: &std::path::Path) -> Result<(), String> {
    match std::fs::metadata(p) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(format!("{what} {}: Not a directory", p.display())),
        Err(e) => {
            let text = e.to_string();
            let text = text.split(" (os error").next().unwrap_or(&text).to_string();
            Err(format!("{what} {}: {text}", p.display()))
        }
    }
}

/// Merges flags over the config file and checks every value, naming the flag at fault.
pub fn settings(args: &MountArgs) -> Result<Settings, String> {
    check_dir("BACKING", &args.backing)?;
    check_dir("MOUNTPOINT", &args.mountpoint)?;
    let file = match &args.config {
        Some(p) => config::load(p)?,
        None => FileConfig::default(),
    };
    let src = |name: &str, from_flag: bool| {
        if from_flag || args.config.is_none() {
            format!("--{name}")
        } else {
            format!(
                "{} ({})",
                name.replace('-', "_"),
                args.config
                    .as_ref()
                    .map_or(String::new(), |p| p.display().to_string())
            )
        }
    };
    let memory = match (&args.memory, &file.memory) {
        (Some(m), _) => parse_size(m).map_err(|e| format!("--memory: {e}"))?,
        (None, Some(m)) => m
            .bytes()
            .map_err(|e| format!("{}: {e}", src("memory", false)))?,
        (None, None) => parse_size(DEFAULT_MEMORY).map_err(|e| format!("--memory: {e}"))?,
    };
    let bs_bytes = match (&args.block_size, &file.block_size) {
        (Some(b), _) => parse_size(b).map_err(|e| format!("--block-size: {e}"))?,
        (None, Some(b)) => b
            .bytes()
            .map_err(|e| format!("{}: {e}", src("block-size", false)))?,
        (None, None) => 4096,
    };
    let block_size = BlockSize::new(bs_bytes).ok_or_else(|| {
        format!(
            "{}: {bs_bytes} is not a power of two in 512..1M",
            src("block-size", args.block_size.is_some())
        )
    })?;
    let capacity = memory / block_size.bytes();
    if capacity < 64 {
        // A number without a unit counts bytes (`--memory 4096`, `memory = 4096`).
        let bare = match (&args.memory, &file.memory) {
            (Some(m), _) => m.trim().bytes().all(|b| b.is_ascii_digit()),
            (None, Some(m)) => m.is_bare(),
            (None, None) => false,
        };
        return Err(format!(
            "{}: {memory} bytes hold fewer than 64 blocks of {bs_bytes}{}",
            src("memory", args.memory.is_some()),
            if bare {
                format!(" (a number without a unit counts bytes: write \"{memory}M\" for MiB)")
            } else {
                String::new()
            }
        ));
    }
    if let Some(total) = mem_total() {
        if memory > total {
            return Err(format!(
                "{}: {} MiB is more than this machine's {} MiB of RAM",
                src("memory", args.memory.is_some()),
                memory >> 20,
                total >> 20
            ));
        }
    }
    let policy = match (args.policy, &file.policy) {
        (Some(p), _) => p,
        (None, Some(p)) => p
            .parse()
            .map_err(|e| format!("{}: {e}", src("policy", false)))?,
        (None, None) => PolicyKind::Lru,
    };
    let from_file = PartitionFlags {
        partition: match &file.partition {
            Some(p) => Some(
                p.parse()
                    .map_err(|e| format!("{}: {e}", src("partition", false)))?,
            ),
            None => None,
        },
        omega: file.omega,
        t_protected: file.t_protected,
        t_normal: file.t_normal,
        b_pmin: match &file.b_pmin {
            Some(b) => Some(
                b.as_text()
                    .parse::<Amount>()
                    .map_err(|e| format!("{}: {e}", src("b-pmin", false)))?,
            ),
            None => None,
        },
        b_nmin: file.b_nmin,
    };
    if let Some(cfg) = &args.config {
        // A bad value in the file is reported against the file, not a flag.
        from_file
            .resolve(&PartitionFlags::default(), PartitionKind::Dirprio, capacity)
            .map_err(|e| {
                format!(
                    "{}: {}",
                    cfg.display(),
                    e.trim_start_matches("--").replace('-', "_")
                )
            })?;
    }
    let partition = args
        .part
        .resolve(&from_file, PartitionKind::Dirprio, capacity)?;
    let emulate = match args.emulate.as_deref().or(file.emulate.as_deref()) {
        None | Some("none") => None,
        Some("hdd") => Some(tiercache_mem::DeviceModel::hdd()),
        Some("ssd") => Some(tiercache_mem::DeviceModel::ssd()),
        Some(other) => {
            return Err(format!(
                "{}: unknown model `{other}` (expected none|hdd|ssd)",
                src("emulate", args.emulate.is_some())
            ))
        }
    };
    let mountpoint = crate::live::control::canonical_mountpoint(&args.mountpoint);
    let mut priority = PriorityDirs::default();
    // Priority flags, when given, replace the file's lists (flags override the file).
    let from_flags = !args.priority.is_empty() || !args.priority_recursive.is_empty();
    let (lists, whence) = if from_flags || args.config.is_none() {
        (
            [(&args.priority, false), (&args.priority_recursive, true)],
            "--priority".to_string(),
        )
    } else {
        let cfg = args
            .config
            .as_ref()
            .map_or(String::new(), |p| p.display().to_string());
        (
            [(&file.priority, false), (&file.priority_recursive, true)],
            format!("{cfg}: priority"),
        )
    };
    for (dirs, recursive) in lists {
        for d in dirs {
            let dir = normalize(d, &mountpoint).map_err(|e| format!("{whence}: {e}"))?;
            priority.add(PriorityRule { dir, recursive });
        }
    }
    let mem = MemConfig {
        capacity_blocks: capacity as usize,
        block_size,
        policy,
        partition,
        readahead_max_blocks: file.readahead.unwrap_or(32),
        flush_interval: file
            .flush_interval_ms
            .map_or(Duration::from_secs(1), Duration::from_millis),
        dirty_expire: file
            .dirty_expire_ms
            .map_or(Duration::from_secs(5), Duration::from_millis),
        ..MemConfig::default()
    };
    mem.validate().map_err(|e| format!("--{e}"))?;
    if let Some(addr) = args.metrics.as_ref().or(file.metrics.as_ref()) {
        addr.parse::<std::net::SocketAddr>().map_err(|_| {
            format!(
                "{}: `{addr}` is not an address like 127.0.0.1:9477",
                src("metrics", args.metrics.is_some())
            )
        })?;
    }
    let threads = args.threads.or(file.threads);
    if let Some(t) = threads {
        if !(1..=256).contains(&t) {
            return Err(format!(
                "{}: {t} is outside 1..=256",
                src("threads", args.threads.is_some())
            ));
        }
    }
    let timeout = |flag: Option<f64>, file: Option<f64>, name: &str| {
        let secs = flag.or(file).unwrap_or(1.0);
        if !(0.0..=86_400.0).contains(&secs) {
            return Err(format!(
                "{}: {secs} is outside 0..=86400 seconds",
                src(name, flag.is_some())
            ));
        }
        Ok(Duration::from_secs_f64(secs))
    };
    let entry_timeout = timeout(args.entry_timeout, file.entry_timeout, "entry-timeout")?;
    let attr_timeout = timeout(args.attr_timeout, file.attr_timeout, "attr-timeout")?;
    Ok(Settings {
        entry_timeout,
        attr_timeout,
        backing: args.backing.clone(),
        mountpoint,
        mem,
        priority,
        emulate,
        kernel_cache: args.kernel_cache.or(file.kernel_cache).unwrap_or(false),
        allow_other: args.allow_other.or(file.allow_other).unwrap_or(false),
        trace_out: args.trace_out.clone().or(file.trace_out),
        metrics: args.metrics.clone().or(file.metrics),
        threads,
    })
}
