//! A mount with a remote tier on real memcached processes (loopback): blocks memory dropped
//! come back from the remote tier with the right bytes; a write is never answered with the
//! old remote copy; a server killed mid-run costs speed, not errors or bytes; and the key file
//! is enforced before anything is mounted.
#![allow(clippy::unwrap_used)]

mod support;

use std::os::unix::fs::{FileExt, PermissionsExt};
use support::{mounted, s, tc, Mount};
use tiercache_remote::local::LocalMemcached;

/// Blocks in the test file: four times the memory tier.
const N: u64 = 256;

fn keyfile(dir: &std::path::Path) -> std::path::PathBuf {
    let key = dir.join("remote.key");
    let out = tc(&["keygen", s(&key)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    key
}

/// A memcached server, and a mount with a 256 KiB memory tier over a remote tier on it (plus
/// `extra` flags); the key lives in the returned temp dir.
fn remote_mount(extra: &[&str]) -> (LocalMemcached, Mount, tempfile::TempDir) {
    let mc = LocalMemcached::start().unwrap();
    let keys = tempfile::tempdir().unwrap();
    let key = keyfile(keys.path());
    let url = format!("memcached://{}", mc.addr());
    let mut args = vec![
        "--memory",
        "256K",
        "--remote",
        &url,
        "--remote-key",
        s(&key),
    ];
    args.extend_from_slice(extra);
    let m = Mount::new(&args);
    (mc, m, keys)
}

fn block(i: u64, version: u8) -> Vec<u8> {
    (0..4096u64)
        .map(|j| (i.wrapping_mul(31) ^ j.wrapping_mul(7)) as u8 ^ version)
        .collect()
}

/// 256 blocks through a 256 KiB memory tier (64 blocks): the second random pass finds most
/// of them in the remote tier.
#[test]
fn blocks_memory_dropped_come_back_from_the_remote_tier() {
    let (_mc, m, _keys) = remote_mount(&[]);
    let data: Vec<u8> = (0..N).flat_map(|i| block(i, 0)).collect();
    std::fs::write(m.backing.join("f"), &data).unwrap();
    let f = std::fs::File::open(m.mnt.join("f")).unwrap();
    let order: Vec<u64> = (0..N).map(|i| (i * 37) % N).collect();
    let mut buf = vec![0u8; 4096];
    for &b in &order {
        f.read_exact_at(&mut buf, b * 4096).unwrap();
        assert_eq!(buf, block(b, 0), "block {b}, first pass");
    }
    // Stores are asynchronous: wait until they landed.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while m.stats()["remote"]["stores"].as_u64().unwrap() < N * 3 / 4 {
        assert!(
            std::time::Instant::now() < deadline,
            "{}",
            m.stats()["remote"]
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    for &b in order.iter().rev() {
        f.read_exact_at(&mut buf, b * 4096).unwrap();
        assert_eq!(buf, block(b, 0), "block {b}, second pass");
    }
    let st = m.stats();
    let r = &st["remote"];
    assert!(r["hits"].as_u64().unwrap() >= N / 2, "{r}");
    assert_eq!(r["auth_failures"].as_u64().unwrap(), 0, "{r}");
    assert_eq!(r["threshold"].as_u64().unwrap(), 32, "{r}");
    let tiers = st["tiers"].as_array().unwrap();
    assert!(tiers.iter().any(|t| t["kind"] == "remote"), "{st}");

    // A write through the mount: later reads never see the remote copy of the old bytes.
    let g = std::fs::OpenOptions::new()
        .write(true)
        .open(m.mnt.join("f"))
        .unwrap();
    for b in 0..N {
        g.write_all_at(&block(b, 1), b * 4096).unwrap();
    }
    drop(g);
    for &b in &order {
        f.read_exact_at(&mut buf, b * 4096).unwrap();
        assert_eq!(buf, block(b, 1), "block {b} after the write");
    }
}

#[test]
fn a_server_killed_mid_run_costs_no_errors_and_no_bytes() {
    let (mut mc, m, _keys) = remote_mount(&[]);
    let data: Vec<u8> = (0..N).flat_map(|i| block(i, 3)).collect();
    std::fs::write(m.backing.join("f"), &data).unwrap();
    let f = std::fs::File::open(m.mnt.join("f")).unwrap();
    let mut buf = vec![0u8; 4096];
    for pass in 0..4u64 {
        if pass == 2 {
            mc.kill();
        }
        for i in 0..N {
            let b = (i * 37 + pass) % N;
            f.read_exact_at(&mut buf, b * 4096).unwrap();
            assert_eq!(buf, block(b, 3), "block {b}, pass {pass}");
        }
    }
    let r = m.stats()["remote"].clone();
    assert_eq!(r["servers_up"].as_u64().unwrap(), 0, "{r}");
}

#[test]
fn keygen_makes_an_owner_only_key_and_a_loose_key_mounts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let key = keyfile(dir.path());
    let mode = std::fs::metadata(&key).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let again = tc(&["keygen", s(&key)]);
    assert!(!again.status.success(), "keygen overwrote a key");

    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (backing, mnt) = (dir.path().join("slow"), dir.path().join("fast"));
    std::fs::create_dir_all(&backing).unwrap();
    std::fs::create_dir_all(&mnt).unwrap();
    let out = tc(&[
        "mount",
        s(&backing),
        s(&mnt),
        "--remote",
        "memcached://127.0.0.1:9",
        "--remote-key",
        s(&key),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains(s(&key)), "{err}");
    assert!(!mounted(&mnt));

    let out = tc(&[
        "mount",
        s(&backing),
        s(&mnt),
        "--remote",
        "memcached://127.0.0.1:9",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("--remote-key"), "{err}");
    assert!(!mounted(&mnt));
}

/// `--remote-placement exclusive`: blocks memory evicts are stored remotely (demotions), and
/// come back from there.
#[test]
fn exclusive_remote_tier_takes_what_memory_evicts() {
    let (_mc, m, _keys) = remote_mount(&["--remote-placement", "exclusive"]);
    two_random_passes(&m, 5);
    let st = m.stats();
    let remote = tier_of_kind(&st, "remote");
    assert!(remote["demotions_in"].as_u64().unwrap() > N / 2, "{remote}");
    assert_eq!(remote["fills"].as_u64().unwrap(), 0, "{remote}");
    assert!(
        st["remote"]["hits"].as_u64().unwrap() > N / 4,
        "{}",
        st["remote"]
    );
}

/// memory → test tier (exclusive) → remote (inclusive) → BACKING: the test tier takes
/// memory's evictions, the remote tier stores what BACKING served; every byte right.
#[test]
fn a_remote_tier_below_another_lower_tier() {
    let (_mc, m, _keys) = remote_mount(&["--tier", "test:256K:exclusive"]);
    two_random_passes(&m, 6);
    let st = m.stats();
    let (test, remote) = (tier_of_kind(&st, "test"), tier_of_kind(&st, "remote"));
    assert!(test["demotions_in"].as_u64().unwrap() > 0, "{test}");
    assert!(remote["fills"].as_u64().unwrap() > N / 2, "{remote}");
    assert!(
        test["hits"].as_u64().unwrap() + remote["hits"].as_u64().unwrap() > N / 2,
        "{st}"
    );
}

/// Two passes of random 4 KiB reads over an N-block file (checked), waiting for background
/// stores in between.
fn two_random_passes(m: &Mount, version: u8) {
    let data: Vec<u8> = (0..N).flat_map(|i| block(i, version)).collect();
    std::fs::write(m.backing.join("f"), &data).unwrap();
    let f = std::fs::File::open(m.mnt.join("f")).unwrap();
    let mut buf = vec![0u8; 4096];
    for pass in 0..2u64 {
        for i in 0..N {
            let b = (i * 37 + pass * 11) % N;
            f.read_exact_at(&mut buf, b * 4096).unwrap();
            assert_eq!(buf, block(b, version), "block {b}, pass {pass}");
        }
        wait_for_stores(m);
    }
}

/// Waits (≤ 30 s) until no remote store or demotion is in flight.
fn wait_for_stores(m: &Mount) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while m.stats()["remote"]["pending_stores"].as_u64().unwrap() > 0
        || m.stats()["lower"]["transit_blocks"].as_u64().unwrap() > 0
    {
        assert!(std::time::Instant::now() < deadline, "stores still pending");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn tier_of_kind(st: &serde_json::Value, kind: &str) -> serde_json::Value {
    st["tiers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["kind"] == kind)
        .unwrap()
        .clone()
}

/// `--remote-threshold auto` behind the HDD model: the mount measures seeks, streaming and
/// remote reads and picks `n` from them (stats show the costs it used).
#[test]
fn auto_threshold_is_chosen_from_measured_costs() {
    let (_mc, m, _keys) = remote_mount(&["--emulate", "hdd", "--remote-threshold", "auto"]);
    let data: Vec<u8> = (0..N).flat_map(|i| block(i, 7)).collect();
    std::fs::write(m.backing.join("f"), &data).unwrap();
    std::fs::write(m.backing.join("seq"), vec![1u8; 4 << 20]).unwrap();
    let f = std::fs::File::open(m.mnt.join("f")).unwrap();
    let mut buf = vec![0u8; 4096];
    // Positioning samples (random reads), streaming samples (a scan), remote hits.
    for i in 0..96u64 {
        let b = (i * 37) % N;
        f.read_exact_at(&mut buf, b * 4096).unwrap();
    }
    let g = std::fs::File::open(m.mnt.join("seq")).unwrap();
    let mut big = vec![0u8; 128 << 10];
    for i in 0..32u64 {
        g.read_exact_at(&mut big, i * (128 << 10)).unwrap();
    }
    wait_for_stores(&m);
    for i in 0..96u64 {
        let b = (i * 37) % N;
        f.read_exact_at(&mut buf, b * 4096).unwrap();
        assert_eq!(buf, block(b, 7));
    }
    let r = m.stats()["remote"].clone();
    assert_eq!(r["threshold_auto"], true, "{r}");
    let n = r["threshold"].as_u64().unwrap();
    assert!(r["hits"].as_u64().unwrap() > 0, "{r}");
    // n is the one the costs it was chosen from give (µs round trip: ±1).
    let c = &r["threshold_costs_us"];
    assert!(c.is_object(), "n was never chosen: {r}");
    let want = tiercache_core::seqrun::choose_threshold(&tiercache_core::seqrun::Costs {
        backing_seek: c["backing_seek_us"].as_f64().unwrap() / 1e6,
        backing_block: c["backing_block_us"].as_f64().unwrap() / 1e6,
        tier_block: c["tier_block_us"].as_f64().unwrap() / 1e6,
    });
    assert!(
        n.abs_diff(want) <= 1,
        "threshold {n}, the measured costs give {want}: {r}"
    );
    // The HDD model's positioning (12 ms) was measured, not assumed.
    assert!(c["backing_seek_us"].as_f64().unwrap() > 6000.0, "{r}");
}

/// memory → a tier that takes write-back → remote → BACKING: writes go back into the middle
/// tier and are cleaned to BACKING; the remote tier only ever holds clean blocks, and every
/// byte read is the newest.
#[test]
fn a_remote_tier_below_a_write_back_tier_holds_clean_data_only() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("tc.toml");
    std::fs::write(
        &cfg,
        "flush_interval_ms = 50\ndirty_expire_ms = 100\n\n[[tier]]\nkind = \"test\"\n\
         size = \"512K\"\nplacement = \"exclusive\"\naccepts_dirty = true\n",
    )
    .unwrap();
    let (_mc, m, _keys) = remote_mount(&["--config", s(&cfg)]);
    middle_tier_takes_the_writes_and_remote_stays_clean(&m, "test");
}

/// The same with the SSD tier in the middle (memory → flash → remote → BACKING).
#[test]
fn a_remote_tier_below_the_ssd_tier_holds_clean_data_only() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("tc.toml");
    std::fs::write(&cfg, "flush_interval_ms = 50\ndirty_expire_ms = 100\n").unwrap();
    let dev = format!("{}:16M", s(&dir.path().join("ssd.cache")));
    let (_mc, m, _keys) = remote_mount(&[
        "--config",
        s(&cfg),
        "--flash",
        &dev,
        "--flash-placement",
        "exclusive",
    ]);
    middle_tier_takes_the_writes_and_remote_stays_clean(&m, "flash");
    let st = m.stats();
    let kinds: Vec<&str> = st["tiers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["memory", "flash", "remote"]);
}

fn middle_tier_takes_the_writes_and_remote_stays_clean(m: &Mount, middle: &str) {
    two_random_passes(m, 8);
    // Rewrite every block through the mount, then read everything back twice.
    let g = std::fs::OpenOptions::new()
        .write(true)
        .open(m.mnt.join("f"))
        .unwrap();
    for i in 0..N {
        let b = (i * 37) % N;
        g.write_all_at(&block(b, 9), b * 4096).unwrap();
    }
    drop(g);
    let f = std::fs::File::open(m.mnt.join("f")).unwrap();
    let mut buf = vec![0u8; 4096];
    for pass in 0..2u64 {
        for i in 0..N {
            let b = (i * 41 + pass) % N;
            f.read_exact_at(&mut buf, b * 4096).unwrap();
            assert_eq!(buf, block(b, 9), "block {b} after the rewrite, pass {pass}");
        }
    }
    let out = tc(&["flush", s(&m.mnt)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let want: Vec<u8> = (0..N).flat_map(|i| block(i, 9)).collect();
    assert!(
        std::fs::read(m.backing.join("f")).unwrap() == want,
        "BACKING after flush"
    );
    let st = m.stats();
    let (mid, remote) = (tier_of_kind(&st, middle), tier_of_kind(&st, "remote"));
    assert!(mid["writebacks_in"].as_u64().unwrap() > 0, "{mid}");
    assert_eq!(remote["writebacks_in"].as_u64().unwrap(), 0, "{remote}");
    assert_eq!(remote["dirty_blocks"].as_u64().unwrap(), 0, "{remote}");
    assert!(
        st["remote"]["invalidations"].as_u64().unwrap() > 0,
        "{}",
        st["remote"]
    );
}

/// `--metrics`: every tier and the remote tier's health are exported.
#[test]
fn metrics_show_every_tier_and_the_remote_servers() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    drop(listener);
    let (_mc, m, _keys) = remote_mount(&["--metrics", &addr]);
    two_random_passes(&m, 10);
    let mut conn = std::net::TcpStream::connect(&addr).unwrap();
    conn.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut body = String::new();
    conn.read_to_string(&mut body).unwrap();
    for want in [
        "tiercache_remote_servers_up{tier=\"remote\"} 1",
        "tiercache_remote_threshold_blocks{tier=\"remote\"} 32",
        "# TYPE tiercache_tier_hits_total counter",
        "tiercache_tier_used_blocks{tier=\"memory\",kind=\"memory\"}",
    ] {
        assert!(body.contains(want), "{want} missing:\n{body}");
    }
    let hits = body
        .lines()
        .find(|l| l.starts_with("tiercache_tier_hits_total{tier=\"remote\",kind=\"remote\"}"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap();
    assert!(hits > 0.0, "{body}");
}
