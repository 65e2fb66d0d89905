//! `tiercache bench web` (real FUSE mounts, nginx, wrk, tar and a memory cgroup: needs root)
//! refuses bad arguments with one line naming the flag, and a short run prints the contracted
//! keys with nginx's pages really served from the mount during the backup.
#![allow(clippy::unwrap_used)]

mod support;

use support::{fails_naming, s, tc_json};

#[test]
fn bad_arguments_are_refused_naming_the_flag() {
    let web = ["bench", "web"];
    let with = |extra: &[&'static str]| -> Vec<&'static str> {
        web.iter().chain(extra).copied().collect()
    };
    fails_naming(
        &with(&["--backup-streams", "0"]),
        "--backup-streams",
        "1..=8",
    );
    fails_naming(
        &with(&["--backup-streams", "9"]),
        "--backup-streams",
        "1..=8",
    );
    fails_naming(&with(&["--configs", "tmpfs"]), "--configs", "tmpfs");
    fails_naming(&with(&["--memory", "lots"]), "--memory", "lots");
    fails_naming(&with(&["--pages", "0"]), "--pages", "1..=100");
}

#[test]
fn a_short_run_serves_the_pages_during_the_backup_and_prints_every_key() {
    let dir = tempfile::tempdir().unwrap();
    let v = tc_json(&[
        "bench",
        "web",
        "--json",
        "--seconds",
        "1",
        "--bulk",
        "16M",
        "--pages",
        "10",
        "--backup-streams",
        "2",
        "--configs",
        "tiercache",
        "--dir",
        s(&dir.path().join("work")),
    ]);
    assert_eq!(v["backup_streams"], 2);
    assert!(
        v["page_cache"].is_null(),
        "not asked for: {}",
        v["page_cache"]
    );
    for run in ["tiercache", "tiercache_one_stream"] {
        for key in ["warm_rps", "load_rps", "load_avg_ms", "load_p99_ms"] {
            let x = v[run][key].as_f64();
            assert!(x.is_some_and(|x| x > 0.0), "{run}.{key}: {}", v[run][key]);
        }
        assert!(v[run]["load_requests"].as_u64().unwrap() > 0, "{run}");
        assert!(v[run]["backup_mb_per_s"].as_f64().is_some(), "{run}");
    }
    for key in ["load_p99_vs_one_stream", "load_rps_vs_one_stream"] {
        assert!(
            v[key].as_f64().is_some_and(|x| x > 0.0),
            "{key}: {}",
            v[key]
        );
    }
    // The run cleaned up after itself: no mount left on its mount point.
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    let mnt = dir.path().join("work").join("mnt");
    assert!(!mounts.contains(s(&mnt)), "{mounts}");
}
