//! Renders the memory tier's statistics: the `stats --json` document (its keys are a contract)
//! and Prometheus text.

use super::metrics::metric;
use serde_json::{json, Value};
use std::path::Path;
use tiercache_core::PoolId;
use tiercache_manager::{ClassInfo, ClassStats, MemStats, PoolStats};

fn pool(pools: &[PoolStats], id: PoolId) -> Option<&PoolStats> {
    pools.iter().find(|p| p.pool == id)
}

fn ratio(hits: u64, misses: u64) -> Value {
    if hits + misses == 0 {
        Value::Null
    } else {
        json!(hits as f64 / (hits + misses) as f64)
    }
}

fn class_json(
    info: &ClassInfo,
    all: &ClassStats,
    window: Option<&ClassStats>,
    block_size: u64,
) -> Value {
    let (wh, wm) = window.map_or((0, 0), |w| (w.hits, w.misses));
    let curve = info.curve.as_ref().map(|points| {
        points
            .iter()
            .map(|&(blocks, h)| {
                json!({ "blocks": blocks, "bytes": blocks * block_size, "hit_ratio": h })
            })
            .collect::<Vec<_>>()
    });
    json!({
        "hits": all.hits,
        "misses": all.misses,
        "hit_ratio": ratio(all.hits, all.misses),
        "blocks": all.blocks,
        "target": info.target,
        "window": { "hits": wh, "misses": wm, "hit_ratio": ratio(wh, wm) },
        "target_reachable": info.target_reachable,
        "curve": curve,
    })
}

/// `classes.NAME`: every class of the table in force, keyed by its name.
fn classes_json(s: &MemStats) -> Value {
    let classes: serde_json::Map<String, Value> = s
        .class_table
        .iter()
        .map(|info| {
            let w = s.window.classes.iter().find(|x| x.class == info.class);
            let c = class_json(info, &s.class(info.class), w, s.block_size);
            (info.name.clone(), c)
        })
        .collect();
    Value::Object(classes)
}

/// The `tiercache stats --json` document.
pub fn json(s: &MemStats, mountpoint: &Path, backing: &Path, emulation: Option<&str>) -> Value {
    let pool_json = |id: PoolId| {
        let p = pool(&s.pools, id);
        let w = pool(&s.window.pools, id);
        json!({
            "blocks": p.map_or(0, |p| p.blocks),
            "hits": p.map_or(0, |p| p.hits),
            "misses": p.map_or(0, |p| p.misses),
            "window": { "hits": w.map_or(0, |p| p.hits), "misses": w.map_or(0, |p| p.misses) },
        })
    };
    json!({
        "pid": std::process::id(),
        "mountpoint": mountpoint,
        "backing_dir": backing,
        "uptime_secs": s.uptime_secs,
        "emulation": emulation,
        "memory": {
            "capacity_blocks": s.capacity_blocks,
            "block_size": s.block_size,
            "used_blocks": s.used_blocks,
            "dirty_blocks": s.dirty_blocks,
            "policy": s.policy,
            "partition": s.partition,
            "s_target": s.s_target,
            "s_cur": s.s_cur,
            "pools": { "protected": pool_json(PoolId::PROTECTED), "normal": pool_json(PoolId::NORMAL) },
            "writeback_blocks_per_sec": s.writeback_blocks_per_sec,
        },
        "window_secs": s.window.secs,
        "classes": classes_json(s),
        "backing": {
            "reads": s.backing.reads,
            "writes": s.backing.writes,
            "bytes_read": s.backing.bytes_read,
            "bytes_written": s.backing.bytes_written,
            "syncs": s.backing.syncs,
            "io_mode": s.backing.io_mode,
        },
        "paths": s.paths,
        "tiers": s.tiers,
        "lower": s.lower,
        "trace_dropped": s.trace_dropped,
        "device_model": s.emulation,
    })
}

/// The FUSE inode table: how inodes are named and what each known inode costs.
pub fn inodes_json(s: &tiercache_fuse::InodeStats) -> Value {
    json!({
        "mode": s.mode,
        "fallback_reason": s.fallback_reason,
        "known": s.known,
        "pinned_fds": s.pinned,
        "cached_fds": s.cached_fds,
        "fd_cache_capacity": s.fd_cache_capacity,
        "fd_cache_hits": s.fd_cache_hits,
        "fd_cache_misses": s.fd_cache_misses,
        "bytes_per_inode": s.bytes_per_inode,
        "fd_exhausted": s.fd_exhausted,
        "nofile_limit": s.nofile_limit,
    })
}

/// Human-readable stats.
pub fn text(v: &Value) -> String {
    let m = &v["memory"];
    let pct = |x: &Value| {
        x.as_f64()
            .map_or("-".to_string(), |r| format!("{:.1}%", r * 100.0))
    };
    let mut out = format!(
        "tiercache {} (pid {}){}\nmemory: {} / {} blocks of {} B used, {} dirty, writeback {:.0} blocks/s\n",
        v["mountpoint"].as_str().unwrap_or("?"),
        v["pid"],
        v["emulation"].as_str().map_or(String::new(), |e| format!(", BACKING behind device {e}")),
        m["used_blocks"],
        m["capacity_blocks"],
        m["block_size"],
        m["dirty_blocks"],
        m["writeback_blocks_per_sec"].as_f64().unwrap_or(0.0),
    );
    // With classes of its own the normal pool is the rest pool, shared by `normal` and the
    // classes without a pool; each class's blocks are on its line below.
    let named = v["classes"]
        .as_object()
        .is_some_and(|c| c.keys().any(|k| k != "priority" && k != "normal"));
    out += &format!(
        "pools ({} / {}): protected {} blocks (s_target {}), {} {} blocks\n",
        m["partition"].as_str().unwrap_or("?"),
        m["policy"].as_str().unwrap_or("?"),
        m["pools"]["protected"]["blocks"],
        m["s_target"],
        if named { "rest" } else { "normal" },
        m["pools"]["normal"]["blocks"],
    );
    for (c, x) in v["classes"].as_object().into_iter().flatten() {
        out += &format!(
            "{c:<8} hit ratio {} since mount ({} hits, {} misses), {} over the last {:.0} s, {} blocks{}\n",
            pct(&x["hit_ratio"]),
            x["hits"],
            x["misses"],
            pct(&x["window"]["hit_ratio"]),
            v["window_secs"].as_f64().unwrap_or(0.0),
            x["blocks"],
            match x["target"].as_f64() {
                Some(t) => format!(", target {}", pct(&json!(t))),
                None => String::new(),
            }
        );
    }
    let b = &v["backing"];
    out += &format!(
        "backing: {} reads ({} B), {} writes ({} B), page cache: {}\n",
        b["reads"],
        b["bytes_read"],
        b["writes"],
        b["bytes_written"],
        match b["io_mode"].as_str().unwrap_or("?") {
            "buffered" => "kept (--backing-cache keep)",
            "memory" => "BACKING is in memory",
            "unprobed" => "dropped (file system not probed yet)",
            _ => "none left behind",
        }
    );
    for t in v["tiers"].as_array().into_iter().flatten().skip(1) {
        out += &format!(
            "tier {} ({}): {} / {} blocks, {} dirty, {} hits, {} misses, {} errors\n",
            t["name"].as_str().unwrap_or("?"),
            t["kind"].as_str().unwrap_or("?"),
            t["used_blocks"],
            t["capacity_blocks"],
            t["dirty_blocks"],
            t["hits"],
            t["misses"],
            t["errors"],
        );
    }
    let r = &v["remote"];
    if r.is_object() {
        out += &format!(
            "remote: {} of {} servers up, {} stores, {} invalidations, {} auth failures, sequential runs of {} blocks{} go to BACKING\n",
            r["servers_up"],
            r["servers"],
            r["stores"],
            r["invalidations"],
            r["auth_failures"],
            r["threshold"],
            if r["threshold_auto"].as_bool() == Some(true) { " (auto)" } else { "" },
        );
    }
    let i = &v["inodes"];
    if i.is_object() {
        out += &format!(
            "inodes: {} known (by {}, {} B each), {} descriptors cached of {}, {} pinned; open-files limit {}{}\n",
            i["known"],
            i["mode"].as_str().unwrap_or("?"),
            i["bytes_per_inode"],
            i["cached_fds"],
            i["fd_cache_capacity"],
            i["pinned_fds"],
            i["nofile_limit"],
            match i["fd_exhausted"].as_u64() {
                Some(n) if n > 0 => format!(", ran out of descriptors {n} times"),
                _ => String::new(),
            }
        );
    }
    out
}

/// Prometheus text for `--metrics`.
pub fn prometheus(s: &MemStats) -> String {
    let mut o = String::new();
    memory_metrics(&mut o, s);
    pool_and_class_metrics(&mut o, s);
    backing_metrics(&mut o, s);
    tier_metrics(&mut o, &s.tiers);
    o
}

/// The memory tier's size, use and protected pool.
fn memory_metrics(o: &mut String, s: &MemStats) {
    let f = |x: u64| x as f64;
    metric(
        o,
        "memory_capacity_blocks",
        "gauge",
        "Blocks the memory tier holds.",
        &[("", f(s.capacity_blocks))],
    );
    metric(
        o,
        "memory_block_size_bytes",
        "gauge",
        "Bytes per cache block (blocks times this: bytes).",
        &[("", f(s.block_size))],
    );
    metric(
        o,
        "memory_used_blocks",
        "gauge",
        "Blocks in use.",
        &[("", f(s.used_blocks))],
    );
    metric(
        o,
        "memory_dirty_blocks",
        "gauge",
        "Blocks not yet written back.",
        &[("", f(s.dirty_blocks))],
    );
    metric(
        o,
        "memory_s_cur_blocks",
        "gauge",
        "Protected pool size.",
        &[("", f(s.s_cur))],
    );
    if let Some(t) = s.s_target {
        metric(
            o,
            "memory_s_target_blocks",
            "gauge",
            "Protected pool target.",
            &[("", f(t))],
        );
    }
}

/// Hits and misses per pool and per class.
fn pool_and_class_metrics(o: &mut String, s: &MemStats) {
    let f = |x: u64| x as f64;
    let pools: Vec<(String, f64, f64, f64)> = s
        .pools
        .iter()
        .map(|p| {
            (
                format!("pool=\"{}\"", p.pool.as_str()),
                f(p.blocks),
                f(p.hits),
                f(p.misses),
            )
        })
        .collect();
    let by = |i: usize| -> Vec<(&str, f64)> {
        pools
            .iter()
            .map(|p| (p.0.as_str(), [p.1, p.2, p.3][i]))
            .collect()
    };
    metric(o, "pool_blocks", "gauge", "Blocks per pool.", &by(0));
    metric(o, "pool_hits_total", "counter", "Hits per pool.", &by(1));
    metric(
        o,
        "pool_misses_total",
        "counter",
        "Misses per pool.",
        &by(2),
    );
    class_metrics(o, s);
}

/// Per class, labelled by its name: hits, misses, resident blocks, the hit-ratio target (for
/// classes with one) and whether it is judged reachable (`mrc`).
fn class_metrics(o: &mut String, s: &MemStats) {
    let f = |x: u64| x as f64;
    let labels: Vec<String> = s
        .class_table
        .iter()
        .map(|c| format!("class=\"{}\"", c.name.replace('"', "'")))
        .collect();
    let series = |get: &dyn Fn(&ClassInfo) -> Option<f64>| -> Vec<(&str, f64)> {
        labels
            .iter()
            .zip(&s.class_table)
            .filter_map(|(l, c)| Some((l.as_str(), get(c)?)))
            .collect()
    };
    let count = |c: &ClassInfo| s.class(c.class);
    metric(
        o,
        "class_hits_total",
        "counter",
        "Hits per class.",
        &series(&|c| Some(f(count(c).hits))),
    );
    metric(
        o,
        "class_misses_total",
        "counter",
        "Misses per class.",
        &series(&|c| Some(f(count(c).misses))),
    );
    metric(
        o,
        "class_blocks",
        "gauge",
        "Blocks of each class the memory tier holds.",
        &series(&|c| Some(f(count(c).blocks))),
    );
    let targets = series(&|c| c.target);
    if !targets.is_empty() {
        metric(
            o,
            "class_target",
            "gauge",
            "Hit-ratio target of each class that has one.",
            &targets,
        );
    }
    let reachable = series(&|c| c.target_reachable.map(|r| f64::from(u8::from(r))));
    if !reachable.is_empty() {
        metric(
            o,
            "class_target_reachable",
            "gauge",
            "1 if the partitioner (mrc) judges the class's hit-ratio target reachable, else 0.",
            &reachable,
        );
    }
}

/// BACKING's requests, bytes and times, and write-back.
fn backing_metrics(o: &mut String, s: &MemStats) {
    let f = |x: u64| x as f64;
    metric(
        o,
        "backing_reads_total",
        "counter",
        "Reads issued to BACKING.",
        &[("", f(s.backing.reads))],
    );
    metric(
        o,
        "backing_writes_total",
        "counter",
        "Writes issued to BACKING.",
        &[("", f(s.backing.writes))],
    );
    metric(
        o,
        "backing_read_bytes_total",
        "counter",
        "Bytes read from BACKING.",
        &[("", f(s.backing.bytes_read))],
    );
    metric(
        o,
        "backing_written_bytes_total",
        "counter",
        "Bytes written to BACKING.",
        &[("", f(s.backing.bytes_written))],
    );
    let secs = |ns: u64| ns as f64 / 1e9;
    metric(
        o,
        "backing_read_seconds_total",
        "counter",
        "Time spent in BACKING reads (divided by backing_reads_total: their mean latency).",
        &[("", secs(s.backing.read_ns))],
    );
    metric(
        o,
        "backing_write_seconds_total",
        "counter",
        "Time spent in BACKING writes (divided by backing_writes_total: their mean latency).",
        &[("", secs(s.backing.write_ns))],
    );
    metric(
        o,
        "writeback_blocks_total",
        "counter",
        "Blocks written back (made clean).",
        &[("", f(s.paths.writeback_blocks))],
    );
    metric(
        o,
        "writeback_errors_total",
        "counter",
        "Failed write-back requests (the data stays dirty and is retried).",
        &[("", f(s.paths.writeback_errors))],
    );
    metric(
        o,
        "backing_io_mode",
        "gauge",
        "How BACKING I/O treats the kernel page cache (1 for the mode in use).",
        &[(format!("mode=\"{}\"", s.backing.io_mode).as_str(), 1.0)],
    );
    metric(
        o,
        "writeback_blocks_per_second",
        "gauge",
        "Recent write-back rate.",
        &[("", s.writeback_blocks_per_sec)],
    );
}

/// The FUSE inode table's descriptors: `fd_exhausted_total` counts the times the daemon ran
/// out of file descriptors; `open_files_limit` is its RLIMIT_NOFILE.
pub fn inodes_prometheus(s: &tiercache_fuse::InodeStats) -> String {
    let mut o = String::new();
    let f = |x: u64| x as f64;
    metric(
        &mut o,
        "fd_exhausted_total",
        "counter",
        "Times the daemon ran out of file descriptors.",
        &[("", f(s.fd_exhausted))],
    );
    metric(
        &mut o,
        "open_files_limit",
        "gauge",
        "The daemon's open-files limit (RLIMIT_NOFILE).",
        &[("", f(s.nofile_limit))],
    );
    metric(
        &mut o,
        "cached_fds",
        "gauge",
        "BACKING descriptors the inode table keeps open.",
        &[("", f(s.cached_fds))],
    );
    o
}

/// `tier_*{tier,kind}` for every tier of the stack, top first.
fn tier_metrics(o: &mut String, tiers: &[tiercache_tier::TierSnapshot]) {
    let labels: Vec<String> = tiers
        .iter()
        .map(|t| format!("tier=\"{}\",kind=\"{}\"", t.name.replace('"', "'"), t.kind))
        .collect();
    type Field = fn(&tiercache_tier::TierSnapshot) -> u64;
    let series: [(&str, &str, &str, Field); 6] = [
        ("tier_used_blocks", "gauge", "Blocks a tier holds.", |t| {
            t.used_blocks
        }),
        (
            "tier_dirty_blocks",
            "gauge",
            "Dirty blocks a tier holds.",
            |t| t.dirty_blocks,
        ),
        ("tier_hits_total", "counter", "Hits per tier.", |t| t.hits),
        ("tier_misses_total", "counter", "Misses per tier.", |t| {
            t.misses
        }),
        (
            "tier_demotions_in_total",
            "counter",
            "Blocks demoted into a tier.",
            |t| t.demotions_in,
        ),
        (
            "tier_errors_total",
            "counter",
            "Failed reads or stores per tier.",
            |t| t.errors,
        ),
    ];
    for (name, kind, help, field) in series {
        let samples: Vec<(&str, f64)> = labels
            .iter()
            .zip(tiers)
            .map(|(l, t)| (l.as_str(), field(t) as f64))
            .collect();
        metric(o, name, kind, help, &samples);
    }
}
