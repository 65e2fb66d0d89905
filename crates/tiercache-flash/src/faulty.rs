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
//!   boundary — then forgets the rest, as a power cut does;
//! - silent corruption, which only the tier's block checksums can catch: a bit flipped at rest
//!   ([`FaultyDevice::flip_bit`]), bits flipped on the way back by every read of a range
//!   ([`FaultyDevice::corrupt_reads_in`]), and a misdirected write (the next write to one
//!   offset lands at another, [`FaultyDevice::misdirect_next_write`]).

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
    /// Reads overlapping `[start, end)` come back with the first overlapping byte flipped.
    corrupt_reads: Option<(u64, u64)>,
    /// The next write at the first offset lands at the second.
    misdirect: Option<(u64, u64)>,
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
                corrupt_reads: None,
                misdirect: None,
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
    /// Flips bit `bit` (0..8) of the byte at `off` on the medium, as bit rot would (a write
    /// of the sector around it, below any volatile buffer).
    pub fn flip_bit(&self, off: u64, bit: u8) -> io::Result<()> {
        let _st = self.st();
        let sector = self.inner.sector_size().max(1) as u64;
        let start = off - off % sector;
        let mut b = vec![0u8; sector as usize];
        self.inner.read_at(&mut b, start)?;
        b[(off - start) as usize] ^= 1 << (bit % 8);
        self.inner.write_at(&b, start)
    }
    /// From now on (`None`: no more), every read overlapping `range` returns with the first
    /// byte of the overlap flipped (bit 0): a bad path between medium and memory.
    pub fn corrupt_reads_in(&self, range: Option<std::ops::Range<u64>>) {
        self.st().corrupt_reads = range.map(|r| (r.start, r.end));
    }
    /// The next write starting at `from` lands at `to` instead (same length), reported as
    /// done: a misdirected write. Counted as lost (what the tier acknowledged since then no
    /// longer means anything until the next crash).
    pub fn misdirect_next_write(&self, from: u64, to: u64) {
        self.st().misdirect = Some((from, to));
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
        st.corrupt_reads = None;
        st.misdirect = None;
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
        let flip = st
            .corrupt_reads
            .filter(|&(lo, hi)| lo < end && hi > off)
            .map(|(lo, _)| (lo.max(off) - off) as usize);
        for (p, data) in &st.pending {
            let pend = p + data.len() as u64;
            if *p < end && pend > off {
                let lo = (*p).max(off);
                let hi = pend.min(end);
                buf[(lo - off) as usize..(hi - off) as usize]
                    .copy_from_slice(&data[(lo - p) as usize..(hi - p) as usize]);
            }
        }
        if let Some(i) = flip {
            buf[i] ^= 1;
        }
        Ok(())
    }

    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        let mut st = self.st();
        st.writes += 1;
        let off = match st.misdirect {
            Some((from, to)) if from == off && to + buf.len() as u64 <= self.inner.len() => {
                st.misdirect = None;
                st.lost += 1;
                to
            }
            _ => off,
        };
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

    fn settle(&self) {
        self.inner.settle();
    }

    fn keep_hot(&self, end: u64) {
        self.inner.keep_hot(end);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::device::MemDevice;

    fn dev(seed: u64) -> (Arc<MemDevice>, FaultyDevice) {
        let m = Arc::new(MemDevice::new(8192));
        let inner: Arc<dyn FlashDevice> = m.clone();
        (m, FaultyDevice::new(inner, seed))
    }

    #[test]
    fn volatile_writes_are_read_back_and_land_only_at_sync() {
        let (m, f) = dev(1);
        f.set_volatile(true).unwrap();
        f.write_at(&[7u8; 512], 512).unwrap();
        let mut b = [0u8; 1024];
        f.read_at(&mut b, 0).unwrap();
        assert_eq!(&b[512..], &[7u8; 512]);
        assert_eq!(m.snapshot()[512], 0);
        f.sync().unwrap();
        assert_eq!(m.snapshot()[512], 7);
    }

    #[test]
    fn a_crash_lands_only_some_unsynced_writes_and_sometimes_tears_one() {
        let mut seen_none = false;
        let mut seen_all = false;
        let mut seen_torn = false;
        for seed in 0..200 {
            let (m, f) = dev(seed);
            f.set_volatile(true).unwrap();
            for i in 0..4u8 {
                f.write_at(&[i + 1; 1024], u64::from(i) * 1024).unwrap();
            }
            f.crash().unwrap();
            let s = m.snapshot();
            let landed: Vec<bool> = (0..4).map(|i| s[i * 1024] != 0).collect();
            seen_none |= landed.iter().all(|&x| !x);
            seen_all |= landed.iter().all(|&x| x);
            // A torn 2-sector write lands its first sector only.
            seen_torn |= (0..4).any(|i| s[i * 1024] != 0 && s[i * 1024 + 512] == 0);
            let mut b = [0u8; 4096];
            f.read_at(&mut b, 0).unwrap();
            assert_eq!(&b[..], &s[..4096], "nothing volatile is left after a crash");
        }
        assert!(seen_none && seen_all && seen_torn);
    }

    #[test]
    fn bits_flip_at_rest_and_on_reads_and_a_write_can_land_elsewhere() {
        let (m, f) = dev(3);
        f.write_at(&[0x10; 1024], 1024).unwrap();
        f.flip_bit(1500, 2).unwrap();
        assert_eq!(m.snapshot()[1500], 0x14, "flipped at rest");
        f.corrupt_reads_in(Some(2000..2001));
        let mut b = [0u8; 1024];
        f.read_at(&mut b, 1024).unwrap();
        assert_eq!((b[976], b[975]), (0x11, 0x10), "flipped on the way back");
        assert_eq!(m.snapshot()[2000], 0x10, "not on the medium");
        f.corrupt_reads_in(None);
        f.misdirect_next_write(4096, 6144);
        f.write_at(&[9; 512], 4096).unwrap();
        assert_eq!((m.snapshot()[4096], m.snapshot()[6144]), (0, 9));
        f.write_at(&[8; 512], 4096).unwrap();
        assert_eq!(m.snapshot()[4096], 8, "only the next write");
        assert_eq!(f.lost_writes(), 1);
    }

    #[test]
    fn countdowns_fail_drop_and_tear_writes() {
        let (m, f) = dev(5);
        f.fail_writes_after(Some(1));
        f.write_at(&[1; 512], 0).unwrap();
        assert!(f.write_at(&[1; 512], 512).is_err());
        f.fail_writes_after(None);
        f.drop_writes_after(Some(0));
        f.write_at(&[2; 512], 1024).unwrap();
        assert_eq!(m.snapshot()[1024], 0);
        assert_eq!(f.lost_writes(), 1);
        f.drop_writes_after(None);
        f.tear_write_after(Some(0));
        f.write_at(&[3; 2048], 2048).unwrap();
        assert!(f.is_cut());
        assert_eq!(m.snapshot()[2048 + 1536], 0, "the last sector never lands");
        f.write_at(&[4; 512], 6144).unwrap();
        assert_eq!(m.snapshot()[6144], 0, "power is cut: later writes are lost");
        f.fail_reads_after(Some(0));
        assert!(f.read_at(&mut [0u8; 512], 0).is_err());
        f.crash().unwrap();
        assert!(!f.is_cut());
        assert!(f.read_at(&mut [0u8; 512], 0).is_ok());
    }
}
