//! `tiercache mount BACKING MOUNTPOINT [...]`: flags over `--config FILE`, checked before
//! anything is mounted; then the daemon (in the background unless `--foreground`). With one
//! path it is MOUNTPOINT, with none both come from the file (`backing`, `mountpoint`).

use super::mount_serving::serving;
use super::partition_flags::PartitionFlags;
use crate::live::config::{
    self, ConfigFile, KernelCacheValue, MountOptions, RespawnArgs, SizeOrPercent, SizeValue,
    TierTable,
};
use crate::live::config_flash::{apply_flash_flags, FlashFlags};
use crate::live::config_remote::{apply_remote_flags, RemoteFlags};
use crate::live::daemon::{self, Settings};
use crate::live::error::ConfigError;
use crate::live::size::parse_size;
use clap::Args;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tiercache_core::partition::{Amount, PartitionConfig, PartitionKind};
use tiercache_core::policy::PolicyKind;
use tiercache_core::BlockSize;
use tiercache_manager::{BackingCache, MemConfig};

/// Default memory tier size: enough to show the effect on a first run, small beside a server's
/// RAM. A size larger than the machine's RAM is refused.
pub const DEFAULT_MEMORY: &str = "256M";

#[derive(Args, Debug, Clone)]
pub struct MountArgs {
    /// The slow directory to cache [default: the --config file's `backing`].
    #[arg(required_unless_present = "config")]
    pub backing: Option<PathBuf>,
    /// Where the fast view appears (an empty directory) [default: the --config file's
    /// `mountpoint`]. Given alone (one path, with --config), the path is MOUNTPOINT.
    #[arg(required_unless_present = "config")]
    pub mountpoint: Option<PathBuf>,
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
    /// A class of files: files directly under each DIR (comma-separated, inside the mount) are
    /// in class NAME, whose hit-ratio target is TARGET (empty: best effort), with an optional
    /// floor (min=SIZE) and cap (max=SIZE); files in no class are `normal`. Repeatable; given,
    /// these replace the config file's class tables.
    #[arg(
        long = "class",
        value_name = "NAME:DIR[,DIR]:TARGET[:min=SIZE][:max=SIZE]"
    )]
    pub class: Vec<String>,
    /// Partitioner of the memory tier and its parameters.
    #[command(flatten)]
    pub part: PartitionFlags,
    /// Eviction policy in each pool: lru|fifo|clock|sieve|s3fifo|arc [default: lru].
    #[arg(long, value_name = "NAME")]
    pub policy: Option<PolicyKind>,
    /// Device MODEL on BACKING for demos and benchmarks: none|hdd|ssd [default: none].
    #[arg(long, value_name = "MODEL")]
    pub emulate: Option<String>,
    /// BACKING's pages in the kernel page cache: drop (leave none: the memory tier is the only
    /// cache) | keep (plain buffered I/O, e.g. for a BACKING on tmpfs) [default: drop].
    #[arg(long, value_name = "keep|drop")]
    pub backing_cache: Option<String>,
    /// Which files the kernel page cache holds too: priority (files of priority directories:
    /// their hits cost no round trip to the daemon; everything else is direct I/O, so a scan
    /// cannot push them out) | all | off (direct I/O only) [default: priority]. A bare
    /// `--kernel-cache` is `all`; `true`/`false` mean all/off.
    #[arg(long, value_name = "MODE", num_args = 0..=1, default_missing_value = "all")]
    pub kernel_cache: Option<String>,
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
    /// I/O workers that answer requests waiting for BACKING (read misses, writes that need
    /// I/O, fsync), so the request threads stay free for hits [default: 8]; size it for
    /// BACKING's concurrency (a disk's queue, an NFS server's threads), not the CPUs; a quarter
    /// is reserved for priority files. 0 runs them on the request threads.
    #[arg(long, value_name = "N")]
    pub io_workers: Option<usize>,
    /// How long the kernel may cache a name lookup, in seconds [default: 1]. Longer makes
    /// repeated walks faster; a name changed on BACKING behind the mount's back may then be
    /// seen late by up to that long.
    #[arg(long, value_name = "SECS")]
    pub entry_timeout: Option<f64>,
    /// How long the kernel may cache attributes (size, times, modes), in seconds [default: 1];
    /// the same trade-off for attributes changed on BACKING behind the mount's back.
    #[arg(long, value_name = "SECS")]
    pub attr_timeout: Option<f64>,
    /// With whose rights BACKING is asked to check permissions and create files:
    /// auto|caller|daemon [default: auto = caller when tiercache runs as root]. `caller` works
    /// on root-squashed NFS and makes new files the caller's; `daemon` uses tiercache's own
    /// rights and chowns new files (BACKING must let root bypass its permissions).
    #[arg(long, value_name = "WHO")]
    pub backing_identity: Option<String>,
    /// How requests reach the daemon: dev-fuse|io-uring|auto [default: dev-fuse]. `io-uring`
    /// (Linux 6.14+, fuse `enable_uring` on) answers each on its caller's CPU: small-file work
    /// about twice as fast, idle 4 KiB random reads slower. `auto`: the rings when offered.
    #[arg(long, value_name = "HOW")]
    pub transport: Option<String>,
    /// Serve zero-copy clients (`tiercache-client`, paper 003): the memory tier lives in shared
    /// memory that they map; a hit costs them no copy and no system call. Admits this user and
    /// root (and `--zero-copy-group`): a client can read every cached block of the mount.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub zero_copy: Option<bool>,
    /// Members of GROUP (name or number) may use the zero-copy service too.
    #[arg(long, value_name = "GROUP")]
    pub zero_copy_group: Option<String>,
    /// A tier below memory, top first; repeatable. KIND `test` (in memory, volatile: for tests
    /// and experiments), PLACEMENT inclusive|exclusive|pinned[=FIRST] [default: exclusive for
    /// the first, inclusive below]. Given, these replace the config file's lower `[[tier]]`s.
    #[arg(long = "tier", value_name = "KIND:SIZE[:PLACEMENT]")]
    pub tier: Vec<String>,
    /// An SSD tier right below memory (paper 001: set-mapped, write-back, crash-consistent):
    /// a cache file (created and preallocated with SIZE when missing) or a block device.
    #[arg(long, value_name = "PATH[:SIZE]")]
    pub flash: Option<String>,
    /// writeback | writethrough | writearound [default: writeback].
    #[arg(long, value_name = "MODE")]
    pub flash_mode: Option<String>,
    /// A contiguous stream of at least this many bytes goes straight to BACKING [default: 4M].
    #[arg(long, value_name = "SIZE")]
    pub flash_seq_cutoff: Option<String>,
    /// idle (clean when no request came for --flash-wait) | eager (clean in the request path
    /// when free sets run short) [default: idle].
    #[arg(long, value_name = "idle|eager")]
    pub flash_cleaner: Option<String>,
    /// Quiet time before idle cleaning starts, in ms [default: 1000].
    #[arg(long, value_name = "MS")]
    pub flash_wait: Option<u64>,
    /// Sets without dirty data that cleaning keeps: a count or a percentage [default: 10%].
    #[arg(long, value_name = "N|P%")]
    pub flash_free_floor: Option<String>,
    /// Above this dirty fraction cleaning runs even when busy, at a bounded rate [default: 80%].
    #[arg(long, value_name = "FRACTION|P%")]
    pub flash_dirty_max: Option<String>,
    /// Device errors after which the tier is detached (its readable dirty data written back
    /// first) [default: 16].
    #[arg(long, value_name = "N")]
    pub flash_max_errors: Option<u64>,
    /// inclusive (allocate on read misses) | exclusive (store clean blocks evicted from memory)
    /// [default: inclusive].
    #[arg(long, value_name = "PLACEMENT")]
    pub flash_placement: Option<String>,
    /// How the cache file is read and written: auto (the first of fadvise, dontcache, direct
    /// that works: no page cache left behind) | fadvise | dontcache | direct | buffered (the
    /// kernel's page cache keeps what it likes) [default: auto].
    #[arg(long, value_name = "MODE")]
    pub flash_io: Option<String>,
    /// A remote-memory tier on memcached servers, below all others (clean data only,
    /// encrypted): memcached://HOST:PORT[,HOST:PORT...]. Needs --remote-key.
    #[arg(long, value_name = "URL")]
    pub remote: Option<String>,
    /// Key file of the remote tier (`tiercache keygen FILE`; must be mode 0600).
    #[arg(long, value_name = "FILE")]
    pub remote_key: Option<PathBuf>,
    /// Isolates clients sharing a memcached pool [default: tiercache].
    #[arg(long, value_name = "NAME")]
    pub remote_namespace: Option<String>,
    /// Reads within a sequential run of at least N blocks go to BACKING, not the remote tier
    /// [default: 32]; `auto` chooses N from measured BACKING and remote costs.
    #[arg(long, value_name = "N|auto")]
    pub remote_threshold: Option<String>,
    /// inclusive (store blocks read from BACKING) | exclusive (store blocks evicted from the
    /// tier above) [default: inclusive].
    #[arg(long, value_name = "PLACEMENT")]
    pub remote_placement: Option<String>,
    /// Per-request timeout of a memcached server, in ms [default: 50]; a server that times
    /// out is skipped (reads go to BACKING) and probed again later.
    #[arg(long, value_name = "MS")]
    pub remote_timeout: Option<u64>,
    /// Blocks the remote tier may hold, e.g. 4G [default: the servers' memory limits].
    #[arg(long, value_name = "SIZE")]
    pub remote_size: Option<String>,
    /// Generic flags of the mount itself, comma-separated: ro|rw, nodev|dev, nosuid|suid,
    /// exec|noexec, atime|noatime, async|sync, dirsync [default: rw,nodev,nosuid].
    #[arg(long, value_name = "LIST")]
    pub mount_flags: Option<String>,
    /// Stay attached to the terminal instead of daemonizing.
    #[arg(long)]
    pub foreground: bool,
    /// TOML file with the same settings; flags override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// Mounts; a background mount restarts this program with `respawn` (this command line, without
/// the program name) and `--foreground`.
pub fn run(args: MountArgs, respawn: &RespawnArgs) -> Result<(), String> {
    let settings = settings(&args)?;
    if args.foreground {
        // A reload (SIGHUP, `tiercache reload`) re-reads the file with the same flags over it.
        let source: crate::live::reload::Source = Box::new(move || {
            settings_at(&args, true).map_err(crate::live::reload::ReloadError::Config)
        });
        Ok(daemon::run_foreground(settings, Some(source))?)
    } else {
        Ok(daemon::spawn_background(respawn, &settings)?)
    }
}

/// BACKING and MOUNTPOINT: the paths given (one path is MOUNTPOINT), else the config file's
/// `backing` and `mountpoint` (relative to the file's directory).
fn paths(args: &MountArgs, file: &ConfigFile) -> Result<(PathBuf, PathBuf), ConfigError> {
    let (backing, mountpoint) = match (&args.backing, &args.mountpoint) {
        (Some(b), Some(m)) => (Some(b.clone()), Some(m.clone())),
        (Some(m), None) => (None, Some(m.clone())),
        _ => (None, None),
    };
    let from_file = |p: &Option<PathBuf>, key: &str, what: &str| match (p, &file.path) {
        (Some(p), Some(cfg)) => Ok(cfg.parent().unwrap_or(Path::new(".")).join(p)),
        (Some(p), None) => Ok(p.clone()),
        (None, Some(cfg)) => Err(ConfigError::bad(
            what,
            format!(
                "not given (neither on the command line nor as `{key}` in {})",
                cfg.display()
            ),
        )),
        (None, None) => Err(ConfigError::bad(
            what,
            format!(
                "not given (tiercache mount BACKING MOUNTPOINT, or `{key}` in a --config file)"
            ),
        )),
    };
    let backing = match backing {
        Some(b) => b,
        None => from_file(&file.options.backing, "backing", "BACKING")?,
    };
    let mountpoint = match mountpoint {
        Some(m) => m,
        None => from_file(&file.options.mountpoint, "mountpoint", "MOUNTPOINT")?,
    };
    Ok((backing, mountpoint))
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
fn check_dir(what: &'static str, p: &std::path::Path) -> Result<(), ConfigError> {
    let source = match std::fs::metadata(p) {
        Ok(m) if m.is_dir() => return Ok(()),
        Ok(_) => std::io::Error::from_raw_os_error(libc::ENOTDIR),
        Err(e) => e,
    };
    Err(ConfigError::Dir {
        what,
        path: p.to_path_buf(),
        source,
    })
}

/// The flags as [`MountOptions`]: `None` where a flag is not given.
fn flag_options(args: &MountArgs) -> Result<MountOptions, ConfigError> {
    let part = &args.part;
    // Either priority flag replaces both of the file's lists.
    let priority = !args.priority.is_empty() || !args.priority_recursive.is_empty();
    Ok(MountOptions {
        memory: args.memory.clone().map(SizeValue::Text),
        block_size: args.block_size.clone().map(SizeValue::Text),
        priority: priority.then(|| args.priority.clone()),
        priority_recursive: priority.then(|| args.priority_recursive.clone()),
        partition: part.partition.map(|k| k.to_string()),
        omega: part.omega,
        t_protected: part.t_protected,
        t_normal: part.t_normal,
        b_pmin: part.b_pmin.map(|a| {
            SizeOrPercent::Text(match a {
                Amount::Blocks(n) => n.to_string(),
                Amount::Percent(p) => format!("{p}%"),
            })
        }),
        b_nmin: part.b_nmin,
        policy: args.policy.map(|p| p.to_string()),
        emulate: args.emulate.clone(),
        backing_cache: args.backing_cache.clone(),
        kernel_cache: args.kernel_cache.clone().map(KernelCacheValue::Text),
        allow_other: args.allow_other,
        trace_out: args.trace_out.clone(),
        metrics: args.metrics.clone(),
        log_level: None,
        readahead: None,
        flush_interval_ms: None,
        dirty_expire_ms: None,
        threads: args.threads,
        io_workers: args.io_workers,
        entry_timeout: args.entry_timeout,
        attr_timeout: args.attr_timeout,
        backing_identity: args.backing_identity.clone(),
        transport: args.transport.clone(),
        zero_copy: args.zero_copy,
        zero_copy_group: args.zero_copy_group.clone(),
        backing: None,
        mountpoint: None,
        mount_flags: args.mount_flags.clone(),
        tiers: if args.tier.is_empty() {
            None
        } else {
            Some(
                args.tier
                    .iter()
                    .map(|a| TierTable::from_flag(a))
                    .collect::<Result<_, _>>()?,
            )
        },
        classes: super::mount_classes::class_flags(&args.class)?,
    })
}

/// The `--flash*` flags.
fn flash_flags(args: &MountArgs) -> FlashFlags {
    FlashFlags {
        device: args.flash.clone(),
        mode: args.flash_mode.clone(),
        seq_cutoff: args.flash_seq_cutoff.clone(),
        cleaner: args.flash_cleaner.clone(),
        wait_ms: args.flash_wait,
        free_floor: args.flash_free_floor.clone(),
        dirty_max: args.flash_dirty_max.clone(),
        max_errors: args.flash_max_errors,
        placement: args.flash_placement.clone(),
        io: args.flash_io.clone(),
    }
}

/// The `--remote*` flags.
fn remote_flags(args: &MountArgs) -> RemoteFlags {
    RemoteFlags {
        url: args.remote.clone(),
        key_file: args.remote_key.clone(),
        namespace: args.remote_namespace.clone(),
        threshold: args.remote_threshold.clone(),
        placement: args.remote_placement.clone(),
        timeout_ms: args.remote_timeout,
        size: args.remote_size.clone(),
    }
}

/// Where a setting came from, for messages: `--flag`, or `key (FILE)` for the config file's.
pub(super) struct Source<'a> {
    config: Option<&'a Path>,
}

impl Source<'_> {
    /// `--name` when `from_flag` (or without a config file), else `name (FILE)`.
    pub(super) fn of(&self, name: &str, from_flag: bool) -> String {
        match self.config {
            Some(cfg) if !from_flag => format!("{} ({})", name.replace('-', "_"), cfg.display()),
            _ => format!("--{name}"),
        }
    }
}

/// The partitioner settings of `o`; a value that does not parse is reported by `src`.
fn partition_flags(
    o: &MountOptions,
    src: impl Fn(&str) -> String,
) -> Result<PartitionFlags, ConfigError> {
    Ok(PartitionFlags {
        partition: match &o.partition {
            Some(p) => Some(
                p.parse::<PartitionKind>()
                    .map_err(|e| ConfigError::bad(src("partition"), e.to_string()))?,
            ),
            None => None,
        },
        omega: o.omega,
        t_protected: o.t_protected,
        t_normal: o.t_normal,
        b_pmin: match &o.b_pmin {
            Some(b) => Some(
                b.as_text()
                    .parse::<Amount>()
                    .map_err(|e| ConfigError::bad(src("b-pmin"), e.to_string()))?,
            ),
            None => None,
        },
        b_nmin: o.b_nmin,
    })
}

/// Merges flags over the config file ([`MountOptions::over`]) and checks every value, naming
/// the flag, or the file (and line, where known), at fault.
pub fn settings(args: &MountArgs) -> Result<Settings, ConfigError> {
    settings_at(args, false)
}

/// [`settings`]; `reload`: for the running mount (its MOUNTPOINT is the mount itself now).
pub fn settings_at(args: &MountArgs, reload: bool) -> Result<Settings, ConfigError> {
    let mut file = match &args.config {
        Some(p) => config::load(p)?,
        None => ConfigFile::default(),
    };
    let (backing, mountpoint) = paths(args, &file)?;
    check_dir("BACKING", &backing)?;
    if !reload {
        check_dir("MOUNTPOINT", &mountpoint)?;
    }
    let memory_name = file.fold_memory_tier()?;
    let flags = flag_options(args)?;
    let file_options = file.options.clone();
    let o = flags.clone().over(std::mem::take(&mut file.options));
    let src = Source {
        config: args.config.as_deref(),
    };
    let (block_size, capacity) = memory_size(&o, &flags, &src)?;
    let policy = match &o.policy {
        Some(p) => p.parse::<PolicyKind>().map_err(|e| {
            ConfigError::bad(src.of("policy", flags.policy.is_some()), e.to_string())
        })?,
        None => PolicyKind::Lru,
    };
    let tiers = apply_remote_flags(o.tiers.clone(), &remote_flags(args))?;
    let tiers = apply_flash_flags(tiers, &flash_flags(args))?;
    let lower_tiers = file.lower_tiers(
        tiers.as_deref().unwrap_or_default(),
        block_size.bytes(),
        &memory_name,
    )?;
    let mountpoint = crate::live::control::canonical_mountpoint(&mountpoint);
    let classes = super::mount_classes::mount_classes(
        &o,
        flags.classes.is_some(),
        &super::mount_classes::priority_whence(args.config.as_deref(), &flags),
        args.config.as_deref(),
        &mountpoint,
        block_size.bytes(),
    )?;
    let partition = partition(args, &o, &src, &file_options, capacity, &classes)?;
    let (emulate, backing_cache, kernel_cache) = caching(&o, &flags, &src)?;
    let log_level = match o.log_level.as_deref() {
        None => None,
        Some(l) => Some(
            crate::live::logging::parse_level(l).map_err(|e| e.at(src.of("log-level", false)))?,
        ),
    };
    let mem = MemConfig {
        capacity_blocks: capacity as usize,
        block_size,
        policy,
        partition,
        readahead_max_blocks: o.readahead.unwrap_or(32),
        flush_interval: o
            .flush_interval_ms
            .map_or(Duration::from_secs(1), Duration::from_millis),
        dirty_expire: o
            .dirty_expire_ms
            .map_or(Duration::from_secs(5), Duration::from_millis),
        ..MemConfig::default()
    };
    validate(&mem, args.config.as_deref())?;
    let serving = serving(&o, &flags, &src)?;
    let zero_copy = zero_copy(&o, &flags, &src)?;
    let mount_flags = match &o.mount_flags {
        Some(list) => super::fstab::mount_flags(list)
            .map_err(|e| ConfigError::bad(src.of("mount-flags", flags.mount_flags.is_some()), e))?,
        None => tiercache_fuse::MountFlags::default(),
    };
    let mut mem = mem;
    mem.zero_copy = zero_copy.is_some();
    Ok(Settings {
        zero_copy,
        backing_identity: serving.backing_identity,
        transport: serving.transport,
        entry_timeout: serving.entry_timeout,
        attr_timeout: serving.attr_timeout,
        backing,
        mountpoint,
        mount_flags,
        mem,
        rules: classes.rules,
        emulate,
        backing_cache,
        kernel_cache,
        allow_other: o.allow_other.unwrap_or(false),
        trace_out: o.trace_out,
        metrics: o.metrics,
        threads: o.threads,
        io_workers: o.io_workers,
        lower_tiers,
        log_level,
    })
}

/// The memory tier's block size and its capacity in blocks: at least 64 blocks, and no more
/// than the machine's RAM.
fn memory_size(
    o: &MountOptions,
    flags: &MountOptions,
    src: &Source<'_>,
) -> Result<(BlockSize, u64), ConfigError> {
    let memory_at = || src.of("memory", flags.memory.is_some());
    let memory = match &o.memory {
        Some(m) => m.bytes().map_err(|e| e.at(memory_at()))?,
        None => parse_size(DEFAULT_MEMORY).map_err(|e| e.at("--memory"))?,
    };
    let block_size_at = || src.of("block-size", flags.block_size.is_some());
    let bs_bytes = match &o.block_size {
        Some(b) => b.bytes().map_err(|e| e.at(block_size_at()))?,
        None => 4096,
    };
    let block_size = BlockSize::new(bs_bytes).ok_or_else(|| {
        ConfigError::bad(
            block_size_at(),
            format!("{bs_bytes} is not a power of two in 512..1M"),
        )
    })?;
    let capacity = memory / block_size.bytes();
    if capacity < 64 {
        // A number without a unit counts bytes (`--memory 4096`, `memory = 4096`).
        let bare = o.memory.as_ref().is_some_and(SizeValue::is_bare);
        return Err(ConfigError::bad(
            memory_at(),
            format!(
                "{memory} bytes hold fewer than 64 blocks of {bs_bytes}{}",
                if bare {
                    format!(" (a number without a unit counts bytes: write \"{memory}M\" for MiB)")
                } else {
                    String::new()
                }
            ),
        ));
    }
    if let Some(total) = mem_total() {
        if memory > total {
            return Err(ConfigError::bad(
                memory_at(),
                format!(
                    "{} MiB is more than this machine's {} MiB of RAM",
                    memory >> 20,
                    total >> 20
                ),
            ));
        }
    }
    Ok((block_size, capacity))
}

/// The partitioner of the memory tier: the file's values are checked against the file first
/// (so a bad one names the file), then the flags over them.
fn partition(
    args: &MountArgs,
    o: &MountOptions,
    src: &Source<'_>,
    file_options: &MountOptions,
    capacity: u64,
    classes: &super::mount_classes::MountClasses,
) -> Result<PartitionConfig, ConfigError> {
    if let Some(cfg) = &args.config {
        // A bad value in the file is reported against the file, not a flag.
        partition_flags(file_options, |name| src.of(name, false))?
            .resolve(&PartitionFlags::default(), PartitionKind::Dirprio, capacity)
            .map_err(|e| {
                ConfigError::bad(
                    cfg.display().to_string(),
                    e.trim_start_matches("--").replace('-', "_"),
                )
            })?;
    }
    // Only the file's values can fail to parse here, and those were checked above. Priority
    // is a class with T_p when priority directories name it.
    let priority_in_use = classes.rules.of_class("priority").next().is_some();
    let partition = partition_flags(o, |name| src.of(name, true))?
        .resolve_classes(
            &PartitionFlags::default(),
            PartitionKind::Dirprio,
            capacity,
            &classes.specs,
            priority_in_use,
        )
        .map_err(|e| match e.strip_prefix("--class") {
            // The class table as a whole (floors that do not fit, too many classes).
            Some(rest) => {
                let rest = rest.trim_start_matches(':').trim();
                ConfigError::bad(
                    &classes.whence,
                    rest.strip_prefix("class: ").unwrap_or(rest),
                )
            }
            None => ConfigError::Invalid(e),
        })?;
    Ok(partition)
}

/// Checks the memory tier's settings together; `config`: the file the flusher's timings came
/// from.
fn validate(mem: &MemConfig, config: Option<&Path>) -> Result<(), ConfigError> {
    mem.validate().map_err(|e| match (&e, config) {
        // The flusher's timings come only from the file.
        (tiercache_manager::MemError::InvalidConfig { param, reason }, Some(cfg))
            if *param == "flush-interval" =>
        {
            ConfigError::bad(
                format!("flush_interval_ms ({})", cfg.display()),
                reason.clone(),
            )
        }
        _ => ConfigError::invalid(format!("--{e}")),
    })
}

/// The device model in front of BACKING, whether BACKING's pages stay in the page cache, and
/// which files the kernel page cache holds.
fn caching(
    o: &MountOptions,
    flags: &MountOptions,
    src: &Source<'_>,
) -> Result<
    (
        Option<tiercache_manager::DeviceModel>,
        BackingCache,
        tiercache_fuse::KernelCacheMode,
    ),
    ConfigError,
> {
    let emulate = match o.emulate.as_deref() {
        None | Some("none") => None,
        Some("hdd") => Some(tiercache_manager::DeviceModel::hdd()),
        Some("ssd") => Some(tiercache_manager::DeviceModel::ssd()),
        Some(other) => {
            return Err(ConfigError::bad(
                src.of("emulate", flags.emulate.is_some()),
                format!("unknown model `{other}` (expected none|hdd|ssd)"),
            ))
        }
    };
    let backing_cache = match o.backing_cache.as_deref() {
        None => BackingCache::Drop,
        Some(v) => v.parse::<BackingCache>().map_err(|e| {
            ConfigError::bad(
                src.of("backing-cache", flags.backing_cache.is_some()),
                e.to_string(),
            )
        })?,
    };
    let kernel_cache = match &o.kernel_cache {
        None => tiercache_fuse::KernelCacheMode::Priority,
        Some(v) => v
            .mode()
            .map_err(|e| e.at(src.of("kernel-cache", flags.kernel_cache.is_some())))?,
    };
    Ok((emulate, backing_cache, kernel_cache))
}

/// The zero-copy service's settings (`None`: not served); its group needs `--zero-copy` and
/// `--allow-other`.
fn zero_copy(
    o: &MountOptions,
    flags: &MountOptions,
    src: &Source<'_>,
) -> Result<Option<crate::live::zerocopy::ZeroCopySettings>, ConfigError> {
    let group_at = || src.of("zero-copy-group", flags.zero_copy_group.is_some());
    let group = match o.zero_copy_group.as_deref() {
        None => None,
        Some(g) => Some(group_id(g).map_err(|e| ConfigError::bad(group_at(), e))?),
    };
    let zero_copy = o.zero_copy.unwrap_or(false);
    if group.is_some() && !zero_copy {
        return Err(ConfigError::bad(group_at(), "needs --zero-copy"));
    }
    if group.is_some() && !o.allow_other.unwrap_or(false) {
        return Err(ConfigError::bad(
            group_at(),
            "needs --allow-other (other users cannot open files on the mount otherwise)",
        ));
    }
    Ok(zero_copy.then_some(crate::live::zerocopy::ZeroCopySettings { group }))
}

/// A group's id from its name or number.
fn group_id(g: &str) -> Result<u32, String> {
    if let Ok(n) = g.parse::<u32>() {
        return Ok(n);
    }
    let name = std::ffi::CString::new(g).map_err(|_| format!("bad group name `{g}`"))?;
    let mut grp: libc::group = unsafe_zeroed_group();
    let mut buf = vec![0 as libc::c_char; 16384];
    let mut out: *mut libc::group = std::ptr::null_mut();
    // SAFETY: all pointers are valid for the call; `buf` is large enough for a group entry
    // (ERANGE is reported otherwise).
    let r = unsafe {
        libc::getgrnam_r(
            name.as_ptr(),
            &mut grp,
            buf.as_mut_ptr(),
            buf.len(),
            &mut out,
        )
    };
    if r != 0 || out.is_null() {
        return Err(format!("no group `{g}`"));
    }
    Ok(grp.gr_gid)
}

fn unsafe_zeroed_group() -> libc::group {
    // SAFETY: `libc::group` is plain data (ids and pointers); all-zero is a valid value that
    // getgrnam_r overwrites.
    unsafe { std::mem::zeroed() }
}

#[cfg(test)]
#[path = "mount_tests.rs"]
mod tests;
