//! After `max_errors` device errors (or a taint) the tier is detaching: clean stores are
//! turned down, requests are told to bypass, and the manager can still list, read and clean
//! the dirty blocks the device can read.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use std::sync::Arc;
use tiercache_flash::{FlashDevice, FlashTier};
use tiercache_tier::Cleaning;
use tiercache_tier::{Admit, CleanAdvice, DataTier, Lookup};

const LEN: u64 = 8 * ((1 << 20) + 2048) + 8192;

#[test]
fn max_errors_device_errors_make_the_tier_detach_and_its_dirty_blocks_stay_cleanable() {
    let dev = faulty(LEN, 3);
    let d: Arc<dyn FlashDevice> = dev.clone();
    let mut cfg = config();
    cfg.max_errors = 3;
    let t = FlashTier::create(d, cfg).unwrap();
    write(&t, &key(1, 0), 1);
    write(&t, &key(2, 0), 1);
    fill(&t, &key(3, 0), 1);
    t.sync().unwrap();
    dev.fail_reads_after(Some(0));
    let mut buf = vec![0u8; 4096];
    for i in 0..3 {
        assert!(!t.detaching(), "after {i} errors");
        assert!(t.read(&key(3, 0), V, &mut buf).is_err());
    }
    assert!(t.detaching());
    assert!(t.flash_stats().degraded);
    // read_dirty still tries the device (and fails while it cannot read).
    assert!(t.read_dirty(&key(1, 0), V, &mut buf).is_err());
    dev.fail_reads_after(None);
    assert_eq!(fill(&t, &key(4, 0), 1), Admit::Rejected);
    assert_eq!(read(&t, &key(3, 0)).0, Lookup::Miss);
    assert_eq!(t.on_request(), CleanAdvice::Bypass);
    assert_eq!(t.flash_stats().bypassed, 1);
    assert_eq!(t.dirty_blocks(10).len(), 2);
    let CleanAdvice::Clean(blocks) = t.on_tick() else {
        panic!("a detaching tier asks to clean its dirty blocks");
    };
    assert_eq!(blocks.len(), 2);
    for b in &blocks {
        let seq = t.read_dirty(&b.key, b.version, &mut buf).unwrap().unwrap();
        assert_eq!(buf, data(&b.key, 1, 4096));
        assert!(t.mark_clean(&b.key, seq));
    }
    t.sync().unwrap();
    assert!(t.dirty_blocks(10).is_empty());
    assert_eq!(t.on_tick(), CleanAdvice::Idle);
    t.abandon();
}

#[test]
fn a_tainted_tier_is_detaching() {
    let dev = faulty(LEN, 4);
    let d: Arc<dyn FlashDevice> = dev.clone();
    let t = FlashTier::create(d, config()).unwrap();
    write(&t, &key(1, 0), 1);
    t.sync().unwrap();
    assert!(!t.detaching());
    // The drop's record cannot be written: tainted.
    dev.fail_writes_after(Some(0));
    t.discard(&key(1, 0));
    assert!(t.flash_stats().tainted);
    assert!(t.detaching());
    t.abandon();
}
