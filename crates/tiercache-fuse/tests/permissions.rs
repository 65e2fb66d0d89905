//! (c) Permission enforcement: an unprivileged process (uid 65534, with and
//! without supplementary group 1000) gets the same results on the mount as on
//! a plain directory of the backing file system, POSIX ACLs included (a named-user deny
//! entry was bypassed before the mount negotiated `FUSE_POSIX_ACL`). Needs `allow_other`.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::Command;

use common::{diff, run_in, text, TestMount};
use tiercache_fuse::MountOptions;

const SETUP: &str = include_str!("perm_setup.sh");
const CHECK: &str = include_str!("perm_check.py");

fn outcome(dir: &Path) -> String {
    let mut all = String::new();
    for (sub, mode) in [("a", "nobody"), ("b", "group")] {
        let d = dir.join(sub);
        std::fs::create_dir(&d).unwrap();
        let setup = run_in(&d, Command::new("bash").arg("-c").arg(SETUP));
        assert!(setup.status.success(), "{}", text(&setup, &d));
        let out = run_in(&d, Command::new("python3").arg("-c").arg(CHECK).arg(mode));
        all.push_str(&format!("== {mode}\n{}\n", text(&out, &d)));
    }
    all
}

#[test]
fn unprivileged_caller_sees_backing_permissions() {
    let mut opts = MountOptions::default();
    opts.allow_other = true;
    let m = TestMount::new(opts);
    let on_mount = outcome(&m.mnt);
    let on_plain = outcome(&m.plain);
    assert!(
        on_mount == on_plain,
        "permission results differ:\n{}\n--- mount ---\n{on_mount}",
        diff(&on_mount, &on_plain)
    );
    for expect in [
        "read_secret EACCES",
        "read_public OK pub",
        "write_public EACCES",
        "create_in_ro EACCES",
        "owner_new OK open/new 65534:65534 644",
        "unlink_sticky_victim EPERM",
        "chmod_public EPERM",
        "owner_sg_f OK sg/f 65534:1000 644",
    ] {
        assert!(
            on_mount.contains(expect),
            "missing {expect:?} in\n{on_mount}"
        );
    }
    // supplementary groups are honoured (kernel-side check)
    let group_part = on_mount.split("== group").nth(1).unwrap();
    assert!(group_part.contains("read_grp OK gr"), "{group_part}");
    // POSIX ACLs decide as on BACKING: a named-user deny entry wins over the owning group the
    // caller is in, an allow entry opens a mode-0600 file, a default ACL is inherited, and
    // setfacl through the mount works for the owner only
    for expect in [
        "read_acl_deny EACCES",
        "read_acl_allow OK aa",
        "create_in_acl_dir OK",
        "setfacl_own OK rc=0",
        "read_acl_allow_after OK aa",
    ] {
        assert!(
            group_part.contains(expect),
            "missing {expect:?} in\n{group_part}"
        );
    }
    assert!(
        !group_part.contains("acl_inherited OK no-acl"),
        "{group_part}"
    );
    assert!(
        group_part.contains("setfacl_not_own OK rc=1"),
        "{group_part}"
    );
    // the backing files really belong to the caller
    let st = std::fs::metadata(m.backing.join("a/open/new")).unwrap();
    assert_eq!(std::os::unix::fs::MetadataExt::uid(&st), 65534);
}
