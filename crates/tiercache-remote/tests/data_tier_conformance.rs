//! The shared `DataTier` conformance checks on the remote tier, against a real memcached on
//! loopback (clean blocks only, volatile, nothing spilled: memcached evicts on its own).
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use std::sync::Arc;
use std::time::Duration;
use tiercache_tier::conformance::Subject;
use tiercache_tier::{conformance_tests, DataTier};

fn remote() -> Subject {
    let m = Memcached::start();
    let t = Arc::new(tier(vec![m.addr()]));
    let i = t.info();
    assert!(!i.accepts_dirty && !i.persistent && !t.can_spill(), "{i:?}");
    let r = t.clone();
    Subject::new(t)
        .settle_with(move || assert!(r.flush(Duration::from_secs(5)), "stores not landed in 5 s"))
        .keep(m)
}

conformance_tests!(remote;
    another_version_misses_and_drops_a_clean_copy,
    a_store_no_longer_current_is_rejected_and_invisible,
    reads_are_whole_or_a_miss,
    take_removes_clean_and_keeps_dirty,
    invalidate_keeps_dirty_and_discard_drops_it,
    invalidate_file_drops_from_a_block_on,
    stats_counters_move_as_documented,
    roles_are_offered_as_info_says,
);
