//! Whatever someone with access to the servers puts under our keys — garbage, a value of
//! another block, another namespace's value, an older value of the same block — is detected,
//! counted and treated as a miss.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use std::time::Duration;
use tiercache_core::Class;
use tiercache_remote::{RemoteKey, RemoteTier, ServerClient};
use tiercache_tier::StoreExt as _;
use tiercache_tier::{DataTier, Lookup, TierKey};

fn raw(addr: &str) -> ServerClient {
    ServerClient::new(
        addr.to_string(),
        addr.parse().unwrap(),
        Duration::from_secs(1),
        1 << 20,
    )
}

fn stored(t: &RemoteTier, k: &TierKey, version: u64) {
    t.fill(k, version, Class::NORMAL, &block(k, version), &yes)
        .unwrap();
    assert!(t.flush(Duration::from_secs(5)));
}

#[test]
fn garbage_under_our_key_fails_authentication() {
    let m = Memcached::start();
    let t = tier(vec![m.addr()]);
    let c = raw(&m.addr());
    let mut buf = vec![0u8; BS];
    for (i, garbage) in [
        vec![0u8; BS + tiercache_remote::VALUE_OVERHEAD],
        b"short".to_vec(),
        Vec::new(),
        (0..BS as u32 + 100).map(|x| x as u8).collect(),
    ]
    .into_iter()
    .enumerate()
    {
        let k = key(1, i as u64);
        stored(&t, &k, 1);
        assert!(c.set(&t.key_name(&k, 1), &garbage).unwrap());
        assert_eq!(
            t.read(&k, 1, &mut buf).unwrap(),
            Lookup::Miss,
            "garbage {i}"
        );
        assert!(!t.contains(&k), "a forged value drops the entry");
        assert_eq!(t.remote_stats().auth_failures, i as u64 + 1);
    }
}

#[test]
fn a_flipped_bit_in_a_real_value_fails_authentication() {
    let m = Memcached::start();
    let t = tier(vec![m.addr()]);
    let c = raw(&m.addr());
    let k = key(2, 0);
    stored(&t, &k, 1);
    let name = t.key_name(&k, 1);
    let mut v = c.get(&name).unwrap().expect("value stored");
    let plain = block(&k, 1);
    assert!(
        !v.windows(64)
            .any(|w| w == &plain[..64] || w == &plain[2048..2112]),
        "the stored value does not contain the plaintext"
    );
    let at = v.len() / 2;
    v[at] ^= 0x40;
    assert!(c.set(&name, &v).unwrap());
    let mut buf = vec![0u8; BS];
    assert_eq!(t.read(&k, 1, &mut buf).unwrap(), Lookup::Miss);
    assert_eq!(t.remote_stats().auth_failures, 1);
}

#[test]
fn another_blocks_value_under_our_key_fails_authentication() {
    let m = Memcached::start();
    let t = tier(vec![m.addr()]);
    let c = raw(&m.addr());
    let (k1, k2) = (key(3, 0), key(3, 1));
    stored(&t, &k1, 1);
    stored(&t, &k2, 1);
    let v1 = c.get(&t.key_name(&k1, 1)).unwrap().unwrap();
    assert!(c.set(&t.key_name(&k2, 1), &v1).unwrap());
    let mut buf = vec![0u8; BS];
    assert_eq!(t.read(&k2, 1, &mut buf).unwrap(), Lookup::Miss);
    assert_eq!(t.remote_stats().auth_failures, 1);
    assert_eq!(
        t.read(&k1, 1, &mut buf).unwrap(),
        Lookup::Hit { dirty: false }
    );
}

#[test]
fn another_namespaces_value_is_detected() {
    let m = Memcached::start();
    let key_bytes = RemoteKey::random();
    let ta = RemoteTier::connect(config(vec![m.addr()], "a", key_bytes.clone())).unwrap();
    let tb = RemoteTier::connect(config(vec![m.addr()], "b", key_bytes)).unwrap();
    let k = key(4, 0);
    assert_ne!(
        ta.key_name(&k, 1),
        tb.key_name(&k, 1),
        "namespaces use other keys"
    );
    stored(&ta, &k, 1);
    stored(&tb, &k, 1);
    let c = raw(&m.addr());
    let va = c.get(&ta.key_name(&k, 1)).unwrap().unwrap();
    assert!(c.set(&tb.key_name(&k, 1), &va).unwrap());
    let mut buf = vec![0u8; BS];
    assert_eq!(tb.read(&k, 1, &mut buf).unwrap(), Lookup::Miss);
    assert_eq!(tb.remote_stats().auth_failures, 1);
    assert_eq!(
        ta.read(&k, 1, &mut buf).unwrap(),
        Lookup::Hit { dirty: false }
    );
    assert_eq!(buf, block(&k, 1));
}

#[test]
fn an_older_store_landing_late_is_a_miss() {
    let m = Memcached::start();
    let t = tier(vec![m.addr()]);
    let c = raw(&m.addr());
    let k = key(5, 0);
    stored(&t, &k, 1);
    let name = t.key_name(&k, 1);
    let old = c.get(&name).unwrap().unwrap();
    // Invalidate and store the same version again: a new store sequence number.
    t.invalidate(&k);
    stored(&t, &k, 1);
    let mut buf = vec![0u8; BS];
    assert_eq!(
        t.read(&k, 1, &mut buf).unwrap(),
        Lookup::Hit { dirty: false }
    );
    // The first store's value arrives late and overwrites the second.
    assert!(c.set(&name, &old).unwrap());
    assert_eq!(t.read(&k, 1, &mut buf).unwrap(), Lookup::Miss);
    let s = t.remote_stats();
    assert_eq!((s.stale_seq, s.auth_failures), (1, 0));
}

#[test]
fn an_evicted_value_is_a_plain_miss() {
    let m = Memcached::start();
    let t = tier(vec![m.addr()]);
    let c = raw(&m.addr());
    let k = key(6, 0);
    stored(&t, &k, 1);
    assert!(c.delete(&t.key_name(&k, 1)).unwrap());
    let mut buf = vec![0u8; BS];
    assert_eq!(t.read(&k, 1, &mut buf).unwrap(), Lookup::Miss);
    assert!(!t.contains(&k));
    let s = t.remote_stats();
    assert_eq!((s.auth_failures, s.errors, s.misses), (0, 0, 1));
}
