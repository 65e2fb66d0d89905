//! `check` (and `tiercache flash check --json`) reports the files holding dirty blocks and
//! how many of them have meta (their size, mtime and handle can be restored).
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use std::sync::Arc;
use tiercache_flash::{FlashDevice, FlashTier};
use tiercache_tier::Persistence;
use tiercache_tier::{DataTier, FileMeta};

const LEN: u64 = 8 * ((1 << 20) + 2048) + 8192;

#[test]
fn check_reports_files_with_dirty_blocks_and_how_many_have_meta() {
    let d: Arc<dyn FlashDevice> = mem(LEN);
    let t = FlashTier::create(d.clone(), config()).unwrap();
    t.set_file_meta(&file(1), &FileMeta::default());
    write(&t, &key(1, 0), 1);
    write(&t, &key(1, 600), 1);
    write(&t, &key(2, 0), 1);
    fill(&t, &key(3, 0), 1);
    t.sync().unwrap();
    t.abandon();
    let r = FlashTier::check(d.as_ref()).unwrap();
    assert_eq!((r.format_version, r.dirty_blocks), (3, 3));
    assert_eq!((r.files_with_dirty, r.files_with_dirty_meta), (2, 1));
    let j = serde_json::to_value(&r).unwrap();
    assert_eq!(j["files_with_dirty"], 2);
    assert_eq!(j["files_with_dirty_meta"], 1);
}
