//! There was no systemd unit: tiercache could not be run as a service. The repository's
//! `tiercache@.service` passes `systemd-analyze verify` without a warning (run on a copy whose
//! ExecStart/ExecStop name the built binary: verify checks that it exists), and its stop writes
//! back through `tiercache unmount` under a long timeout.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;

fn unit_text() -> String {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging/systemd/tiercache@.service");
    std::fs::read_to_string(&path).unwrap()
}

#[test]
fn the_unit_template_verifies_cleanly_for_an_escaped_mount_point() {
    let dir = tempfile::tempdir().unwrap();
    let text = unit_text().replace("/usr/bin/tiercache", env!("CARGO_BIN_EXE_tiercache"));
    std::fs::write(dir.path().join("tiercache@.service"), &text).unwrap();
    let escaped = Command::new("systemd-escape")
        .args(["--path", "/srv/fast cache"])
        .output()
        .unwrap();
    assert!(escaped.status.success());
    let instance = String::from_utf8(escaped.stdout)
        .unwrap()
        .trim()
        .to_string();
    let unit = dir.path().join(format!("tiercache@{instance}.service"));
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&unit)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "systemd-analyze verify: {err}");
    assert!(err.trim().is_empty(), "systemd-analyze verify warns: {err}");
    // A unit it refuses is reported (the check can fail): a missing binary.
    std::fs::write(
        dir.path().join("tiercache@.service"),
        unit_text().replace("/usr/bin/tiercache", "/nonexistent/tiercache"),
    )
    .unwrap();
    let bad = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&unit)
        .output()
        .unwrap();
    assert!(!bad.status.success());
}

#[test]
fn the_unit_waits_for_the_mount_and_for_the_write_back() {
    let text = unit_text();
    let has = |line: &str| text.lines().any(|l| l.trim() == line);
    assert!(has("Type=notify"), "{text}");
    assert!(has("NotifyAccess=all"));
    assert!(has(
        "ExecStart=/usr/bin/tiercache mount --foreground --config /etc/tiercache/%i.toml %f"
    ));
    assert!(has("ExecStop=/usr/bin/tiercache unmount %f"));
    assert!(has("ExecReload=/usr/bin/tiercache reload %f"));
    assert!(has("TimeoutStopSec=1h"));
}
