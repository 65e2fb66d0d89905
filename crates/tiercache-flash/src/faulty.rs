//! [`FaultyDevice`]: a [`FlashDevice`] wrapper that injects the faults a real SSD shows.
//!
//! - countdowns: fail writes or reads after `n` more, or silently drop writes after `n` more;
//! - a torn write: after `n` more writes, the next lands only a prefix of its sectors and the
//!   power is then "cut" ([`FaultyDevice::is_cut`]): every later write and sync is dropped
//!   (the process would be dead; a test stops acknowledging anything from then on);
//! - power-cut mode ([`FaultyDevice::set_volatile`]): every write since the last `sync` stays
//!   in a volatile buffer (reads see it, as a drive cache serves them); `sync` makes the buffer
//!   durable in order; [`FaultyDevice::crash`] instead applies a seeded random choice of it —
//!   nothing, a prefix, or a reordered subset, possibly with one write torn at a sector
//!   boundary — then forgets the rest, as a power cut does.

use crate::device::FlashDevice;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::fmt;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

#[derive(Debug)]
struct State {
    fail_writes_after: Option<u64>,
    fail_reads_after: Option<u64>,
    drop_writes_after: Option<u64>,
    tear_after: Option<u64>,
    cut: bool,
    volatile: bool,
    pending: Vec<(u64, Vec<u8>)>,
    rng: SmallRng,
    writes: u64,
    syncs: u64,
    /// Writes torn or dropped since the last crash.
    lost: u64,
}

/// Wraps another device; see the module docs.
pub struct FaultyDevice {
    inner: Arc<dyn FlashDevice>,
    st: Mutex<State>,
}

impl fmt::Debug for FaultyDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultyDevice")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

/// Decrements a countdown; `true` once it has run out (the fault applies).
fn fires(c: &mut Option<u64>) -> bool {
    match c {
        Some(0) => true,
        Some(n) => {
            *n -= 1;
            false
        }
        None => false,
    }
}

impl FaultyDevice {
    /// No faults until told; `seed` drives every random choice.
    pub fn new(inner: Arc<dyn FlashDevice>, seed: u64) -> Self {
        Self {
            inner,
            st: Mutex::new(State {
                fail_writes_after: None,
                fail_reads_after: None,
                drop_writes_after: None,
                tear_after: None,
                cut: false,
                volatile: false,
                pending: Vec::new(),
                rng: SmallRng::seed_from_u64(seed),
                writes: 0,
                syncs: 0,
                lost: 0,
            }),
        }
    }

    fn st(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// After `n` more successful writes, every write fails (`None`: never).
    pub fn fail_writes_after(&self, n: Option<u64>) {
        self.st().fail_writes_after = n;
    }
    /// After `n` more successful reads, every read fails (`None`: never).
    pub fn fail_reads_after(&self, n: Option<u64>) {
        self.st().fail_reads_after = n;
    }
    /// After `n` more writes, writes report success but are silently dropped.
    pub fn drop_writes_after(&self, n: Option<u64>) {
        self.st().drop_writes_after = n;
    }
    /// After `n` more writes, the next lands only a random prefix of its sectors and the
    /// power is cut.
    pub fn tear_write_after(&self, n: Option<u64>) {
        self.st().tear_after = n;
    }
    /// Power-cut mode on or off (turning it off makes the buffer durable).
    pub fn set_volatile(&self, on: bool) -> io::Result<()> {
        if !on {
            self.sync()?;
        }
        self.st().volatile = on;
        Ok(())
    }
    /// Whether a torn write has cut the power (later writes were dropped).
    pub fn is_cut(&self) -> bool {
        self.st().cut
    }
    /// Writes torn or silently dropped since the last [`FaultyDevice::crash`]: once it is
    /// not 0, what the tier acknowledges no longer means anything until the next crash.
    pub fn lost_writes(&self) -> u64 {
        self.st().lost
    }
    /// Writes and syncs seen so far.
    pub fn counts(&self) -> (u64, u64) {
        let st = self.st();
        (st.writes, st.syncs)
    }

    /// A power cut: a seeded random part of the volatile buffer lands (possibly reordered,
    /// one write possibly torn), the rest is lost; then power is back and every fault is
    /// cleared (the volatile mode stays as it was).
    pub fn crash(&self) -> io::Result<()> {
        let mut st = self.st();
        let mut pending = std::mem::take(&mut st.pending);
        let sector = self.inner.sector_size().max(1);
        let n = pending.len();
        let chosen: Vec<(u64, Vec<u8>)> = match st.rng.gen_range(0..4) {
            0 => Vec::new(),
            1 => {
                let k = st.rng.gen_range(0..=n);
                pending.truncate(k);
                pending
            }
            _ => {
                let mut keep: Vec<(u64, Vec<u8>)> = pending
                    .into_iter()
                    .filter(|_| st.rng.gen_bool(0.5))
                    .collect();
                // Fisher-Yates with the seeded generator.
                for i in (1..keep.len()).rev() {
                    let j = st.rng.gen_range(0..=i);
                    keep.swap(i, j);
                }
                keep
            }
        };
        let torn = if !chosen.is_empty() && st.rng.gen_bool(0.5) {
            Some(st.rng.gen_range(0..chosen.len()))
        } else {
            None
        };
        for (i, (off, data)) in chosen.iter().enumerate() {
            if Some(i) == torn {
                let sectors = data.len() / sector;
                let keep = st.rng.gen_range(0..sectors.max(1)) * sector;
                self.inner.write_at(&data[..keep], *off)?;
            } else {
                self.inner.write_at(data, *off)?;
            }
        }
        self.inner.sync()?;
        st.cut = false;
        st.lost = 0;
        st.fail_writes_after = None;
        st.fail_reads_after = None;
        st.drop_writes_after = None;
        st.tear_after = None;
        Ok(())
    }
}

impl FlashDevice for FaultyDevice {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        let mut st = self.st();
        if fires(&mut st.fail_reads_after) {
            return Err(io::Error::other("injected read fault"));
        }
        self.inner.read_at(buf, off)?;
        // Overlay the volatile writes, oldest first: a drive serves its cache.
        let end = off + buf.len() as u64;
        for (p, data) in &st.pending {
            let pend = p + data.len() as u64;
            if *p < end && pend > off {
                let lo = (*p).max(off);
                let hi = pend.min(end);
                buf[(lo - off) as usize..(hi - off) as usize]
                    .copy_from_slice(&data[(lo - p) as usize..(hi - p) as usize]);
            }
        }
        Ok(())
    }

    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        let mut st = self.st();
        st.writes += 1;
        if st.cut {
            st.lost += 1;
            return Ok(());
        }
        if fires(&mut st.fail_writes_after) {
            return Err(io::Error::other("injected write fault"));
        }
        if fires(&mut st.drop_writes_after) {
            st.lost += 1;
            return Ok(());
        }
        if fires(&mut st.tear_after) {
            let sector = self.inner.sector_size().max(1);
            let sectors = buf.len() / sector;
            let keep = st.rng.gen_range(0..sectors.max(1)) * sector;
            st.cut = true;
            st.lost += 1;
            if st.volatile {
                st.pending.push((off, buf[..keep].to_vec()));
            } else {
                self.inner.write_at(&buf[..keep], off)?;
            }
            return Ok(());
        }
        if st.volatile {
            st.pending.push((off, buf.to_vec()));
            return Ok(());
        }
        self.inner.write_at(buf, off)
    }

    fn sync(&self) -> io::Result<()> {
        let mut st = self.st();
        st.syncs += 1;
        if st.cut {
            return Ok(());
        }
        for (off, data) in std::mem::take(&mut st.pending) {
            self.inner.write_at(&data, off)?;
        }
        self.inner.sync()
    }

    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn sector_size(&self) -> usize {
        self.inner.sector_size()
    }
}
