//! `tiercache list [--json]`: every tiercache mount of the mount table, each asked for its
//! statistics on its control socket (all at once, each for at most [`ASK_TIMEOUT`]). A daemon
//! that does not answer does not fail the list: its mount is shown with its state.
//!
//! JSON: `{"mounts": [{"mountpoint", "backing", "owner_uid", "pid", "state", "error",
//! "block_size", "memory_bytes", "memory_used_bytes", "dirty_bytes", "tiers": [{"name",
//! "kind", "capacity_bytes", "used_bytes", "dirty_bytes"}]}]}`; `state` is `serving`,
//! `not responding` (its daemon holds the mount's pid file but does not answer), `no daemon`
//! (nothing holds it: the daemon died; `tiercache unmount --force` clears the mount),
//! `refused` (the daemon answered with an error) or `unreachable` (another user's mount, for
//! a caller that is not root). What a mount that did not answer cannot tell is `null`.

use super::mounts::{mounts, MountEntry};
use crate::live::control::{self, MountFiles, Request};
use clap::Args;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args, Debug)]
pub struct ListArgs {
    /// Print `{"mounts": [...]}` (keys in README).
    #[arg(long)]
    pub json: bool,
}

/// How long one daemon has to answer.
const ASK_TIMEOUT: Duration = Duration::from_secs(2);

pub fn list_cmd(a: ListArgs) -> Result<(), String> {
    let all: Vec<MountEntry> = mounts().into_iter().filter(|m| m.is_tiercache()).collect();
    let rows: Vec<Value> = std::thread::scope(|scope| {
        let asks: Vec<_> = all.iter().map(|m| scope.spawn(move || row(m))).collect();
        asks.into_iter()
            .zip(&all)
            .map(|(h, m)| {
                h.join().unwrap_or_else(|_| {
                    unanswered(m, None, "refused", Some("the query failed".into()))
                })
            })
            .collect()
    });
    if a.json {
        let doc = json!({ "mounts": rows });
        let text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
        println!("{text}");
    } else {
        print!("{}", table(&rows));
    }
    Ok(())
}

/// The runtime directories where the daemon of a mount made by `owner` may keep its files.
fn candidate_dirs(owner: Option<u32>) -> Vec<PathBuf> {
    // SAFETY: getuid has no preconditions and cannot fail.
    let me = unsafe { libc::getuid() };
    match owner {
        None => vec![control::runtime_dir()],
        Some(o) if o == me => vec![control::runtime_dir()],
        // Root may ask any user's daemon (they serve root too); where its files are depends
        // on that user's XDG_RUNTIME_DIR: the usual place, else the fallback.
        // Only a directory that user owns counts (not one another user planted in /tmp).
        Some(o) if me == 0 => [
            PathBuf::from(format!("/run/user/{o}/tiercache")),
            PathBuf::from(format!("/tmp/tiercache-{o}")),
        ]
        .into_iter()
        .filter(|d| {
            use std::os::unix::fs::MetadataExt;
            std::fs::symlink_metadata(d).is_ok_and(|m| m.is_dir() && m.uid() == o)
        })
        .collect(),
        // Another user's daemon serves only that user and root.
        Some(_) => Vec::new(),
    }
}

/// One mount's row: its statistics, or its state when its daemon does not answer.
fn row(m: &MountEntry) -> Value {
    let dirs = candidate_dirs(m.fuse_owner);
    if dirs.is_empty() {
        return unanswered(m, None, "unreachable", Some("another user's mount".into()));
    }
    let mut pid = None;
    let mut last_error = None;
    for dir in &dirs {
        let files = MountFiles::in_dir(dir, &m.mount_point);
        if !files.socket.exists() && !files.pid.exists() {
            continue;
        }
        pid = pid.or_else(|| files.live_pid());
        match control::call_socket(&files.socket, &Request::Stats, ASK_TIMEOUT) {
            Ok(v) => return answered(m, &v),
            Err(control::CallError::Refused(e)) => {
                return unanswered(m, pid, "refused", Some(e));
            }
            Err(control::CallError::Unreachable(e)) => last_error = Some(e),
        }
    }
    let state = if pid.is_some() {
        "not responding"
    } else {
        "no daemon"
    };
    unanswered(m, pid, state, last_error)
}

fn backing(m: &MountEntry) -> Value {
    m.backing().map_or(Value::Null, |b| json!(b))
}

fn unanswered(m: &MountEntry, pid: Option<i32>, state: &str, error: Option<String>) -> Value {
    json!({
        "mountpoint": m.mount_point,
        "backing": backing(m),
        "owner_uid": m.fuse_owner,
        "pid": pid,
        "state": state,
        "error": error,
        "block_size": null,
        "memory_bytes": null,
        "memory_used_bytes": null,
        "dirty_bytes": null,
        "tiers": null,
    })
}

fn answered(m: &MountEntry, v: &Value) -> Value {
    let bs = v["memory"]["block_size"].as_u64().unwrap_or(0);
    let bytes = |blocks: &Value| blocks.as_u64().unwrap_or(0).saturating_mul(bs);
    let tiers: Vec<Value> = v["tiers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            json!({
                "name": t["name"],
                "kind": t["kind"],
                "capacity_bytes": bytes(&t["capacity_blocks"]),
                "used_bytes": bytes(&t["used_blocks"]),
                "dirty_bytes": bytes(&t["dirty_blocks"]),
            })
        })
        .collect();
    let dirty: u64 = tiers
        .iter()
        .map(|t| t["dirty_bytes"].as_u64().unwrap_or(0))
        .sum();
    let backing = match backing(m) {
        Value::Null => v["backing_dir"].clone(),
        b => b,
    };
    json!({
        "mountpoint": m.mount_point,
        "backing": backing,
        "owner_uid": m.fuse_owner,
        "pid": v["pid"],
        "state": "serving",
        "error": null,
        "block_size": bs,
        "memory_bytes": bytes(&v["memory"]["capacity_blocks"]),
        "memory_used_bytes": bytes(&v["memory"]["used_blocks"]),
        "dirty_bytes": dirty,
        "tiers": tiers,
    })
}

/// `1.5G`, `64M`, `12K`, `512B`.
pub(super) fn human(bytes: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("T", 1 << 40),
        ("G", 1 << 30),
        ("M", 1 << 20),
        ("K", 1 << 10),
    ];
    for (unit, size) in UNITS {
        if bytes >= size {
            let v = bytes as f64 / size as f64;
            return if v >= 10.0 || bytes.is_multiple_of(size) {
                format!("{v:.0}{unit}")
            } else {
                format!("{v:.1}{unit}")
            };
        }
    }
    format!("{bytes}B")
}

/// The text table: one line per mount, columns aligned.
fn table(rows: &[Value]) -> String {
    let text = |v: &Value| match v {
        Value::Null => "-".to_string(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let size = |v: &Value| v.as_u64().map_or("-".to_string(), human);
    let mut lines = vec![[
        "MOUNTPOINT",
        "BACKING",
        "PID",
        "MEMORY",
        "TIERS",
        "DIRTY",
        "STATE",
    ]
    .map(String::from)];
    for r in rows {
        let tiers = r["tiers"].as_array().map_or("-".to_string(), |ts| {
            ts.iter()
                .skip(1)
                .map(|t| format!("{} {}", text(&t["name"]), size(&t["capacity_bytes"])))
                .collect::<Vec<_>>()
                .join(", ")
        });
        let state = match &r["error"] {
            Value::String(e) if r["state"] != "serving" => format!("{} ({e})", text(&r["state"])),
            _ => text(&r["state"]),
        };
        lines.push([
            text(&r["mountpoint"]),
            text(&r["backing"]),
            text(&r["pid"]),
            size(&r["memory_bytes"]),
            if tiers.is_empty() { "-".into() } else { tiers },
            size(&r["dirty_bytes"]),
            state,
        ]);
    }
    let widths: Vec<usize> = (0..7)
        .map(|i| {
            lines
                .iter()
                .map(|l| l[i].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for l in &lines {
        let cells: Vec<String> = l
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (c, w))| {
                if i == 6 {
                    c.clone()
                } else {
                    format!("{c:<w$}")
                }
            })
            .collect();
        out += cells.join("  ").trim_end();
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_short() {
        assert_eq!(human(512), "512B");
        assert_eq!(human(64 << 20), "64M");
        assert_eq!(human(3 << 29), "1.5G");
    }
}
