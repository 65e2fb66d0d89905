//! `tiercache bench classes --json`: the keys issue 20 names (a contract other tools read),
//! with values that hold together: each class's target is its table's, hit ratios are
//! fractions, the partitioners saw the same classes, the comparisons are computed, and no
//! class falls short of its target in fewer windows than the whole tier would.
#![allow(clippy::unwrap_used)]

use std::process::Command;

fn fraction(v: &serde_json::Value, at: &str) {
    let x = v
        .as_f64()
        .unwrap_or_else(|| panic!("{at}: {v} is not a number"));
    assert!((0.0..=1.0).contains(&x), "{at}: {x}");
}

fn check_part(p: &serde_json::Value, at: &str) {
    let classes = p["classes"]
        .as_object()
        .unwrap_or_else(|| panic!("{at}.classes"));
    for (name, c) in classes {
        let here = format!("{at}.classes.{name}");
        for k in [
            "target",
            "hit_ratio",
            "blocks",
            "target_met",
            "windows_to_target",
        ] {
            assert!(c.get(k).is_some(), "{here}.{k} missing");
        }
        if !c["target"].is_null() {
            fraction(&c["target"], &format!("{here}.target"));
            assert!(c["target_met"].is_boolean(), "{here}.target_met");
            // A window the whole tier cannot hold is one no pool of it holds either.
            let below = c["windows_below_target"].as_u64();
            let out = c["windows_out_of_reach"].as_u64();
            assert!(
                matches!((below, out), (Some(b), Some(o)) if o <= b),
                "{here}: below {below:?}, out of reach {out:?}"
            );
        }
        fraction(&c["hit_ratio"], &format!("{here}.hit_ratio"));
    }
    fraction(
        &p["best_effort_hit_ratio"],
        &format!("{at}.best_effort_hit_ratio"),
    );
}

#[test]
fn bench_classes_json_has_the_contracted_keys() {
    let trace = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/traces/cloudPhysicsIO.oracleGeneral.bin.zst"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_tiercache"))
        .args(["bench", "classes", "--json", "--requests", "200000"])
        .args(["--cache-blocks", "4000", "--repeat", "1", "--trace", trace])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for (at, s) in [
        ("top", &v),
        ("synthetic", &v["scenarios"]["synthetic"]),
        ("cloudphysics", &v["scenarios"]["cloudphysics"]),
    ] {
        check_part(&s["mrc"], &format!("{at}.mrc"));
        check_part(&s["dirprio"], &format!("{at}.dirprio"));
        let names = |p: &str| -> Vec<String> {
            s[p]["classes"]
                .as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect()
        };
        assert_eq!(names("mrc"), names("dirprio"), "{at}: same classes");
        for k in [
            "mrc_blocks_vs_optimal",
            "best_effort_hits_mrc_vs_dirprio",
            "best_effort_hits_mrc_vs_dirprio_last_half",
            "sampling_speed_cost",
            "mrc_vs_dirprio_speed_cost",
            "curve_error",
        ] {
            assert!(s[k].is_number(), "{at}.{k}: {}", s[k]);
        }
        for k in ["optimal_blocks", "recent_optimal_blocks"] {
            assert!(s[k].is_object(), "{at}.{k}: {}", s[k]);
        }
        assert!(s["windows"].as_u64().is_some_and(|w| w > 0), "{at}.windows");
        fraction(&s["curve_error"], &format!("{at}.curve_error"));
        fraction(
            &s["sampling_speed_cost"],
            &format!("{at}.sampling_speed_cost"),
        );
    }
    // The synthetic scenario's four named classes, two with targets.
    let syn = &v["scenarios"]["synthetic"]["mrc"]["classes"];
    for c in ["web", "db", "batch", "backup"] {
        assert!(syn.get(c).is_some(), "synthetic class {c}");
    }
    assert!(syn["web"]["target"].is_number() && syn["batch"]["target"].is_null());
}

#[test]
fn bench_classes_names_a_missing_trace() {
    let out = Command::new(env!("CARGO_BIN_EXE_tiercache"))
        .args([
            "bench",
            "classes",
            "--requests",
            "20000",
            "--cache-blocks",
            "1000",
        ])
        .args(["--repeat", "1", "--trace", "/nonexistent/trace.bin"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--trace") && err.lines().count() == 1, "{err}");
}
