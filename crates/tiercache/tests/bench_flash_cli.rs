//! `tiercache bench flash --json` with the smoke flags of `scripts/test.sh` (real FUSE mounts:
//! needs root) prints the contracted keys: each workload's seconds per configuration, and
//! idle ÷ eager for the two write workloads.
#![allow(clippy::unwrap_used)]

mod support;

use support::{s, tc};

#[test]
fn smoke_run_prints_every_workload_for_every_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("flash.png");
    let out = tc(&[
        "bench",
        "flash",
        "--json",
        "--cache",
        "16M",
        "--rand-writes",
        "12",
        "--rand-reads",
        "32",
        "--wait-ms",
        "300",
        "--dir",
        s(&dir.path().join("work")),
        "--plot",
        s(&png),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for w in ["seq_write", "rand_write", "seq_read", "rand_read"] {
        for c in ["idle", "eager", "none", "raw"] {
            let secs = v[w][c].as_f64();
            assert!(secs.is_some_and(|x| x > 0.0), "{w}.{c}: {}", v[w][c]);
        }
    }
    for w in ["seq_write", "rand_write"] {
        let r = v[w]["idle_over_eager"].as_f64().unwrap();
        let want = v[w]["idle"].as_f64().unwrap() / v[w]["eager"].as_f64().unwrap();
        assert!((r - want).abs() < 1e-9, "{w}: {r} vs {want}");
    }
    assert!(v["device_model"].as_str().unwrap().contains("emulated"));
    // The sequential write is larger than the cache, so the idle cleaner's tier filled up and
    // sent the rest of the write-back straight to BACKING.
    assert_eq!(v["details"]["idle"]["seq_write"]["free_sets_after"], 0);
    assert!(
        v["details"]["idle"]["seq_write"]["bypassed"]
            .as_u64()
            .unwrap()
            > 0
    );
    let head = std::fs::read(&png).unwrap();
    assert_eq!(&head[..8], b"\x89PNG\r\n\x1a\n");
}
