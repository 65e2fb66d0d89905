//! The remote tier of a mount: built from its [`RemoteSpec`], and its `stats --json` `remote`
//! object (the tier's own counters plus the sequential-run threshold the manager applies).

use super::config::LowerTierSpec;
use super::config_remote::RemoteSpec;
use super::error::DaemonError;
use serde_json::{json, Value};
use std::sync::Arc;
use tiercache_manager::{LowerStats, SeqBypassStats};
use tiercache_remote::{RemoteConfig, RemoteTier};

/// A remote tier of the mount, and its position in the lower stack (for its threshold).
#[derive(Debug, Clone)]
pub struct MountedRemote {
    pub tier: Arc<RemoteTier>,
    pub position: usize,
}

/// Reads the key and connects (servers that are down are probed later, not an error).
pub fn build(
    spec: &LowerTierSpec,
    r: &RemoteSpec,
    block_size: usize,
) -> Result<Arc<RemoteTier>, DaemonError> {
    let key =
        tiercache_remote::keyfile::load(&r.key_file).map_err(|source| DaemonError::Remote {
            what: String::new(),
            source,
        })?;
    let mut cfg = RemoteConfig::new(spec.name.clone(), r.servers.clone(), key);
    cfg.namespace = r.namespace.clone();
    cfg.block_size = block_size;
    cfg.timeout = r.timeout;
    cfg.capacity_blocks =
        (spec.capacity_bytes > 0).then(|| spec.capacity_bytes / block_size as u64);
    let tier = RemoteTier::connect(cfg).map_err(|source| DaemonError::Remote {
        what: format!("tier {}", spec.name),
        source,
    })?;
    Ok(Arc::new(tier))
}

/// The manager's sequential-bypass state of remote tier `m`.
fn bypass_of<'a>(m: &MountedRemote, lower: Option<&'a LowerStats>) -> Option<&'a SeqBypassStats> {
    lower.and_then(|l| l.seq_bypass.iter().find(|b| b.tier == m.position))
}

/// `stats --json` `remote`: the first remote tier's counters and current threshold (null
/// without one); `remote_tiers` lists them all when there are several.
pub fn stats_json(remotes: &[MountedRemote], lower: Option<&LowerStats>) -> (Value, Value) {
    let one = |m: &MountedRemote| {
        let s = m.tier.remote_stats();
        let mut v = serde_json::to_value(&s).unwrap_or(Value::Null);
        let b = bypass_of(m, lower);
        v["threshold"] = json!(b.map(|b| b.threshold));
        v["threshold_auto"] = json!(b.map(|b| b.auto));
        v["seq_bypassed_blocks"] = json!(b.map_or(0, |b| b.bypassed_blocks));
        v["threshold_costs_us"] = json!(b.and_then(|b| b.measured));
        v["name"] = json!(tiercache_tier::DataTier::info(&*m.tier).name);
        v
    };
    let first = remotes.first().map_or(Value::Null, one);
    let all = if remotes.len() > 1 {
        Value::Array(remotes.iter().map(one).collect())
    } else {
        Value::Null
    };
    (first, all)
}

/// Prometheus lines of the remote tiers (`remote_*{tier}`); nothing without one.
pub fn prometheus(remotes: &[MountedRemote], lower: Option<&LowerStats>) -> String {
    let mut o = String::new();
    if remotes.is_empty() {
        return o;
    }
    let stats: Vec<(String, tiercache_remote::RemoteStats, f64)> = remotes
        .iter()
        .map(|m| {
            let name = tiercache_tier::DataTier::info(&*m.tier)
                .name
                .replace('"', "'");
            let n = bypass_of(m, lower).map_or(0.0, |b| b.threshold as f64);
            (format!("tier=\"{name}\""), m.tier.remote_stats(), n)
        })
        .collect();
    type Field = fn(&tiercache_remote::RemoteStats) -> u64;
    let series: [(&str, &str, &str, Field); 6] = [
        (
            "remote_stores_total",
            "counter",
            "Values stored on memcached.",
            |s| s.stores,
        ),
        (
            "remote_invalidations_total",
            "counter",
            "Remote copies dropped by writes.",
            |s| s.invalidations,
        ),
        (
            "remote_auth_failures_total",
            "counter",
            "Values that failed authentication.",
            |s| s.auth_failures,
        ),
        (
            "remote_errors_total",
            "counter",
            "Failed remote requests.",
            |s| s.errors,
        ),
        (
            "remote_servers_up",
            "gauge",
            "memcached servers in use.",
            |s| s.servers_up,
        ),
        (
            "remote_servers",
            "gauge",
            "memcached servers configured.",
            |s| s.servers,
        ),
    ];
    for (name, kind, help, field) in series {
        let samples: Vec<(&str, f64)> = stats
            .iter()
            .map(|(l, s, _)| (l.as_str(), field(s) as f64))
            .collect();
        super::metrics::metric(&mut o, name, kind, help, &samples);
    }
    let n: Vec<(&str, f64)> = stats.iter().map(|(l, _, n)| (l.as_str(), *n)).collect();
    super::metrics::metric(
        &mut o,
        "remote_threshold_blocks",
        "gauge",
        "Sequential run length from which reads go to BACKING.",
        &n,
    );
    o
}
