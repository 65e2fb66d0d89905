//! The tier's own cleaning advice (`on_request`/`on_tick`, driven here with explicit times on
//! its clock): idle mode waits for a quiet `wait`, then asks to clean at most 4 LRU dirty
//! sets per tick until the floor of free sets is back; eager mode cleans in the request
//! path; with no free set requests are told to bypass, and that is counted in the stats.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use std::sync::Arc;
use std::time::Duration;
use tiercache_flash::{
    CleanerConfig, CleanerMode, CleanerState, FlashConfig, FlashDevice, FlashTier,
};
use tiercache_tier::Cleaning;
use tiercache_tier::{CleanAdvice, DataTier, DirtyBlock};

const LEN: u64 = 8 * ((1 << 20) + 2048) + 8192;
const MS: fn(u64) -> Duration = Duration::from_millis;

fn tier(mode: CleanerMode, floor: u32) -> FlashTier {
    let d: Arc<dyn FlashDevice> = mem(LEN);
    let mut cfg: FlashConfig = config();
    cfg.cleaner = CleanerConfig::new(mode, floor);
    let t = FlashTier::create(d, cfg).unwrap();
    assert_eq!(t.geometry().sets, 8);
    t
}

/// One dirty set per file `0..n` (blocks 3 and 9), file 0 least recently used.
fn dirty_sets(t: &FlashTier, n: u64) {
    for f in 0..n {
        write(t, &key(f, 3), 1);
        write(t, &key(f, 9), 1);
    }
}

/// As the manager: write to "BACKING", mark clean, sync.
fn clean(t: &FlashTier, blocks: &[DirtyBlock]) {
    for d in blocks {
        let mut buf = vec![0u8; 4096];
        let seq = t.read_dirty(&d.key, d.version, &mut buf).unwrap().unwrap();
        assert!(t.mark_clean(&d.key, seq));
    }
    t.sync().unwrap();
}

fn files_of(blocks: &[DirtyBlock]) -> Vec<u64> {
    let mut f: Vec<u64> = blocks.iter().map(|d| d.key.file.ino).collect();
    f.dedup();
    f
}

#[test]
fn idle_advice_waits_while_requests_come_then_cleans_lru_sets_until_the_floor() {
    let t = tier(CleanerMode::Idle, 4);
    dirty_sets(&t, 7); // 1 free set, floor 4
    let mut now = MS(0);
    for _ in 0..90 {
        now += MS(10);
        assert_eq!(t.on_request_at(now), CleanAdvice::Idle);
        assert_eq!(t.on_tick_at(now + MS(5)), CleanAdvice::Idle);
    }
    assert_eq!(t.flash_stats().state, CleanerState::Wait);
    // Quiet for 1 s after the last request: at most 4 sets, the least recently used first.
    assert_eq!(t.on_tick_at(now + MS(990)), CleanAdvice::Idle);
    let CleanAdvice::Clean(blocks) = t.on_tick_at(now + MS(1000)) else {
        panic!("no cleaning after the quiet wait");
    };
    assert_eq!(files_of(&blocks), vec![0, 1, 2, 3]);
    assert_eq!(blocks.len(), 8);
    assert_eq!(blocks[0].key, key(0, 3));
    assert_eq!(t.flash_stats().state, CleanerState::Writeback);
    // The manager cleans only part of the batch: the next tick goes on with the LRU set.
    clean(&t, &blocks[..2]);
    let CleanAdvice::Clean(next) = t.on_tick_at(now + MS(1010)) else {
        panic!("writeback stopped below the floor");
    };
    assert_eq!(files_of(&next), vec![1, 2, 3, 4]);
    clean(&t, &next[..4]);
    // 1 + 3 sets cleaned: the floor (4 free sets) is back.
    assert_eq!(t.flash_stats().free_sets, 4);
    assert_eq!(t.on_tick_at(now + MS(1020)), CleanAdvice::Idle);
    let s = t.flash_stats();
    assert_eq!(s.state, CleanerState::Normal);
    assert_eq!(s.bytes_cleaned, 6 * 4096);
    assert_eq!(s.bypassed, 0);
}

#[test]
fn a_request_interrupts_idle_writeback() {
    let t = tier(CleanerMode::Idle, 4);
    dirty_sets(&t, 6);
    assert!(matches!(t.on_tick_at(MS(5000)), CleanAdvice::Clean(_)));
    assert_eq!(t.on_request_at(MS(5001)), CleanAdvice::Idle);
    assert_eq!(t.flash_stats().state, CleanerState::Wait);
    assert_eq!(t.on_tick_at(MS(5002)), CleanAdvice::Idle);
}

#[test]
fn eager_advice_cleans_one_lru_set_in_the_request_path_below_the_floor() {
    let t = tier(CleanerMode::Eager, 4);
    dirty_sets(&t, 6); // 2 free sets
    let CleanAdvice::Clean(blocks) = t.on_request_at(MS(0)) else {
        panic!("eager mode did not clean below the floor");
    };
    assert_eq!(files_of(&blocks), vec![0]);
    clean(&t, &blocks);
    let CleanAdvice::Clean(blocks) = t.on_request_at(MS(1)) else {
        panic!("still below the floor");
    };
    assert_eq!(files_of(&blocks), vec![1]);
    clean(&t, &blocks);
    assert_eq!(t.on_request_at(MS(2)), CleanAdvice::Idle);
    assert_eq!(
        t.on_tick_at(MS(9000)),
        CleanAdvice::Idle,
        "eager: ticks do nothing"
    );
}

#[test]
fn with_no_free_set_requests_are_told_to_bypass_and_it_is_counted() {
    let t = tier(CleanerMode::Idle, 4);
    dirty_sets(&t, 8);
    assert_eq!(t.on_request_at(MS(0)), CleanAdvice::Bypass);
    assert_eq!(t.on_request_at(MS(1)), CleanAdvice::Bypass);
    let s = t.flash_stats();
    assert_eq!((s.bypassed, s.free_sets, s.dirty_blocks), (2, 0, 16));
    let j = serde_json::to_value(&s).unwrap();
    assert_eq!(j["state"], "wait");
    assert_eq!(j["bypassed"], 2);
    assert_eq!(j["free_sets"], 0);
    assert_eq!(j["dirty_blocks"], 16);
    assert_eq!(j["bytes_cleaned"], 0);
    assert_eq!(j["degraded"], false);
    // Under a byte per block plus a few hundred bytes that do not grow with the tier (which
    // weigh here: 8 sets, 2048 blocks; the bound per block alone is checked on 256 MiB).
    let blocks = t.info().capacity_blocks as f64;
    assert!(j["ram_bytes_per_block"].as_f64().unwrap() * blocks < blocks + 256.0);
    assert_eq!(j["unmapped_sets"], 0);
}

#[test]
fn the_default_floor_is_a_tenth_of_the_sets_and_the_trait_uses_the_tiers_clock() {
    let d: Arc<dyn FlashDevice> = mem(LEN);
    let t = FlashTier::create(d, config()).unwrap();
    assert_eq!(t.flash_stats().free_floor, 1);
    assert_eq!(t.on_request(), CleanAdvice::Idle);
    assert_eq!(t.on_tick(), CleanAdvice::Idle);
}
