//! `tiercache bench meta --side write --json` on a small tree (real FUSE mounts, bindfs and
//! `tar`: needs root and `scripts/setup-deps.sh`) prints the keys issue 22 names — `untar_secs`
//! and `rm_secs` per target, `untar_backing_syncs`, `untar_hdd_model_secs` — and the create +
//! write + close loop's `create_write_close_secs` with `create_files`, each a measured time.
#![allow(clippy::unwrap_used)]

mod support;

use support::{s, tc_json};

fn seconds(v: &serde_json::Value, at: &str) -> f64 {
    let x = v
        .as_f64()
        .unwrap_or_else(|| panic!("{at}: {v} is not a number"));
    assert!(x > 0.0 && x < 600.0, "{at}: {x} s");
    x
}

#[test]
fn write_side_prints_every_target_of_every_step() {
    let dir = tempfile::tempdir().unwrap();
    let v = tc_json(&[
        "bench",
        "meta",
        "--side",
        "write",
        "--json",
        "--write-files",
        "300",
        "--write-dirs",
        "6",
        "--hdd-files",
        "30",
        "--dir",
        s(&dir.path().join("work")),
    ]);
    for step in ["untar_secs", "rm_secs", "create_write_close_secs"] {
        for target in ["tiercache", "bindfs", "native"] {
            seconds(&v[step][target], &format!("{step}.{target}"));
        }
    }
    assert_eq!(v["create_files"], 300, "{v}");
    assert!(v["untar_backing_syncs"].is_u64(), "{v}");
    let hdd = &v["untar_hdd_model_secs"];
    let returned = seconds(&hdd["returned"], "untar_hdd_model_secs.returned");
    let on_backing = seconds(&hdd["on_backing"], "untar_hdd_model_secs.on_backing");
    assert!(on_backing >= returned, "{hdd}");
    // The model charges a seek for every request that does not continue the previous one in
    // the same file: one per file it writes back but the first.
    assert!(hdd["seeks"].as_u64().unwrap() >= 29, "{hdd}");
}
