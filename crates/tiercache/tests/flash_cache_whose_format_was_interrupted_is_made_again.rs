//! Bug (review of issue 17): a crash while a mount was making its SSD cache (a new cache file,
//! or the reformat that ends a format-2 upgrade) left a file the next mount refused for good
//! ("exists and is not a tiercache flash cache"): the superblocks were zeroed first and the
//! records written, so it looked like other data. Now the format starts with a marker and
//! ends with the superblock, and a mount over an interrupted format makes the cache again.
#![allow(clippy::unwrap_used)]

mod support;

use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;
use support::{mounted, s, tc};
use tiercache_flash::{FaultyDevice, FlashConfig, FlashDevice, FlashTier, MemDevice};

const LEN: u64 = 16 << 20;

/// Writes at `path` (mode 0600) what a crash leaves of a format cut before its superblock.
fn interrupted_format(path: &Path) {
    let m = Arc::new(MemDevice::new(LEN));
    let inner: Arc<dyn FlashDevice> = m.clone();
    let dev = Arc::new(FaultyDevice::new(inner, 1));
    dev.drop_writes_after(Some(2)); // the first step and the records land; the superblock not
    FlashTier::create(dev, FlashConfig::new("flash"))
        .unwrap()
        .abandon();
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .unwrap();
    std::io::Write::write_all(&mut f, &m.snapshot()).unwrap();
}

/// Unmounts on the way out, whatever happened.
struct Unmount<'a>(&'a Path);

impl Drop for Unmount<'_> {
    fn drop(&mut self) {
        if mounted(self.0) {
            let _ = tc(&["unmount", "--force", s(self.0)]);
        }
    }
}

#[test]
fn a_mount_over_a_cache_whose_format_was_cut_by_a_crash_makes_it_again() {
    let dir = tempfile::tempdir().unwrap();
    let (backing, mnt, cache) = (
        dir.path().join("slow"),
        dir.path().join("fast"),
        dir.path().join("ssd.cache"),
    );
    std::fs::create_dir_all(&backing).unwrap();
    std::fs::create_dir_all(&mnt).unwrap();
    std::fs::write(backing.join("data"), b"hello").unwrap();
    interrupted_format(&cache);
    let _guard = Unmount(&mnt);
    let out = tc(&["flash", "check", s(&cache)]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("interrupted"), "{err}");
    let out = tc(&[
        "mount",
        s(&backing),
        s(&mnt),
        "--memory",
        "256K",
        "--flash",
        s(&cache),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read(mnt.join("data")).unwrap(), b"hello");
    std::fs::write(mnt.join("data"), b"world").unwrap();
    assert!(tc(&["unmount", s(&mnt)]).status.success());
    assert!(!mounted(&mnt));
    assert_eq!(std::fs::read(backing.join("data")).unwrap(), b"world");
    let out = tc(&["flash", "check", s(&cache), "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (
            r["format_version"].as_u64(),
            r["superblocks_valid"].as_u64()
        ),
        (Some(3), Some(2)),
        "{r}"
    );
    assert_eq!(std::fs::metadata(&cache).unwrap().len(), LEN, "same size");
}
