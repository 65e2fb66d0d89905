//! `tiercache mount` for real (root, /dev/fuse): bad input leaves nothing mounted, fsync'ed data
//! survives kill -9, clean unmount and SIGTERM write everything back, stats/priority/flush over
//! the control socket, config files, --trace-out replayed by `sim`, --metrics.
#![allow(clippy::unwrap_used)]

mod support;

use support::{mounted, s, tc, Mount};

use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

fn wait_gone(pid: i32) {
    let t = Instant::now();
    // SAFETY: signal 0 only probes for existence.
    while unsafe { libc::kill(pid, 0) } == 0 {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "daemon {pid} did not exit"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn bad_input_is_one_line_and_mounts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let backing = dir.path().join("slow");
    let mnt = dir.path().join("fast");
    let file = dir.path().join("file");
    let full = dir.path().join("full");
    std::fs::create_dir_all(&backing).unwrap();
    std::fs::create_dir_all(&mnt).unwrap();
    std::fs::create_dir_all(full.join("x")).unwrap();
    std::fs::write(&file, b"x").unwrap();
    let inside = backing.join("inner");
    std::fs::create_dir_all(&inside).unwrap();
    let cfg = dir.path().join("bad.toml");
    std::fs::write(&cfg, "memory = \"64M\"\n\ncolour = \"red\"\n").unwrap();
    let missing = dir.path().join("missing");
    // (Argument errors keep clap's own multi-line message: `cli_errors.rs`.)
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["mount", s(&missing), s(&mnt)], "BACKING"),
        (vec!["mount", s(&file), s(&mnt)], "file"),
        (vec!["mount", s(&backing), s(&full)], "full"),
        (vec!["mount", s(&backing), s(&inside)], "inner"),
        (
            vec!["mount", s(&backing), s(&mnt), "--memory", "12Q"],
            "--memory",
        ),
        (
            vec!["mount", s(&backing), s(&mnt), "--block-size", "3000"],
            "--block-size",
        ),
        (
            vec!["mount", s(&backing), s(&mnt), "--t-normal", "2"],
            "t-normal",
        ),
        (
            vec!["mount", s(&backing), s(&mnt), "--emulate", "floppy"],
            "--emulate",
        ),
        (
            vec!["mount", s(&backing), s(&mnt), "--config", s(&cfg)],
            "bad.toml:3",
        ),
        (
            vec!["mount", s(&backing), s(&mnt), "--metrics", "nonsense"],
            "--metrics",
        ),
    ];
    for (args, needle) in cases {
        let out = tc(&args);
        assert!(!out.status.success(), "{args:?} should fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(
            !mounted(&mnt) && !mounted(&full) && !mounted(&inside),
            "{args:?} left a mount"
        );
    }
    // A busy mount point: the second mount is refused and the first keeps working.
    let m = Mount::new(&["--memory", "8M"]);
    let out = tc(&["mount", s(&m.backing), s(&m.mnt)]);
    assert!(!out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr)
            .trim_end()
            .lines()
            .count(),
        1
    );
    std::fs::write(m.mnt.join("still"), b"ok").unwrap();
}

#[test]
fn fsynced_data_survives_kill_9_and_force_unmount_clears_the_mount() {
    let m = Mount::new(&["--memory", "8M"]);
    let payload: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    {
        let mut f = std::fs::File::create(m.mnt.join("durable.bin")).unwrap();
        f.write_all(&payload).unwrap();
        f.sync_all().unwrap();
        // Not fsynced: may be lost, must not corrupt the fsynced bytes.
        f.write_at(b"tail", payload.len() as u64).unwrap();
    }
    let pid = m.pid();
    // SAFETY: killing the daemon we started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    wait_gone(pid);
    let on_disk = std::fs::read(m.backing.join("durable.bin")).unwrap();
    assert!(on_disk.len() >= payload.len());
    assert_eq!(&on_disk[..payload.len()], &payload[..]);
    let out = tc(&["unmount", "--force", s(&m.mnt)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!mounted(&m.mnt));
}

#[test]
fn clean_unmount_and_sigterm_write_everything_back() {
    let m = Mount::new(&["--memory", "8M"]);
    let data: Vec<u8> = (0..100_000u32).map(|i| (i % 253) as u8).collect();
    std::fs::write(m.mnt.join("a.bin"), &data).unwrap();
    let out = tc(&["unmount", s(&m.mnt)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!mounted(&m.mnt));
    assert_eq!(std::fs::read(m.backing.join("a.bin")).unwrap(), data);

    let m = Mount::new(&["--memory", "8M"]);
    std::fs::write(m.mnt.join("b.bin"), &data[..5000]).unwrap();
    let pid = m.pid();
    // SAFETY: signalling the daemon we started.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    wait_gone(pid);
    assert_eq!(
        std::fs::read(m.backing.join("b.bin")).unwrap(),
        &data[..5000]
    );
    assert!(!mounted(&m.mnt));
}

#[test]
fn stats_json_has_the_contracted_keys() {
    let m = Mount::new(&["--memory", "16M", "--emulate", "ssd"]);
    std::fs::write(m.mnt.join("x"), vec![1u8; 50_000]).unwrap();
    let _ = std::fs::read(m.mnt.join("x")).unwrap();
    let v = m.stats();
    for path in [
        "/memory/capacity_blocks",
        "/memory/used_blocks",
        "/memory/dirty_blocks",
        "/memory/s_target",
        "/memory/s_cur",
        "/memory/pools/protected/blocks",
        "/memory/pools/protected/hits",
        "/memory/pools/protected/misses",
        "/memory/pools/normal/blocks",
        "/memory/pools/normal/hits",
        "/memory/pools/normal/misses",
        "/classes/priority/hits",
        "/classes/priority/misses",
        "/classes/normal/hits",
        "/classes/normal/misses",
        "/backing/reads",
        "/backing/writes",
        "/backing/bytes_read",
        "/backing/bytes_written",
        "/pid",
    ] {
        assert!(
            v.pointer(path).is_some_and(|x| !x.is_null()),
            "missing {path} in {v}"
        );
    }
    assert_eq!(v["memory"]["capacity_blocks"], 4096);
    assert!(
        v["emulation"].as_str().unwrap().contains("MODEL"),
        "emulation must be labelled: {v}"
    );
    let out = tc(&["flush", s(&m.mnt)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(m.stats()["memory"]["dirty_blocks"], 0);
    assert_eq!(
        std::fs::read(m.backing.join("x")).unwrap(),
        vec![1u8; 50_000]
    );
}

fn read_all(p: &Path) {
    let _ = std::fs::read(p).unwrap();
}

/// Small memory tier; priority files read repeatedly while a larger normal tree is scanned.
/// The daemon's pools are what is measured, so the kernel page cache must not serve the
/// priority files' hits (`--kernel-cache off`).
fn priority_hit_ratio(partition: &str) -> f64 {
    let m = Mount::new(&[
        "--memory",
        "2M",
        "--partition",
        partition,
        "--priority",
        "hot",
        "--kernel-cache",
        "off",
    ]);
    std::fs::create_dir_all(m.backing.join("hot")).unwrap();
    std::fs::create_dir_all(m.backing.join("bulk")).unwrap();
    for i in 0..8 {
        std::fs::write(m.backing.join(format!("hot/{i}")), vec![i as u8; 96 << 10]).unwrap();
    }
    for i in 0..16 {
        std::fs::write(
            m.backing.join(format!("bulk/{i}")),
            vec![i as u8; 128 << 10],
        )
        .unwrap();
    }
    // 192 priority blocks, then 512 bulk blocks per round through a 512-block tier: plain LRU
    // loses every priority block each round.
    for _ in 0..20 {
        for i in 0..8 {
            read_all(&m.mnt.join(format!("hot/{i}")));
        }
        for i in 0..16 {
            read_all(&m.mnt.join(format!("bulk/{i}")));
        }
    }
    let v = m.stats();
    let p = &v["classes"]["priority"];
    let (h, mi) = (p["hits"].as_f64().unwrap(), p["misses"].as_f64().unwrap());
    assert!(h + mi > 0.0, "no priority accesses counted: {v}");
    h / (h + mi)
}

#[test]
fn priority_directories_stay_cached_with_dirprio() {
    let dirprio = priority_hit_ratio("dirprio");
    let none = priority_hit_ratio("none");
    assert!(dirprio >= 0.9, "dirprio priority hit ratio {dirprio}");
    assert!(none < dirprio - 0.3, "none {none} vs dirprio {dirprio}");
}

#[test]
fn runtime_priority_changes_reclassify_cached_blocks() {
    let m = Mount::new(&["--memory", "8M"]);
    std::fs::create_dir_all(m.mnt.join("later")).unwrap();
    std::fs::write(m.mnt.join("later/f"), vec![3u8; 64 << 10]).unwrap();
    read_all(&m.mnt.join("later/f"));
    assert_eq!(m.stats()["memory"]["pools"]["protected"]["blocks"], 0);
    let out = tc(&["priority", "add", s(&m.mnt), "later"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(m.stats()["memory"]["pools"]["protected"]["blocks"], 16);
    let list = tc(&["priority", "list", s(&m.mnt)]);
    assert_eq!(String::from_utf8_lossy(&list.stdout).trim(), "later");
    let out = tc(&[
        "priority",
        "add",
        s(&m.mnt),
        &format!("{}/deep", s(&m.mnt)),
        "--recursive",
    ]);
    assert!(out.status.success());
    let out = tc(&["priority", "remove", s(&m.mnt), "later"]);
    assert!(out.status.success());
    assert_eq!(m.stats()["memory"]["pools"]["protected"]["blocks"], 0);
    let out = tc(&["priority", "remove", s(&m.mnt), "never"]);
    assert!(!out.status.success());
    let out = tc(&["priority", "add", s(&m.mnt), "/etc"]);
    assert!(
        !out.status.success(),
        "a directory outside the mount is refused"
    );
}

#[test]
fn config_file_applies_and_flags_override_it() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("tc.toml");
    std::fs::write(
        &cfg,
        "memory = \"8M\"\npartition = \"basic\"\npriority = [\"hot\"]\n",
    )
    .unwrap();
    let m = Mount::new(&["--config", s(&cfg)]);
    let v = m.stats();
    assert_eq!(v["memory"]["capacity_blocks"], 2048);
    assert_eq!(v["memory"]["partition"], "basic");
    drop(m);
    let m = Mount::new(&["--config", s(&cfg), "--memory", "4M"]);
    assert_eq!(m.stats()["memory"]["capacity_blocks"], 1024);
}

#[test]
fn trace_out_is_replayed_by_sim() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.csv");
    let m = Mount::new(&[
        "--memory",
        "8M",
        "--trace-out",
        s(&trace),
        "--priority",
        "hot",
    ]);
    std::fs::create_dir_all(m.mnt.join("hot")).unwrap();
    std::fs::write(m.mnt.join("hot/a"), vec![1u8; 40_000]).unwrap();
    std::fs::write(m.mnt.join("b"), vec![2u8; 40_000]).unwrap();
    for _ in 0..3 {
        read_all(&m.mnt.join("hot/a"));
        read_all(&m.mnt.join("b"));
    }
    let out = tc(&["unmount", s(&m.mnt)]);
    assert!(out.status.success());
    let out = tc(&[
        "sim",
        "--trace",
        s(&trace),
        "--format",
        "csv",
        "--tier",
        "mem:100:lru",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["requests"].as_u64().unwrap() >= 60, "{v}");
    assert!(
        v["classes"]["priority"]["requests"].as_u64().unwrap() > 0,
        "{v}"
    );
    assert!(
        v["classes"]["normal"]["requests"].as_u64().unwrap() > 0,
        "{v}"
    );
}

#[test]
fn metrics_are_served_in_prometheus_format() {
    use std::io::Read;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    drop(listener);
    let m = Mount::new(&["--memory", "8M", "--metrics", &addr]);
    std::fs::write(m.mnt.join("x"), b"data").unwrap();
    let mut conn = std::net::TcpStream::connect(&addr).unwrap();
    conn.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut body = String::new();
    conn.read_to_string(&mut body).unwrap();
    assert!(body.starts_with("HTTP/1.1 200"), "{body}");
    assert!(
        body.contains("tiercache_memory_capacity_blocks 2048"),
        "{body}"
    );
    assert!(
        body.contains("# TYPE tiercache_pool_hits_total counter"),
        "{body}"
    );
}
