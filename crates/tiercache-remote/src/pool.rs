//! The server pool: rendezvous (highest-random-weight) hashing over the servers, and each
//! server's health (ejected after consecutive failures, probed again later).
//!
//! Rendezvous hashing scores every (server, key) pair and picks the highest score among the
//! servers that are up. A server's score depends only on its own address and the key, so
//! adding a server moves exactly the keys it now wins (about 1/(N+1) of them) and only to it;
//! an ejected server's keys spread over the others and come back when it does.

use crate::client::ServerClient;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// A 64-bit seed for a server's address (stable across runs and processes).
pub fn server_seed(addr: &str) -> u64 {
    let h = blake3::hash(addr.as_bytes());
    let mut b = [0u8; 8];
    b.copy_from_slice(&h.as_bytes()[..8]);
    u64::from_le_bytes(b)
}

/// The rendezvous weight of a server (by seed) for a key (by 64-bit hash).
pub fn score(seed: u64, key_hash: u64) -> u64 {
    // splitmix64's finaliser over the pair: a good 64-bit mix of both inputs.
    let mut z = seed ^ key_hash.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Which of `addrs` owns `key_hash` when all are up (rendezvous hashing); `None` if empty.
pub fn rendezvous_owner(addrs: &[&str], key_hash: u64) -> Option<usize> {
    addrs
        .iter()
        .enumerate()
        .max_by_key(|(i, a)| (score(server_seed(a), key_hash), usize::MAX - i))
        .map(|(i, _)| i)
}

/// One server: its client and health.
#[derive(Debug)]
pub struct Server {
    pub client: ServerClient,
    seed: u64,
    /// Consecutive failures since the last success.
    fails: AtomicU32,
    /// Ejected: reads and stores skip it until a probe succeeds.
    down: AtomicBool,
    /// When an ejected server is probed next.
    retry_at: Mutex<Instant>,
}

/// The servers of one tier.
#[derive(Debug)]
pub struct Pool {
    servers: Vec<Server>,
    eject_after: u32,
    retry_after: Duration,
}

impl Pool {
    /// A pool of `clients`, all up until they fail.
    pub fn new(clients: Vec<ServerClient>, eject_after: u32, retry_after: Duration) -> Self {
        let servers = clients
            .into_iter()
            .map(|client| Server {
                seed: server_seed(client.name()),
                client,
                fails: AtomicU32::new(0),
                down: AtomicBool::new(false),
                retry_at: Mutex::new(Instant::now()),
            })
            .collect();
        Self {
            servers,
            eject_after: eject_after.max(1),
            retry_after,
        }
    }

    pub fn len(&self) -> usize {
        self.servers.len()
    }

    pub fn server(&self, i: usize) -> Option<&Server> {
        self.servers.get(i)
    }

    pub fn is_up(&self, i: usize) -> bool {
        self.servers
            .get(i)
            .is_some_and(|s| !s.down.load(Ordering::Acquire))
    }

    pub fn servers_up(&self) -> usize {
        (0..self.servers.len()).filter(|&i| self.is_up(i)).count()
    }

    /// The highest-ranked server that is up for `key_hash`.
    pub fn pick(&self, key_hash: u64) -> Option<usize> {
        self.servers
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.down.load(Ordering::Acquire))
            .max_by_key(|(i, s)| (score(s.seed, key_hash), usize::MAX - i))
            .map(|(i, _)| i)
    }

    /// A request to server `i` worked.
    pub fn success(&self, i: usize) {
        if let Some(s) = self.servers.get(i) {
            s.fails.store(0, Ordering::Relaxed);
            if s.down.swap(false, Ordering::AcqRel) {
                log::info!("memcached {}: back up", s.client.name());
            }
        }
    }

    /// A request to server `i` failed or timed out: ejected after `eject_after` in a row.
    pub fn failure(&self, i: usize) {
        let Some(s) = self.servers.get(i) else {
            return;
        };
        let n = s.fails.fetch_add(1, Ordering::Relaxed).saturating_add(1);
        if n >= self.eject_after {
            self.eject(i);
        }
    }

    /// Marks server `i` down until a probe after `retry_after` succeeds.
    pub fn eject(&self, i: usize) {
        let Some(s) = self.servers.get(i) else {
            return;
        };
        *s.retry_at.lock().unwrap_or_else(PoisonError::into_inner) =
            Instant::now() + self.retry_after;
        if !s.down.swap(true, Ordering::AcqRel) {
            log::warn!(
                "memcached {}: ejected after {} consecutive failures; probing again in {:?}",
                s.client.name(),
                s.fails.load(Ordering::Relaxed),
                self.retry_after
            );
        }
        // Idle connections to a failing server are suspect.
        s.client.clear_idle();
    }

    /// Probes every ejected server whose retry time has come (`mn`); a server that answers is
    /// up again. Called from the background worker, never from the request path. Returns as
    /// soon as `stop` is set (checked before each probe: a probe may take one timeout).
    pub fn probe_due(&self, stop: &AtomicBool) {
        let now = Instant::now();
        for (i, s) in self.servers.iter().enumerate() {
            if stop.load(Ordering::Acquire) {
                return;
            }
            if !s.down.load(Ordering::Acquire) {
                continue;
            }
            let due = *s.retry_at.lock().unwrap_or_else(PoisonError::into_inner) <= now;
            if !due {
                continue;
            }
            s.client.clear_idle();
            match s.client.noop() {
                Ok(()) => self.success(i),
                Err(e) => {
                    log::debug!("memcached {}: probe failed: {e}", s.client.name());
                    *s.retry_at.lock().unwrap_or_else(PoisonError::into_inner) =
                        Instant::now() + self.retry_after;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addrs(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("10.0.0.{}:11211", i + 1)).collect()
    }

    #[test]
    fn adding_a_server_moves_only_its_share_and_only_to_it() {
        for n in 1..=6 {
            let before = addrs(n);
            let after = addrs(n + 1);
            let b: Vec<&str> = before.iter().map(String::as_str).collect();
            let a: Vec<&str> = after.iter().map(String::as_str).collect();
            let keys = 60_000u64;
            let mut moved = 0u64;
            for k in 0..keys {
                let h = score(0x1234_5678, k); // any spread of key hashes
                let old = rendezvous_owner(&b, h).unwrap();
                let new = rendezvous_owner(&a, h).unwrap();
                if old != new {
                    assert_eq!(new, n, "a key moved to an old server");
                    moved += 1;
                }
            }
            let share = moved as f64 / keys as f64;
            let want = 1.0 / (n + 1) as f64;
            assert!(
                (share - want).abs() < 0.02,
                "{n}→{}: moved {share:.3}, expected about {want:.3}",
                n + 1
            );
        }
    }

    #[test]
    fn ejection_and_return() {
        let clients = addrs(2)
            .into_iter()
            .map(|a| {
                ServerClient::new(
                    a.clone(),
                    a.parse().unwrap(),
                    Duration::from_millis(10),
                    100,
                )
            })
            .collect();
        let pool = Pool::new(clients, 2, Duration::from_secs(60));
        assert_eq!(pool.servers_up(), 2);
        pool.failure(0);
        assert!(pool.is_up(0), "one failure is not enough");
        pool.success(0);
        pool.failure(0);
        assert!(pool.is_up(0), "a success resets the count");
        pool.failure(0);
        assert!(!pool.is_up(0));
        assert_eq!(pool.servers_up(), 1);
        for k in 0..100 {
            assert_eq!(pool.pick(k), Some(1));
        }
        pool.success(0);
        assert!(pool.is_up(0));
    }
}
