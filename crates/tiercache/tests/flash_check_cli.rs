//! `tiercache flash check PATH [--json]` on a cache file the SSD-tier engine wrote (dirty
//! blocks after a clean close), on a file that is not a cache, and on a missing path: a report
//! and exit 0, or one line naming the path and exit 1, never a change to the file.
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use support::{s, tc};
use tiercache_core::Class;
use tiercache_flash::{FileDevice, FlashConfig, FlashTier, IoChoice};
use tiercache_tier::StoreExt as _;
use tiercache_tier::{DataTier, FileKey, TierKey};

#[test]
fn check_reports_a_cache_and_refuses_what_is_not_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cache.img");
    {
        let dev = Arc::new(FileDevice::open(&path, Some(16 << 20), IoChoice::Auto).unwrap());
        let tier = FlashTier::create(dev, FlashConfig::new("flash")).unwrap();
        let file = FileKey {
            dev: 1,
            ino: 2,
            birth: 3,
        };
        for b in 0..10u64 {
            let data = vec![b as u8; 4096];
            tier.write_dirty(&TierKey::new(file, b), 7, Class::NORMAL, &data)
                .unwrap();
        }
        tier.sync().unwrap();
        tier.close().unwrap();
    }
    let before = std::fs::read(&path).unwrap();
    let out = tc(&["flash", "check", s(&path), "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["dirty_blocks"], 10, "{r}");
    assert_eq!(r["valid_blocks"], 10, "{r}");
    assert_eq!(r["clean_shutdown"], true, "{r}");
    assert_eq!(r["superblocks_valid"], 2, "{r}");
    let text = tc(&["flash", "check", s(&path)]);
    assert!(text.status.success());
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("10 dirty"),
        "{}",
        String::from_utf8_lossy(&text.stdout)
    );
    assert!(
        std::fs::read(&path).unwrap() == before,
        "check changed the file"
    );

    let junk = dir.path().join("junk.img");
    std::fs::write(&junk, vec![0x5a; 1 << 20]).unwrap();
    let missing = dir.path().join("missing.img");
    for p in [&junk, &missing] {
        let out = tc(&["flash", "check", s(p)]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{}", p.display());
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains(s(p)), "{err}");
    }
    assert!(!missing.exists(), "check created the missing file");
}
