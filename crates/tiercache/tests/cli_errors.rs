//! Bug: errors lost their hints — the one-line wrapper dropped clap's content (no "did you mean `--memory`", no name of the missing argument), a missing BACKING did not say which argument it was, `stats`/`unmount` told "no daemon answers" for a missing path, a plain directory and a subdirectory of a mount alike, and a bare `tiercache` exited 0.
#![allow(clippy::unwrap_used)]

mod support;

use support::{s, tc, Mount};

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_misspelled_flag_keeps_clap_tip_and_usage() {
    let out = tc(&["mount", "/tmp", "/mnt", "--memroy", "1G"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("--memroy") && err.contains("--memory"),
        "{err}"
    );
    assert!(err.contains("tip"), "clap's tip is kept: {err}");
    assert!(err.contains("Usage: tiercache mount"), "{err}");
}

#[test]
fn a_missing_required_argument_is_named() {
    let out = tc(&["mount", "/tmp"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("<MOUNTPOINT>"), "{err}");
}

#[test]
fn bare_tiercache_prints_help_and_fails() {
    let out = tc(&[]);
    assert!(!out.status.success());
    let text = stderr(&out) + &String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Usage: tiercache"), "{text}");
    assert!(text.contains("mount") && text.contains("unmount"), "{text}");
    // Asking for help is not an error.
    assert!(tc(&["--help"]).status.success());
}

#[test]
fn a_missing_backing_names_the_argument() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("x");
    let out = tc(&["mount", s(&missing), s(dir.path())]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert_eq!(
        err.trim_end(),
        format!(
            "tiercache: BACKING {}: No such file or directory",
            missing.display()
        )
    );
    let out = tc(&["mount", s(dir.path()), s(&missing)]);
    assert!(stderr(&out).contains(&format!("MOUNTPOINT {}: No such file", missing.display())));
}

#[test]
fn a_bare_memory_number_in_the_config_counts_bytes_and_too_few_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (backing, mnt, cfg) = (
        dir.path().join("slow"),
        dir.path().join("fast"),
        dir.path().join("tc.toml"),
    );
    std::fs::create_dir_all(&backing).unwrap();
    std::fs::create_dir_all(&mnt).unwrap();
    std::fs::write(&cfg, "memory = 64\n").unwrap();
    let out = tc(&["mount", s(&backing), s(&mnt), "--config", s(&cfg)]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("memory") && err.contains("tc.toml"), "{err}");
    assert!(
        err.contains("64 bytes") && err.contains("counts bytes"),
        "{err}"
    );
    assert!(err.contains("\"64M\""), "the unit to write: {err}");
}

#[test]
fn stats_and_unmount_tell_a_missing_path_a_plain_directory_and_a_subdirectory_apart() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    for cmd in [
        &["stats"][..],
        &["unmount"],
        &["unmount", "--force"],
        &["flush"],
    ] {
        let run = |p: &std::path::Path| {
            let mut args = cmd.to_vec();
            args.push(s(p));
            let out = tc(&args);
            assert!(!out.status.success(), "{args:?} succeeded");
            let err = stderr(&out);
            assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
            err
        };
        let err = run(&missing);
        assert!(err.contains("no such file or directory"), "{cmd:?}: {err}");
        let err = run(dir.path());
        assert!(err.contains("not a mount point"), "{cmd:?}: {err}");
    }
    let m = Mount::new(&["--memory", "8M"]);
    std::fs::create_dir_all(m.mnt.join("sub")).unwrap();
    for cmd in ["stats", "unmount", "flush"] {
        let out = tc(&[cmd, s(&m.mnt.join("sub"))]);
        assert!(!out.status.success());
        let err = stderr(&out);
        assert!(
            err.contains("a subdirectory of the tiercache mount")
                && err.contains(&m.mnt.display().to_string()),
            "{cmd}: {err}"
        );
    }
    assert!(
        tc(&["stats", s(&m.mnt)]).status.success(),
        "the mount still serves"
    );
}

#[test]
fn an_unknown_transport_is_named_with_the_choices() {
    let d = tempfile::tempdir().unwrap();
    let (b, m) = (d.path().join("b"), d.path().join("m"));
    std::fs::create_dir(&b).unwrap();
    std::fs::create_dir(&m).unwrap();
    support::fails_naming(
        &["mount", s(&b), s(&m), "--transport", "uring"],
        "--transport",
        "unknown transport 'uring' (expected one of: dev-fuse, io-uring, auto)",
    );
    assert!(!support::mounted(&m));
    for bench in ["meta", "fuse"] {
        support::fails_naming(
            &["bench", bench, "--transport", "ring"],
            "--transport",
            "unknown transport 'ring'",
        );
    }
}
