//! Format 3 (issue 17, item 8: block checksums) changed the SSD tier's device format. A cache
//! of format 2 may hold the only copy of fsync-acknowledged writes, so it is never discarded:
//! a mount over it writes its dirty blocks back to BACKING (the same recovery as after a
//! crash), and only then reformats it as format 3; a format-2 cache whose dirty blocks cannot
//! all be written back is refused and left as it was. `flash check` reports a format-2 cache
//! from its records.
#![allow(clippy::unwrap_used)]

mod support;

use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use support::{mounted, s, tc};
use tiercache_flash::format::{Geometry, Record, Superblock};
use tiercache_tier::{FileHandle, FileKey, FileMeta};

const LEN: u64 = 16 << 20;
const VERSION: u64 = 77;

struct Rig {
    _dir: tempfile::TempDir,
    backing: PathBuf,
    mnt: PathBuf,
    cache: PathBuf,
}

impl Rig {
    fn new() -> Rig {
        let dir = tempfile::tempdir().unwrap();
        let backing = dir.path().join("slow");
        let mnt = dir.path().join("fast");
        std::fs::create_dir_all(&backing).unwrap();
        std::fs::create_dir_all(&mnt).unwrap();
        let cache = dir.path().join("ssd.cache");
        Rig {
            _dir: dir,
            backing,
            mnt,
            cache,
        }
    }

    fn mount(&self) -> std::process::Output {
        tc(&[
            "mount",
            s(&self.backing),
            s(&self.mnt),
            "--memory",
            "256K",
            "--flash",
            s(&self.cache),
        ])
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        if mounted(&self.mnt) {
            let _ = tc(&["unmount", "--force", s(&self.mnt)]);
        }
    }
}

fn block(i: u64) -> Vec<u8> {
    (0..4096u64).map(|j| (i * 37 + j * 11 + 5) as u8).collect()
}

/// Writes a format-2 cache of `LEN` bytes at `path` (mode 0600) as a format-2 tier left it
/// after a crash: set 0 holds `blocks` of `file` dirty, with `meta`.
fn format_2_cache(path: &Path, file: FileKey, meta: FileMeta, blocks: &[u64]) {
    let geo = Geometry::compute_for(2, LEN, 512, 12, 8).unwrap();
    let instance = 0x1234_5677;
    let mut img = vec![0u8; LEN as usize];
    let sb = Superblock {
        flags: 0,
        gen: 3,
        geo,
        device_len: LEN,
        instance,
    };
    let at = |img: &mut Vec<u8>, off: u64, b: &[u8]| {
        img[off as usize..off as usize + b.len()].copy_from_slice(b);
    };
    at(&mut img, geo.sb_off(1), &sb.encode());
    let words = geo.bitmap_bytes() / 8;
    let mut bits = vec![0u64; words];
    for &b in blocks {
        bits[b as usize / 64] |= 1 << (b % 64);
        at(&mut img, geo.block_off(0, b as usize), &block(b));
    }
    let rec = Record {
        set: 0,
        seq: 5,
        tag: Some((file, 0)),
        version: VERSION,
        valid: bits.clone(),
        dirty: bits,
        in_place: vec![0; words],
        meta: Some((meta, 9)),
    };
    at(&mut img, geo.rec_off(0, 1), &rec.encode(&geo, instance));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .unwrap();
    std::io::Write::write_all(&mut f, &img).unwrap();
}

fn key_and_meta(path: &Path, size: u64) -> (FileKey, FileMeta) {
    let f = std::fs::File::open(path).unwrap();
    let st = f.metadata().unwrap();
    let handle = tiercache_manager::handle::file_handle(&f).unwrap();
    let key = FileKey {
        dev: st.dev(),
        ino: st.ino(),
        birth: 0,
    };
    let meta = FileMeta {
        size,
        mtime_ns: 1_700_000_000_000_000_000,
        handle,
    };
    (key, meta)
}

fn check_json(path: &Path) -> serde_json::Value {
    let out = tc(&["flash", "check", s(path), "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn a_format_2_cache_has_its_dirty_blocks_written_back_then_is_reformatted() {
    let r = Rig::new();
    let f = r.backing.join("data");
    std::fs::write(&f, vec![0u8; 8 * 4096]).unwrap();
    let (key, meta) = key_and_meta(&f, 10 * 4096);
    format_2_cache(&r.cache, key, meta, &[1, 3, 9]);
    let c = check_json(&r.cache);
    assert_eq!(
        (c["format_version"].as_u64(), c["dirty_blocks"].as_u64()),
        (Some(2), Some(3)),
        "{c}"
    );
    let out = r.mount();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut want = vec![0u8; 10 * 4096];
    for b in [1u64, 3, 9] {
        want[b as usize * 4096..(b as usize + 1) * 4096].copy_from_slice(&block(b));
    }
    assert!(
        std::fs::read(&f).unwrap() == want,
        "BACKING has the dirty blocks"
    );
    assert!(std::fs::read(r.mnt.join("data")).unwrap() == want);
    let st = tc(&["stats", s(&r.mnt), "--json"]);
    let st: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
    assert_eq!(
        st["flash"]["recovery"]["blocks_written"], 3,
        "{}",
        st["flash"]
    );
    assert!(tc(&["unmount", s(&r.mnt)]).status.success());
    let c = check_json(&r.cache);
    assert_eq!(c["format_version"], 3, "{c}");
    assert_eq!(std::fs::metadata(&r.cache).unwrap().len(), LEN, "same size");
}

#[test]
fn a_format_2_cache_whose_dirty_blocks_cannot_be_written_back_is_refused_and_kept() {
    let r = Rig::new();
    // Dirty blocks of a file of another file system, whose handle opens nothing here: the
    // cache was used with another BACKING.
    let key = FileKey {
        dev: 0xdead,
        ino: 424242,
        birth: 0,
    };
    let meta = FileMeta {
        size: 4 * 4096,
        mtime_ns: 1,
        handle: FileHandle {
            kind: 1,
            bytes: vec![0xee; 8],
        },
    };
    format_2_cache(&r.cache, key, meta, &[0, 2]);
    let before = std::fs::read(&r.cache).unwrap();
    let out = r.mount();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "mounted");
    assert!(!mounted(&r.mnt));
    assert!(err.contains("format 2"), "{err}");
    assert!(
        std::fs::read(&r.cache).unwrap() == before,
        "the cache was changed"
    );
    assert_eq!(check_json(&r.cache)["dirty_blocks"], 2);
}
