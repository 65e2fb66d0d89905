//! `tiercache stats --curves`: each class's estimated hit-ratio curve as a table, one column
//! per class with a pool of its own (`normal`: the rest pool's), one row per size (sixteenths
//! of the memory tier), read from `stats`'s JSON (`classes.NAME.curve`). Only
//! `--partition mrc` keeps curves.

use super::list::human;
use serde_json::Value;
use std::fmt::Write as _;

/// The curves of `v` (a `stats` document) as text; says why when there are none.
pub(super) fn text(v: &Value) -> String {
    let classes: Vec<(&String, &Vec<Value>)> = v["classes"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(name, c)| c["curve"].as_array().map(|pts| (name, pts)))
        .collect();
    let Some((_, first)) = classes.first() else {
        let partition = v["memory"]["partition"].as_str().unwrap_or("?");
        return if partition == "mrc" {
            "curves: none yet (a curve appears after a class's first accesses)\n".to_string()
        } else {
            format!("curves: none (this mount sizes pools with `{partition}`; `--partition mrc` estimates each class's curve)\n")
        };
    };
    let mut out = String::from(
        "estimated hit ratio of each class at a pool of each size (mrc's sampled curves):\n",
    );
    let _ = write!(out, "{:>8}", "size");
    for (name, _) in &classes {
        let _ = write!(out, " {name:>9}");
    }
    out.push('\n');
    for (i, p) in first.iter().enumerate() {
        let _ = write!(out, "{:>8}", human(p["bytes"].as_u64().unwrap_or(0)));
        for (_, pts) in &classes {
            let h = pts.get(i).and_then(|p| p["hit_ratio"].as_f64());
            let _ = write!(
                out,
                " {:>9}",
                h.map_or("-".to_string(), |h| format!("{:.1}%", 100.0 * h))
            );
        }
        out.push('\n');
    }
    // Where each class stands on its curve.
    for (name, _) in &classes {
        let c = &v["classes"][name.as_str()];
        let bytes =
            c["blocks"].as_u64().unwrap_or(0) * v["memory"]["block_size"].as_u64().unwrap_or(0);
        let _ = write!(out, "{name}: holds {}", human(bytes));
        if let Some(t) = c["target"].as_f64() {
            let _ = write!(out, ", target {:.1}%", 100.0 * t);
            if c["target_reachable"] == Value::Bool(false) {
                out.push_str(" (out of reach at the last window's sizing)");
            }
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_mount_without_curves_says_which_partitioner_it_runs() {
        let v = json!({ "memory": { "partition": "dirprio" }, "classes": { "normal": { "curve": null } } });
        assert!(text(&v).contains("`dirprio`"), "{}", text(&v));
    }

    #[test]
    fn curves_are_one_column_per_class() {
        let pt = |b: u64, h: f64| json!({ "blocks": b, "bytes": b * 4096, "hit_ratio": h });
        let v = json!({
            "memory": { "partition": "mrc", "block_size": 4096 },
            "classes": {
                "web": { "curve": [pt(256, 0.5), pt(512, 0.9)], "blocks": 300, "target": 0.99, "target_reachable": false },
                "normal": { "curve": [pt(256, 0.1), pt(512, 0.2)], "blocks": 10, "target": null },
            }
        });
        let t = text(&v);
        assert!(
            t.contains("1M") && t.contains("2M") && t.contains("90.0%"),
            "{t}"
        );
        assert!(
            t.contains("web: holds 1.2M, target 99.0% (out of reach at"),
            "{t}"
        );
    }
}
