//! There was no way to see every tiercache mount of a machine at once: `tiercache list` shows
//! each with BACKING, pid, memory, tiers, dirty bytes and state, and a mount whose daemon does
//! not answer is listed as such instead of failing the list.
#![allow(clippy::unwrap_used)]

mod support;

use std::time::{Duration, Instant};
use support::{s, tc, Mount};

fn listed(v: &serde_json::Value, m: &Mount) -> serde_json::Value {
    let mp = std::fs::canonicalize(&m.mnt).unwrap();
    v["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["mountpoint"] == s(&mp))
        .cloned()
        .unwrap_or_else(|| panic!("{} not listed: {v}", mp.display()))
}

#[test]
fn two_mounts_are_listed_and_a_stopped_daemon_does_not_fail_the_list() {
    let a = Mount::new(&["--memory", "32M"]);
    let b = Mount::new(&["--memory", "16M", "--block-size", "8K", "--tier", "test:8M"]);
    std::fs::write(a.mnt.join("x"), vec![7u8; 100_000]).unwrap();
    let v = support::json_of(&["list", "--json"], &[]);
    let (ra, rb) = (listed(&v, &a), listed(&v, &b));
    let backing_a = std::fs::canonicalize(&a.backing).unwrap();
    assert_eq!(ra["backing"], s(&backing_a));
    assert_eq!(ra["state"], "serving");
    assert_eq!(ra["pid"], a.pid());
    assert_eq!(ra["memory_bytes"], 32 << 20);
    assert!(ra["dirty_bytes"].as_u64().unwrap() >= 100_000, "{ra}");
    assert_eq!(ra["tiers"][0]["name"], "memory");
    assert_eq!(rb["block_size"], 8192);
    assert_eq!(rb["tiers"][1]["kind"], "test", "{rb}");
    assert_eq!(rb["tiers"][1]["capacity_bytes"], 8 << 20);
    let text = tc(&["list"]);
    let out = String::from_utf8_lossy(&text.stdout);
    assert!(out.starts_with("MOUNTPOINT"), "{out}");
    assert!(
        out.lines().any(
            |l| l.starts_with(s(&std::fs::canonicalize(&b.mnt).unwrap()))
                && l.contains("test 8M")
                && l.ends_with("serving")
        ),
        "{out}"
    );
    // A daemon that does not answer (stopped): the list still comes, with that state.
    let pid = b.pid();
    // SAFETY: stops (and below resumes) the daemon this test started.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let start = Instant::now();
    let out = tc(&["list", "--json"]);
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(start.elapsed() < Duration::from_secs(20));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rb = listed(&v, &b);
    assert_eq!(rb["state"], "not responding", "{rb}");
    assert!(
        rb["error"]
            .as_str()
            .unwrap()
            .contains("no answer within 2 s"),
        "{rb}"
    );
    assert_eq!(rb["pid"], pid);
    assert_eq!(listed(&v, &a)["state"], "serving");
}
