//! Test helpers: real memcached processes on loopback ports, a delaying TCP proxy, tier
//! builders and checksummed blocks.
#![allow(dead_code, clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tiercache_remote::local::LocalMemcached;
use tiercache_remote::{RemoteConfig, RemoteKey, RemoteTier};
use tiercache_tier::{FileKey, TierKey};

pub const BS: usize = 4096;

/// A free loopback port.
pub fn free_port() -> u16 {
    tiercache_remote::local::free_port().unwrap()
}

/// A memcached on a loopback port (see [`tiercache_remote::local`]); panics when it cannot
/// start, saying what to install.
#[derive(Debug)]
pub struct Memcached(pub LocalMemcached);

impl Memcached {
    pub fn start() -> Self {
        Memcached(LocalMemcached::start().unwrap_or_else(|e| panic!("{e}")))
    }
    pub fn start_on(port: u16) -> Self {
        Memcached(LocalMemcached::start_on(port).unwrap_or_else(|e| panic!("{e}")))
    }
}

impl std::ops::Deref for Memcached {
    type Target = LocalMemcached;
    fn deref(&self) -> &LocalMemcached {
        &self.0
    }
}

impl std::ops::DerefMut for Memcached {
    fn deref_mut(&mut self) -> &mut LocalMemcached {
        &mut self.0
    }
}

/// A TCP proxy to `target` that delays every chunk of the server's replies by `delay_ms`
/// (changeable while running).
#[derive(Debug)]
pub struct SlowProxy {
    pub port: u16,
    pub delay_ms: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
}

impl SlowProxy {
    pub fn start(target: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let delay_ms = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (d, s, cs) = (delay_ms.clone(), stop.clone(), conns.clone());
        let accept = std::thread::spawn(move || {
            while !s.load(Ordering::Acquire) {
                match listener.accept() {
                    Ok((client, _)) => {
                        client.set_nonblocking(false).unwrap();
                        let Ok(server) = TcpStream::connect(&target) else {
                            continue;
                        };
                        let mut list = cs.lock().unwrap();
                        list.push(client.try_clone().unwrap());
                        list.push(server.try_clone().unwrap());
                        drop(list);
                        pipe(
                            client.try_clone().unwrap(),
                            server.try_clone().unwrap(),
                            None,
                        );
                        pipe(server, client, Some(d.clone()));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        SlowProxy {
            port,
            delay_ms,
            stop,
            accept: Some(accept),
            conns,
        }
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn set_delay(&self, d: Duration) {
        self.delay_ms.store(d.as_millis() as u64, Ordering::Release);
    }
}

fn pipe(mut from: TcpStream, mut to: TcpStream, delay: Option<Arc<AtomicU64>>) {
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if let Some(d) = &delay {
                let ms = d.load(Ordering::Acquire);
                if ms > 0 {
                    std::thread::sleep(Duration::from_millis(ms));
                }
            }
            if to.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Both);
        let _ = from.shutdown(Shutdown::Both);
    });
}

impl Drop for SlowProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(a) = self.accept.take() {
            let _ = a.join();
        }
        for c in self.conns.lock().unwrap().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
    }
}

/// A config for `servers` with test-friendly timings: a 1 s timeout (the suite runs tests in
/// parallel on a loaded machine; tests about timeouts set their own) and a 200 ms retry.
pub fn config(servers: Vec<String>, namespace: &str, key: RemoteKey) -> RemoteConfig {
    let mut cfg = RemoteConfig::new("remote", servers, key);
    cfg.timeout = Duration::from_secs(1);
    cfg.namespace = namespace.to_string();
    cfg.block_size = BS;
    cfg.capacity_blocks = Some(100_000);
    cfg.retry_after = Duration::from_millis(200);
    cfg
}

pub fn tier(servers: Vec<String>) -> RemoteTier {
    RemoteTier::connect(config(servers, "t", RemoteKey::random())).unwrap()
}

pub fn file(ino: u64) -> FileKey {
    FileKey {
        dev: 7,
        ino,
        birth: 1_700_000_000,
    }
}

pub fn key(ino: u64, block: u64) -> TierKey {
    TierKey::new(file(ino), block)
}

/// Deterministic content of (key, version): every byte depends on both.
pub fn block(key: &TierKey, version: u64) -> Vec<u8> {
    let mut x =
        (key.file.ino ^ (key.block.0 << 20) ^ version.wrapping_mul(0x9E37_79B9_7F4A_7C15)) | 1;
    (0..BS)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

pub fn yes() -> bool {
    true
}

/// Polls `f` until it holds or `timeout` passes.
pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A fake memcached on loopback: answers each request (the bytes read until `request_ends`
/// says the request is complete) with the next canned reply, and closes when they run out.
/// Returns its address and the number of connections it accepted.
pub fn fake_server(
    replies: Vec<&'static [u8]>,
    request_ends: fn(&[u8]) -> bool,
) -> (String, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let accepts = Arc::new(AtomicUsize::new(0));
    let a = accepts.clone();
    std::thread::spawn(move || {
        let mut replies = replies.into_iter();
        for stream in l.incoming() {
            let Ok(mut s) = stream else { return };
            a.fetch_add(1, Ordering::SeqCst);
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            loop {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
                if request_ends(&got) {
                    got.clear();
                    let Some(r) = replies.next() else { return };
                    if s.write_all(r).is_err() {
                        break;
                    }
                }
            }
        }
    });
    (addr, accepts)
}
