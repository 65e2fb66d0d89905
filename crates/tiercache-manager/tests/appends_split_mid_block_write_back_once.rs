//! Bug: an append whose writes end mid-block (FUSE splits a 1 MiB write from an unaligned
//! buffer at a page of the buffer, not of the file) had its partial last block written back
//! by throttled writers, then written again once completed: a seek back on a disk for every
//! write (64 seeks for a 64-write stream on the HDD model instead of 1). Background and
//! throttled write-back now hold back an open file's partial last block while it is young.
#![allow(clippy::unwrap_used)]
mod common;
use common::*;
use std::sync::Arc;
use tiercache_manager::{BackingIo, Class, DeviceModel, EmulatedBacking, MemCache, RealBacking};

#[test]
fn an_append_split_mid_block_is_written_back_in_one_stream() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_file(dir.path(), "f", b"");
    let dev =
        Arc::new(EmulatedBacking::new(Arc::new(RealBacking), DeviceModel::hdd()).without_sleep());
    // 64 blocks of 512 bytes; writers throttle above a quarter dirty.
    let cfg = tiercache_manager::MemConfig {
        dirty_ratio: 0.25,
        dirty_background_ratio: 0.1,
        ..small_config(64)
    };
    let cache = MemCache::new(cfg, dev.clone() as Arc<dyn BackingIo>).unwrap();
    let id = open(&cache, &path, Class::NORMAL);
    // 32 "writes" of 8 blocks, each split 100 bytes before its end as FUSE would.
    let chunk = 8 * 512u64;
    let mut want = Vec::new();
    for i in 0..32u64 {
        let data = pattern(i * chunk, chunk as usize, 1);
        let cut = chunk as usize - 100;
        cache.write(id, i * chunk, &data[..cut]).unwrap();
        cache
            .write(id, i * chunk + cut as u64, &data[cut..])
            .unwrap();
        want.extend_from_slice(&data);
    }
    cache.fsync(id, true).unwrap();
    assert_bytes(&read_file(&path), &want, "BACKING");
    let e = dev.stats();
    assert_eq!(e.bytes, want.len() as u64, "every byte written once: {e:?}");
    assert!(e.seeks <= 2, "one stream, not a seek back per write: {e:?}");
}
