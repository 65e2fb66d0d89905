//! (a) Scripted shell workload and errno comparison: the same script runs on
//! the mount and on a plain directory; outputs, exit codes and the resulting
//! trees must be identical (and the backing tree must equal the mounted one).
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::Command;

use common::{diff, manifest, run_in, text, TestMount};
use tiercache_fuse::MountOptions;

const SCRIPT: &str = include_str!("workload.sh");
const ERRNO_PY: &str = include_str!("errno.py");

fn run_script(dir: &Path) -> String {
    let out = run_in(dir, Command::new("bash").arg("-c").arg(SCRIPT));
    text(&out, dir)
}

fn run_errno(dir: &Path) -> String {
    let out = run_in(dir, Command::new("python3").arg("-c").arg(ERRNO_PY));
    text(&out, dir)
}

fn compare(what: &str, mount: &str, plain: &str) {
    assert!(
        mount == plain,
        "{what} differs between mount and plain directory:\n{}\n--- mount ---\n{mount}",
        diff(mount, plain)
    );
}

fn workload(opts: MountOptions) {
    let m = TestMount::new(opts);
    let on_mount = run_script(&m.mnt);
    let on_plain = run_script(&m.plain);
    compare("workload output", &on_mount, &on_plain);
    assert!(
        on_mount.contains("### git fsck --no-progress\nrc=0"),
        "{on_mount}"
    );

    let e_mount = run_errno(&m.mnt);
    let e_plain = run_errno(&m.plain);
    compare("errno output", &e_mount, &e_plain);
    assert!(e_mount.starts_with("exit=Some(0)"), "{e_mount}");

    let (tm, tp, tb) = (manifest(&m.mnt), manifest(&m.plain), manifest(&m.backing));
    compare("tree (mount vs plain)", &tm, &tp);
    compare("tree (mount vs backing)", &tm, &tb);
    assert!(tm.lines().count() > 50, "{tm}");
}

#[test]
fn workload_direct_io() {
    workload(MountOptions::default());
}

#[test]
fn workload_kernel_cache() {
    let mut opts = MountOptions::default();
    opts.kernel_cache = tiercache_fuse::KernelCacheMode::All;
    workload(opts);
}
