//! `[[tier]]` tables and `--tier` flags are checked before anything is mounted: a bad one is a
//! one-line error naming `FILE:LINE` or the flag, with a non-zero exit and no mount.
#![allow(clippy::unwrap_used)]

mod support;

use support::{mounted, s, tc};

#[test]
fn help_shows_the_tier_flag() {
    let out = tc(&["mount", "--help"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("--tier <KIND:SIZE[:PLACEMENT]>"), "{text}");
}

#[test]
fn a_bad_tier_fails_with_its_place_and_mounts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (backing, mnt) = (dir.path().join("slow"), dir.path().join("fast"));
    std::fs::create_dir_all(&backing).unwrap();
    std::fs::create_dir_all(&mnt).unwrap();
    let cfg = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let kind = cfg(
        "kind.toml",
        "memory = \"8M\"\n\n[[tier]]\nkind = \"ssd\"\nsize = \"1G\"\n",
    );
    let small = cfg("small.toml", "[[tier]]\nkind = \"test\"\nsize = 512\n");
    let twice = cfg(
        "twice.toml",
        "memory = \"8M\"\n[[tier]]\nkind = \"memory\"\nsize = \"8M\"\n",
    );
    let key = cfg(
        "key.toml",
        "[[tier]]\nkind = \"test\"\nsize = \"1M\"\nspeed = \"fast\"\n",
    );
    let cases: Vec<(Vec<&str>, String)> = vec![
        (
            vec!["--config", s(&kind)],
            format!("{}:4: unknown tier kind `ssd`", kind.display()),
        ),
        (
            vec!["--config", s(&small)],
            format!(
                "{}:3: size: 512 bytes is less than one block",
                small.display()
            ),
        ),
        (
            vec!["--config", s(&twice)],
            format!("{}:4: memory tier `size` and top-level", twice.display()),
        ),
        (
            vec!["--config", s(&key)],
            format!("{}:4: unknown field `speed`", key.display()),
        ),
        (
            vec!["--tier", "test:1M:pinned=x"],
            "--tier test:1M:pinned=x: unknown placement `pinned=x`".to_string(),
        ),
        (
            vec!["--tier", "test"],
            "--tier test: expected KIND:SIZE[:PLACEMENT]".to_string(),
        ),
    ];
    for (extra, want) in cases {
        let mut args = vec!["mount", s(&backing), s(&mnt), "--memory", "8M"];
        args.extend(extra);
        let out = tc(&args);
        assert!(!out.status.success(), "{args:?} should fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.starts_with(&format!("tiercache: {want}")),
            "{args:?}: {err}"
        );
        assert!(!mounted(&mnt), "{args:?} left a mount");
    }
}
