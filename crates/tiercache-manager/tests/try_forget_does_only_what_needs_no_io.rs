//! `MemCache::try_forget` (what a FUSE request thread calls before handing a FORGET to an I/O
//! worker): it lets go of a closed file with nothing to write back, leaves an open one's forget
//! to its last release, and refuses — changing nothing — a file with dirty blocks or a stack
//! with a tier below, whose forget is I/O.
#![allow(clippy::unwrap_used)]

mod common;

use common::{make_file, open, read_file, reopen, small_config, test_tier};
use std::sync::Arc;
use tiercache_core::placement::Placement;
use tiercache_manager::{Class, LowerTier, MemCache, RealBacking};

const LEN: usize = 4096;

#[test]
fn a_dirty_file_is_refused_and_a_written_back_one_is_forgotten() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_file(dir.path(), "f", b"");
    let cache = MemCache::with_real_device(small_config(64)).unwrap();
    let id = open(&cache, &path, Class::NORMAL);
    cache.write(id, 0, &[b'X'; LEN]).unwrap();
    cache.release(id);
    assert!(!cache.try_forget(id), "dirty blocks need a write-back");
    assert!(cache.file_blocks(id).1 > 0, "refused: nothing dropped");
    assert!(read_file(&path).is_empty(), "refused: nothing written");

    cache.flush_all().unwrap();
    assert!(cache.try_forget(id), "clean and closed: no I/O needed");
    assert_eq!(cache.file_blocks(id).1, 0);
    // Whatever it kept (clean blocks told apart by birth time), the file reads its bytes.
    reopen(&cache, &path, id, Class::NORMAL);
    let mut buf = vec![0u8; LEN];
    assert_eq!(cache.read_into(id, 0, &mut buf).unwrap(), LEN);
    assert_eq!(buf, vec![b'X'; LEN]);
}

/// The kernel may forget a node before the last RELEASE of its handles: the forget is left
/// to that release (no I/O now), and the open handle keeps reading and writing its file.
#[test]
fn an_open_file_is_forgotten_at_its_last_release() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_file(dir.path(), "f", &[b'Z'; LEN]);
    let cache = MemCache::with_real_device(small_config(64)).unwrap();
    let id = open(&cache, &path, Class::NORMAL);
    assert!(
        cache.try_forget(id),
        "deferred to the last release: nothing to wait for"
    );
    cache.write(id, 0, b"new").unwrap();
    let mut buf = vec![0u8; LEN];
    assert_eq!(cache.read_into(id, 0, &mut buf).unwrap(), LEN);
    assert_eq!(&buf[..4], b"newZ");
    cache.release(id);
    cache.flush_all().unwrap();
    assert_eq!(
        &read_file(&path)[..4],
        b"newZ",
        "the handle's write reached BACKING"
    );
}

#[test]
fn a_tier_below_leaves_every_forget_to_the_waiting_call() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_file(dir.path(), "f", &[b'Y'; LEN]);
    let lower = vec![LowerTier::new(test_tier(64), Placement::Exclusive)];
    let cache = MemCache::with_tiers(small_config(64), Arc::new(RealBacking), lower).unwrap();
    let id = open(&cache, &path, Class::NORMAL);
    let mut buf = vec![0u8; LEN];
    cache.read_into(id, 0, &mut buf).unwrap();
    cache.release(id);
    assert!(!cache.try_forget(id), "dropping copies below may be I/O");
    assert!(cache.file_blocks(id).0 > 0, "refused: nothing dropped");
    cache.forget(id);
}
