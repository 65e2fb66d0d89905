//! `tiercache sim` with a `flash` tier: the report's flash keys, `--flash-set-blocks`, errors
//! naming their flag (flash top tier, less than one set, a policy other than lru, a bad set
//! size, the flag without a flash tier), and `--compare` leaving a flash tier at lru.
#![allow(clippy::unwrap_used)]

mod support;

use support::{fails_naming, json_of};

const BASE: [&str; 6] = [
    "sim",
    "--workload",
    "zipf:blocks=4000,alpha=0.9",
    "--requests",
    "20000",
    "--json",
];

fn json(extra: &[&str]) -> serde_json::Value {
    json_of(&BASE, extra)
}

#[test]
fn flash_tier_reports_kind_geometry_set_evictions_and_ram_per_block() {
    let v = json(&["--tier", "mem:100:lru", "--tier", "flash:1000:lru"]);
    let (mem, flash) = (&v["tiers"][0], &v["tiers"][1]);
    assert_eq!(mem["kind"], "local");
    for key in ["set_blocks", "sets", "set_evictions", "ram_bytes_per_block"] {
        assert!(mem.get(key).is_none(), "{key} in {mem}");
    }
    assert_eq!(flash["kind"], "flash");
    assert_eq!(flash["policy"], "lru");
    assert_eq!(flash["set_blocks"], 256);
    // 1000 blocks round down to 3 sets.
    assert_eq!(flash["sets"], 3);
    assert_eq!(flash["capacity_blocks"], 768);
    assert_eq!(flash["ram_bytes_per_block"], 0.3125);
    // 16 backing sets of one file share 3 cache sets: they are reused.
    assert!(flash["set_evictions"].as_u64().unwrap() > 0, "{flash}");
}

#[test]
fn set_blocks_flag_sets_the_geometry_and_placements_apply() {
    let v = json(&[
        "--tier",
        "mem:100:lru",
        "--tier",
        "flash:1000:lru:exclusive",
        "--flash-set-blocks",
        "64",
    ]);
    let flash = &v["tiers"][1];
    assert_eq!(
        (flash["set_blocks"].as_u64(), flash["sets"].as_u64()),
        (Some(64), Some(15))
    );
    assert_eq!(flash["capacity_blocks"], 960);
    assert_eq!(flash["placement"], "exclusive");
    assert!(flash["demotions"].as_u64().unwrap() > 0, "{flash}");
}

#[test]
fn compare_by_policy_keeps_a_flash_tier_at_lru() {
    let v = json(&[
        "--tier",
        "mem:100:lru",
        "--tier",
        "flash:1024:lru",
        "--compare",
        "lru,fifo",
    ]);
    let fifo = &v[1]["tiers"];
    assert_eq!(fifo[0]["policy"], "fifo");
    assert_eq!(fifo[1]["policy"], "lru");
}

#[test]
fn flash_errors_name_their_flag() {
    fails_naming(
        &["sim", "--tier", "flash:1024:lru", "--tier", "mem:10:lru"],
        "--tier",
        "cannot be the top tier",
    );
    fails_naming(
        &["sim", "--tier", "mem:10:lru", "--tier", "flash:100:lru"],
        "--tier",
        "less than one set of 256 blocks",
    );
    fails_naming(
        &[
            "sim",
            "--tier",
            "mem:10:lru",
            "--tier",
            "flash:100:lru",
            "--flash-set-blocks",
            "128",
        ],
        "--tier",
        "less than one set of 128 blocks",
    );
    fails_naming(
        &["sim", "--tier", "mem:10:lru", "--tier", "flash:1024:arc"],
        "--tier",
        "POLICY must be lru",
    );
    fails_naming(
        &[
            "sim",
            "--tier",
            "mem:10:lru",
            "--tier",
            "flash:1024:lru",
            "--flash-set-blocks",
            "100",
        ],
        "--flash-set-blocks",
        "not a power of two",
    );
    fails_naming(
        &["sim", "--tier", "mem:10:lru", "--flash-set-blocks", "64"],
        "--flash-set-blocks",
        "applies to a flash tier",
    );
}
