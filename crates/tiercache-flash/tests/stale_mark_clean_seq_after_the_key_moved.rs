//! Bug: `mark_clean` seqs were a per-set epoch only, so a stale seq from the set a key left matched the epoch of the set it moved to and marked newer bytes clean.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use std::sync::Arc;
use tiercache_flash::{FlashDevice, FlashTier};
use tiercache_tier::Cleaning;
use tiercache_tier::{Admit, DataTier};

const SMALL: u64 = 64 * 1024;

/// A stale `mark_clean` seq from one cache set matches the epoch of another set the same key
/// was remapped to: the newer dirty bytes are marked clean without ever reaching BACKING.
#[test]
fn a_stale_mark_clean_seq_never_cleans_newer_bytes_after_the_key_moved_to_another_set() {
    let d: Arc<dyn FlashDevice> = mem(SMALL);
    let t = FlashTier::create(d, small_config()).unwrap();
    let bs = t.info().block_size;
    let k = key(1, 0);
    assert_eq!(write(&t, &k, 1), Admit::Stored); // set X, epoch 0
                                                 // Cleaner: reads the dirty copy (old bytes) and gets its seq.
    let mut buf = vec![0u8; bs];
    let stale_seq = t.read_dirty(&k, V, &mut buf).unwrap().unwrap();
    // Meanwhile: the file is truncated (block dropped, set X freed) ...
    t.invalidate_file(&file(1), 0);
    // ... another file takes set X, and the key is written again: lands in set Y (epoch 0).
    assert_eq!(fill(&t, &key(2, 0), 1), Admit::Stored);
    assert_eq!(write(&t, &k, 2), Admit::Stored);
    // Another cleaning pass lists set Y: its epoch goes 0 -> 1.
    let listed = t.dirty_blocks(16);
    assert!(listed.iter().any(|b| b.key == k));
    // The first cleaner finishes (it wrote the OLD bytes to BACKING) and marks clean.
    let cleaned = t.mark_clean(&k, stale_seq);
    let mut b2 = vec![0u8; bs];
    let still_dirty = t.read_dirty(&k, V, &mut b2).unwrap().is_some();
    assert!(
        !cleaned && still_dirty,
        "stale seq {stale_seq:#x} marked the newer bytes clean (cleaned={cleaned}, still dirty={still_dirty}); listed seqs {:?}",
        listed.iter().map(|b| b.seq).collect::<Vec<_>>()
    );
}
