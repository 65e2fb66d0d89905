//! Several threads fill, read, take and invalidate checksummed blocks while versions change
//! under them (and one server is killed halfway): a hit always carries exactly the bytes of
//! the version asked for.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tiercache_core::Class;
use tiercache_tier::StoreExt as _;
use tiercache_tier::{DataTier, Lookup};

const BLOCKS: u64 = 64;

#[test]
fn concurrent_fill_read_take_invalidate_never_return_wrong_bytes() {
    let a = Memcached::start();
    let mut b = Memcached::start();
    let t = Arc::new(tier(vec![a.addr(), b.addr()]));
    let versions: Arc<Vec<AtomicU64>> = Arc::new((0..BLOCKS).map(|_| AtomicU64::new(1)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let hits = Arc::new(AtomicU64::new(0));
    let mut threads = Vec::new();
    for id in 0..4u64 {
        let (t, versions, stop, hits) = (t.clone(), versions.clone(), stop.clone(), hits.clone());
        threads.push(std::thread::spawn(move || {
            let mut rng = rand::rngs::SmallRng::seed_from_u64(id);
            let mut buf = vec![0u8; BS];
            while !stop.load(Ordering::Relaxed) {
                let i = rng.gen_range(0..BLOCKS);
                let k = key(1, i);
                let v = versions[i as usize].load(Ordering::Acquire);
                match rng.gen_range(0..10) {
                    0 if id == 0 => {
                        // A write: new version, invalidate the old copy.
                        versions[i as usize].fetch_add(1, Ordering::AcqRel);
                        t.invalidate(&k);
                    }
                    0..=3 => {
                        let vs = versions.clone();
                        let current = move || vs[i as usize].load(Ordering::Acquire) == v;
                        t.fill(&k, v, Class::NORMAL, &block(&k, v), &current)
                            .expect("fill never errors");
                    }
                    4 => {
                        if let Lookup::Hit { .. } = t.take(&k, v, &mut buf).expect("take") {
                            assert!(buf == block(&k, v), "take: wrong bytes for {i} v{v}");
                            hits.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    _ => {
                        if let Lookup::Hit { .. } = t.read(&k, v, &mut buf).expect("read") {
                            assert!(buf == block(&k, v), "read: wrong bytes for {i} v{v}");
                            hits.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            }
        }));
    }
    let start = Instant::now();
    // Until enough hits before and after the kill (by count, not time: a loaded machine is
    // slower, not different).
    let wait_hits = |n: u64| {
        let deadline = Instant::now() + Duration::from_secs(60);
        while hits.load(Ordering::Relaxed) < n && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    std::thread::sleep(Duration::from_millis(500));
    wait_hits(100);
    b.kill();
    let before = hits.load(Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(500));
    wait_hits(before + 100);
    stop.store(true, Ordering::Relaxed);
    for th in threads {
        th.join().expect("no thread saw wrong bytes");
    }
    let s = t.remote_stats();
    eprintln!("{:?}: {s:?}", start.elapsed());
    let total = hits.load(Ordering::Relaxed);
    assert!(
        before >= 100 && total >= before + 100,
        "the test exercised hits before ({before}) and after the kill ({total}): {s:?}"
    );
    assert_eq!(s.auth_failures, 0);
}
