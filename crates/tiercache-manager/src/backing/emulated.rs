//! [`EmulatedBacking`]: a latency MODEL of a slow disk, wrapped around a real device, for
//! `--emulate hdd|ssd`. It does not measure anything: it computes how long a request would take
//! on the modelled device and sleeps for that long.
//!
//! Model (one disk head, requests serialized):
//! - a request that does not start where the previous request on this device ended (same file,
//!   next byte) pays `seek + rotation` (counted as one seek);
//! - every request pays `bytes / bandwidth` transfer time;
//! - `sync` and `set_len` pay nothing and do not move the head (a simplification).
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
use std::time::Duration;
use tiercache_core::FileId;

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
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "hdd" => Ok(Self::hdd()),
            "ssd" => Ok(Self::ssd()),
            _ => Err(format!("unknown device model `{s}` (expected hdd|ssd)")),
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

    /// Charges one request and runs `op` while holding the head.
    fn charged<T>(&self, file: FileId, offset: u64, len: u64, op: impl FnOnce() -> T) -> T {
        let mut head = self.head.lock().unwrap_or_else(PoisonError::into_inner);
        let seek = head.last != Some((file, offset));
        let cost = self.model.cost(len, seek);
        head.last = Some((file, offset + len));
        let s = &mut head.stats;
        s.requests += 1;
        s.seeks += u64::from(seek);
        s.bytes += len;
        s.modelled_secs += cost.as_secs_f64();
        if self.sleep && !cost.is_zero() {
            std::thread::sleep(cost);
        }
        op()
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
