//! (b) Seeded random operation sequence executed on the mount and on a shadow
//! plain directory, compared byte for byte, with a concurrent reader thread
//! checking a file that is appended to while it reads (see `common/random.rs`,
//! shared with the cached-mount test of the `tiercache` crate).
#![allow(clippy::unwrap_used)]

mod common;

use common::{random, TestMount};
use tiercache_fuse::MountOptions;

fn random_ops(opts: MountOptions, seed: u64) {
    let m = TestMount::new(opts);
    let outcome = random::run(&m.mnt, &m.plain, seed);
    // pass-through: the backing tree is up to date at once
    outcome.check_tree("backing vs plain", &m.backing, &m.plain);
}

#[test]
fn random_ops_direct_io() {
    random_ops(MountOptions::default(), 0x1234_5678_9abc_def1);
}

#[test]
fn random_ops_kernel_cache() {
    let mut opts = MountOptions::default();
    opts.kernel_cache = tiercache_fuse::KernelCacheMode::All;
    random_ops(opts, 0x0fed_cba9_8765_4321);
}
