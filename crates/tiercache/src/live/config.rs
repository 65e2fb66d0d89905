//! Mount settings: `tiercache mount` flags over an optional TOML file (`--config`); flags win.
//!
//! File and flags fill one [`MountOptions`] each (every field optional; the flags converted by
//! `cmd::mount`); [`MountOptions::over`] takes each field from the flags when they give it, else
//! from the file. TOML keys mirror the flags: `memory`, `block_size`, `priority` (list),
//! `priority_recursive` (list), `partition`, `omega`, `t_protected`, `t_normal`, `b_pmin`,
//! `b_nmin`, `policy`, `emulate`, `kernel_cache`, `allow_other`, `trace_out`, `metrics`,
//! `readahead`, `flush_interval_ms`, `dirty_expire_ms`, `threads`, `entry_timeout`,
//! `backing_identity`,
//! `attr_timeout`, and `[[tier]]` tables (see [`TierTable`]). An unknown key or a bad value is an
//! error naming the file and line.

use super::config_remote::{remote_only_key, RemoteSpec};
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
    pub kernel_cache: Option<bool>,
    pub allow_other: Option<bool>,
    pub trace_out: Option<PathBuf>,
    pub metrics: Option<String>,
    pub readahead: Option<u32>,
    pub flush_interval_ms: Option<u64>,
    pub dirty_expire_ms: Option<u64>,
    pub threads: Option<usize>,
    pub entry_timeout: Option<f64>,
    pub attr_timeout: Option<f64>,
    /// `auto`, `caller` or `daemon` (see `tiercache_fuse::BackingIdentity`).
    pub backing_identity: Option<String>,
    /// `[[tier]]` tables or `--tier` flags, in order from the top.
    #[serde(rename = "tier")]
    pub tiers: Option<Vec<TierTable>>,
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
            kernel_cache,
            allow_other,
            trace_out,
            metrics,
            readahead,
            flush_interval_ms,
            dirty_expire_ms,
            threads,
            entry_timeout,
            attr_timeout,
            backing_identity,
            tiers,
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
            kernel_cache: kernel_cache.or(file.kernel_cache),
            allow_other: allow_other.or(file.allow_other),
            trace_out: trace_out.or(file.trace_out),
            metrics: metrics.or(file.metrics),
            readahead: readahead.or(file.readahead),
            flush_interval_ms: flush_interval_ms.or(file.flush_interval_ms),
            dirty_expire_ms: dirty_expire_ms.or(file.dirty_expire_ms),
            threads: threads.or(file.threads),
            entry_timeout: entry_timeout.or(file.entry_timeout),
            attr_timeout: attr_timeout.or(file.attr_timeout),
            backing_identity: backing_identity.or(file.backing_identity),
            tiers: tiers.or(file.tiers),
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
    pub fn bytes(&self) -> Result<u64, String> {
        match self {
            SizeValue::Bytes(b) => Ok(*b),
            SizeValue::Text(t) => parse_size(t),
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
    /// The `--tier` argument this came from; `None` for a `[[tier]]` table.
    #[serde(skip)]
    pub flag: Option<String>,
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
            flag: None,
        }
    }

    /// Parses `--tier KIND:SIZE[:PLACEMENT]`.
    pub fn from_flag(arg: &str) -> Result<TierTable, String> {
        let parts: Vec<&str> = arg.split(':').collect();
        let (kind, size, placement) = match parts[..] {
            [k, s] => (k, s, None),
            [k, s, p] => (k, s, Some(p)),
            _ => {
                return Err(format!(
                    "--tier {arg}: expected KIND:SIZE[:PLACEMENT], e.g. test:64M:exclusive"
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
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LowerTierKind {
    /// In memory, volatile: for tests and experiments.
    Test,
    /// memcached servers (clean data only, encrypted).
    Remote,
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
    pub fn fold_memory_tier(&mut self) -> Result<String, String> {
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
                return Err(format!(
                    "{}: the memory tier must be the first [[tier]] (at most one)",
                    here(&t.kind)
                ));
            }
            if let Some(p) = &t.placement {
                return Err(format!(
                    "{}: `placement` is for lower tiers, not the memory tier",
                    self.place(&t, p)
                ));
            }
            if let Some((span, key)) = test_only_key(&t) {
                return Err(format!(
                    "{}: `{key}` is only for kind = \"test\", not \"memory\"",
                    self.place_span(&t, span)
                ));
            }
            if let Some((span, key)) = remote_only_key(&t) {
                return Err(format!(
                    "{}: `{key}` is only for kind = \"remote\", not \"memory\"",
                    self.place_span(&t, span)
                ));
            }
            if let Some(size) = &t.size {
                if self.options.memory.is_some() {
                    return Err(format!(
                        "{}: memory tier `size` and top-level `memory` both given; keep one",
                        self.place(&t, size)
                    ));
                }
                size.value
                    .bytes()
                    .map_err(|e| format!("{}: size: {e}", self.place(&t, size)))?;
                self.options.memory = Some(size.value.clone());
            }
            if let Some(policy) = &t.policy {
                if self.options.policy.is_some() {
                    return Err(format!(
                        "{}: memory tier `policy` and top-level `policy` both given; keep one",
                        self.place(&t, policy)
                    ));
                }
                policy
                    .value
                    .parse::<PolicyKind>()
                    .map_err(|e| format!("{}: policy: {e}", self.place(&t, policy)))?;
                self.options.policy = Some(policy.value.clone());
            }
            if let Some(n) = &t.name {
                name = checked_name(n).map_err(|e| format!("{}: {e}", self.place(&t, n)))?;
            }
        }
        self.options.tiers = Some(lower);
        Ok(name)
    }

    /// Checks lower `tiers` (from this file, or `--tier` flags) against a block of
    /// `block_size` bytes; every name differs from `memory_name` and from each other.
    pub fn lower_tiers(
        &self,
        tiers: &[TierTable],
        block_size: u64,
        memory_name: &str,
    ) -> Result<Vec<LowerTierSpec>, String> {
        let mut specs: Vec<LowerTierSpec> = Vec::new();
        for t in tiers {
            let here = |at| self.place(t, at);
            let kind = match t.kind.value.as_str() {
                "test" => LowerTierKind::Test,
                "remote" => LowerTierKind::Remote,
                "memory" => {
                    return Err(format!(
                        "{}: the memory tier is set with --memory and --policy (or a first \
                         [[tier]] in the config file)",
                        here(&t.kind)
                    ))
                }
                other => {
                    return Err(format!(
                        "{}: unknown tier kind `{other}` (expected memory|test|remote; the SSD \
                         tier is not implemented yet)",
                        here(&t.kind)
                    ))
                }
            };
            let remote = match kind {
                LowerTierKind::Remote => Some(self.remote_spec(t)?),
                LowerTierKind::Test => {
                    if let Some((span, key)) = remote_only_key(t) {
                        return Err(format!(
                            "{}: `{key}` is only for kind = \"remote\"",
                            self.place_span(t, span)
                        ));
                    }
                    None
                }
            };
            let capacity_bytes = match (&t.size, kind) {
                (Some(size), _) => size
                    .value
                    .bytes()
                    .map_err(|e| format!("{}: size: {e}", self.place(t, size)))?,
                (None, LowerTierKind::Remote) => 0,
                (None, _) => {
                    return Err(format!(
                        "{}: a {} tier needs `size`",
                        here(&t.kind),
                        t.kind.value
                    ))
                }
            };
            if let (Some(size), true) = (&t.size, capacity_bytes < block_size) {
                return Err(format!(
                    "{}: size: {capacity_bytes} bytes is less than one block of {block_size}",
                    self.place(t, size)
                ));
            }
            let policy = match &t.policy {
                Some(p) => p
                    .value
                    .parse()
                    .map_err(|e| format!("{}: policy: {e}", self.place(t, p)))?,
                None => PolicyKind::Lru,
            };
            let placement = match &t.placement {
                // Paper 002 stores on a miss; a test tier demotes by default.
                None if kind == LowerTierKind::Remote => Placement::Inclusive,
                // Only the first lower tier can be exclusive (see below).
                None if !specs.is_empty() => Placement::Inclusive,
                None => Placement::Exclusive,
                Some(p) => match p.value.parse::<Placement>() {
                    Ok(Placement::Pinned { .. }) => {
                        return Err(format!(
                            "{}: placement `{}` is not supported yet (inclusive|exclusive)",
                            self.place(t, p),
                            p.value
                        ))
                    }
                    Ok(pl) => pl,
                    Err(_) => {
                        return Err(format!(
                            "{}: unknown placement `{}` (expected inclusive|exclusive)",
                            self.place(t, p),
                            p.value
                        ))
                    }
                },
            };
            if placement == Placement::Exclusive && !specs.is_empty() {
                let at = t
                    .placement
                    .as_ref()
                    .map_or_else(|| here(&t.kind), |p| self.place(t, p));
                return Err(format!(
                    "{at}: only the tier right below memory may be exclusive (evictions from \
                     lower tiers are not passed further down yet); use inclusive"
                ));
            }
            let name = match &t.name {
                Some(n) => checked_name(n).map_err(|e| format!("{}: {e}", self.place(t, n)))?,
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
                return Err(format!(
                    "{at}: tier name `{name}` is used twice (give each tier its own `name`)"
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

fn checked_name(n: &At<String>) -> Result<String, String> {
    let v = n.value.trim();
    if v.is_empty() {
        return Err("name: must not be empty".to_string());
    }
    Ok(v.to_string())
}

/// 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// Reads and parses `path`; errors are one line: `FILE:LINE: message`.
pub fn load(path: &Path) -> Result<ConfigFile, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    ConfigFile::from_text(path, text)
}

impl ConfigFile {
    /// Parses `text` read from `path`.
    pub fn from_text(path: &Path, text: String) -> Result<ConfigFile, String> {
        let options =
            parse(&text).map_err(|(line, msg)| format!("{}:{line}: {msg}", path.display()))?;
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

impl RespawnArgs {
    /// This process's arguments, without the program name.
    pub fn of_this_process() -> RespawnArgs {
        RespawnArgs(std::env::args_os().skip(1).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_known_keys() {
        let c =
            parse("memory = \"64M\"\npriority = [\"www/top\"]\nb_pmin = \"30%\"\nomega = 100\n")
                .unwrap();
        assert_eq!(c.memory.unwrap().bytes().unwrap(), 64 << 20);
        assert_eq!(c.priority, Some(vec![PathBuf::from("www/top")]));
        assert_eq!(c.b_pmin.unwrap().as_text(), "30%");
    }

    #[test]
    fn unknown_key_names_its_line() {
        let (line, msg) = parse("memory = \"64M\"\n\ncolour = \"red\"\n").unwrap_err();
        assert_eq!(line, 3);
        assert!(msg.contains("colour"), "{msg}");
        let (line, _) = parse("memory = \"64M\"\nomega = \"many\"\n").unwrap_err();
        assert_eq!(line, 2);
        let (line, msg) =
            parse("[[tier]]\nkind = \"test\"\nsize = \"1M\"\nspeed = 3\n").unwrap_err();
        assert_eq!(line, 4, "{msg}");
        assert!(msg.contains("speed"), "{msg}");
    }

    #[test]
    fn flags_win_field_by_field() {
        let file = parse("memory = \"64M\"\npolicy = \"arc\"\nthreads = 4\n").unwrap();
        let flags = MountOptions {
            memory: Some(SizeValue::Text("8M".into())),
            threads: None,
            ..MountOptions::default()
        };
        let m = flags.over(file);
        assert_eq!(m.memory.unwrap().bytes().unwrap(), 8 << 20);
        assert_eq!(m.policy.as_deref(), Some("arc"));
        assert_eq!(m.threads, Some(4));
    }

    fn file(text: &str) -> ConfigFile {
        ConfigFile {
            path: Some(PathBuf::from("tc.toml")),
            text: text.to_string(),
            options: parse(text).unwrap(),
        }
    }

    /// The lower tiers of `text` with 4 KiB blocks, or the error.
    fn lower(text: &str) -> Result<Vec<LowerTierSpec>, String> {
        let mut f = file(text);
        let mem = f.fold_memory_tier()?;
        let tiers = f.options.tiers.clone().unwrap_or_default();
        f.lower_tiers(&tiers, 4096, &mem)
    }

    #[test]
    fn tiers_parse_with_defaults() {
        let text = "[[tier]]\nkind = \"memory\"\nsize = \"64M\"\npolicy = \"sieve\"\n\n\
                    [[tier]]\nkind = \"test\"\nsize = \"1G\"\n\n\
                    [[tier]]\nkind = \"test\"\nname = \"slow\"\nsize = 65536\npolicy = \"arc\"\n\
                    placement = \"inclusive\"\nread_latency_us = 100\nwrite_latency_us = 200\n\
                    accepts_dirty = true\n";
        let mut f = file(text);
        assert_eq!(f.fold_memory_tier().unwrap(), "memory");
        assert_eq!(
            f.options.memory.as_ref().unwrap().bytes().unwrap(),
            64 << 20
        );
        assert_eq!(f.options.policy.as_deref(), Some("sieve"));
        let tiers = f.options.tiers.clone().unwrap();
        let specs = f.lower_tiers(&tiers, 4096, "memory").unwrap();
        assert_eq!(
            specs,
            vec![
                LowerTierSpec {
                    name: "test".into(),
                    kind: LowerTierKind::Test,
                    capacity_bytes: 1 << 30,
                    policy: PolicyKind::Lru,
                    placement: Placement::Exclusive,
                    read_latency: Duration::ZERO,
                    write_latency: Duration::ZERO,
                    accepts_dirty: false,
                    remote: None,
                },
                LowerTierSpec {
                    name: "slow".into(),
                    kind: LowerTierKind::Test,
                    capacity_bytes: 65536,
                    policy: PolicyKind::Arc,
                    placement: Placement::Inclusive,
                    read_latency: Duration::from_micros(100),
                    write_latency: Duration::from_micros(200),
                    accepts_dirty: true,
                    remote: None,
                },
            ]
        );
    }

    #[test]
    fn tier_errors_name_file_and_line() {
        let cases = [
            ("[[tier]]\nkind = \"ssd\"\nsize = \"1G\"\n", "tc.toml:2:", "unknown tier kind `ssd`"),
            ("[[tier]]\nkind = \"test\"\nsize = \"1K\"\n", "tc.toml:3:", "less than one block"),
            ("[[tier]]\nkind = \"test\"\nsize = \"1Q\"\n", "tc.toml:3:", "not a size"),
            ("[[tier]]\nkind = \"test\"\n", "tc.toml:2:", "needs `size`"),
            (
                "[[tier]]\nkind = \"test\"\nsize = \"1M\"\nplacement = \"pinned\"\n",
                "tc.toml:4:",
                "not supported yet",
            ),
            (
                "[[tier]]\nkind = \"test\"\nsize = \"1M\"\nplacement = \"sideways\"\n",
                "tc.toml:4:",
                "unknown placement",
            ),
            (
                "[[tier]]\nkind = \"test\"\nsize = \"1M\"\npolicy = \"random\"\n",
                "tc.toml:4:",
                "policy",
            ),
            (
                "[[tier]]\nkind = \"test\"\nsize = \"1M\"\n[[tier]]\nkind = \"test\"\nsize = \"2M\"\n",
                "tc.toml:5:",
                "`test` is used twice",
            ),
            (
                "[[tier]]\nkind = \"test\"\nsize = \"1M\"\n[[tier]]\nkind = \"memory\"\n",
                "tc.toml:5:",
                "must be the first",
            ),
            (
                "memory = \"64M\"\n[[tier]]\nkind = \"memory\"\nsize = \"32M\"\n",
                "tc.toml:4:",
                "both given",
            ),
            (
                "policy = \"lru\"\n[[tier]]\nkind = \"memory\"\npolicy = \"arc\"\n",
                "tc.toml:4:",
                "both given",
            ),
            (
                "[[tier]]\nkind = \"memory\"\n\npolicy = \"random\"\n",
                "tc.toml:4:",
                "policy",
            ),
            (
                "[[tier]]\nkind = \"memory\"\nplacement = \"inclusive\"\n",
                "tc.toml:3:",
                "not the memory tier",
            ),
            (
                "[[tier]]\nkind = \"memory\"\nread_latency_us = 5\n",
                "tc.toml:3:",
                "only for kind = \"test\"",
            ),
            (
                "[[tier]]\nkind = \"memory\"\nname = \"fast\"\n[[tier]]\nkind = \"test\"\n\
                 name = \"fast\"\nsize = \"1M\"\n",
                "tc.toml:6:",
                "`fast` is used twice",
            ),
        ];
        for (text, place, needle) in cases {
            let err = lower(text).unwrap_err();
            assert!(err.starts_with(place), "{text:?}: {err}");
            assert!(err.contains(needle), "{text:?}: {err}");
            assert_eq!(err.lines().count(), 1, "{err}");
        }
    }

    #[test]
    fn tier_flags_parse_and_name_themselves() {
        let f = ConfigFile::default();
        let flags: Vec<TierTable> = ["test:64M:exclusive", "test:1G", "test:8M:inclusive"]
            .iter()
            .map(|a| TierTable::from_flag(a).unwrap())
            .collect();
        let specs = f.lower_tiers(&flags, 4096, "memory").unwrap();
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["test", "test2", "test3"]);
        assert_eq!(specs[0].capacity_bytes, 64 << 20);
        // Below the first lower tier the default is inclusive (exclusive is refused there).
        assert_eq!(specs[1].placement, Placement::Inclusive);
        assert_eq!(specs[2].placement, Placement::Inclusive);
        let two = ["test:1M", "test:1M:exclusive"].map(|a| TierTable::from_flag(a).unwrap());
        let err = f.lower_tiers(&two, 4096, "memory").unwrap_err();
        assert!(
            err.starts_with("--tier test:1M:exclusive: only the tier right below memory"),
            "{err}"
        );
        for (arg, needle) in [
            ("test", "expected KIND:SIZE[:PLACEMENT]"),
            ("test:1M:exclusive:x", "expected KIND:SIZE[:PLACEMENT]"),
        ] {
            let err = TierTable::from_flag(arg).unwrap_err();
            assert!(err.starts_with(&format!("--tier {arg}: ")), "{err}");
            assert!(err.contains(needle), "{err}");
        }
        for (arg, needle) in [
            ("ssd:1G", "unknown tier kind `ssd`"),
            ("memory:1G", "--memory"),
            ("test:100", "less than one block"),
            ("test:1M:pinned", "not supported yet"),
        ] {
            let t = TierTable::from_flag(arg).unwrap();
            let err = f.lower_tiers(&[t], 4096, "memory").unwrap_err();
            assert!(err.starts_with(&format!("--tier {arg}: ")), "{err}");
            assert!(err.contains(needle), "{err}");
        }
    }
}
