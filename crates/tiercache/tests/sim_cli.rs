//! `tiercache sim` end to end: JSON contract, comparisons, series and plots, and one-line errors
//! naming the file and line at fault.
#![allow(clippy::unwrap_used)]

mod support;

use std::path::PathBuf;
use support::{tc as tiercache, tc_json as json};

/// A sample trace stored (zstd-compressed) in the repository's `testdata/traces/`.
fn sample_trace(name: &str) -> String {
    let p = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/traces/"
    ))
    .join(name);
    assert!(
        p.exists(),
        "testdata/traces/{name} is missing (it is part of the repository)"
    );
    p.to_string_lossy().into_owned()
}

#[test]
fn json_report_has_the_contracted_keys_and_matches_libcachesim() {
    let trace = sample_trace("cloudPhysicsIO.oracleGeneral.bin.zst");
    let v = json(&["sim", "--trace", &trace, "--tier", "mem:4897:lru", "--json"]);
    for k in [
        "requests",
        "overall_hit_ratio",
        "requests_per_second",
        "tiers",
        "classes",
    ] {
        assert!(v.get(k).is_some(), "missing {k}");
    }
    assert_eq!(v["requests"], 113_872);
    // libCacheSim: LRU miss ratio .8049 at 4897 objects.
    let hit = v["overall_hit_ratio"].as_f64().unwrap();
    assert!((hit - (1.0 - 0.8049)).abs() < 5e-5, "{hit}");
    let t = &v["tiers"][0];
    for k in [
        "name",
        "capacity_blocks",
        "requests",
        "hits",
        "hit_ratio",
        "duplication",
        "demotions",
        "promotions",
    ] {
        assert!(t.get(k).is_some(), "tier missing {k}");
    }
    for k in ["requests", "hits", "hit_ratio"] {
        assert!(v["classes"]["normal"].get(k).is_some());
    }
}

#[test]
fn compare_replays_the_same_stream_and_dirprio_protects_priority() {
    let v = json(&[
        "sim",
        "--workload",
        "zipf:blocks=3000,alpha=0.8,class=priority",
        "--workload",
        "scan:weight=3",
        "--tier",
        "mem:2000:lru",
        "--requests",
        "200000",
        "--compare",
        "none,basic,dirprio,static",
        "--b-pmin",
        "50%",
        "--json",
    ]);
    let runs = v.as_array().unwrap();
    assert_eq!(runs.len(), 4);
    assert!(runs.iter().all(|r| r["requests"] == 200_000));
    let prio = |i: usize| {
        runs[i]["classes"]["priority"]["hit_ratio"]
            .as_f64()
            .unwrap()
    };
    assert!(
        prio(2) > prio(0) + 0.2,
        "dirprio {} vs none {}",
        prio(2),
        prio(0)
    );
    assert!(runs[2]["tiers"][0]["s_target"].as_u64().is_some());
    assert!(runs[2]["tiers"][0]["s_cur"].as_u64().is_some());
    assert!(
        runs[0]["tiers"][0].get("s_target").is_none(),
        "no target without a partitioner"
    );
    assert_eq!(runs[3]["tiers"][0]["s_target"], 1000, "static keeps b-pmin");
}

#[test]
fn two_tier_json_counts_demotions_and_promotions() {
    let v = json(&[
        "sim",
        "--workload",
        "uniform:blocks=5000",
        "--tier",
        "l1:500:lru",
        "--tier",
        "l2:1000:lru:exclusive",
        "--requests",
        "100000",
        "--json",
    ]);
    let l2 = &v["tiers"][1];
    assert!(l2["demotions"].as_u64().unwrap() > 0);
    assert!(l2["promotions"].as_u64().unwrap() > 0);
    assert_eq!(l2["duplication"], 0.0);
    let overall = v["overall_hit_ratio"].as_f64().unwrap();
    assert!(
        (overall - 0.3).abs() < 0.02,
        "exclusive reaches (c1 + c2) / N: {overall}"
    );
}

#[test]
fn timeseries_and_plot_are_written() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("ts.csv");
    let png = dir.path().join("fig.png");
    let out = tiercache(&[
        "sim",
        "--workload",
        "zipf:blocks=2000,class=priority",
        "--workload",
        "uniform:blocks=20000",
        "--tier",
        "mem:1000:lru",
        "--partition",
        "dirprio",
        "--requests",
        "50000",
        "--timeseries",
        csv.to_str().unwrap(),
        "--plot",
        png.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&csv).unwrap();
    let mut lines = text.lines();
    assert_eq!(
        lines.next().unwrap(),
        "request,h_p,h_n,s_target,s_cur,hit_mem"
    );
    assert_eq!(lines.count(), 50, "one row per ω = 1000 requests");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("wrote {}", png.display())),
        "the PNG's path is printed: {err}"
    );
    let png = std::fs::read(&png).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
}

#[test]
fn compare_writes_one_plot_per_setup_and_names_each() {
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("cmp.png");
    let out = tiercache(&[
        "sim",
        "--workload",
        "zipf:blocks=2000,class=priority",
        "--workload",
        "uniform:blocks=20000",
        "--tier",
        "mem:1000:lru",
        "--requests",
        "20000",
        "--compare",
        "none,dirprio",
        "--plot",
        png.to_str().unwrap(),
        "--json",
    ]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 2, "stdout stays JSON");
    let err = String::from_utf8_lossy(&out.stderr);
    for label in ["none", "dirprio"] {
        let p = dir.path().join(format!("cmp-{label}.png"));
        assert!(p.is_file(), "{}", p.display());
        assert!(err.contains(&format!("wrote {}", p.display())), "{err}");
    }
}

#[test]
fn bad_trace_line_is_one_error_line_naming_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.csv");
    std::fs::write(&p, "time,obj_id\n1,5\n2,x7\n").unwrap();
    let out = tiercache(&["sim", "--trace", p.to_str().unwrap(), "--format", "csv"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("bad.csv:3"), "{err}");
}

#[test]
fn bad_flags_are_errors_naming_the_flag() {
    for (args, needle) in [
        (
            vec!["sim", "--workload", "uniform", "--tier", "a:10:nope"],
            "nope",
        ),
        (
            vec!["sim", "--workload", "uniform", "--partition", "fancy"],
            "--partition",
        ),
        (
            vec!["sim", "--workload", "uniform", "--t-normal", "1.5"],
            "t-normal",
        ),
        (
            vec![
                "sim",
                "--workload",
                "uniform",
                "--tier",
                "a:100:lru",
                "--b-pmin",
                "90",
                "--b-nmin",
                "20",
            ],
            "b-pmin",
        ),
        (
            vec!["sim", "--workload", "uniform", "--compare", "lru,bogus"],
            "bogus",
        ),
        (vec!["sim"], "--workload"),
        (
            vec!["sim", "--workload", "uniform", "--requests", "100000000000"],
            "--requests",
        ),
        (
            vec!["sim", "--workload", "uniform", "--tier", "a:4000000000:lru"],
            "--tier",
        ),
        (
            vec!["sim", "--trace", "/nonexistent/t.bin"],
            "/nonexistent/t.bin",
        ),
    ] {
        let out = tiercache(&args);
        assert!(!out.status.success(), "{args:?} should fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
        // Ours are one line (exit 1); clap's keep their usage and tips (exit 2), the flag named
        // on the first line.
        if out.status.code() == Some(2) {
            assert!(err.starts_with("error: "), "{args:?}: {err}");
        } else {
            assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        }
    }
}

#[test]
fn curves_give_each_class_its_exact_and_estimated_miss_ratio_curve() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("curves.csv");
    let out = tiercache(&[
        "sim",
        "--workload",
        "zipf:blocks=50000,alpha=0.9,class=priority,weight=1",
        "--workload",
        "scan:blocks=100000,weight=2",
        "--tier",
        "mem:5000:lru",
        "--requests",
        "300000",
        "--curves",
        csv.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let text = std::fs::read_to_string(&csv).unwrap();
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("class,blocks,exact_miss_ratio,estimated_miss_ratio")
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    for class in ["priority", "normal"] {
        let mine: Vec<_> = rows.iter().filter(|r| r[0] == class).collect();
        assert_eq!(mine.len(), 101, "{class}: one row per 1/100 of 4× the tier");
        let m = |r: &Vec<&str>, i: usize| r[i].parse::<f64>().unwrap();
        // Monotone, 1 at size 0, and the estimate close to the exact curve everywhere.
        assert_eq!(m(mine[0], 2), 1.0);
        assert!(mine.windows(2).all(|w| m(w[1], 2) <= m(w[0], 2) + 1e-12));
        let worst = mine
            .iter()
            .map(|r| (m(r, 2) - m(r, 3)).abs())
            .fold(0.0, f64::max);
        assert!(worst < 0.1, "{class}: estimate {worst} off somewhere");
        assert!(err.contains(&format!("{class} curve:")), "{err}");
    }
    // A scan larger than 4× the tier never hits: its exact curve stays at 1.
    assert!(rows
        .iter()
        .filter(|r| r[0] == "normal")
        .all(|r| r[2] == "1.000000"));
}

/// Named classes: the curves CSV names them as the table does, and `--curves FILE.png` draws
/// the curves instead of writing the CSV.
#[test]
fn curves_of_named_classes_are_named_and_plotted() {
    let dir = tempfile::tempdir().unwrap();
    let (csv, png) = (dir.path().join("c.csv"), dir.path().join("c.png"));
    for path in [&csv, &png] {
        let out = tiercache(&[
            "sim",
            "--class",
            "web::0.9",
            "--workload",
            "zipf:blocks=3000,class=web",
            "--tier",
            "mem:1000:lru",
            "--requests",
            "50000",
            "--curves",
            path.to_str().unwrap(),
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        assert!(err.contains("web curve:"), "{err}");
    }
    let text = std::fs::read_to_string(&csv).unwrap();
    assert!(
        text.lines().skip(1).all(|l| l.starts_with("web,")),
        "{text}"
    );
    let bytes = std::fs::read(&png).unwrap();
    assert!(bytes.starts_with(b"\x89PNG"), "not a PNG");
}

/// `--partition mrc` sees from the priority class's curve that T_p = 0.95 cannot be had in the
/// tier and says so, keeping the normal class's target, where `dirprio` chases T_p with the
/// whole tier and the normal class gets almost nothing.
#[test]
fn mrc_reports_an_unreachable_target_and_keeps_the_reachable_one() {
    let v = json(&[
        "sim",
        "--workload",
        "zipf:blocks=20000,alpha=1.0,class=priority",
        "--workload",
        "zipf:blocks=50000,alpha=0.9,class=normal",
        "--tier",
        "mem:12000:lru",
        "--requests",
        "1500000",
        "--compare",
        "dirprio,mrc",
        "--t-protected",
        "0.95",
        "--t-normal",
        "0.5",
        "--b-pmin",
        "0",
        "--b-nmin",
        "0",
        "--json",
    ]);
    let (dirprio, mrc) = (&v[0], &v[1]);
    assert_eq!(mrc["tiers"][0]["partition"], "mrc");
    assert_eq!(mrc["classes"]["priority"]["target_reachable"], false);
    assert_eq!(mrc["classes"]["normal"]["target_reachable"], true);
    assert!(dirprio["classes"]["priority"]["target_reachable"].is_null());
    let h_n = |r: &serde_json::Value| r["classes"]["normal"]["hit_ratio"].as_f64().unwrap();
    assert!(h_n(mrc) >= 0.5, "mrc H_n {}", h_n(mrc));
    assert!(h_n(dirprio) < 0.2, "dirprio H_n {}", h_n(dirprio));
}
