//! Issue 17, item 8: `tiercache flash check PATH [--json]` checks every block a mount would
//! use against its checksum: a cache file with a flipped byte in a block is reported
//! (`corrupt_blocks`, and a line naming the path) with exit status 1; the file is not changed.
#![allow(clippy::unwrap_used)]

mod support;

use std::os::unix::fs::FileExt;
use std::sync::Arc;
use support::{s, tc};
use tiercache_core::Class;
use tiercache_flash::{FileDevice, FlashConfig, FlashTier, Geometry, IoChoice};
use tiercache_tier::StoreExt as _;
use tiercache_tier::{FileKey, TierKey};

#[test]
fn check_reports_a_block_that_fails_its_checksum_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cache.img");
    let len = 16u64 << 20;
    {
        let dev = Arc::new(FileDevice::open(&path, Some(len), IoChoice::Auto).unwrap());
        let tier = FlashTier::create(dev, FlashConfig::new("flash")).unwrap();
        let file = FileKey {
            dev: 1,
            ino: 2,
            birth: 3,
        };
        for b in 0..6u64 {
            let data = vec![b as u8 + 1; 4096];
            tier.write_dirty(&TierKey::new(file, b), 7, Class::NORMAL, &data)
                .unwrap();
        }
        tier.close().unwrap();
    }
    let good = tc(&["flash", "check", s(&path), "--json"]);
    assert!(good.status.success());
    let r: serde_json::Value = serde_json::from_slice(&good.stdout).unwrap();
    assert_eq!(
        (r["corrupt_blocks"].as_u64(), r["format_version"].as_u64()),
        (Some(0), Some(3))
    );
    // Bit rot in block 4 of set 0.
    let g = Geometry::compute(len, 512, 12, 8).unwrap();
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let off = g.block_off(0, 4) + 1000;
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, off).unwrap();
    f.write_all_at(&[b[0] ^ 0x20], off).unwrap();
    drop(f);
    let before = std::fs::read(&path).unwrap();
    let out = tc(&["flash", "check", s(&path), "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["corrupt_blocks"], 1, "{r}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(s(&path)) && err.contains("checksum"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    let text = tc(&["flash", "check", s(&path)]);
    assert_eq!(text.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("failing their checksum: 1"),
        "{}",
        String::from_utf8_lossy(&text.stdout)
    );
    assert!(
        std::fs::read(&path).unwrap() == before,
        "check changed the file"
    );
}
