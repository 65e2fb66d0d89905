//! [`EmulatedBacking`]: a latency MODEL of a slow disk, wrapped around a real device, for
//! `--emulate hdd|ssd`. It does not measure anything: it computes how long a request would take
//! on the modelled device and makes the request take that long.
//!
//! Model (one disk head, requests serialized):
//! - a request that does not start where the previous request on this device ended (same file,
//!   next byte) pays `seek + rotation` (counted as one seek);
//! - every request pays `bytes / bandwidth` transfer time;
//! - `sync` and `set_len` pay nothing and do not move the head (a simplification).
//!
//! A request takes its modelled time, not the model's time plus the real device's: the inner
//! I/O runs first and only the rest of the modelled time is slept. Otherwise the same model
//! would charge more when the real device underneath is slower, e.g. when BACKING's pages are
//! no longer in the kernel page cache (`--backing-cache drop`), and figures measured through the
//! model would depend on the host's page cache instead of on the cache under test. A real
//! device slower than the model is not hidden: the request then takes the real time
//! (`slept_secs` stays below `modelled_secs` by what the real device ate).
//!
//! Invariant: the head lock is held across the sleep and the inner I/O, so modelled requests
//! never overlap, like a single actuator.

use super::BackingIo;
use serde::Serialize;
use std::fmt;
use std::fs::File;
use std::io;
use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tiercache_core::{FileId, ParseError};

/// Parameters of the modelled device. All fields are public so each can be overridden.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceModel {
    /// Label used in logs and stats (`hdd`, `ssd`, or anything custom).
    pub name: String,
    /// Paid by a non-contiguous request.
    pub seek: Duration,
    /// Paid with the seek (average rotational latency).
    pub rotation: Duration,
    /// Transfer rate in bytes per second.
    pub bandwidth: u64,
}

impl DeviceModel {
    /// A 7200 rpm disk: 8 ms seek + 4 ms rotation, 150 MB/s.
    pub fn hdd() -> Self {
        Self {
            name: "hdd".into(),
            seek: Duration::from_millis(8),
            rotation: Duration::from_millis(4),
            bandwidth: 150_000_000,
        }
    }

    /// A SATA SSD: 0.08 ms access, 500 MB/s.
    pub fn ssd() -> Self {
        Self {
            name: "ssd".into(),
            seek: Duration::from_micros(80),
            rotation: Duration::ZERO,
            bandwidth: 500_000_000,
        }
    }

    /// Modelled time of one request of `bytes`, with or without a seek.
    pub fn cost(&self, bytes: u64, seek: bool) -> Duration {
        let transfer = if self.bandwidth == 0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(bytes as f64 / self.bandwidth as f64)
        };
        if seek {
            self.seek + self.rotation + transfer
        } else {
            transfer
        }
    }
}

impl FromStr for DeviceModel {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "hdd" => Ok(Self::hdd()),
            "ssd" => Ok(Self::ssd()),
            _ => Err(ParseError::unknown("device model", s, "hdd|ssd")),
        }
    }
}

impl fmt::Display for DeviceModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} model (seek {:?} + rotation {:?}, {} MB/s)",
            self.name,
            self.seek,
            self.rotation,
            self.bandwidth / 1_000_000
        )
    }
}

/// What the model has charged so far.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct EmulationStats {
    /// The model's label; always an emulation, never a measured device.
    pub model: String,
    pub requests: u64,
    /// Requests that paid seek + rotation.
    pub seeks: u64,
    pub bytes: u64,
    /// Total modelled time, in seconds.
    pub modelled_secs: f64,
    /// Time slept to bring each request up to its modelled time, in seconds: `modelled_secs`
    /// minus what the real device underneath took (never negative per request).
    pub slept_secs: f64,
}

#[derive(Debug, Default)]
struct Head {
    /// Where the previous request ended: (file, byte after its last).
    last: Option<(FileId, u64)>,
    stats: EmulationStats,
}

/// A device MODEL wrapped around a real device. See the module docs.
#[derive(Debug)]
pub struct EmulatedBacking {
    inner: Arc<dyn BackingIo>,
    model: DeviceModel,
    sleep: bool,
    head: Mutex<Head>,
}

impl EmulatedBacking {
    /// Wraps `inner`; every request sleeps for its modelled time.
    pub fn new(inner: Arc<dyn BackingIo>, model: DeviceModel) -> Self {
        log::info!("backing device: emulated {model} — modelled latencies, not a real disk");
        let head = Head {
            last: None,
            stats: EmulationStats {
                model: model.name.clone(),
                ..EmulationStats::default()
            },
        };
        Self {
            inner,
            model,
            sleep: true,
            head: Mutex::new(head),
        }
    }

    /// Keeps the accounting but skips the sleeps (tests, dry runs).
    pub fn without_sleep(mut self) -> Self {
        self.sleep = false;
        self
    }

    pub fn model(&self) -> &DeviceModel {
        &self.model
    }

    /// The counters so far.
    pub fn stats(&self) -> EmulationStats {
        self.head
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .stats
            .clone()
    }

    /// Charges one request and runs `op` while holding the head; the request then takes its
    /// modelled time in all (see the module docs), or longer if `op` alone takes longer.
    fn charged<T>(&self, file: FileId, offset: u64, len: u64, op: impl FnOnce() -> T) -> T {
        let mut head = self.head.lock().unwrap_or_else(PoisonError::into_inner);
        let seek = head.last != Some((file, offset));
        let cost = self.model.cost(len, seek);
        head.last = Some((file, offset + len));
        let started = Instant::now();
        let out = op();
        let s = &mut head.stats;
        s.requests += 1;
        s.seeks += u64::from(seek);
        s.bytes += len;
        s.modelled_secs += cost.as_secs_f64();
        if self.sleep {
            let rest = cost.saturating_sub(started.elapsed());
            if !rest.is_zero() {
                s.slept_secs += rest.as_secs_f64();
                std::thread::sleep(rest);
            }
        }
        out
    }
}

impl BackingIo for EmulatedBacking {
    fn read_at(&self, file: FileId, fd: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let len = buf.len() as u64;
        self.charged(file, offset, len, || {
            self.inner.read_at(file, fd, buf, offset)
        })
    }

    fn write_at(&self, file: FileId, fd: &File, buf: &[u8], offset: u64) -> io::Result<()> {
        self.charged(file, offset, buf.len() as u64, || {
            self.inner.write_at(file, fd, buf, offset)
        })
    }

    fn sync(&self, file: FileId, fd: &File, datasync: bool) -> io::Result<()> {
        self.inner.sync(file, fd, datasync)
    }

    fn set_len(&self, file: FileId, fd: &File, len: u64) -> io::Result<()> {
        self.inner.set_len(file, fd, len)
    }

    fn emulation(&self) -> Option<EmulationStats> {
        Some(self.stats())
    }

    fn io_mode(&self) -> super::IoMode {
        self.inner.io_mode()
    }

    fn sync_fs(&self, fd: &File) -> io::Result<()> {
        self.inner.sync_fs(fd)
    }

    fn settle(&self) {
        self.inner.settle();
    }
}
