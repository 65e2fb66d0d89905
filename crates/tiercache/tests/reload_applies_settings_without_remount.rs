//! Changing a setting meant unmounting (and SIGHUP stopped the mount): `tiercache reload` and
//! SIGHUP now re-read the mount's config file and apply priority directories, partitioner
//! parameters, flusher timings, remote threshold and timeout live; an invalid file changes
//! nothing; what cannot change live (memory size, ...) is named as not applied; flags given at
//! mount time keep overriding the file.
#![allow(clippy::unwrap_used)]

mod support;

use std::path::Path;
use std::time::{Duration, Instant};
use support::{mounted, s, tc, Mount};
use tiercache_remote::local::LocalMemcached;

const BASE: &str = "memory = \"16M\"\npartition = \"dirprio\"\npriority = [\"www/top\"]\n\
                    flush_interval_ms = 1000\n";

fn settings(m: &Mount) -> serde_json::Value {
    m.stats()["settings"].clone()
}

fn priority_dirs(m: &Mount) -> Vec<String> {
    settings(m)["priority"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["dir"].as_str().unwrap().to_string())
        .collect()
}

/// `tiercache reload MNT`: (success, stdout, stderr).
fn reload(m: &Mount) -> (bool, String, String) {
    let out = tc(&["reload", s(&m.mnt)]);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn mount_with(cfg: &Path, text: &str, extra: &[&str]) -> Mount {
    std::fs::write(cfg, text).unwrap();
    let mut args = vec!["--config", s(cfg)];
    args.extend_from_slice(extra);
    Mount::new(&args)
}

#[test]
fn reload_command_applies_priority_dirs_and_flusher_timings() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("tc.toml");
    let m = mount_with(&cfg, BASE, &[]);
    assert_eq!(priority_dirs(&m), ["www/top"]);
    assert_eq!(settings(&m)["flush_interval_ms"], 1000);
    let changed = "memory = \"32M\"\npartition = \"dirprio\"\npriority = [\"www/hot\"]\n\
                   flush_interval_ms = 250\nt_normal = 0.5\n";
    std::fs::write(&cfg, changed).unwrap();
    let (ok, out, err) = reload(&m);
    assert!(ok, "{err}");
    assert!(out.contains("priority: +www/hot"), "{out}");
    assert!(out.contains("flush_interval_ms: 1000 -> 250"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("not applied") && l.contains("memory")),
        "{out}"
    );
    let st = m.stats();
    assert_eq!(st["settings"]["flush_interval_ms"], 250);
    assert_eq!(st["settings"]["dirprio"]["t_normal"], 0.5);
    assert_eq!(priority_dirs(&m), ["www/hot"]);
    // The memory size is what was mounted.
    assert_eq!(st["memory"]["capacity_blocks"], 4096);
}

#[test]
fn sighup_reloads_and_keeps_the_mount() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("tc.toml");
    let m = mount_with(&cfg, BASE, &[]);
    std::fs::write(
        &cfg,
        BASE.replace("www/top", "www/sighup")
            .replace("= 1000", "= 400"),
    )
    .unwrap();
    // SAFETY: kill with a valid signal number on the daemon's pid.
    assert_eq!(unsafe { libc::kill(m.pid(), libc::SIGHUP) }, 0);
    let deadline = Instant::now() + Duration::from_secs(10);
    while settings(&m)["flush_interval_ms"] != 400 {
        assert!(Instant::now() < deadline, "SIGHUP did not reload");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(priority_dirs(&m), ["www/sighup"]);
    assert!(mounted(&m.mnt), "SIGHUP must not stop the mount");
    std::fs::write(m.mnt.join("still-served"), b"x").unwrap();
}

#[test]
fn an_invalid_file_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("tc.toml");
    let m = mount_with(&cfg, BASE, &[]);
    let before = settings(&m);
    // A good change next to a bad value: neither is applied.
    for (bad, key) in [
        (
            "priority = [\"www/new\"]\nflush_interval_ms = 200\nt_normal = 2.0\n",
            "t_normal",
        ),
        (
            "priority = [\"www/new\"]\nflush_interval_ms = 200\nbogus_key = 1\n",
            "bogus_key",
        ),
        (
            "priority = [\"www/new\"]\nflush_interval_ms = 0\n",
            "flush_interval_ms",
        ),
    ] {
        std::fs::write(
            &cfg,
            format!("memory = \"16M\"\npartition = \"dirprio\"\n{bad}"),
        )
        .unwrap();
        let (ok, out, err) = reload(&m);
        assert!(!ok, "an invalid file was accepted: {out}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(s(&cfg)) && err.contains(key), "{err}");
        assert_eq!(settings(&m), before, "{bad}");
    }
}

#[test]
fn flags_given_at_mount_keep_overriding_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("tc.toml");
    let m = mount_with(&cfg, BASE, &["--priority", "from/flag"]);
    assert_eq!(priority_dirs(&m), ["from/flag"]);
    std::fs::write(&cfg, BASE.replace("www/top", "www/other")).unwrap();
    let (ok, out, err) = reload(&m);
    assert!(ok, "{err}");
    assert!(out.contains("changed: nothing"), "{out}");
    assert_eq!(priority_dirs(&m), ["from/flag"]);
}

#[test]
fn remote_threshold_and_timeout_change_live() {
    let mc = LocalMemcached::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("remote.key");
    assert!(tc(&["keygen", s(&key)]).status.success());
    let cfg = dir.path().join("tc.toml");
    let text = |threshold: u32, timeout: u32| {
        format!(
            "memory = \"1M\"\n[[tier]]\nkind = \"remote\"\nservers = \"memcached://{}\"\n\
             key_file = \"{}\"\nthreshold = {threshold}\ntimeout_ms = {timeout}\n",
            mc.addr(),
            s(&key)
        )
    };
    let m = mount_with(&cfg, &text(32, 50), &[]);
    assert_eq!(m.stats()["remote"]["threshold"], 32);
    assert_eq!(settings(&m)["remote"][0]["timeout_ms"], 50);
    std::fs::write(&cfg, text(64, 200)).unwrap();
    let (ok, out, err) = reload(&m);
    assert!(ok, "{err}");
    assert!(!out.contains("not applied"), "{out}");
    assert_eq!(m.stats()["remote"]["threshold"], 64);
    assert_eq!(settings(&m)["remote"][0]["timeout_ms"], 200);
}
