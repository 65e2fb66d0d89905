//! Mount settings: `tiercache mount` flags over an optional TOML file (`--config`); flags win.
//!
//! File and flags fill one [`MountOptions`] each (every field optional; the flags converted by
//! `cmd::mount`); [`MountOptions::over`] takes each field from the flags when they give it, else
//! from the file. TOML keys mirror the flags: `memory`, `block_size`, `priority` (list),
//! `priority_recursive` (list), `partition`, `omega`, `t_protected`, `t_normal`, `b_pmin`,
//! `b_nmin`, `policy`, `emulate`, `backing_cache`, `kernel_cache`, `allow_other`, `trace_out`,
//! `metrics`, `readahead`, `flush_interval_ms`, `dirty_expire_ms`, `threads`, `io_workers`,
//! `entry_timeout`,
//! `backing_identity`, `transport`, `zero_copy`, `zero_copy_group`,
//! `attr_timeout`, `log_level`, `backing` and `mountpoint` (used when the command line does
//! not give them; relative to the file's directory), `mount_flags` (`"ro,noexec"`:
//! `--mount-flags`), `[[tier]]` tables (see [`TierTable`]) and `[[class]]` tables (`name`,
//! `dirs`, `recursive`, `target`, `min`, `max`; see `live::classes`). An unknown key or a bad
//! value is an error naming the file and line.

use super::config_flash::{flash_only_key, FlashSpec, FractionValue};
use super::config_remote::{remote_only_key, RemoteSpec};
use super::error::ConfigError;
use super::size::parse_size;
use serde::{Deserialize, Deserializer};
use std::ffi::OsString;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tiercache_core::hierarchy::Placement;
use tiercache_core::policy::PolicyKind;

/// Everything the TOML file or the flags may say; `None`: not given there.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MountOptions {
    pub memory: Option<SizeValue>,
    pub block_size: Option<SizeValue>,
    /// Given together with `priority_recursive` (flags replace both of the file's lists).
    pub priority: Option<Vec<PathBuf>>,
    pub priority_recursive: Option<Vec<PathBuf>>,
    pub partition: Option<String>,
    pub omega: Option<u64>,
    pub t_protected: Option<f64>,
    pub t_normal: Option<f64>,
    pub b_pmin: Option<SizeOrPercent>,
    pub b_nmin: Option<u64>,
    pub policy: Option<String>,
    pub emulate: Option<String>,
    /// `keep` or `drop`: whether BACKING I/O may leave pages in the kernel page cache.
    pub backing_cache: Option<String>,
    /// `priority`, `all` or `off` (`true`/`false`: `all`/`off`).
    pub kernel_cache: Option<KernelCacheValue>,
    pub allow_other: Option<bool>,
    pub trace_out: Option<PathBuf>,
    pub metrics: Option<String>,
    pub readahead: Option<u32>,
    pub flush_interval_ms: Option<u64>,
    pub dirty_expire_ms: Option<u64>,
    pub threads: Option<usize>,
    /// I/O workers for requests that wait for BACKING (`tiercache_fuse::MountOptions`).
    pub io_workers: Option<usize>,
    pub entry_timeout: Option<f64>,
    pub attr_timeout: Option<f64>,
    /// `auto`, `caller` or `daemon` (see `tiercache_fuse::BackingIdentity`).
    pub backing_identity: Option<String>,
    /// `dev-fuse`, `io-uring` or `auto` (see `tiercache_fuse::Transport`).
    pub transport: Option<String>,
    /// Serve zero-copy clients (`tiercache-client`) from a shared memory tier.
    pub zero_copy: Option<bool>,
    /// A group whose members may use the zero-copy service too (by name or number).
    pub zero_copy_group: Option<String>,
    /// BACKING when the command line names none (only the file gives it).
    pub backing: Option<PathBuf>,
    /// MOUNTPOINT when the command line names none (only the file gives it).
    pub mountpoint: Option<PathBuf>,
    /// Generic mount flags (`--mount-flags`): `ro`, `noexec`, ...
    pub mount_flags: Option<String>,
    /// `[[tier]]` tables or `--tier` flags, in order from the top.
    #[serde(rename = "tier")]
    pub tiers: Option<Vec<TierTable>>,
    /// The daemon's log level: error|warn|info|debug|trace (`TIERCACHE_LOG` overrides it).
    pub log_level: Option<String>,
    /// `[[class]]` tables or `--class` flags (flags replace the file's classes).
    #[serde(rename = "class")]
    pub classes: Option<Vec<super::classes::ClassToml>>,
}

impl MountOptions {
    /// `self` (the flags) over `file`: each field from `self` if given, else from `file`.
    pub fn over(self, file: MountOptions) -> MountOptions {
        // Destructured so that a new field cannot be left out of the merge.
        let MountOptions {
            memory,
            block_size,
            priority,
            priority_recursive,
            partition,
            omega,
            t_protected,
            t_normal,
            b_pmin,
            b_nmin,
            policy,
            emulate,
            backing_cache,
            kernel_cache,
            allow_other,
            trace_out,
            metrics,
            readahead,
            flush_interval_ms,
            dirty_expire_ms,
            threads,
            io_workers,
            entry_timeout,
            attr_timeout,
            backing_identity,
            transport,
            zero_copy,
            zero_copy_group,
            backing,
            mountpoint,
            mount_flags,
            tiers,
            log_level,
            classes,
        } = self;
        MountOptions {
            memory: memory.or(file.memory),
            block_size: block_size.or(file.block_size),
            priority: priority.or(file.priority),
            priority_recursive: priority_recursive.or(file.priority_recursive),
            partition: partition.or(file.partition),
            omega: omega.or(file.omega),
            t_protected: t_protected.or(file.t_protected),
            t_normal: t_normal.or(file.t_normal),
            b_pmin: b_pmin.or(file.b_pmin),
            b_nmin: b_nmin.or(file.b_nmin),
            policy: policy.or(file.policy),
            emulate: emulate.or(file.emulate),
            backing_cache: backing_cache.or(file.backing_cache),
            kernel_cache: kernel_cache.or(file.kernel_cache),
            allow_other: allow_other.or(file.allow_other),
            trace_out: trace_out.or(file.trace_out),
            metrics: metrics.or(file.metrics),
            readahead: readahead.or(file.readahead),
            flush_interval_ms: flush_interval_ms.or(file.flush_interval_ms),
            dirty_expire_ms: dirty_expire_ms.or(file.dirty_expire_ms),
            threads: threads.or(file.threads),
            io_workers: io_workers.or(file.io_workers),
            entry_timeout: entry_timeout.or(file.entry_timeout),
            attr_timeout: attr_timeout.or(file.attr_timeout),
            backing_identity: backing_identity.or(file.backing_identity),
            transport: transport.or(file.transport),
            zero_copy: zero_copy.or(file.zero_copy),
            zero_copy_group: zero_copy_group.or(file.zero_copy_group),
            backing: backing.or(file.backing),
            mountpoint: mountpoint.or(file.mountpoint),
            mount_flags: mount_flags.or(file.mount_flags),
            tiers: tiers.or(file.tiers),
            log_level: log_level.or(file.log_level),
            classes: classes.or(file.classes),
        }
    }
}

/// A size written as a number of bytes (`memory = 268435456`: a bare number counts bytes) or a
/// string with a unit (`memory = "256M"`).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum SizeValue {
    Bytes(u64),
    Text(String),
}

impl SizeValue {
    /// Written without a unit (a TOML integer, or a string of digits): a number of bytes.
    pub fn is_bare(&self) -> bool {
        match self {
            SizeValue::Bytes(_) => true,
            SizeValue::Text(t) => t.trim().bytes().all(|b| b.is_ascii_digit()),
        }
    }
    pub fn bytes(&self) -> Result<u64, ConfigError> {
        match self {
            SizeValue::Bytes(b) => Ok(*b),
            SizeValue::Text(t) => parse_size(t),
        }
    }
}

/// `kernel_cache = "priority"` (`"all"`, `"off"`), or a boolean (`true`: all, `false`: off).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum KernelCacheValue {
    Bool(bool),
    Text(String),
}

impl KernelCacheValue {
    pub fn mode(&self) -> Result<tiercache_fuse::KernelCacheMode, ConfigError> {
        match self {
            KernelCacheValue::Bool(true) => Ok(tiercache_fuse::KernelCacheMode::All),
            KernelCacheValue::Bool(false) => Ok(tiercache_fuse::KernelCacheMode::Off),
            KernelCacheValue::Text(t) => {
                t.parse().map_err(|e| ConfigError::invalid(format!("{e}")))
            }
        }
    }
}

/// `b_pmin = 300` or `b_pmin = "30%"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum SizeOrPercent {
    Blocks(u64),
    Text(String),
}

impl SizeOrPercent {
    pub fn as_text(&self) -> String {
        match self {
            SizeOrPercent::Blocks(b) => b.to_string(),
            SizeOrPercent::Text(t) => t.clone(),
        }
    }
}

/// A value and where the file gave it (`None`: from a flag).
#[derive(Debug, Clone)]
pub struct At<T> {
    pub value: T,
    pub span: Option<Range<usize>>,
}

impl<T> At<T> {
    pub fn flag(value: T) -> At<T> {
        At { value, span: None }
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for At<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = toml::Spanned::<T>::deserialize(d)?;
        Ok(At {
            span: Some(s.span()),
            value: s.into_inner(),
        })
    }
}

/// One `[[tier]]` table (or `--tier KIND:SIZE[:PLACEMENT]`), unchecked. `kind` is `memory` (at
/// most one, first; its `size`/`policy` are the top-level `memory`/`policy`) or `test` (an
/// in-memory, volatile lower tier for tests and experiments).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TierTable {
    pub kind: At<String>,
    pub name: Option<At<String>>,
    pub size: Option<At<SizeValue>>,
    pub policy: Option<At<String>>,
    pub placement: Option<At<String>>,
    pub read_latency_us: Option<At<u64>>,
    pub write_latency_us: Option<At<u64>>,
    pub accepts_dirty: Option<At<bool>>,
    /// Remote tier only (see `config_remote`): `memcached://HOST:PORT[,HOST:PORT...]`.
    pub servers: Option<At<String>>,
    pub key_file: Option<At<PathBuf>>,
    pub namespace: Option<At<String>>,
    /// Sequential-run threshold in blocks, or `"auto"`.
    pub threshold: Option<At<SizeValue>>,
    pub timeout_ms: Option<At<u64>>,
    /// Flash tier only (see `config_flash`).
    pub path: Option<At<PathBuf>>,
    pub mode: Option<At<String>>,
    pub seq_cutoff: Option<At<SizeValue>>,
    pub cleaner: Option<At<String>>,
    pub wait_ms: Option<At<u64>>,
    pub free_floor: Option<At<SizeOrPercent>>,
    pub dirty_max: Option<At<FractionValue>>,
    pub max_errors: Option<At<u64>>,
    pub io: Option<At<String>>,
    /// The `--tier` argument this came from; `None` for a `[[tier]]` table.
    #[serde(skip)]
    pub flag: Option<String>,
    /// Made or changed by the `--flash*` / `--remote*` flags: their prefix (`flash`,
    /// `remote`), so that a bad value set by one of them names that flag.
    #[serde(skip)]
    pub from_flags: Option<&'static str>,
}

impl TierTable {
    /// A table of `kind` with nothing else set (for tables made from flags).
    pub fn of_kind(kind: &str) -> TierTable {
        TierTable {
            kind: At::flag(kind.to_string()),
            name: None,
            size: None,
            policy: None,
            placement: None,
            read_latency_us: None,
            write_latency_us: None,
            accepts_dirty: None,
            servers: None,
            key_file: None,
            namespace: None,
            threshold: None,
            timeout_ms: None,
            path: None,
            mode: None,
            seq_cutoff: None,
            cleaner: None,
            wait_ms: None,
            free_floor: None,
            dirty_max: None,
            max_errors: None,
            io: None,
            flag: None,
            from_flags: None,
        }
    }

    /// Parses `--tier KIND:SIZE[:PLACEMENT]`.
    pub fn from_flag(arg: &str) -> Result<TierTable, ConfigError> {
        let parts: Vec<&str> = arg.split(':').collect();
        let (kind, size, placement) = match parts[..] {
            [k, s] => (k, s, None),
            [k, s, p] => (k, s, Some(p)),
            _ => {
                return Err(ConfigError::bad(
                    format!("--tier {arg}"),
                    "expected KIND:SIZE[:PLACEMENT], e.g. test:64M:exclusive",
                ))
            }
        };
        Ok(TierTable {
            size: Some(At::flag(SizeValue::Text(size.to_string()))),
            placement: placement.map(|p| At::flag(p.to_string())),
            flag: Some(arg.to_string()),
            ..TierTable::of_kind(kind)
        })
    }
}

/// A tier below the memory tier, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct LowerTierSpec {
    pub name: String,
    pub kind: LowerTierKind,
    /// 0 for a remote tier without `size`: sized from the servers' memory limits.
    pub capacity_bytes: u64,
    pub policy: PolicyKind,
    pub placement: Placement,
    pub read_latency: Duration,
    pub write_latency: Duration,
    pub accepts_dirty: bool,
    /// Kind `remote` only.
    pub remote: Option<RemoteSpec>,
    /// Kind `flash` only.
    pub flash: Option<FlashSpec>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LowerTierKind {
    /// In memory, volatile: for tests and experiments.
    Test,
    /// memcached servers (clean data only, encrypted).
    Remote,
    /// An SSD (file or block device): set-mapped, write-back, persistent.
    Flash,
}

/// A config file's path and text (for `FILE:LINE` in errors) and what it says.
#[derive(Debug, Default)]
pub struct ConfigFile {
    pub path: Option<PathBuf>,
    text: String,
    pub options: MountOptions,
}

impl ConfigFile {
    /// `FILE:LINE` of a value from this file, or `--tier ARG` for one from a flag.
    pub(super) fn place<T>(&self, table: &TierTable, at: &At<T>) -> String {
        self.place_span(table, &at.span)
    }

    /// [`ConfigFile::place`] for the common key `key` (`size`, `placement`): a value the
    /// `--flash*`/`--remote*` flags set names their flag.
    fn place_key<T>(&self, table: &TierTable, at: &At<T>, key: &str) -> String {
        match (at.span.is_none(), table.from_flags) {
            (true, Some(prefix)) if key == "size" && prefix == "flash" => "--flash".to_string(),
            (true, Some(prefix)) => format!("--{prefix}-{key}"),
            _ => self.place(table, at),
        }
    }

    pub(super) fn place_span(&self, table: &TierTable, span: &Option<Range<usize>>) -> String {
        match (span, &self.path, &table.flag) {
            (_, _, Some(arg)) => format!("--tier {arg}"),
            (Some(span), Some(path), None) => {
                format!("{}:{}", path.display(), line_of(&self.text, span.start))
            }
            _ => "[[tier]]".to_string(),
        }
    }

    /// Takes a memory `[[tier]]` out of the file's tiers into `memory`/`policy`; checks the
    /// rules that need no block size. Returns the memory tier's name.
    pub fn fold_memory_tier(&mut self) -> Result<String, ConfigError> {
        let Some(tiers) = self.options.tiers.take() else {
            return Ok("memory".to_string());
        };
        let mut name = "memory".to_string();
        let mut lower = Vec::new();
        for (i, t) in tiers.into_iter().enumerate() {
            if t.kind.value != "memory" {
                lower.push(t);
                continue;
            }
            let here = |at| self.place(&t, at);
            if i > 0 {
                return Err(ConfigError::bad(
                    here(&t.kind),
                    "the memory tier must be the first [[tier]] (at most one)",
                ));
            }
            if let Some(p) = &t.placement {
                return Err(ConfigError::bad(
                    self.place(&t, p),
                    "`placement` is for lower tiers, not the memory tier",
                ));
            }
            if let Some((span, key)) = test_only_key(&t) {
                return Err(ConfigError::bad(
                    self.place_span(&t, span),
                    format!("`{key}` is only for kind = \"test\", not \"memory\""),
                ));
            }
            if let Some((span, key)) = remote_only_key(&t) {
                return Err(ConfigError::bad(
                    self.place_span(&t, span),
                    format!("`{key}` is only for kind = \"remote\", not \"memory\""),
                ));
            }
            if let Some((span, key)) = flash_only_key(&t) {
                return Err(ConfigError::bad(
                    self.place_span(&t, span),
                    format!("`{key}` is only for kind = \"flash\", not \"memory\""),
                ));
            }
            if let Some(size) = &t.size {
                if self.options.memory.is_some() {
                    return Err(ConfigError::bad(
                        self.place(&t, size),
                        "memory tier `size` and top-level `memory` both given; keep one",
                    ));
                }
                size.value
                    .bytes()
                    .map_err(|e| e.at(format!("{}: size", self.place(&t, size))))?;
                self.options.memory = Some(size.value.clone());
            }
            if let Some(policy) = &t.policy {
                if self.options.policy.is_some() {
                    return Err(ConfigError::bad(
                        self.place(&t, policy),
                        "memory tier `policy` and top-level `policy` both given; keep one",
                    ));
                }
                policy.value.parse::<PolicyKind>().map_err(|e| {
                    ConfigError::bad(format!("{}: policy", self.place(&t, policy)), e.to_string())
                })?;
                self.options.policy = Some(policy.value.clone());
            }
            if let Some(n) = &t.name {
                name = checked_name(n).map_err(|e| e.at(self.place(&t, n)))?;
            }
        }
        self.options.tiers = Some(lower);
        Ok(name)
    }

    /// A `[[tier]]`'s kind, checked against the keys it uses, with its remote or flash
    /// settings.
    fn tier_kind(
        &self,
        t: &TierTable,
    ) -> Result<(LowerTierKind, Option<RemoteSpec>, Option<FlashSpec>), ConfigError> {
        let here = |at| self.place(t, at);
        let kind = match t.kind.value.as_str() {
            "test" => LowerTierKind::Test,
            "remote" => LowerTierKind::Remote,
            "flash" => LowerTierKind::Flash,
            "memory" => {
                return Err(ConfigError::bad(
                    here(&t.kind),
                    "the memory tier is set with --memory and --policy (or a first \
                 [[tier]] in the config file)",
                ))
            }
            other => {
                return Err(ConfigError::bad(
                    here(&t.kind),
                    format!("unknown tier kind `{other}` (expected memory|test|flash|remote)"),
                ))
            }
        };
        if kind != LowerTierKind::Flash {
            if let Some((span, key)) = flash_only_key(t) {
                return Err(ConfigError::bad(
                    self.place_span(t, span),
                    format!("`{key}` is only for kind = \"flash\""),
                ));
            }
        }
        let remote = match kind {
            LowerTierKind::Remote => Some(self.remote_spec(t)?),
            LowerTierKind::Test => {
                if let Some((span, key)) = remote_only_key(t) {
                    return Err(ConfigError::bad(
                        self.place_span(t, span),
                        format!("`{key}` is only for kind = \"remote\""),
                    ));
                }
                None
            }
            LowerTierKind::Flash => None,
        };
        let flash = match kind {
            LowerTierKind::Flash => Some(self.flash_spec(t)?),
            _ => None,
        };
        Ok((kind, remote, flash))
    }

    /// A `[[tier]]`'s `size` in bytes (0 where the tier finds it itself), at least a block.
    fn tier_capacity(
        &self,
        t: &TierTable,
        kind: LowerTierKind,
        block_size: u64,
    ) -> Result<u64, ConfigError> {
        let here = |at| self.place(t, at);
        let capacity_bytes = match (&t.size, kind) {
            (Some(size), _) => size
                .value
                .bytes()
                .map_err(|e| e.at(format!("{}: size", self.place_key(t, size, "size"))))?,
            // Remote: the servers' limits; flash: the existing cache's own size.
            (None, LowerTierKind::Remote | LowerTierKind::Flash) => 0,
            (None, _) => {
                return Err(ConfigError::bad(
                    here(&t.kind),
                    format!("a {} tier needs `size`", t.kind.value),
                ))
            }
        };
        if let (Some(size), true) = (&t.size, capacity_bytes < block_size) {
            return Err(ConfigError::bad(
                self.place_key(t, size, "size"),
                format!("size: {capacity_bytes} bytes is less than one block of {block_size}"),
            ));
        }
        Ok(capacity_bytes)
    }

    /// A `[[tier]]`'s placement; `first`: the first tier below memory.
    fn tier_placement(
        &self,
        t: &TierTable,
        kind: LowerTierKind,
        first: bool,
    ) -> Result<Placement, ConfigError> {
        Ok(match &t.placement {
            // Paper 002 stores on a miss; a test tier demotes by default.
            // Paper 001 allocates on a read miss too.
            None if matches!(kind, LowerTierKind::Remote | LowerTierKind::Flash) => {
                Placement::Inclusive
            }
            // Further down, exclusive (evictions cascade into it) is asked for by name.
            None if !first => Placement::Inclusive,
            None => Placement::Exclusive,
            Some(p) => match p.value.parse::<Placement>() {
                Ok(pl) => pl,
                Err(_) => {
                    return Err(ConfigError::bad(
                        self.place_key(t, p, "placement"),
                        format!(
                            "unknown placement `{}` (expected inclusive|exclusive|pinned\
                     [=FIRST_BLOCK])",
                            p.value
                        ),
                    ))
                }
            },
        })
    }

    /// Checks lower `tiers` (from this file, or `--tier` flags) against a block of
    /// `block_size` bytes; every name differs from `memory_name` and from each other.
    pub fn lower_tiers(
        &self,
        tiers: &[TierTable],
        block_size: u64,
        memory_name: &str,
    ) -> Result<Vec<LowerTierSpec>, ConfigError> {
        let mut specs: Vec<LowerTierSpec> = Vec::new();
        for t in tiers {
            let here = |at| self.place(t, at);
            let (kind, remote, flash) = self.tier_kind(t)?;
            let capacity_bytes = self.tier_capacity(t, kind, block_size)?;
            let policy = match &t.policy {
                Some(p) => {
                    p.value
                        .parse()
                        .map_err(|e: <PolicyKind as std::str::FromStr>::Err| {
                            ConfigError::bad(format!("{}: policy", self.place(t, p)), e.to_string())
                        })?
                }
                None => PolicyKind::Lru,
            };
            let placement = self.tier_placement(t, kind, specs.is_empty())?;
            let name = match &t.name {
                Some(n) => checked_name(n).map_err(|e| e.at(self.place(t, n)))?,
                // Repeated `--tier` flags cannot name their tiers: test, test2, test3, ...
                None if t.flag.is_some() => {
                    let same = specs.iter().filter(|s| s.kind == kind).count();
                    match same {
                        0 => t.kind.value.clone(),
                        n => format!("{}{}", t.kind.value, n + 1),
                    }
                }
                None => t.kind.value.clone(),
            };
            if name == memory_name || specs.iter().any(|s| s.name == name) {
                let at = here(t.name.as_ref().unwrap_or(&t.kind));
                return Err(ConfigError::bad(
                    at,
                    format!("tier name `{name}` is used twice (give each tier its own `name`)"),
                ));
            }
            let us = |v: &Option<At<u64>>| Duration::from_micros(v.as_ref().map_or(0, |a| a.value));
            specs.push(LowerTierSpec {
                name,
                kind,
                capacity_bytes,
                policy,
                placement,
                read_latency: us(&t.read_latency_us),
                write_latency: us(&t.write_latency_us),
                accepts_dirty: t.accepts_dirty.as_ref().is_some_and(|a| a.value),
                remote,
                flash,
            });
        }
        Ok(specs)
    }
}

/// The first key given that only a `test` tier takes, and where.
pub(super) fn test_only_key(t: &TierTable) -> Option<(&Option<Range<usize>>, &'static str)> {
    let spans = [
        (
            t.read_latency_us.as_ref().map(|a| &a.span),
            "read_latency_us",
        ),
        (
            t.write_latency_us.as_ref().map(|a| &a.span),
            "write_latency_us",
        ),
        (t.accepts_dirty.as_ref().map(|a| &a.span), "accepts_dirty"),
    ];
    spans.into_iter().find_map(|(s, key)| s.map(|s| (s, key)))
}

fn checked_name(n: &At<String>) -> Result<String, ConfigError> {
    let v = n.value.trim();
    if v.is_empty() {
        return Err(ConfigError::bad("name", "must not be empty"));
    }
    Ok(v.to_string())
}

/// 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// Reads and parses `path`; errors are one line: `FILE:LINE: message`.
pub fn load(path: &Path) -> Result<ConfigFile, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    ConfigFile::from_text(path, text)
}

impl ConfigFile {
    /// Parses `text` read from `path`.
    pub fn from_text(path: &Path, text: String) -> Result<ConfigFile, ConfigError> {
        let options = parse(&text).map_err(|(line, message)| ConfigError::Syntax {
            path: path.to_path_buf(),
            line,
            message,
        })?;
        Ok(ConfigFile {
            path: Some(path.to_path_buf()),
            text,
            options,
        })
    }
}

/// Parses TOML text; the error carries the 1-based line.
pub fn parse(text: &str) -> Result<MountOptions, (usize, String)> {
    toml::from_str::<MountOptions>(text).map_err(|e| {
        let line = e.span().map_or(1, |s| line_of(text, s.start));
        (line, e.message().trim().replace('\n', " "))
    })
}

/// The command line a background mount restarts itself with (plus `--foreground`).
#[derive(Debug, Clone)]
pub struct RespawnArgs(pub Vec<OsString>);

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
