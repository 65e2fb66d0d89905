//! Bug: writes did not clear set-user-ID / set-group-ID in the default direct-I/O mode — a write by a non-owner or by the owner left 04777 / 02777 / 06777 on the mount and on BACKING, because the server ignored `FUSE_WRITE_KILL_SUIDGID`.
//!
//! The same writes (`dd conv=notrunc`), truncates (`truncate -s`) and `open(O_TRUNC)`s are done
//! as uid/gid 65534 (via `setpriv`, no capabilities) and as root on the mount and on a plain directory; the modes the mount
//! reports, and BACKING's, must equal the plain directory's. Both I/O modes: direct I/O (the
//! server clears the bits) and `--kernel-cache` (the kernel asks for it with SETATTR).
#![allow(clippy::unwrap_used)]

mod support;

use support::Mount;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

/// (file, mode, owner uid, owner gid, who writes, how).
const CASES: &[(&str, u32, u32, u32, &str, &str)] = &[
    ("suid_other", 0o4777, 0, 0, "nobody", "write"),
    ("sgid_other", 0o2777, 0, 0, "nobody", "write"),
    ("both_other", 0o6777, 0, 0, "nobody", "write"),
    ("sgid_noexec_other", 0o2767, 0, 0, "nobody", "write"),
    ("sgid_noexec_member", 0o2767, 0, 65534, "nobody", "write"),
    ("both_owner", 0o6777, 65534, 65534, "nobody", "write"),
    ("suid_owner_0755", 0o4755, 65534, 0, "nobody", "write"),
    ("plain_other", 0o0777, 0, 0, "nobody", "write"),
    ("both_other_trunc", 0o6777, 0, 0, "nobody", "otrunc"),
    ("both_other_ftrunc", 0o6777, 0, 0, "nobody", "ftrunc"),
    ("both_root", 0o6777, 0, 0, "root", "write"),
];

/// Runs as uid/gid 65534 (`sh -c AS_NOBODY sh DIR NAME:HOW...`): each listed operation in DIR.
const AS_NOBODY: &str = r#"
d=$1; shift
for spec in "$@"; do
    name=${spec%:*}; how=${spec#*:}
    case $how in
        write) printf xy | dd of="$d/$name" bs=1 seek=1 conv=notrunc status=none ;;
        otrunc) : > "$d/$name" ;;
        ftrunc) truncate -s 1 "$d/$name" ;;
    esac || echo "$name: $how failed"
done
"#;

/// Sets the cases up in `dir`, runs them, and returns each file's mode as `dir` reports it.
fn run_cases(dir: &Path) -> Vec<(String, u32)> {
    for &(name, mode, uid, gid, _, _) in CASES {
        let p = dir.join(name);
        std::fs::write(&p, b"0123456789").unwrap();
        std::os::unix::fs::chown(&p, Some(uid), Some(gid)).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .args(["/bin/sh", "-c", AS_NOBODY, "sh"])
        .arg(dir);
    for &(name, _, _, _, who, how) in CASES {
        if who == "nobody" {
            cmd.arg(format!("{name}:{how}"));
        } else {
            let f = std::fs::OpenOptions::new().write(true).open(dir.join(name));
            std::os::unix::fs::FileExt::write_at(&f.unwrap(), b"xy", 1).unwrap();
        }
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success() && out.stdout.is_empty(),
        "as uid 65534 in {}: {}{}",
        dir.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    modes(dir)
}

fn modes(dir: &Path) -> Vec<(String, u32)> {
    CASES
        .iter()
        .map(|&(name, ..)| {
            let m = std::fs::metadata(dir.join(name)).unwrap();
            (name.to_string(), m.mode() & 0o7777)
        })
        .collect()
}

/// Mounts with `flags` and compares with a plain directory. `kernel_differs` lists the files
/// whose mode differs from the plain directory's by the kernel's own FUSE rules, with the mode
/// the mount shows.
fn check(flags: &[&str], kernel_differs: &[(&str, u32)]) {
    let mut args = vec!["--allow-other"];
    args.extend_from_slice(flags);
    let m = Mount::new(&args);
    // uid 65534 must reach the mount and the plain directory
    let top = m.mnt.parent().unwrap();
    std::fs::set_permissions(top, std::fs::Permissions::from_mode(0o755)).unwrap();
    let plain = top.join("plain");
    std::fs::create_dir(&plain).unwrap();
    std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o777)).unwrap();

    let native = run_cases(&plain);
    let mut expected = native.clone();
    for (name, mode) in &mut expected {
        if let Some((_, m)) = kernel_differs.iter().find(|(n, _)| n == name) {
            assert_ne!(
                *mode, *m,
                "{name} no longer differs: update the test and the docs"
            );
            *mode = *m;
        }
    }
    let on_mount = run_cases(&m.mnt);
    let on_backing = modes(&m.backing);
    assert_eq!(on_mount, expected, "{flags:?}: modes the mount reports");
    assert_eq!(on_backing, expected, "{flags:?}: modes on BACKING");
    // What the kernel does on this machine, spelled out (the comparison above is the test).
    let mode_of = |n: &str| native.iter().find(|(f, _)| f == n).unwrap().1;
    assert_eq!(mode_of("suid_other"), 0o777);
    assert_eq!(mode_of("sgid_other"), 0o777);
    assert_eq!(mode_of("both_owner"), 0o777);
    assert_eq!(mode_of("both_other_trunc"), 0o777);
    assert_eq!(mode_of("sgid_noexec_member"), 0o2767);
    assert_eq!(mode_of("sgid_noexec_other"), 0o767);
    assert_eq!(mode_of("both_root"), 0o6777);
}

#[test]
fn writes_and_truncates_clear_setid_bits_as_on_a_local_file_system() {
    check(&[], &[]);
}

#[test]
fn writes_and_truncates_clear_setid_bits_with_the_kernel_page_cache() {
    // Through the page cache the kernel clears the bits itself (file_remove_privs, then a
    // SETATTR of the mode), and fuse_setattr recomputes the mode with the rule "S_ISGID only
    // together with S_IXGRP": a set-group-ID file without group-execute keeps the bit on a
    // write by a non-member, where a local file system clears it. Nothing reaches the server
    // that would let it tell (see killpriv.rs in tiercache-fuse).
    check(&["--kernel-cache"], &[("sgid_noexec_other", 0o2767)]);
}
