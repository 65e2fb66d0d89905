//! Bug: a degraded tier answered `Rejected` to a write of a block it holds dirty (contract: never turned down) and `Miss` to a read of one (sending the reader to stale BACKING); both are now `Err(Unavailable)`.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use std::sync::Arc;
use tiercache_core::Class;
use tiercache_flash::{FlashDevice, FlashTier};
use tiercache_tier::Cleaning;
use tiercache_tier::StoreExt as _;
use tiercache_tier::{Admit, DataTier, Lookup, TierError};

/// Degraded: a held-dirty block's write and read are errors; other blocks are turned down and
/// miss as before; the cleaner still reads the dirty block.
#[test]
fn a_degraded_tier_errs_on_a_block_it_holds_dirty() {
    let len = 8 * ((1 << 20) + 1024) + 8192;
    let dev = faulty(len, 1);
    let d: Arc<dyn FlashDevice> = dev.clone();
    let mut cfg = config();
    cfg.max_errors = 1;
    let t = FlashTier::create(d, cfg).unwrap();
    let k = key(1, 0);
    assert_eq!(write(&t, &k, 1), Admit::Stored);
    assert_eq!(fill(&t, &key(1, 1), 1), Admit::Stored);
    dev.fail_reads_after(Some(0));
    let mut buf = vec![0u8; 4096];
    assert!(t.read(&key(1, 0), V, &mut buf).is_err());
    dev.fail_reads_after(None);
    assert!(t.flash_stats().degraded);
    let r = t.write_dirty(&k, V, Class::NORMAL, &data(&k, 2, 4096));
    assert!(
        matches!(r, Err(TierError::Unavailable { .. })),
        "held-dirty block: {r:?}"
    );
    let r = t.read(&k, V, &mut buf);
    assert!(
        matches!(r, Err(TierError::Unavailable { .. })),
        "held-dirty read: {r:?}"
    );
    assert_eq!(write(&t, &key(1, 2), 1), Admit::Rejected);
    assert_eq!(read(&t, &key(1, 1)).0, Lookup::Miss);
    assert!(t.read_dirty(&k, V, &mut buf).unwrap().is_some());
    assert_eq!(buf, data(&k, 1, 4096));
    t.abandon();
}
