//! The `remote` tier kind in replay (paper 002): sequential runs of at least `n` blocks neither
//! read nor fill it, short reads do, writes invalidate it; counts checked against a tiny trace
//! worked out by hand.
#![allow(clippy::unwrap_used)]

use tiercache_core::partition::PartitionConfig;
use tiercache_core::{Access, BlockKey, Class};
use tiercache_sim::replay::{replay, ReplayOptions, Setup};
use tiercache_sim::report::TierReport;

fn read(file: u64, block: u64) -> Access {
    Access::read(BlockKey::new(file, block), Class::NORMAL)
}

fn setup(tiers: &[&str], n: u64) -> Setup {
    Setup {
        label: "t".into(),
        tiers: tiers.iter().map(|t| t.parse().unwrap()).collect(),
        partition: PartitionConfig::none(),
        remote_threshold: n,
    }
}

/// Two 40-block scans of file 1 with three random reads of file 2 after each, a write, and two
/// single-block probes of file 1, through `mem:4:lru` over `remote:100:lru`.
fn scans_and_random_reads() -> Vec<Access> {
    let mut t = Vec::new();
    for _ in 0..2 {
        t.extend((0..40).map(|b| read(1, b)));
        t.extend([read(2, 100), read(2, 50), read(2, 200)]);
    }
    t.push(Access {
        write: true,
        ..read(2, 50)
    });
    t.extend([read(1, 35), read(1, 5)]);
    t
}

fn tiers_of(n: u64, trace: &[Access]) -> Vec<TierReport> {
    let s = setup(&["mem:4:lru", "remote:100:lru"], n);
    replay(&s, trace, ReplayOptions::default())
        .unwrap()
        .report
        .tiers
}

#[test]
fn sequential_scans_skip_the_remote_tier_while_random_reads_use_it() {
    let trace = scans_and_random_reads();
    let t = tiers_of(32, &trace);
    let (mem, remote) = (&t[0], &t[1]);
    assert_eq!(mem.kind, "local");
    assert_eq!(remote.kind, "remote");
    assert_eq!(remote.threshold, Some(32));
    // Every read misses the 4-block memory tier; the write (2:50) hits it.
    assert_eq!((mem.requests, mem.hits), (40 + 3 + 40 + 3 + 1 + 2, 1));
    // Each scan: blocks 0..=30 (runs 1..31) go through the remote tier, 31..=39 (runs ≥ 32)
    // bypass it: 9 per scan.
    assert_eq!(remote.bypassed, Some(18));
    // Lookups: scan 1: 31 misses (filled); random: 3 misses (filled); scan 2: 31 hits;
    // random: 3 hits; the write looks nothing up and removes 2:50; probe 1:35 misses (the
    // scan never stored it), probe 1:5 hits (stored by scan 1).
    assert_eq!(remote.invalidations, Some(1));
    assert_eq!(remote.requests, 31 + 3 + 31 + 3 + 2);
    assert_eq!(remote.hits, 31 + 3 + 1);
}

#[test]
fn without_a_reachable_threshold_scans_fill_and_hit_the_remote_tier() {
    let t = tiers_of(1000, &scans_and_random_reads());
    let remote = &t[1];
    assert_eq!(remote.bypassed, Some(0));
    assert_eq!(remote.requests, 40 + 3 + 40 + 3 + 2);
    // Scan 2 and the random reads hit; both probes hit (scan 1 stored 1:35 too).
    assert_eq!(remote.hits, 40 + 3 + 2);
}

#[test]
fn runs_interleaved_across_files_are_tracked_per_file() {
    // Files 1 and 2 scanned in lockstep: each file's run still grows by one per access.
    let trace: Vec<Access> = (0..40).flat_map(|b| [read(1, b), read(2, b)]).collect();
    let remote = tiers_of(32, &trace).remove(1);
    assert_eq!(remote.bypassed, Some(2 * 9));
    assert_eq!(remote.requests, 2 * 31);
}

#[test]
fn a_remote_top_tier_is_refused() {
    let s = setup(&["remote:100:lru", "mem:4:lru"], 32);
    let e = replay(&s, &[read(1, 0)], ReplayOptions::default()).unwrap_err();
    assert!(e.to_string().contains("top tier"), "{e}");
}

#[test]
fn stacks_without_remote_tiers_report_no_remote_keys() {
    let t = tiers_of_local();
    assert!(t
        .iter()
        .all(|t| t.kind == "local" && t.bypassed.is_none() && t.threshold.is_none()));
}

fn tiers_of_local() -> Vec<TierReport> {
    let s = setup(&["mem:4:lru", "lower:100:lru"], 32);
    replay(&s, &scans_and_random_reads(), ReplayOptions::default())
        .unwrap()
        .report
        .tiers
}
