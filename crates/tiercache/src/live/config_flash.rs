//! The SSD tier's settings: the keys of a `[[tier]] kind = "flash"` table and the `--flash*`
//! flags of `tiercache mount`, checked into a [`FlashSpec`].
//!
//! Keys: `path` (a file, created and preallocated when missing, or a block device; required),
//! `size` (needed to create a file; an existing cache keeps its own), `mode`
//! (`writeback|writethrough|writearound`, default writeback), `seq_cutoff` (bytes of a
//! contiguous stream from which it goes straight to BACKING, default 4M), `cleaner`
//! (`idle|eager`, default idle), `wait_ms` (quiet time before idle cleaning, default 1000),
//! `free_floor` (sets without dirty data cleaning aims for: a count or a percentage of the
//! sets, default 10%), `dirty_max` (dirty fraction above which cleaning runs even when busy:
//! `0.8` or `"80%"`, default 80%), `max_errors` (device errors before the tier is detached,
//! default 16), `io` (`auto|fadvise|dontcache|direct|buffered`: how the cache file is read
//! and written, default auto: see `tiercache_flash::IoMode`), plus the common `name`,
//! `placement` (default inclusive: 001 allocates on read miss).

use super::config::{test_only_key, At, ConfigFile, SizeOrPercent, SizeValue, TierTable};
use super::config_remote::remote_only_key;
use super::error::ConfigError;
use serde::Deserialize;
use std::ops::Range;
use std::path::PathBuf;
use std::time::Duration;
use tiercache_flash::IoChoice;

/// Default `--flash-seq-cutoff`: 4 MiB.
pub const DEFAULT_SEQ_CUTOFF: u64 = 4 << 20;
/// Default `--flash-wait`.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(1);
/// Default `--flash-free-floor`, percent of the sets.
pub const DEFAULT_FREE_FLOOR_PERCENT: f64 = 10.0;
/// Default `--flash-dirty-max`.
pub const DEFAULT_DIRTY_MAX: f64 = 0.8;
/// Default `--flash-max-errors`.
pub const DEFAULT_MAX_ERRORS: u64 = 16;

/// How writes use the SSD tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlashMode {
    /// Write-back lands in the tier (dirty) and is cleaned to BACKING later.
    Writeback,
    /// Write-back goes to BACKING and a clean copy into the tier.
    Writethrough,
    /// Write-back goes to BACKING only; the tier caches reads.
    Writearound,
}

impl std::str::FromStr for FlashMode {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, ConfigError> {
        match s {
            "writeback" => Ok(FlashMode::Writeback),
            "writethrough" => Ok(FlashMode::Writethrough),
            "writearound" => Ok(FlashMode::Writearound),
            _ => Err(ConfigError::invalid(format!(
                "unknown mode `{s}` (expected writeback|writethrough|writearound)"
            ))),
        }
    }
}

/// Idle-time (paper 001) or request-path cleaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CleanerKind {
    Idle,
    Eager,
}

/// `free_floor`: sets, or a percentage of the tier's sets (known once it is opened).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Floor {
    Sets(u32),
    Percent(f64),
}

impl Floor {
    /// The floor for a tier of `sets` sets (at least 1 when there is any set).
    pub fn sets(&self, sets: u32) -> u32 {
        match *self {
            Floor::Sets(n) => n.min(sets),
            Floor::Percent(p) => {
                ((f64::from(sets) * p / 100.0).ceil() as u32).clamp(1, sets.max(1))
            }
        }
    }
}

/// `dirty_max = 0.8` or `dirty_max = "80%"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum FractionValue {
    Number(f64),
    Text(String),
}

/// An SSD tier, checked (the device is opened when the mount starts).
#[derive(Debug, Clone, PartialEq)]
pub struct FlashSpec {
    pub path: PathBuf,
    /// Bytes to create the cache file with (`None`: it must exist already).
    pub size: Option<u64>,
    pub mode: FlashMode,
    pub seq_cutoff: u64,
    pub cleaner: CleanerKind,
    pub wait: Duration,
    pub free_floor: Floor,
    pub dirty_max: f64,
    pub max_errors: u64,
    /// How the cache file is read and written (what it leaves in the page cache).
    pub io: IoChoice,
}

/// The `--flash*` flags of `tiercache mount`.
#[derive(Debug, Clone, Default)]
pub struct FlashFlags {
    /// `PATH[:SIZE]`.
    pub device: Option<String>,
    pub mode: Option<String>,
    pub seq_cutoff: Option<String>,
    pub cleaner: Option<String>,
    pub wait_ms: Option<u64>,
    pub free_floor: Option<String>,
    pub dirty_max: Option<String>,
    pub max_errors: Option<u64>,
    pub placement: Option<String>,
    pub io: Option<String>,
}

impl FlashFlags {
    fn any(&self) -> bool {
        self.device.is_some()
            || self.mode.is_some()
            || self.seq_cutoff.is_some()
            || self.cleaner.is_some()
            || self.wait_ms.is_some()
            || self.free_floor.is_some()
            || self.dirty_max.is_some()
            || self.max_errors.is_some()
            || self.placement.is_some()
            || self.io.is_some()
    }
}

/// Splits `PATH[:SIZE]`: the part after the last `:` is a size when it parses as one.
fn split_device(arg: &str) -> (PathBuf, Option<String>) {
    if let Some((p, s)) = arg.rsplit_once(':') {
        if !p.is_empty() && super::size::parse_size(s).is_ok() {
            return (PathBuf::from(p), Some(s.to_string()));
        }
    }
    (PathBuf::from(arg), None)
}

/// Applies the `--flash*` flags to the lower tiers: with one flash tier there, the flags change
/// its keys; with none, `--flash PATH[:SIZE]` adds one right below memory (memory → flash →
/// remote → BACKING).
pub fn apply_flash_flags(
    tiers: Option<Vec<TierTable>>,
    f: &FlashFlags,
) -> Result<Option<Vec<TierTable>>, ConfigError> {
    if !f.any() {
        return Ok(tiers);
    }
    let mut tiers = tiers.unwrap_or_default();
    let flashes = tiers.iter().filter(|t| t.kind.value == "flash").count();
    if flashes > 1 {
        return Err(ConfigError::bad(
            "--flash*",
            "the config file has several flash tiers; set them there",
        ));
    }
    if flashes == 0 {
        if f.device.is_none() {
            return Err(ConfigError::bad(
                "--flash-*",
                "no flash tier to apply it to (give --flash PATH[:SIZE], or a \
                 [[tier]] kind = \"flash\" in the config file)",
            ));
        }
        tiers.insert(0, TierTable::of_kind("flash"));
    }
    let Some(t) = tiers.iter_mut().find(|t| t.kind.value == "flash") else {
        return Err(ConfigError::bad("--flash", "internal error: no tier"));
    };
    t.from_flags = Some("flash");
    if let Some(dev) = &f.device {
        let (path, size) = split_device(dev);
        t.path = Some(At::flag(path));
        if let Some(s) = size {
            t.size = Some(At::flag(SizeValue::Text(s)));
        }
    }
    let text = |v: &Option<String>| v.as_ref().map(|s| At::flag(s.clone()));
    if f.mode.is_some() {
        t.mode = text(&f.mode);
    }
    if let Some(c) = &f.seq_cutoff {
        t.seq_cutoff = Some(At::flag(SizeValue::Text(c.clone())));
    }
    if f.cleaner.is_some() {
        t.cleaner = text(&f.cleaner);
    }
    if let Some(ms) = f.wait_ms {
        t.wait_ms = Some(At::flag(ms));
    }
    if let Some(v) = &f.free_floor {
        t.free_floor = Some(At::flag(SizeOrPercent::Text(v.clone())));
    }
    if let Some(v) = &f.dirty_max {
        t.dirty_max = Some(At::flag(FractionValue::Text(v.clone())));
    }
    if let Some(n) = f.max_errors {
        t.max_errors = Some(At::flag(n));
    }
    if f.placement.is_some() {
        t.placement = text(&f.placement);
    }
    if f.io.is_some() {
        t.io = text(&f.io);
    }
    Ok(Some(tiers))
}

/// The first key given that only a `flash` tier takes, and where.
pub(super) fn flash_only_key(t: &TierTable) -> Option<(&Option<Range<usize>>, &'static str)> {
    let spans = [
        (t.path.as_ref().map(|a| &a.span), "path"),
        (t.mode.as_ref().map(|a| &a.span), "mode"),
        (t.seq_cutoff.as_ref().map(|a| &a.span), "seq_cutoff"),
        (t.cleaner.as_ref().map(|a| &a.span), "cleaner"),
        (t.wait_ms.as_ref().map(|a| &a.span), "wait_ms"),
        (t.free_floor.as_ref().map(|a| &a.span), "free_floor"),
        (t.dirty_max.as_ref().map(|a| &a.span), "dirty_max"),
        (t.max_errors.as_ref().map(|a| &a.span), "max_errors"),
        (t.io.as_ref().map(|a| &a.span), "io"),
    ];
    spans.into_iter().find_map(|(s, key)| s.map(|s| (s, key)))
}

/// Where a flash key came from: `FILE:LINE`, or the flag that set it.
fn place<T>(cf: &ConfigFile, t: &TierTable, at: &At<T>, flag: &str) -> String {
    match at.span {
        None => format!("--{flag}"),
        Some(_) => cf.place(t, at),
    }
}

/// `0.8`, `"0.8"` or `"80%"` as a fraction in (0, 1].
fn fraction(v: &FractionValue) -> Result<f64, ConfigError> {
    let x = match v {
        FractionValue::Number(x) => *x,
        FractionValue::Text(s) => {
            let s = s.trim();
            match s.strip_suffix('%') {
                Some(p) => p.trim().parse::<f64>().map(|p| p / 100.0),
                None => s.parse::<f64>(),
            }
            .map_err(|_| {
                ConfigError::bad(format!("`{s}`"), "expected a fraction like 0.8 or 80%")
            })?
        }
    };
    if x > 0.0 && x <= 1.0 {
        Ok(x)
    } else {
        Err(ConfigError::bad(
            x.to_string(),
            "expected a fraction above 0 and at most 1 (or 1% to 100%)",
        ))
    }
}

impl ConfigFile {
    /// A flash tier's `path`: a file or a block device; relative to the config file's
    /// directory when given there.
    fn flash_path(&self, t: &TierTable) -> Result<std::path::PathBuf, ConfigError> {
        let Some(path) = &t.path else {
            return Err(ConfigError::bad(
                self.place(t, &t.kind),
                "a flash tier needs `path` (--flash PATH[:SIZE]): a file or a block device",
            ));
        };
        let path_at = place(self, t, path, "flash");
        if path.value.as_os_str().is_empty() {
            return Err(ConfigError::bad(path_at, "empty path"));
        }
        // A relative `path` in the config file is relative to the file's directory.
        let path_value = match (&path.span, &self.path) {
            (Some(_), Some(cfg)) if path.value.is_relative() => cfg
                .parent()
                .map_or_else(|| path.value.clone(), |d| d.join(&path.value)),
            _ => path.value.clone(),
        };
        Ok(path_value)
    }

    /// A flash tier's `free_floor`: a number of sets or a percentage of them.
    fn free_floor(&self, t: &TierTable) -> Result<Floor, ConfigError> {
        Ok(match &t.free_floor {
            None => Floor::Percent(DEFAULT_FREE_FLOOR_PERCENT),
            Some(at) => {
                let text = at.value.as_text();
                let text = text.trim();
                let bad = || {
                    ConfigError::bad(
                        place(self, t, at, "flash-free-floor"),
                        format!(
                            "free floor `{text}`: expected a number of sets or a percentage \
                     like 10%"
                        ),
                    )
                };
                match text.strip_suffix('%') {
                    Some(p) => match p.trim().parse::<f64>() {
                        Ok(p) if p > 0.0 && p <= 100.0 => Floor::Percent(p),
                        _ => return Err(bad()),
                    },
                    None => Floor::Sets(text.parse().map_err(|_| bad())?),
                }
            }
        })
    }

    /// Checks the flash keys of `t` (kind `flash`).
    pub(super) fn flash_spec(&self, t: &TierTable) -> Result<FlashSpec, ConfigError> {
        if let Some((span, key)) = test_only_key(t).or_else(|| remote_only_key(t)) {
            return Err(ConfigError::bad(
                self.place_span(t, span),
                format!("`{key}` is not a key of a flash tier"),
            ));
        }
        let path_value = self.flash_path(t)?;
        let size = match &t.size {
            None => None,
            Some(at) => Some(
                at.value
                    .bytes()
                    .map_err(|e| e.at(format!("{}: size", place(self, t, at, "flash"))))?,
            ),
        };
        let mode = match &t.mode {
            None => FlashMode::Writeback,
            Some(m) => m
                .value
                .trim()
                .parse()
                .map_err(|e: ConfigError| e.at(place(self, t, m, "flash-mode")))?,
        };
        let seq_cutoff = match &t.seq_cutoff {
            None => DEFAULT_SEQ_CUTOFF,
            Some(at) => at.value.bytes().map_err(|e| {
                e.at(format!(
                    "{}: seq_cutoff",
                    place(self, t, at, "flash-seq-cutoff")
                ))
            })?,
        };
        let cleaner = match t.cleaner.as_ref().map(|c| (c, c.value.trim())) {
            None | Some((_, "idle")) => CleanerKind::Idle,
            Some((_, "eager")) => CleanerKind::Eager,
            Some((c, other)) => {
                return Err(ConfigError::bad(
                    place(self, t, c, "flash-cleaner"),
                    format!("unknown cleaner `{other}` (expected idle|eager)"),
                ))
            }
        };
        let wait = match &t.wait_ms {
            None => DEFAULT_WAIT,
            Some(at) if at.value > 3_600_000 => {
                return Err(ConfigError::bad(
                    place(self, t, at, "flash-wait"),
                    format!("wait {} ms: at most one hour", at.value),
                ))
            }
            Some(at) => Duration::from_millis(at.value),
        };
        let free_floor = self.free_floor(t)?;
        let dirty_max = match &t.dirty_max {
            None => DEFAULT_DIRTY_MAX,
            Some(at) => fraction(&at.value).map_err(|e| {
                ConfigError::bad(
                    place(self, t, at, "flash-dirty-max"),
                    format!("dirty_max {e}"),
                )
            })?,
        };
        let max_errors = match &t.max_errors {
            None => DEFAULT_MAX_ERRORS,
            Some(at) if at.value == 0 => {
                return Err(ConfigError::bad(
                    place(self, t, at, "flash-max-errors"),
                    "max_errors must be at least 1",
                ))
            }
            Some(at) => at.value,
        };
        let io = match &t.io {
            None => IoChoice::Auto,
            Some(at) => {
                at.value
                    .trim()
                    .parse()
                    .map_err(|e: <IoChoice as std::str::FromStr>::Err| {
                        ConfigError::bad(place(self, t, at, "flash-io"), e.to_string())
                    })?
            }
        };
        Ok(FlashSpec {
            path: path_value,
            size,
            mode,
            seq_cutoff,
            cleaner,
            wait,
            free_floor,
            dirty_max,
            max_errors,
            io,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> ConfigFile {
        ConfigFile::from_text(std::path::Path::new("/etc/tc/tc.toml"), text.to_string())
            .expect("parses")
    }

    fn spec(text: &str) -> Result<FlashSpec, ConfigError> {
        let mut f = file(text);
        f.fold_memory_tier()?;
        let tiers = f.options.tiers.clone().unwrap_or_default();
        let mut specs = f.lower_tiers(&tiers, 4096, "memory")?;
        specs
            .pop()
            .and_then(|s| s.flash)
            .ok_or_else(|| ConfigError::invalid("no flash spec"))
    }

    #[test]
    fn a_flash_table_takes_defaults_and_a_relative_path_from_the_file() {
        let s = spec("[[tier]]\nkind = \"flash\"\npath = \"cache.img\"\nsize = \"1G\"\n")
            .expect("valid");
        assert_eq!(s.path, PathBuf::from("/etc/tc/cache.img"));
        assert_eq!(s.size, Some(1 << 30));
        assert_eq!(s.mode, FlashMode::Writeback);
        assert_eq!(s.seq_cutoff, DEFAULT_SEQ_CUTOFF);
        assert_eq!(s.cleaner, CleanerKind::Idle);
        assert_eq!(s.free_floor.sets(255), 26);
        assert!((s.dirty_max - 0.8).abs() < 1e-9);
        assert_eq!(s.io, IoChoice::Auto);
    }

    #[test]
    fn flash_errors_name_file_line_or_flag() {
        for (text, at, what) in [
            ("[[tier]]\nkind = \"flash\"\n", "tc.toml:2:", "needs `path`"),
            (
                "[[tier]]\nkind = \"flash\"\npath = \"c\"\nmode = \"sideways\"\n",
                "tc.toml:4:",
                "unknown mode",
            ),
            (
                "[[tier]]\nkind = \"flash\"\npath = \"c\"\ncleaner = \"lazy\"\n",
                "tc.toml:4:",
                "unknown cleaner",
            ),
            (
                "[[tier]]\nkind = \"flash\"\npath = \"c\"\ndirty_max = 1.5\n",
                "tc.toml:4:",
                "fraction",
            ),
            (
                "[[tier]]\nkind = \"flash\"\npath = \"c\"\nfree_floor = \"200%\"\n",
                "tc.toml:4:",
                "free floor",
            ),
            (
                "[[tier]]\nkind = \"flash\"\npath = \"c\"\nio = \"cached\"\n",
                "tc.toml:4:",
                "unknown I/O mode",
            ),
            (
                "[[tier]]\nkind = \"flash\"\npath = \"c\"\nservers = \"x\"\n",
                "tc.toml:4:",
                "not a key of a flash tier",
            ),
            (
                "[[tier]]\nkind = \"test\"\nsize = \"1M\"\ncleaner = \"idle\"\n",
                "tc.toml:4:",
                "only for kind = \"flash\"",
            ),
        ] {
            let e = spec(text).expect_err(text).to_string();
            assert!(e.contains(at) && e.contains(what), "{text}: {e}");
        }
    }

    #[test]
    fn flash_flags_add_a_tier_below_memory_or_change_the_files() {
        let mut f = FlashFlags {
            device: Some("/ssd/cache.img:2G".into()),
            cleaner: Some("eager".into()),
            io: Some("buffered".into()),
            ..FlashFlags::default()
        };
        let remote = TierTable::of_kind("remote");
        let tiers = apply_flash_flags(Some(vec![remote]), &f)
            .expect("ok")
            .expect("some");
        assert_eq!(tiers[0].kind.value, "flash");
        assert_eq!(tiers[1].kind.value, "remote");
        let cf = ConfigFile::default();
        let s = cf.flash_spec(&tiers[0]).expect("valid");
        assert_eq!(
            (s.path.to_str(), s.size),
            (Some("/ssd/cache.img"), Some(2 << 30))
        );
        assert_eq!(s.cleaner, CleanerKind::Eager);
        assert_eq!(s.io, IoChoice::Only(tiercache_flash::IoMode::Buffered));
        // A path with a colon and no size stays whole.
        f.device = Some("/ssd/a:b".into());
        let tiers = apply_flash_flags(None, &f).expect("ok").expect("some");
        assert_eq!(cf.flash_spec(&tiers[0]).expect("valid").size, None);
        // A flag without a tier to change is an error naming it.
        let e = apply_flash_flags(
            None,
            &FlashFlags {
                mode: Some("writethrough".into()),
                ..FlashFlags::default()
            },
        )
        .expect_err("no tier")
        .to_string();
        assert!(e.contains("--flash-*"), "{e}");
        let e = cf
            .flash_spec(
                &apply_flash_flags(
                    None,
                    &FlashFlags {
                        device: Some("c".into()),
                        dirty_max: Some("0".into()),
                        ..FlashFlags::default()
                    },
                )
                .expect("ok")
                .expect("some")[0],
            )
            .expect_err("bad fraction")
            .to_string();
        assert!(e.starts_with("--flash-dirty-max:"), "{e}");
    }
}
