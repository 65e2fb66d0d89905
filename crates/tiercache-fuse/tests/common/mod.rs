//! Shared helpers of the integration tests: a real mount in temporary
//! directories that is always unmounted (falling back to `fusermount3 -uz`).

#![allow(dead_code)]

pub mod random;
pub mod ring;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

use tiercache_fuse::{mount, DataPath, MountHandle, MountOptions, PassThrough};

/// A mounted test file system: `root/backing` mounted on `root/mnt`, plus an
/// unrelated plain directory `root/plain` for comparisons.
pub struct TestMount {
    pub handle: Option<MountHandle>,
    pub root: PathBuf,
    pub backing: PathBuf,
    pub mnt: PathBuf,
    pub plain: PathBuf,
    // dropped after the unmount in `Drop::drop`
    _dir: tempfile::TempDir,
}

impl TestMount {
    pub fn new(opts: MountOptions) -> Self {
        Self::with_data(opts, Arc::new(PassThrough))
    }

    pub fn with_data(opts: MountOptions, data: Arc<dyn DataPath>) -> Self {
        let dir = tempfile::Builder::new().prefix("tcfuse").tempdir().unwrap();
        // traversable by the unprivileged users of the permission tests
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let root = dir.path().to_path_buf();
        let backing = root.join("backing");
        let mnt = root.join("mnt");
        let plain = root.join("plain");
        for d in [&backing, &mnt, &plain] {
            std::fs::create_dir(d).unwrap();
        }
        let handle = mount(&backing, &mnt, opts, data).unwrap();
        Self {
            handle: Some(handle),
            root,
            backing,
            mnt,
            plain,
            _dir: dir,
        }
    }
}

impl Drop for TestMount {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            if let Err(e) = h.unmount() {
                eprintln!("unmount failed ({e}); falling back to fusermount3 -uz");
                let _ = Command::new("fusermount3")
                    .arg("-uz")
                    .arg(&self.mnt)
                    .status();
            }
        }
    }
}

/// Runs `cmd` in `cwd` with a deterministic environment.
pub fn run_in(cwd: &Path, cmd: &mut Command) -> Output {
    cmd.current_dir(cwd)
        .env("LC_ALL", "C")
        .env("TZ", "UTC")
        .env("HOME", cwd)
        .env("GIT_AUTHOR_NAME", "Tier Cache")
        .env("GIT_AUTHOR_EMAIL", "tc@example.invalid")
        .env("GIT_COMMITTER_NAME", "Tier Cache")
        .env("GIT_COMMITTER_EMAIL", "tc@example.invalid")
        .env("GIT_AUTHOR_DATE", "2020-01-01T00:00:00Z")
        .env("GIT_COMMITTER_DATE", "2020-01-01T00:00:00Z")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap()
}

/// Output of a command as text, with `replace` substituted by `<DIR>`.
pub fn text(out: &Output, replace: &Path) -> String {
    let r = replace.to_string_lossy();
    let s = format!(
        "exit={:?}\n--stdout--\n{}\n--stderr--\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    s.replace(r.as_ref(), "<DIR>")
}

/// Python helper that prints a manifest of a tree: type, mode, owner,
/// size, content hash, symlink target, link count and user xattrs.
pub const MANIFEST_PY: &str = r#"
import os, sys, hashlib, stat
root = sys.argv[1]
skip = set(sys.argv[2:])
for dirpath, dirnames, filenames in os.walk(root):
    dirnames.sort()
    for name in sorted(dirnames + filenames):
        p = os.path.join(dirpath, name)
        rel = os.path.relpath(p, root)
        st = os.lstat(p)
        m = st.st_mode
        line = [rel, stat.filemode(m), "%o" % stat.S_IMODE(m), "%d:%d" % (st.st_uid, st.st_gid)]
        if stat.S_ISREG(m):
            line.append("size=%d" % st.st_size)
            line.append("links=%d" % st.st_nlink)
            if rel not in skip and not rel.endswith("/index"):
                with open(p, "rb") as f:
                    line.append(hashlib.sha256(f.read()).hexdigest()[:16])
        elif stat.S_ISLNK(m):
            line.append("-> " + os.readlink(p))
        elif stat.S_ISDIR(m):
            line.append("links=%d" % st.st_nlink)
        if name.startswith("touched"):
            line.append("mtime=%d" % st.st_mtime)
        try:
            xs = sorted(x for x in os.listxattr(p, follow_symlinks=False) if x.startswith("user."))
            for x in xs:
                line.append("%s=%r" % (x, os.getxattr(p, x, follow_symlinks=False)))
        except OSError as e:
            line.append("xattr-error=%d" % e.errno)
        print(" ".join(line))
"#;

/// Manifest of the tree at `dir` (see [`MANIFEST_PY`]).
pub fn manifest(dir: &Path) -> String {
    let out = Command::new("python3")
        .arg("-c")
        .arg(MANIFEST_PY)
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "manifest failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Line-by-line diff for assertion messages.
pub fn diff(a: &str, b: &str) -> String {
    let mut out = String::new();
    let (la, lb): (Vec<_>, Vec<_>) = (a.lines().collect(), b.lines().collect());
    for i in 0..la.len().max(lb.len()) {
        let (x, y) = (la.get(i).copied(), lb.get(i).copied());
        if x != y {
            out.push_str(&format!("line {i}:\n  mount: {x:?}\n  plain: {y:?}\n"));
        }
    }
    out
}

/// The required `DataPath` calls a test data path leaves alone, forwarded to `PassThrough`:
/// `pass_through!(write, fsync, truncate, fallocate);` inside its `impl DataPath`.
#[macro_export]
macro_rules! pass_through {
    ($($call:ident),* $(,)?) => { $( $crate::pass_through!(@ $call); )* };
    (@ read) => {
        fn read(
            &self,
            fh: &tiercache_fuse::FileHandleInfo,
            offset: u64,
            size: u32,
        ) -> std::io::Result<Vec<u8>> {
            tiercache_fuse::DataPath::read(&tiercache_fuse::PassThrough, fh, offset, size)
        }
    };
    (@ write) => {
        fn write(
            &self,
            fh: &tiercache_fuse::FileHandleInfo,
            offset: u64,
            data: &[u8],
        ) -> std::io::Result<u32> {
            tiercache_fuse::DataPath::write(&tiercache_fuse::PassThrough, fh, offset, data)
        }
    };
    (@ fsync) => {
        fn fsync(&self, fh: &tiercache_fuse::FileHandleInfo, datasync: bool) -> std::io::Result<()> {
            tiercache_fuse::DataPath::fsync(&tiercache_fuse::PassThrough, fh, datasync)
        }
    };
    (@ truncate) => {
        fn truncate(&self, ino: u64, file: &std::fs::File, new_size: u64) -> std::io::Result<()> {
            tiercache_fuse::DataPath::truncate(&tiercache_fuse::PassThrough, ino, file, new_size)
        }
    };
    (@ fallocate) => {
        fn fallocate(
            &self,
            fh: &tiercache_fuse::FileHandleInfo,
            mode: i32,
            offset: u64,
            len: u64,
        ) -> std::io::Result<()> {
            tiercache_fuse::DataPath::fallocate(&tiercache_fuse::PassThrough, fh, mode, offset, len)
        }
    };
}
