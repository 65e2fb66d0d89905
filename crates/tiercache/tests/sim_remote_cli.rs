//! `tiercache sim` with a `remote` tier: the threshold flag, its errors naming the flag, a
//! refused remote top tier, and the report's remote keys.
#![allow(clippy::unwrap_used)]

mod support;

use support::{fails_naming, json_of};

const BASE: [&str; 8] = [
    "sim",
    "--workload",
    "zipf:blocks=2000,alpha=0.9",
    "--workload",
    "scan:blocks=100000,file=1",
    "--requests",
    "20000",
    "--json",
];

fn json(extra: &[&str]) -> serde_json::Value {
    json_of(&BASE, extra)
}

#[test]
fn remote_tier_reports_kind_threshold_and_bypassed_requests() {
    let v = json(&["--tier", "mem:100:lru", "--tier", "remote:1000:lru"]);
    let (mem, remote) = (&v["tiers"][0], &v["tiers"][1]);
    assert_eq!(mem["kind"], "local");
    assert!(mem.get("bypassed").is_none());
    assert_eq!(remote["kind"], "remote");
    assert_eq!(remote["threshold"], 32);
    // The scan is one long run: almost all of its requests bypass the remote tier.
    assert!(remote["bypassed"].as_u64().unwrap() > 1000, "{remote}");
    assert_eq!(remote["invalidations"], 0);
}

#[test]
fn auto_threshold_comes_from_the_cost_model() {
    let v = json(&[
        "--tier",
        "mem:100:lru",
        "--tier",
        "remote:1000:lru",
        "--remote-threshold",
        "auto",
    ]);
    // 12 ms / (0.25 ms − 4096 B / 150 MB/s) = 53.9.
    assert_eq!(v["tiers"][1]["threshold"], 54);
    let v = json(&[
        "--tier",
        "mem:100:lru",
        "--tier",
        "remote:1000:lru",
        "--remote-threshold",
        "auto",
        "--remote-model",
        "8,100,0.25",
    ]);
    // 8 ms / (0.25 ms − 4096 B / 100 MB/s) = 38.3.
    assert_eq!(v["tiers"][1]["threshold"], 39);
}

#[test]
fn bad_thresholds_and_models_are_errors_naming_the_flag() {
    let two = ["sim", "--tier", "mem:10:lru", "--tier", "remote:10:lru"];
    for bad in ["0", "-3", "x", ""] {
        let flag = format!("--remote-threshold={bad}");
        let args: Vec<&str> = two.iter().copied().chain([flag.as_str()]).collect();
        fails_naming(&args, "--remote-threshold", "");
    }
    let args: Vec<&str> = two
        .iter()
        .copied()
        .chain(["--remote-threshold", "auto", "--remote-model", "8,100"])
        .collect();
    fails_naming(&args, "--remote-model", "");
    let args: Vec<&str> = two
        .iter()
        .copied()
        .chain(["--remote-model", "8,100,1"])
        .collect();
    fails_naming(&args, "--remote-model", "");
    fails_naming(
        &["sim", "--tier", "mem:10:lru", "--remote-threshold", "8"],
        "--remote-threshold",
        "",
    );
}

#[test]
fn a_remote_top_tier_is_refused_naming_the_flag() {
    fails_naming(&["sim", "--tier", "remote:100:lru"], "--tier", "");
    fails_naming(
        &["sim", "--tier", "remote:100:lru", "--tier", "mem:10:lru"],
        "--tier",
        "",
    );
}
