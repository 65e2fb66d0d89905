//! The `flash` tier kind in replay (paper 001): a set-mapped index under a memory tier, with
//! counts worked out by hand on tiny traces; a flash top tier is refused.
#![allow(clippy::unwrap_used)]

use tiercache_core::partition::PartitionConfig;
use tiercache_core::{Access, BlockKey, Class};
use tiercache_sim::remote::TierKind;
use tiercache_sim::replay::{replay, ReplayOptions, Setup, TierSpec};
use tiercache_sim::report::TierReport;

fn read(file: u64, block: u64) -> Access {
    Access::read(BlockKey::new(file, block), Class::NORMAL)
}

/// Tiers from specs; flash tiers get sets of `set_blocks`.
fn setup(tiers: &[&str], set_blocks: usize) -> Setup {
    Setup {
        label: "t".into(),
        tiers: tiers
            .iter()
            .map(|t| {
                let mut s: TierSpec = t.parse().unwrap();
                s.set_blocks = set_blocks;
                s
            })
            .collect(),
        partition: PartitionConfig::none(),
        remote_threshold: 32,
    }
}

fn tiers(tiers: &[&str], set_blocks: usize, trace: &[Access]) -> Vec<TierReport> {
    replay(&setup(tiers, set_blocks), trace, ReplayOptions::default())
        .unwrap()
        .report
        .tiers
}

#[test]
fn two_files_in_one_set_mapped_set_thrash_where_a_fully_associative_tier_hits() {
    // mem holds one block; the lower tier holds 4 = blocks 0 and 1 of files 1 and 2. Each
    // round: 1/0 1/1 2/0 2/1. A fully associative lower tier misses only the first round.
    let trace: Vec<Access> = (0..3)
        .flat_map(|_| [read(1, 0), read(1, 1), read(2, 0), read(2, 1)])
        .collect();
    let local = tiers(&["mem:1:lru", "lower:4:lru"], 4, &trace);
    assert_eq!((local[1].requests, local[1].hits), (12, 8));
    // One 4-block set: both files' backing set 0 map to it, so each file switch reuses it.
    let flash = tiers(&["mem:1:lru", "flash:4:lru"], 4, &trace);
    let f = &flash[1];
    assert_eq!((f.kind.as_str(), f.requests, f.hits), ("flash", 12, 0));
    assert_eq!(
        (f.sets, f.set_blocks, f.set_evictions),
        (Some(1), Some(4), Some(5))
    );
    // Sets of two blocks, two of them: each file has its own.
    let small = tiers(&["mem:1:lru", "flash:4:lru"], 2, &trace);
    assert_eq!((small[1].hits, small[1].set_evictions), (8, Some(0)));
}

#[test]
fn a_scan_fills_whole_sets_and_reuses_them_from_the_lru_end() {
    // 40 blocks of one file through 16 flash blocks in sets of 4: 10 backing sets, 4 cache
    // sets; the last 4 backing sets (blocks 24..40) stay, 6 set evictions.
    let scan: Vec<Access> = (0..40).map(|b| read(7, b)).collect();
    let mut trace = scan.clone();
    trace.extend((24..40).map(|b| read(7, b)));
    trace.push(read(7, 0));
    let t = tiers(&["mem:1:lru", "flash:16:lru"], 4, &trace);
    let f = &t[1];
    assert_eq!(f.capacity_blocks, 16);
    // Second pass over 24..40 hits every block; block 0 misses.
    assert_eq!((f.requests, f.hits), (57, 16));
    // Block 0's backing set takes the LRU set (blocks 24..28): 7 reuses in all.
    assert_eq!(f.set_evictions, Some(7));
    assert_eq!(f.ram_bytes_per_block, Some((1.0 + 16.0) / 4.0));
}

#[test]
fn a_set_eviction_demotes_every_dropped_block_into_the_exclusive_tier_below() {
    // mem:1 over an exclusive one-set flash tier over an exclusive lower tier. Blocks 0..4 of
    // file 0 pass through mem into flash's set; file 1's first demoted block reuses the set,
    // and all four of file 0's blocks go down to `low`, where the second pass finds them.
    let mut trace: Vec<Access> = (0..4).map(|b| read(0, b)).collect();
    trace.extend([read(1, 0), read(1, 1)]);
    trace.extend((0..4).map(|b| read(0, b)));
    let t = tiers(
        &[
            "mem:1:lru",
            "flash:4:lru:exclusive",
            "low:100:lru:exclusive",
        ],
        4,
        &trace,
    );
    let (f, low) = (&t[1], &t[2]);
    assert_eq!(low.hits, 4);
    // File 0's four, then file 1's two when file 0's blocks come back through flash.
    assert_eq!(low.demotions, 6);
    assert_eq!(f.set_evictions, Some(2));
    assert_eq!(f.hits, 0);
}

#[test]
fn a_flash_top_tier_is_refused() {
    let e = replay(
        &setup(&["flash:1024:lru", "mem:10:lru"], 256),
        &[read(0, 0)],
        ReplayOptions::default(),
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("flash tier cannot be the top tier"),
        "{e}"
    );
}

#[test]
fn flash_geometry_and_policy_errors() {
    let e = replay(
        &setup(&["mem:10:lru", "flash:100:lru"], 256),
        &[read(0, 0)],
        ReplayOptions::default(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("less than one set"), "{e}");
    let e = "flash:1024:arc".parse::<TierSpec>().unwrap_err();
    assert!(e.to_string().contains("POLICY must be lru"), "{e}");
    assert_eq!(
        "flash2:1024:lru:exclusive"
            .parse::<TierSpec>()
            .unwrap()
            .kind,
        TierKind::Flash
    );
}

#[test]
fn local_tiers_report_no_flash_keys() {
    let t = tiers(&["mem:1:lru", "lower:4:lru"], 4, &[read(0, 0)]);
    assert!(t
        .iter()
        .all(|r| r.sets.is_none() && r.ram_bytes_per_block.is_none()));
}

#[test]
fn one_block_sets_replay_exactly_like_a_fully_associative_lru_tier() {
    let specs = [
        "zipf:blocks=4000,alpha=0.9".parse().unwrap(),
        "scan:blocks=3000,file=1".parse().unwrap(),
    ];
    let trace = tiercache_sim::workload::generate(&specs, 50_000, 3).unwrap();
    let local = tiers(&["mem:100:lru", "lower:1000:lru:exclusive"], 1, &trace);
    let flash = tiers(&["mem:100:lru", "flash:1000:lru:exclusive"], 1, &trace);
    for (l, f) in local.iter().zip(&flash) {
        assert_eq!(
            (l.requests, l.hits, l.demotions, l.promotions),
            (f.requests, f.hits, f.demotions, f.promotions)
        );
    }
    assert!(flash[1].hits > 1000, "{:?}", flash[1]);
}
