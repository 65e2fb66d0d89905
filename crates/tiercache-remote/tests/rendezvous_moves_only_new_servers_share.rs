//! Rendezvous hashing: adding a server to N moves about 1/(N+1) of the keys, all of them to
//! the new server; removing one moves only its keys.
#![allow(clippy::unwrap_used)]
use tiercache_remote::rendezvous_owner;

fn addrs(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("192.168.1.{}:11211", 10 + i))
        .collect()
}

fn key_hash(i: u64) -> u64 {
    // Key hashes come from a keyed BLAKE3; any well-spread 64-bit values do here.
    let h = blake3::hash(&i.to_le_bytes());
    u64::from_le_bytes(h.as_bytes()[..8].try_into().unwrap())
}

#[test]
fn adding_a_server_moves_only_its_share() {
    for n in [1usize, 2, 3, 4, 8] {
        let before = addrs(n);
        let after = addrs(n + 1);
        let b: Vec<&str> = before.iter().map(String::as_str).collect();
        let a: Vec<&str> = after.iter().map(String::as_str).collect();
        let keys = 50_000;
        let mut moved = 0;
        for i in 0..keys {
            let h = key_hash(i);
            let (old, new) = (
                rendezvous_owner(&b, h).unwrap(),
                rendezvous_owner(&a, h).unwrap(),
            );
            if old != new {
                assert_eq!(new, n, "moved to an old server");
                moved += 1;
            }
        }
        let share = moved as f64 / keys as f64;
        let want = 1.0 / (n + 1) as f64;
        assert!(
            (share - want).abs() < 0.02,
            "{n}→{}: {share:.3} vs {want:.3}",
            n + 1
        );
    }
}

#[test]
fn removing_a_server_moves_only_its_keys() {
    let all = addrs(5);
    let without: Vec<&str> = all
        .iter()
        .map(String::as_str)
        .filter(|a| *a != all[2])
        .collect();
    let full: Vec<&str> = all.iter().map(String::as_str).collect();
    for i in 0..20_000 {
        let h = key_hash(i);
        let old = full[rendezvous_owner(&full, h).unwrap()];
        let new = without[rendezvous_owner(&without, h).unwrap()];
        if old != all[2] {
            assert_eq!(old, new, "a key of a remaining server moved");
        }
    }
}
