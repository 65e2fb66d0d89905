//! The shared `DataTier` conformance checks on the memory tier and the test tier, each in
//! both forms: clean only, and accepting dirty blocks. Bug it found: `MemoryTier::read`,
//! `take` and `read_dirty` panicked on a buffer shorter than a block (slicing it unchecked)
//! instead of answering an error, as the flash tier does (`reads_are_whole_or_a_miss`).
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use tiercache_memtier::{MemoryTier, MemoryTierConfig, TestTier, TestTierConfig};
use tiercache_tier::conformance::Subject;
use tiercache_tier::conformance_tests;

const CAPACITY: usize = 64;
const BS: usize = 4096;

fn memory(accepts_dirty: bool) -> Subject {
    let mut cfg = MemoryTierConfig::new("memory-c", CAPACITY, BS);
    cfg.accepts_dirty = accepts_dirty;
    let t = MemoryTier::new(&cfg).unwrap();
    Subject::new(Arc::new(t))
}

fn test_tier(accepts_dirty: bool) -> Subject {
    let mut cfg = TestTierConfig::new("test-c", CAPACITY, BS);
    cfg.accepts_dirty = accepts_dirty;
    Subject::new(Arc::new(TestTier::new(cfg).unwrap()))
}

/// What each form offers: volatile, spilling; dirty blocks as configured.
fn expect(s: Subject, accepts_dirty: bool) -> Subject {
    let i = s.tier.info();
    assert_eq!((i.accepts_dirty, i.persistent), (accepts_dirty, false));
    assert!(s.tier.can_spill() && s.takes_stores);
    s
}

mod memory_clean {
    use super::*;
    fn make() -> Subject {
        expect(memory(false), false)
    }
    conformance_tests!(make;
        another_version_misses_and_drops_a_clean_copy,
        a_store_no_longer_current_is_rejected_and_invisible,
        reads_are_whole_or_a_miss,
        take_removes_clean_and_keeps_dirty,
        invalidate_keeps_dirty_and_discard_drops_it,
        invalidate_file_drops_from_a_block_on,
        spills_hand_over_clean_victims_exactly,
        stats_counters_move_as_documented,
        roles_are_offered_as_info_says,
    );
}

mod memory_dirty {
    use super::*;
    fn make() -> Subject {
        expect(memory(true), true)
    }
    conformance_tests!(make;
        another_version_misses_and_drops_a_clean_copy,
        a_store_no_longer_current_is_rejected_and_invisible,
        reads_are_whole_or_a_miss,
        take_removes_clean_and_keeps_dirty,
        dirty_blocks_stay_until_mark_clean,
        mark_clean_with_an_old_seq_after_a_rewrite_fails,
        invalidate_keeps_dirty_and_discard_drops_it,
        invalidate_file_drops_from_a_block_on,
        spills_hand_over_clean_victims_exactly,
        a_dirty_rewrite_of_the_same_version_is_never_rejected,
        stats_counters_move_as_documented,
        roles_are_offered_as_info_says,
    );
}

mod test_clean {
    use super::*;
    fn make() -> Subject {
        expect(test_tier(false), false)
    }
    conformance_tests!(make;
        another_version_misses_and_drops_a_clean_copy,
        a_store_no_longer_current_is_rejected_and_invisible,
        reads_are_whole_or_a_miss,
        take_removes_clean_and_keeps_dirty,
        invalidate_keeps_dirty_and_discard_drops_it,
        invalidate_file_drops_from_a_block_on,
        spills_hand_over_clean_victims_exactly,
        stats_counters_move_as_documented,
        roles_are_offered_as_info_says,
    );
}

mod test_dirty {
    use super::*;
    fn make() -> Subject {
        expect(test_tier(true), true)
    }
    conformance_tests!(make;
        another_version_misses_and_drops_a_clean_copy,
        a_store_no_longer_current_is_rejected_and_invisible,
        reads_are_whole_or_a_miss,
        take_removes_clean_and_keeps_dirty,
        dirty_blocks_stay_until_mark_clean,
        mark_clean_with_an_old_seq_after_a_rewrite_fails,
        invalidate_keeps_dirty_and_discard_drops_it,
        invalidate_file_drops_from_a_block_on,
        spills_hand_over_clean_victims_exactly,
        a_dirty_rewrite_of_the_same_version_is_never_rejected,
        stats_counters_move_as_documented,
        roles_are_offered_as_info_says,
    );
}
