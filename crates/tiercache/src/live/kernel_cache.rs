//! The kernel page cache's part of a mount (`tiercache_fuse::KernelCacheStats`): the
//! `kernel_cache` object of `stats --json`, its line in `stats`, and the
//! `tiercache_kernel_cache_*` Prometheus metrics.
//!
//! Keys (a contract): `kernel_cache.mode` (`priority`, `all` or `off`), `kernel_cache.files`
//! (files the kernel may hold pages of: opened in its cached mode and not forgotten since),
//! `kernel_cache.bytes_at_most` (the sum of those files' sizes: the most the kernel holds for
//! them — it holds what was read, charged to the readers' memory cgroup, and reclaims it under
//! pressure), `kernel_cache.cached_opens` (opens answered in cached mode),
//! `kernel_cache.stale_drops` (opens at which the kernel dropped a file's pages because it
//! changed behind the mount), `kernel_cache.invalidations` (ranges dropped because the daemon
//! changed them for a zero-copy client). Hits the kernel serves never reach the daemon: the
//! hit ratios of `stats` count only what the kernel passed on.

use super::metrics::metric;
use serde_json::{json, Value};
use tiercache_fuse::KernelCacheStats;

/// The `kernel_cache` object of `stats --json`.
pub fn json(s: &KernelCacheStats) -> Value {
    json!({
        "mode": s.mode,
        "files": s.files,
        "bytes_at_most": s.bytes_at_most,
        "cached_opens": s.cached_opens,
        "stale_drops": s.stale_drops,
        "invalidations": s.invalidations,
    })
}

/// The `kernel cache` line of `stats` (empty without the object).
pub fn text(v: &Value) -> String {
    let k = &v["kernel_cache"];
    if !k.is_object() {
        return String::new();
    }
    let mib = k["bytes_at_most"].as_u64().unwrap_or(0) as f64 / f64::from(1u32 << 20);
    format!(
        "kernel cache: {} ({} files, at most {mib:.1} MiB; {} cached opens, {} dropped as \
         stale, {} invalidations)\n",
        k["mode"].as_str().unwrap_or("?"),
        k["files"],
        k["cached_opens"],
        k["stale_drops"],
        k["invalidations"]
    )
}

/// Prometheus text: `tiercache_kernel_cache_files`, `tiercache_kernel_cache_bytes_at_most`,
/// `tiercache_kernel_cache_cached_opens_total`, `tiercache_kernel_cache_stale_drops_total`,
/// `tiercache_kernel_cache_invalidations_total`, and `tiercache_kernel_cache_mode{mode}` 1.
pub fn prometheus(s: &KernelCacheStats) -> String {
    let mut o = String::new();
    let f = |x: u64| x as f64;
    let mode = format!("mode=\"{}\"", s.mode);
    metric(
        &mut o,
        "kernel_cache_mode",
        "gauge",
        "Which files the kernel page cache holds too (priority, all, off).",
        &[(mode.as_str(), 1.0)],
    );
    metric(
        &mut o,
        "kernel_cache_files",
        "gauge",
        "Files the kernel page cache may hold pages of.",
        &[("", f(s.files))],
    );
    metric(
        &mut o,
        "kernel_cache_bytes_at_most",
        "gauge",
        "Sum of the sizes of the files the kernel page cache may hold.",
        &[("", f(s.bytes_at_most))],
    );
    metric(
        &mut o,
        "kernel_cache_cached_opens_total",
        "counter",
        "Opens answered in the kernel's cached mode.",
        &[("", f(s.cached_opens))],
    );
    metric(
        &mut o,
        "kernel_cache_stale_drops_total",
        "counter",
        "Opens at which the kernel dropped a file's pages: it changed behind the mount.",
        &[("", f(s.stale_drops))],
    );
    metric(
        &mut o,
        "kernel_cache_invalidations_total",
        "counter",
        "Ranges the kernel dropped because the daemon changed them for a zero-copy client.",
        &[("", f(s.invalidations))],
    );
    o
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn keys_line_and_metrics() {
        let mut s = KernelCacheStats::default();
        s.mode = "priority";
        s.files = 3;
        s.bytes_at_most = 3 << 20;
        s.cached_opens = 40;
        s.stale_drops = 2;
        s.invalidations = 5;
        let v = json!({ "kernel_cache": json(&s) });
        assert_eq!(v["kernel_cache"]["mode"], "priority");
        assert_eq!(v["kernel_cache"]["bytes_at_most"], 3 << 20);
        assert_eq!(
            text(&v),
            "kernel cache: priority (3 files, at most 3.0 MiB; 40 cached opens, 2 dropped as \
             stale, 5 invalidations)\n"
        );
        let p = prometheus(&s);
        assert!(p.contains("tiercache_kernel_cache_mode{mode=\"priority\"} 1"));
        assert!(p.contains("tiercache_kernel_cache_files 3"));
        assert!(p.contains("tiercache_kernel_cache_stale_drops_total 2"));
        assert!(p.contains("tiercache_kernel_cache_invalidations_total 5"));
        assert_eq!(text(&json!({})), "");
    }
}
