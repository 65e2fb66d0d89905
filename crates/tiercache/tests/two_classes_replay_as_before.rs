//! Generalizing classes from two to N must not change a two-class replay: every partitioner's
//! report and the `dirprio`/`mrc` window series match, number for number, what the two-pool
//! build printed for the same commands (`testdata/two-class/`, recorded before the change).
//! The `mrc` fixtures (`mrc.json`, `mrc-s3.json`, `ts-mrc.csv`) were re-recorded since, for
//! changes of `mrc`'s own sizing, not of the class count: its sampling rate now follows the
//! tier's size and it corrects its curves by the hit ratio the tier measures. They now hold
//! `mrc` to what it decides today; the other partitioners' fixtures are the two-pool build's.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::Command;

const WORKLOAD: &[&str] = &[
    "--workload",
    "loop:blocks=700,class=priority,weight=1",
    "--workload",
    "zipf:alpha=0.9,blocks=5000,class=normal,weight=2",
    "--workload",
    "scan:class=normal,from=0.4,until=0.7,weight=3,file=9",
    "--requests",
    "300000",
];

fn fixture(name: &str) -> String {
    let p = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/two-class/"
    ))
    .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn sim(extra: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_tiercache"))
        .arg("sim")
        .args(WORKLOAD)
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The report without its one measured figure (replay speed).
fn without_speed(json: &str) -> serde_json::Value {
    let mut v: serde_json::Value = serde_json::from_str(json).unwrap();
    v.as_object_mut().unwrap().remove("requests_per_second");
    v
}

/// Every value the old report had is in the new one, equal (keys added since are allowed).
fn assert_kept(got: &serde_json::Value, old: &serde_json::Value, at: &str) {
    use serde_json::Value;
    match (got, old) {
        (Value::Object(g), Value::Object(o)) => {
            for (k, v) in o {
                let here = format!("{at}.{k}");
                let g = g.get(k).unwrap_or_else(|| panic!("{here} is gone"));
                assert_kept(g, v, &here);
            }
        }
        (Value::Array(g), Value::Array(o)) => {
            assert_eq!(g.len(), o.len(), "{at}: length");
            for (i, (g, o)) in g.iter().zip(o).enumerate() {
                assert_kept(g, o, &format!("{at}[{i}]"));
            }
        }
        _ => assert_eq!(got, old, "{at}"),
    }
}

fn same_report(got: &str, fixture_name: &str) {
    assert_kept(
        &without_speed(got),
        &without_speed(&fixture(fixture_name)),
        fixture_name,
    );
}

#[test]
fn two_class_reports_match_the_two_pool_build() {
    let two_tiers = ["--tier", "mem:1000:lru", "--tier", "flash:4096:lru"];
    for p in ["none", "basic", "dirprio", "static", "mrc"] {
        let mut args = two_tiers.to_vec();
        args.extend(["--partition", p, "--t-protected", "0.95", "--json"]);
        same_report(&sim(&args), &format!("{p}.json"));
    }
    let arc = sim(&["--tier", "mem:1000:arc", "--partition", "dirprio", "--json"]);
    same_report(&arc, "dirprio-arc.json");
    let s3 = sim(&[
        "--tier",
        "mem:1000:s3fifo",
        "--partition",
        "mrc",
        "--t-protected",
        "0.9",
        "--omega",
        "500",
        "--json",
    ]);
    same_report(&s3, "mrc-s3.json");
}

#[test]
fn two_class_window_series_match_the_two_pool_build() {
    let dir = tempfile::tempdir().unwrap();
    for p in ["dirprio", "mrc"] {
        let csv = dir.path().join(format!("{p}.csv"));
        sim(&[
            "--tier",
            "mem:1000:lru",
            "--partition",
            p,
            "--t-protected",
            "0.95",
            "--timeseries",
            csv.to_str().unwrap(),
        ]);
        let got = std::fs::read_to_string(&csv).unwrap();
        assert_eq!(got, fixture(&format!("ts-{p}.csv")), "{p}");
    }
}
