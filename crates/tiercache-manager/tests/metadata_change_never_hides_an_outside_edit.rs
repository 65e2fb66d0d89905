//! Bug: a chmod/chown/utimens through the mount recorded BACKING's new stamp as the daemon's
//! own, so an edit made directly on BACKING just before it was taken for ours and the next open
//! served the stale cached blocks.
#![allow(clippy::unwrap_used)]
mod common;
use common::*;
use std::os::unix::fs::PermissionsExt;
use tiercache_manager::{Class, FileStamp, MemCache};

#[test]
fn a_metadata_change_after_an_outside_edit_still_reveals_the_edit() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_file(dir.path(), "f", &[b'a'; 2048]);
    let cache = MemCache::with_real_device(small_config(32)).unwrap();
    let id = open(&cache, &path, Class::NORMAL);
    assert_eq!(cache.read(id, 0, 2048).unwrap(), vec![b'a'; 2048]);
    cache.release(id); // closed; its clean blocks stay in memory
    std::thread::sleep(std::time::Duration::from_millis(30));
    // Someone edits BACKING directly: new bytes, new size, new mtime.
    std::fs::write(&path, vec![b'B'; 3000]).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(30));
    // A chmod through the mount.
    let fd = file_handle(&path);
    cache
        .change_metadata(
            id,
            &mut || fd.set_permissions(std::fs::Permissions::from_mode(0o600)),
            &mut || FileStamp::of_file(&fd),
        )
        .unwrap();
    reopen(&cache, &path, id, Class::NORMAL);
    let got = cache.read(id, 0, 4096).unwrap();
    assert_eq!(
        got,
        vec![b'B'; 3000],
        "stale cached bytes served after a metadata change"
    );
}
