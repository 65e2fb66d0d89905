//! The `DataTier` contract on the flash tier, without faults.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use std::sync::Arc;
use tiercache_core::Class;
use tiercache_flash::{FlashDevice, FlashTier, SetId};
use tiercache_tier::Cleaning;
use tiercache_tier::StoreExt as _;
use tiercache_tier::{Admit, DataTier, Lookup, TierKind};

/// A tier of `sets` 1 MiB sets (4 KiB blocks).
fn tier(sets: u64) -> FlashTier {
    let dev: Arc<dyn FlashDevice> = mem(sets * ((1 << 20) + 1024) + 8192);
    FlashTier::create(dev, config()).unwrap()
}

#[test]
fn info_says_flash_persistent_and_accepting_dirty_blocks() {
    let t = tier(4);
    assert_eq!(t.info().kind, TierKind::Flash);
    assert_eq!(t.info().kind.to_string(), "flash");
    assert!(t.info().accepts_dirty && t.info().persistent);
    assert_eq!(t.info().block_size, 4096);
    assert_eq!(t.info().capacity_blocks, 4 * 256);
    assert_eq!(t.stats().kind, "flash");
}

#[test]
fn a_filled_block_reads_back_and_another_version_is_a_miss_that_drops_it() {
    let t = tier(4);
    let k = key(1, 10);
    assert_eq!(fill(&t, &k, 1), Admit::Stored);
    assert!(t.contains(&k));
    let (l, buf) = read(&t, &k);
    assert_eq!(l, Lookup::Hit { dirty: false });
    assert_eq!(buf, data(&k, 1, 4096));
    let mut b = vec![0u8; 4096];
    assert_eq!(t.read(&k, V + 1, &mut b).unwrap(), Lookup::Miss);
    assert!(!t.contains(&k));
}

#[test]
fn a_fill_whose_current_check_fails_is_rejected() {
    let t = tier(4);
    let k = key(1, 0);
    let r = t
        .fill(&k, V, Class::NORMAL, &data(&k, 1, 4096), &|| false)
        .unwrap();
    assert_eq!(r, Admit::Rejected);
    assert!(!t.contains(&k));
}

#[test]
fn a_clean_store_never_overwrites_a_dirty_block_and_dirty_overwrites_in_place() {
    let t = tier(4);
    let k = key(1, 0);
    assert_eq!(write(&t, &k, 1), Admit::Stored);
    assert_eq!(fill(&t, &k, 2), Admit::Rejected);
    assert_eq!(write(&t, &k, 3), Admit::Stored);
    let (l, buf) = read(&t, &k);
    assert_eq!(l, Lookup::Hit { dirty: true });
    assert_eq!(buf, data(&k, 3, 4096));
}

#[test]
fn invalidate_keeps_dirty_blocks_and_discard_drops_them() {
    let t = tier(4);
    let (c, d) = (key(1, 0), key(1, 1));
    fill(&t, &c, 1);
    write(&t, &d, 1);
    t.invalidate(&c);
    t.invalidate(&d);
    assert!(!t.contains(&c));
    assert!(t.contains(&d));
    t.discard(&d);
    assert!(!t.contains(&d));
    assert_eq!(t.stats().dirty_blocks, 0);
}

#[test]
fn take_removes_a_clean_copy_but_not_a_dirty_one() {
    let t = tier(4);
    let (c, d) = (key(1, 0), key(1, 1));
    fill(&t, &c, 1);
    write(&t, &d, 1);
    let mut b = vec![0u8; 4096];
    assert_eq!(t.take(&c, V, &mut b).unwrap(), Lookup::Hit { dirty: false });
    assert_eq!(t.take(&d, V, &mut b).unwrap(), Lookup::Hit { dirty: true });
    assert!(!t.contains(&c));
    assert!(t.contains(&d));
}

#[test]
fn cleaning_marks_clean_unless_written_again_since_read_dirty() {
    let t = tier(4);
    let (a, b) = (key(1, 0), key(1, 1));
    write(&t, &a, 1);
    write(&t, &b, 1);
    let list = t.dirty_blocks(10);
    assert_eq!(list.len(), 2);
    let mut buf = vec![0u8; 4096];
    let sa = t.read_dirty(&a, V, &mut buf).unwrap().unwrap();
    assert_eq!(buf, data(&a, 1, 4096));
    let sb = t.read_dirty(&b, V, &mut buf).unwrap().unwrap();
    write(&t, &b, 2);
    assert!(t.mark_clean(&a, sa));
    assert!(!t.mark_clean(&b, sb), "b was written during its cleaning");
    assert_eq!(t.stats().dirty_blocks, 1);
    assert_eq!(t.flash_stats().bytes_cleaned, 4096);
    assert_eq!(t.read_dirty(&a, V, &mut buf).unwrap(), None);
}

#[test]
fn try_invalidate_does_what_invalidate_does_and_never_waits_for_the_tiers_lock() {
    let t = tier(4);
    let (c, d, e) = (key(1, 0), key(1, 1), key(1, 2));
    fill(&t, &c, 1);
    write(&t, &d, 1);
    assert!(t.try_invalidate(&c));
    assert!(t.try_invalidate(&d));
    assert!(!t.contains(&c));
    assert!(t.contains(&d), "a dirty copy stays");
    fill(&t, &c, 2);
    // `current` is asked under the tier's lock (held across device I/O): no wait, no change.
    let inside = std::cell::Cell::new(None);
    let r = t
        .fill(&e, V, Class::NORMAL, &data(&e, 1, 4096), &|| {
            inside.set(Some(t.try_invalidate(&c)));
            true
        })
        .unwrap();
    assert_eq!(r, Admit::Stored);
    assert_eq!(inside.get(), Some(false));
    assert!(t.contains(&c));
}

#[test]
fn invalidate_file_drops_blocks_from_the_given_one_on_dirty_too() {
    let t = tier(4);
    for b in [0, 5, 255, 256, 300] {
        write(&t, &key(1, b), 1);
    }
    fill(&t, &key(2, 300), 1);
    t.invalidate_file(&file(1), 255);
    assert!(t.contains(&key(1, 0)) && t.contains(&key(1, 5)));
    assert!(!t.contains(&key(1, 255)) && !t.contains(&key(1, 256)) && !t.contains(&key(1, 300)));
    assert!(t.contains(&key(2, 300)));
}

#[test]
fn a_full_tier_reuses_the_least_recently_used_clean_set() {
    let t = tier(2);
    fill(&t, &key(1, 0), 1); // set A
    fill(&t, &key(2, 0), 1); // set B
    read(&t, &key(1, 0)); // A is now most recently used
    assert_eq!(fill(&t, &key(3, 0), 1), Admit::Stored);
    assert!(t.contains(&key(1, 0)));
    assert!(!t.contains(&key(2, 0)), "the LRU set was reused");
}

#[test]
fn a_tier_full_of_dirty_sets_rejects_new_sets_but_not_rewrites_of_dirty_blocks() {
    let t = tier(2);
    write(&t, &key(1, 0), 1);
    write(&t, &key(2, 0), 1);
    assert_eq!(write(&t, &key(3, 0), 1), Admit::Rejected);
    assert_eq!(fill(&t, &key(3, 0), 1), Admit::Rejected);
    assert_eq!(write(&t, &key(1, 0), 2), Admit::Stored);
    assert_eq!(
        write(&t, &key(1, 1), 2),
        Admit::Stored,
        "same set: room left"
    );
    assert_eq!(t.reclaimable_sets(), 0);
    assert_eq!(t.lru_dirty_sets(8).len(), 2);
}

#[test]
fn a_set_cleaned_through_its_dirty_list_becomes_reusable() {
    let t = tier(2);
    write(&t, &key(1, 0), 1);
    write(&t, &key(1, 3), 1);
    write(&t, &key(2, 0), 1);
    let cold: SetId = t.lru_dirty_sets(1)[0];
    let blocks = t.set_dirty_blocks(cold);
    assert_eq!(blocks.len(), 2);
    assert!(blocks.windows(2).all(|w| w[0].key.block < w[1].key.block));
    for d in &blocks {
        assert!(t.mark_clean(&d.key, d.seq));
    }
    t.sync().unwrap();
    assert_eq!(t.reclaimable_sets(), 1);
    assert_eq!(write(&t, &key(3, 0), 1), Admit::Stored);
}

#[test]
fn a_store_of_another_version_into_a_set_with_dirty_blocks_is_rejected() {
    let t = tier(2);
    write(&t, &key(1, 0), 1);
    let k = key(1, 1);
    let r = t
        .fill(&k, V + 1, Class::NORMAL, &data(&k, 1, 4096), &yes)
        .unwrap();
    assert_eq!(r, Admit::Rejected);
    assert_eq!(t.flash_stats().version_conflicts, 1);
}

#[test]
fn a_wrong_buffer_size_is_an_error_not_a_partial_store() {
    let t = tier(2);
    assert!(t
        .write_dirty(&key(1, 0), V, Class::NORMAL, &[0u8; 100])
        .is_err());
    assert!(!t.contains(&key(1, 0)));
}
