//! The I/O workers' figures (`tiercache_fuse::IoStats`): the `io` object of `stats --json`,
//! its line in `stats`, and the `tiercache_io_*` Prometheus metrics.
//!
//! Keys (a contract): `io.workers` (0: no workers, requests that wait run on the FUSE request
//! threads), `io.reserved` (workers the normal class cannot occupy), and per class
//! `io.{priority,normal}.{queued,in_flight,workers,completed}`: requests waiting for a worker,
//! requests a worker runs, the workers the class may occupy at once, requests finished since
//! the mount.

use super::metrics::metric;
use serde_json::{json, Value};
use tiercache_fuse::{IoClassStats, IoStats};

fn class_json(c: &IoClassStats) -> Value {
    json!({
        "queued": c.queued,
        "in_flight": c.in_flight,
        "workers": c.workers,
        "completed": c.completed,
    })
}

/// The `io` object of `stats --json`.
pub fn json(s: &IoStats) -> Value {
    json!({
        "workers": s.workers,
        "reserved": s.reserved,
        "priority": class_json(&s.priority),
        "normal": class_json(&s.normal),
    })
}

/// The `io` line of `stats` (empty without the object).
pub fn text(v: &Value) -> String {
    let io = &v["io"];
    if !io.is_object() {
        return String::new();
    }
    let c = |k: &str| {
        format!(
            "{k} {} queued, {} running (of {}), {} done",
            io[k]["queued"], io[k]["in_flight"], io[k]["workers"], io[k]["completed"]
        )
    };
    format!(
        "io: {} workers ({} reserved for priority); {}; {}\n",
        io["workers"],
        io["reserved"],
        c("priority"),
        c("normal")
    )
}

/// Prometheus text: `tiercache_io_workers`, `tiercache_io_reserved_workers`, and per class
/// (label `class`) `tiercache_io_queued`, `tiercache_io_in_flight`, `tiercache_io_class_workers`,
/// `tiercache_io_completed_total`.
pub fn prometheus(s: &IoStats) -> String {
    let mut o = String::new();
    let f = |x: u64| x as f64;
    metric(
        &mut o,
        "io_workers",
        "gauge",
        "I/O worker threads answering requests that wait for BACKING.",
        &[("", f(s.workers))],
    );
    metric(
        &mut o,
        "io_reserved_workers",
        "gauge",
        "I/O workers the normal class cannot occupy.",
        &[("", f(s.reserved))],
    );
    let per = |get: fn(&IoClassStats) -> u64| {
        [
            ("class=\"priority\"", f(get(&s.priority))),
            ("class=\"normal\"", f(get(&s.normal))),
        ]
    };
    metric(
        &mut o,
        "io_queued",
        "gauge",
        "Requests waiting for an I/O worker.",
        &per(|c| c.queued),
    );
    metric(
        &mut o,
        "io_in_flight",
        "gauge",
        "Requests an I/O worker is running.",
        &per(|c| c.in_flight),
    );
    metric(
        &mut o,
        "io_class_workers",
        "gauge",
        "I/O workers the class may occupy at once.",
        &per(|c| c.workers),
    );
    metric(
        &mut o,
        "io_completed_total",
        "counter",
        "Requests the I/O workers finished.",
        &per(|c| c.completed),
    );
    o
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn keys_and_metrics_name_every_class() {
        let s = IoStats {
            workers: 8,
            reserved: 2,
            priority: IoClassStats {
                queued: 1,
                in_flight: 2,
                workers: 8,
                completed: 3,
            },
            normal: IoClassStats {
                queued: 4,
                in_flight: 6,
                workers: 6,
                completed: 9,
            },
        };
        let v = json!({ "io": json(&s) });
        assert_eq!(v["io"]["normal"]["in_flight"], 6);
        assert_eq!(v["io"]["priority"]["workers"], 8);
        assert!(text(&v).contains("normal 4 queued, 6 running (of 6), 9 done"));
        let p = prometheus(&s);
        assert!(p.contains("tiercache_io_queued{class=\"normal\"} 4"));
        assert!(p.contains("tiercache_io_completed_total{class=\"priority\"} 3"));
    }
}
