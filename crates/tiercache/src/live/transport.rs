//! The FUSE transport's figures (`tiercache_fuse::TransportStats`): the `transport` object of
//! `stats --json`, its line in `stats`, and the `tiercache_transport_*`/`tiercache_ring_*`
//! Prometheus metrics.
//!
//! Keys (a contract): `transport.kind` (`"dev_fuse"` or `"io_uring"`: what serves requests
//! now), `transport.queues` (ring queues set up, one per possible CPU; 0 when the mount did not
//! ask for the rings),
//! `transport.ring_requests` (requests served through the rings since the mount),
//! `transport.ring_worker_replies` (of those, answered by I/O workers),
//! `transport.ring_entries_replaced` (ring entries the kernel refused back: 0 unless something
//! is wrong).

use super::metrics::metric;
use serde_json::{json, Value};
use tiercache_fuse::TransportStats;

/// The `transport` object of `stats --json`.
pub fn json(s: &TransportStats) -> Value {
    json!({
        "kind": s.kind,
        "queues": s.queues,
        "ring_requests": s.ring_requests,
        "ring_worker_replies": s.ring_worker_replies,
        "ring_entries_replaced": s.ring_entries_replaced,
    })
}

/// The `transport` line of `stats` (empty without the object).
pub fn text(v: &Value) -> String {
    let t = &v["transport"];
    match t["kind"].as_str() {
        Some("io_uring") => format!(
            "transport: io_uring, {} queues, {} requests ({} answered by I/O workers)\n",
            t["queues"], t["ring_requests"], t["ring_worker_replies"]
        ),
        Some(kind) => format!("transport: {kind}\n"),
        None => String::new(),
    }
}

/// Prometheus text: `tiercache_transport_io_uring` (1 when the rings serve), and
/// `tiercache_ring_queues`, `tiercache_ring_requests_total`,
/// `tiercache_ring_worker_replies_total`, `tiercache_ring_entries_replaced_total`.
pub fn prometheus(s: &TransportStats) -> String {
    let mut o = String::new();
    let f = |x: u64| x as f64;
    let ring = if s.kind == "io_uring" { 1.0 } else { 0.0 };
    let rows: [(&str, &str, &str, f64); 5] = [
        (
            "transport_io_uring",
            "gauge",
            "1 when FUSE over io_uring serves the requests.",
            ring,
        ),
        (
            "ring_queues",
            "gauge",
            "Ring queues (one per possible CPU).",
            s.queues as f64,
        ),
        (
            "ring_requests_total",
            "counter",
            "Requests served through the rings.",
            f(s.ring_requests),
        ),
        (
            "ring_worker_replies_total",
            "counter",
            "Ring requests answered by I/O workers.",
            f(s.ring_worker_replies),
        ),
        (
            "ring_entries_replaced_total",
            "counter",
            "Ring entries registered again after the kernel refused a commit.",
            f(s.ring_entries_replaced),
        ),
    ];
    for (name, kind, help, value) in rows {
        metric(&mut o, name, kind, help, &[("", value)]);
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_fuse_mounts_say_so_and_report_no_ring() {
        let s = tiercache_fuse::TransportReader::default().stats();
        let v = json!({ "transport": json(&s) });
        assert_eq!(v["transport"]["kind"], "dev_fuse");
        assert_eq!(v["transport"]["ring_requests"], 0);
        assert_eq!(text(&v), "transport: dev_fuse\n");
        let p = prometheus(&s);
        assert!(p.contains("tiercache_transport_io_uring 0"), "{p}");
        assert!(p.contains("tiercache_ring_requests_total 0"), "{p}");
    }
}
