//! Reload without remount: `SIGHUP` or `tiercache reload MOUNTPOINT` re-reads the config file
//! the mount was started with (the flags given at mount time still override it, as they did
//! then) and applies what can change while mounted: priority directories, the partitioner's
//! parameters (ω, T_p, T_n, B_pmin, B_nmin), the flusher's interval and dirty expiry, each
//! remote tier's sequential-run threshold and request timeout, and the log level.
//!
//! All or nothing: the whole new configuration is parsed and checked exactly as at mount time
//! before anything changes; an invalid file changes nothing. Settings that cannot change while
//! mounted (memory size, block size, tiers, BACKING's options, ...) are named in the answer as
//! not applied, and stay as they are until the next mount.
//!
//! Classes and their directories (priority directories among them): the classes and rules the
//! previous configuration named and the new one does not are removed, the new and changed ones
//! set; those added or removed by `tiercache class` or `tiercache priority` in between are
//! otherwise kept.

use super::adapter::CacheDataPath;
use super::classes::{ClassRule, LiveClasses};
use super::daemon::Settings;
use super::logging;
use super::remote::MountedRemote;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// Produces the mount's settings again from its config file and flags (checked, or
/// [`ReloadError::Config`] naming the file and key at fault).
pub type Source = Box<dyn Fn() -> Result<Settings, ReloadError> + Send + Sync>;

/// Why a reload was refused. Nothing changed unless the error names a setting being applied
/// (values are checked before anything changes, so those do not happen in practice).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReloadError {
    /// The config file (or the flags over it) does not give valid settings (the file cannot
    /// be read, or a value is wrong: where and why).
    #[error("{0}")]
    Config(#[source] super::error::ConfigError),
    /// The new partitioner parameters do not hold for this memory tier.
    #[error("partition parameters: {0}")]
    PartitionCheck(#[source] tiercache_core::CoreError),
    /// The memory tier refused the new classes or partitioner parameters.
    #[error("classes: {0}")]
    Classes(#[source] Box<super::error::DaemonError>),
    /// The flusher refused its new interval or dirty expiry.
    #[error("flusher timings: {0}")]
    Flusher(#[source] tiercache_manager::MemError),
    /// A remote tier refused its new sequential-run threshold.
    #[error("tier {tier}: {source}")]
    Threshold {
        tier: String,
        #[source]
        source: tiercache_manager::MemError,
    },
    /// A remote tier refused its new request timeout.
    #[error("tier {tier}: {source}")]
    Timeout {
        tier: String,
        #[source]
        source: tiercache_remote::RemoteError,
    },
}

/// What a reload did: human-readable items, one per setting.
#[derive(Debug, Default)]
pub struct Outcome {
    pub changed: Vec<String>,
    pub not_applied: Vec<String>,
}

impl Outcome {
    pub fn json(&self) -> Value {
        json!({ "changed": self.changed, "not_applied": self.not_applied })
    }
}

/// The mount's reload state: where its settings come from, and those in force.
pub struct Reloader {
    source: Source,
    /// The settings in force (the live ones updated by each reload; the others as mounted).
    current: Mutex<Settings>,
    data: Arc<CacheDataPath>,
    remotes: Vec<MountedRemote>,
}

fn ms(d: Duration) -> u128 {
    d.as_millis()
}

impl Reloader {
    pub fn new(
        source: Source,
        current: Settings,
        data: Arc<CacheDataPath>,
        remotes: Vec<MountedRemote>,
    ) -> Self {
        Self {
            source,
            current: Mutex::new(current),
            data,
            remotes,
        }
    }

    /// Re-reads and applies (see the module comment). Serialised: one reload at a time.
    pub fn reload(&self) -> Result<Outcome, ReloadError> {
        let mut cur = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        let new = (self.source)()?;
        let mut out = Outcome {
            not_applied: fixed_changes(&cur, &new),
            ..Outcome::default()
        };
        // Checked before anything changes: the new parameters hold for this tier, and each
        // remote tier is where it was (tiers that moved are reported above, not applied).
        let params_changed = cur.mem.partition != new.mem.partition
            && cur.mem.partition.kind == new.mem.partition.kind;
        if params_changed {
            new.mem
                .partition
                .params
                .resolved(cur.mem.capacity_blocks as u64)
                .map_err(ReloadError::PartitionCheck)?;
            // The classes in force with the file's changes: checked as a whole.
            let mut live = self.data.classes();
            class_diff(&mut live, &cur, &new, None).map_err(ReloadError::PartitionCheck)?;
            live.params
                .resolved(cur.mem.capacity_blocks as u64)
                .map_err(ReloadError::PartitionCheck)?;
        }
        let remote_changes = self.remote_changes(&cur, &new);
        // Apply: nothing below can fail on values checked above.
        if params_changed || cur.rules != new.rules {
            self.data
                .update_classes(|next| {
                    rule_diff(next, &cur, &new, &mut out);
                    if params_changed {
                        class_diff(next, &cur, &new, Some(&mut out))?;
                    }
                    Ok(true)
                })
                .map_err(|e| ReloadError::Classes(Box::new(e)))?;
            cur.rules = new.rules.clone();
        }
        if params_changed {
            params_diff(
                &cur.mem.partition.params.dirprio(),
                &new.mem.partition.params.dirprio(),
                &mut out,
            );
            cur.mem.partition = new.mem.partition.clone();
        }
        let (fi, de) = (new.mem.flush_interval, new.mem.dirty_expire);
        if (fi, de) != (cur.mem.flush_interval, cur.mem.dirty_expire) {
            self.data
                .mem()
                .set_flush_timings(fi, de)
                .map_err(ReloadError::Flusher)?;
            for (name, old, new) in [
                ("flush_interval_ms", cur.mem.flush_interval, fi),
                ("dirty_expire_ms", cur.mem.dirty_expire, de),
            ] {
                if old != new {
                    out.changed
                        .push(format!("{name}: {} -> {}", ms(old), ms(new)));
                }
            }
            cur.mem.flush_interval = fi;
            cur.mem.dirty_expire = de;
        }
        for (i, m, spec) in remote_changes {
            self.apply_remote(&mut cur.lower_tiers[i], m, spec, &mut out)?;
        }
        let level = logging::effective(new.log_level);
        if level != log::max_level() {
            out.changed
                .push(format!("log_level: {} -> {level}", log::max_level()));
            logging::set_level(level);
        }
        cur.log_level = new.log_level;
        Ok(out)
    }

    /// Remote tiers (index in the lower stack, the mounted tier, the new spec) whose threshold
    /// or timeout changed, the rest of the tier being the same.
    fn remote_changes<'a>(
        &'a self,
        cur: &Settings,
        new: &'a Settings,
    ) -> Vec<(
        usize,
        &'a MountedRemote,
        &'a super::config_remote::RemoteSpec,
    )> {
        self.remotes
            .iter()
            .filter_map(|m| {
                let (old, spec) = (
                    cur.lower_tiers.get(m.position)?,
                    new.lower_tiers.get(m.position)?,
                );
                // The same tier (by name) in the same place: never another tier's values.
                if old.name != spec.name {
                    return None;
                }
                let (o, n) = (old.remote.as_ref()?, spec.remote.as_ref()?);
                (o.threshold != n.threshold || o.timeout != n.timeout).then_some((m.position, m, n))
            })
            .collect()
    }

    fn apply_remote(
        &self,
        old: &mut super::config::LowerTierSpec,
        m: &MountedRemote,
        n: &super::config_remote::RemoteSpec,
        out: &mut Outcome,
    ) -> Result<(), ReloadError> {
        let Some(o) = old.remote.as_mut() else {
            return Ok(());
        };
        let tier = old.name.as_str();
        let threshold = Change {
            tier,
            key: "threshold",
            old: &mut o.threshold,
            new: n.threshold,
            text: threshold_text,
        };
        threshold.apply(out, |t| {
            self.data
                .mem()
                .set_seq_threshold(m.position, t)
                .map_err(|source| ReloadError::Threshold {
                    tier: tier.to_string(),
                    source,
                })
        })?;
        let timeout = Change {
            tier,
            key: "timeout_ms",
            old: &mut o.timeout,
            new: n.timeout,
            text: |d| ms(d).to_string(),
        };
        timeout.apply(out, |d| {
            m.tier
                .set_timeout(d)
                .map_err(|source| ReloadError::Timeout {
                    tier: tier.to_string(),
                    source,
                })
        })
    }

    /// The `settings` object of `stats --json`: what a reload may change, as in force.
    pub fn settings_json(&self) -> Value {
        let cur = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        let (fi, de) = self.data.mem().flush_timings();
        let p = cur.mem.partition.params.dirprio();
        let remotes: Vec<Value> = self
            .remotes
            .iter()
            .map(|m| {
                json!({
                    "tier": tiercache_tier::DataTier::info(&*m.tier).name,
                    "timeout_ms": m.tier.timeout().map(|t| t.as_millis() as u64),
                })
            })
            .collect();
        json!({
            "priority": self.data.priority_rules(),
            "classes": super::class_ctl::list_json(&self.data),
            "flush_interval_ms": fi.as_millis() as u64,
            "dirty_expire_ms": de.as_millis() as u64,
            "partition": cur.mem.partition.kind.to_string(),
            "dirprio": {
                "omega": p.omega,
                "t_protected": p.t_protected,
                "t_normal": p.t_normal,
                "b_pmin": amount(p.b_pmin),
                "b_nmin": p.b_nmin,
            },
            "remote": remotes,
            "log_level": log::max_level().to_string().to_lowercase(),
        })
    }
}

/// One live setting of a remote tier: applied through a setter, then reported as
/// `tier NAME KEY: OLD -> NEW` and kept as in force.
struct Change<'a, T> {
    tier: &'a str,
    key: &'static str,
    old: &'a mut T,
    new: T,
    text: fn(T) -> String,
}

impl<T: Copy + PartialEq> Change<'_, T> {
    /// Does nothing when the value is unchanged; otherwise `set`s it, and only once that
    /// succeeded records it (in `out` and as the value in force).
    fn apply(
        self,
        out: &mut Outcome,
        set: impl FnOnce(T) -> Result<(), ReloadError>,
    ) -> Result<(), ReloadError> {
        if *self.old == self.new {
            return Ok(());
        }
        set(self.new)?;
        out.changed.push(format!(
            "tier {} {}: {} -> {}",
            self.tier,
            self.key,
            (self.text)(*self.old),
            (self.text)(self.new)
        ));
        *self.old = self.new;
        Ok(())
    }
}

/// Removes from `next` the rules only the old configuration (`cur`) named, adds the new ones.
fn rule_diff(next: &mut LiveClasses, cur: &Settings, new: &Settings, out: &mut Outcome) {
    let (old, fresh) = (cur.rules.rules(), new.rules.rules());
    let label = |r: &ClassRule| match r.class.as_str() {
        "priority" => "priority".to_string(),
        c => format!("class {c}"),
    };
    for r in old.iter().filter(|r| !fresh.contains(r)) {
        if next.rules.remove(&r.dir, &r.class) {
            out.changed
                .push(format!("{}: -{}", label(r), r.dir.display()));
        }
    }
    for r in fresh.iter().filter(|r| !old.contains(r)) {
        next.rules.add(r.clone());
        let rec = if r.recursive { " (recursive)" } else { "" };
        out.changed
            .push(format!("{}: +{}{rec}", label(r), r.dir.display()));
    }
}

/// Applies to `next` the class table changes from the old configuration (`cur`) to the new:
/// ω, classes set or changed, classes removed (their rules too). Built-in classes' changes are
/// told by `params_diff`, the others in `out` when given.
fn class_diff(
    next: &mut LiveClasses,
    cur: &Settings,
    new: &Settings,
    mut out: Option<&mut Outcome>,
) -> Result<(), tiercache_core::CoreError> {
    let (old, fresh) = (&cur.mem.partition.params, &new.mem.partition.params);
    next.params.omega = fresh.omega;
    for (c, spec) in fresh.classes.iter() {
        let before = old
            .classes
            .by_name(&spec.name)
            .and_then(|c| old.classes.get(c));
        if before != Some(spec) {
            next.params.classes.set(spec.clone())?;
            if let (Some(out), true) = (out.as_deref_mut(), c.index() >= 2) {
                let what = if before.is_some() { "changed" } else { "added" };
                out.changed.push(format!("class {}: {what}", spec.name));
            }
        }
    }
    for (c, spec) in old.classes.iter() {
        if c.index() >= 2
            && fresh.classes.by_name(&spec.name).is_none()
            && next.params.classes.by_name(&spec.name).is_some()
        {
            next.params.classes.remove(&spec.name)?;
            next.rules.remove_class(&spec.name);
            if let Some(out) = out.as_deref_mut() {
                out.changed.push(format!("class {}: removed", spec.name));
            }
        }
    }
    Ok(())
}

/// One item per partitioner parameter that changed.
fn params_diff(
    a: &tiercache_core::partition::DirprioParams,
    b: &tiercache_core::partition::DirprioParams,
    out: &mut Outcome,
) {
    let omega = |o: Option<u64>| o.map_or("B".to_string(), |n| n.to_string());
    let items = [
        ("omega", omega(a.omega), omega(b.omega)),
        (
            "t_protected",
            a.t_protected.to_string(),
            b.t_protected.to_string(),
        ),
        ("t_normal", a.t_normal.to_string(), b.t_normal.to_string()),
        ("b_pmin", amount(a.b_pmin), amount(b.b_pmin)),
        ("b_nmin", a.b_nmin.to_string(), b.b_nmin.to_string()),
    ];
    for (k, x, y) in items {
        if x != y {
            out.changed.push(format!("{k}: {x} -> {y}"));
        }
    }
}

fn amount(a: tiercache_core::partition::Amount) -> String {
    match a {
        tiercache_core::partition::Amount::Blocks(n) => n.to_string(),
        tiercache_core::partition::Amount::Percent(p) => format!("{p}%"),
    }
}

fn threshold_text(t: tiercache_core::seqrun::Threshold) -> String {
    match t {
        tiercache_core::seqrun::Threshold::Auto => "auto".to_string(),
        tiercache_core::seqrun::Threshold::Fixed(n) => n.to_string(),
    }
}

/// The settings that differ between `cur` and `new` but cannot change while mounted, by their
/// config-file key.
fn fixed_changes(cur: &Settings, new: &Settings) -> Vec<String> {
    fn differs<T: std::fmt::Debug>(a: &T, b: &T) -> bool {
        format!("{a:?}") != format!("{b:?}")
    }
    let (a, b) = (&cur.mem, &new.mem);
    let mut lower_a = cur.lower_tiers.clone();
    // A remote tier's threshold and timeout change live: compared without them.
    for (x, y) in lower_a.iter_mut().zip(&new.lower_tiers) {
        if let (Some(rx), Some(ry)) = (x.remote.as_mut(), y.remote.as_ref()) {
            rx.threshold = ry.threshold;
            rx.timeout = ry.timeout;
        }
    }
    let checks: [(&str, bool); 20] = [
        ("memory", a.capacity_blocks != b.capacity_blocks),
        ("block_size", a.block_size != b.block_size),
        ("policy", a.policy != b.policy),
        ("partition", a.partition.kind != b.partition.kind),
        (
            "readahead",
            a.readahead_max_blocks != b.readahead_max_blocks,
        ),
        ("emulate", differs(&cur.emulate, &new.emulate)),
        (
            "backing_cache",
            differs(&cur.backing_cache, &new.backing_cache),
        ),
        (
            "kernel_cache",
            differs(&cur.kernel_cache, &new.kernel_cache),
        ),
        ("allow_other", cur.allow_other != new.allow_other),
        ("trace_out", cur.trace_out != new.trace_out),
        ("metrics", cur.metrics != new.metrics),
        ("threads", cur.threads != new.threads),
        ("io_workers", cur.io_workers != new.io_workers),
        ("entry_timeout", cur.entry_timeout != new.entry_timeout),
        ("attr_timeout", cur.attr_timeout != new.attr_timeout),
        (
            "backing_identity",
            differs(&cur.backing_identity, &new.backing_identity),
        ),
        ("transport", cur.transport != new.transport),
        ("zero_copy", differs(&cur.zero_copy, &new.zero_copy)),
        ("tier", lower_a != new.lower_tiers),
        ("mountpoint", cur.mountpoint != new.mountpoint),
    ];
    checks
        .into_iter()
        .filter(|(_, d)| *d)
        .map(|(k, _)| k.to_string())
        .collect()
}
