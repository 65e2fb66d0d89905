//! Bug (issue 17, item 1): the SSD tier's cache file was created mode 0644, so any local user
//! could read the plaintext copies of every user's cached blocks; an existing cache file was
//! opened whatever its owner and mode, and a symlink at the cache path was followed.
//!
//! On a real mount: the cache file is made 0600 and `nobody` cannot read a root-only secret
//! from it; a cache file with group/other bits or another owner is refused with one line
//! naming the fix, and nothing is mounted; a symlink at the cache path is never followed.
#![allow(clippy::unwrap_used)]

mod support;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use support::{mounted, s, tc};

struct Rig {
    _dir: tempfile::TempDir,
    backing: PathBuf,
    mnt: PathBuf,
    cache: PathBuf,
}

impl Rig {
    fn new() -> Rig {
        let dir = tempfile::tempdir().unwrap();
        // Others may walk to the cache file: only its own mode may keep them out.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
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

    fn try_mount(&self, cache: &Path, size: Option<&str>) -> std::process::Output {
        let dev = match size {
            Some(sz) => format!("{}:{sz}", s(cache)),
            None => s(cache).to_string(),
        };
        tc(&[
            "mount",
            s(&self.backing),
            s(&self.mnt),
            "--memory",
            "256K",
            "--flash",
            &dev,
        ])
    }

    fn unmount(&self) {
        let out = tc(&["unmount", s(&self.mnt)]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The mount is refused with one line containing each of `want`; nothing is mounted.
    fn refused(&self, cache: &Path, size: Option<&str>, want: &[&str]) {
        let out = self.try_mount(cache, size);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "mounted over {}", cache.display());
        assert!(!mounted(&self.mnt), "mounted over {}", cache.display());
        for w in want {
            assert!(err.contains(w), "expected {w:?} in: {err}");
        }
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        if mounted(&self.mnt) {
            let _ = tc(&["unmount", "--force", s(&self.mnt)]);
        }
    }
}

/// `sh -c script` as uid/gid 65534 with no supplementary groups and no capabilities.
fn as_nobody(script: &str, arg: &Path) -> std::process::Output {
    Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .args(["/bin/sh", "-c", script, "sh"])
        .arg(arg)
        .output()
        .unwrap()
}

fn mode_of(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

#[test]
fn the_cache_file_is_made_private_and_other_users_cannot_read_secrets_from_it() {
    let r = Rig::new();
    let out = r.try_mount(&r.cache, Some("16M"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A root-only file, written and fsynced through the mount: 1 MiB through a 256 KiB memory
    // tier, so most of it is only in the SSD tier's cache file.
    let secret: Vec<u8> = b"TOP-SECRET-4711 ".repeat(65536);
    let f = r.mnt.join("secret");
    std::fs::write(&f, &secret).unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::File::open(&f).unwrap().sync_all().unwrap();
    assert_eq!(std::fs::read(&f).unwrap(), secret);
    let cached = std::fs::read(&r.cache).unwrap();
    assert!(
        cached.windows(15).any(|w| w == b"TOP-SECRET-4711"),
        "the test needs the secret in the cache file"
    );
    let out = as_nobody("grep -c TOP-SECRET \"$1\"", &r.cache);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("Permission denied"),
        "nobody read the cache file: {}{err}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(mode_of(&r.cache), 0o600, "cache file mode");
    assert_eq!(std::fs::metadata(&r.cache).unwrap().uid(), 0);
    r.unmount();
}

#[test]
fn a_cache_file_others_may_read_or_another_user_owns_is_refused_and_nothing_is_mounted() {
    let r = Rig::new();
    let out = r.try_mount(&r.cache, Some("16M"));
    assert!(out.status.success());
    r.unmount();
    let before = std::fs::read(&r.cache).unwrap();
    for mode in [0o644, 0o640, 0o604, 0o660] {
        std::fs::set_permissions(&r.cache, std::fs::Permissions::from_mode(mode)).unwrap();
        r.refused(&r.cache, None, &[s(&r.cache), "chmod 600"]);
        r.refused(&r.cache, Some("16M"), &["chmod 600"]);
    }
    std::fs::set_permissions(&r.cache, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::chown(&r.cache, Some(65534), Some(65534)).unwrap();
    r.refused(&r.cache, None, &["uid 65534", "chown"]);
    assert!(
        std::fs::read(&r.cache).unwrap() == before,
        "a refused cache was changed"
    );
    // Put right as the messages say, it mounts again.
    std::os::unix::fs::chown(&r.cache, Some(0), Some(0)).unwrap();
    let out = r.try_mount(&r.cache, None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    r.unmount();
}

#[test]
fn a_symlink_at_the_cache_path_is_never_followed() {
    let r = Rig::new();
    let out = r.try_mount(&r.cache, Some("16M"));
    assert!(out.status.success());
    r.unmount();
    let before = std::fs::read(&r.cache).unwrap();
    // To a good cache.
    let link = r.cache.with_file_name("link.cache");
    std::os::unix::fs::symlink(&r.cache, &link).unwrap();
    r.refused(&link, None, &[s(&link), "symbolic link"]);
    r.refused(&link, Some("16M"), &["symbolic link"]);
    assert!(std::fs::read(&r.cache).unwrap() == before);
    // Dangling, where a new cache would be created: nothing is made at its target.
    let target = r.cache.with_file_name("elsewhere");
    let dangling = r.cache.with_file_name("dangling.cache");
    std::os::unix::fs::symlink(&target, &dangling).unwrap();
    r.refused(&dangling, Some("16M"), &["symbolic link"]);
    assert!(!target.exists(), "the symlink's target was created");
    // `flash check` reads but never through a symlink either.
    let out = tc(&["flash", "check", s(&link)]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("symbolic link"),
        "{err}"
    );
}
