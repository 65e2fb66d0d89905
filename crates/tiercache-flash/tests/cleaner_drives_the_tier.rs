//! The cleaner's decisions carried out on a real tier, as the manager will: writes fill the
//! tier with dirty sets; after a quiet `wait` the cleaner picks LRU sets, the blocks are
//! written "to BACKING" in merged runs, marked clean and synced, and sets become reusable.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tiercache_flash::cleaner::{plan_runs, View};
use tiercache_flash::{
    Cleaner, CleanerConfig, CleanerMode, CleanerState, Decision, FlashDevice, FlashTier,
};
use tiercache_tier::Cleaning;
use tiercache_tier::{Admit, DataTier, TierKey};

#[test]
fn idle_cleaning_restores_the_free_floor_after_a_quiet_wait_and_bypasses_when_full() {
    let d: Arc<dyn FlashDevice> = mem(8 * ((1 << 20) + 1024) + 8192);
    let t = FlashTier::create(d, config()).unwrap();
    let sets = t.geometry().sets;
    let mut c = Cleaner::new(CleanerConfig::new(CleanerMode::Idle, 4));
    let mut backing: HashMap<TierKey, Vec<u8>> = HashMap::new();
    let ms = Duration::from_millis;
    // A burst of writes: one dirty block in each of more sets than the tier has.
    let mut now = ms(0);
    let mut bypassed = 0;
    for f in 0..(sets as u64 + 2) {
        now += ms(1);
        let lru = t.lru_dirty_sets(64);
        let dec = c.on_request(
            now,
            &View {
                free_sets: t.reclaimable_sets(),
                dirty_fraction: t.dirty_fraction(),
                lru_dirty: &lru,
            },
        );
        if dec == Decision::Bypass {
            bypassed += 1;
            continue;
        }
        assert_eq!(write(&t, &key(f, 3), 1), Admit::Stored);
        write(&t, &key(f, 4), 1);
        write(&t, &key(f, 9), 1);
    }
    assert_eq!(bypassed, 2, "no free set left: requests go to BACKING");
    assert_eq!(c.state(), CleanerState::Wait);
    // Busy ticks clean nothing (dirty fraction is far below dirty_max).
    let lru = t.lru_dirty_sets(64);
    let v = View {
        free_sets: t.reclaimable_sets(),
        dirty_fraction: t.dirty_fraction(),
        lru_dirty: &lru,
    };
    assert_eq!(c.on_tick(now + ms(500), &v), Decision::Idle);
    // Quiet: write back batches of at most 4 sets until the floor is reached.
    now += ms(1000);
    let mut rounds = 0;
    loop {
        let lru = t.lru_dirty_sets(64);
        let v = View {
            free_sets: t.reclaimable_sets(),
            dirty_fraction: t.dirty_fraction(),
            lru_dirty: &lru,
        };
        let Decision::CleanSets(ids) = c.on_tick(now, &v) else {
            break;
        };
        assert!(ids.len() <= 4);
        rounds += 1;
        let blocks: Vec<_> = ids.iter().flat_map(|&s| t.set_dirty_blocks(s)).collect();
        for run in plan_runs(blocks, 256) {
            // Blocks 3 and 4 of a file merge into one run; block 9 is a run of its own.
            let shape = (run.first_block, run.blocks.len());
            assert!(shape == (3, 2) || shape == (9, 1), "run {shape:?}");
            // One pwrite per run in the manager; here: copy to the model BACKING.
            for d in &run.blocks {
                let mut buf = vec![0u8; 4096];
                let seq = t.read_dirty(&d.key, d.version, &mut buf).unwrap().unwrap();
                backing.insert(d.key, buf);
                assert!(t.mark_clean(&d.key, seq));
            }
        }
        t.sync().unwrap();
        now += ms(5);
    }
    assert!(rounds >= 1);
    assert_eq!(c.state(), CleanerState::Normal);
    assert!(t.reclaimable_sets() >= 4);
    assert_eq!(backing[&key(0, 3)], data(&key(0, 3), 1, 4096));
    assert!(t.flash_stats().bytes_cleaned >= 4 * 3 * 4096);
}
