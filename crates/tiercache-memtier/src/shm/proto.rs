//! The lock-free protocol on one slot header of the shared region (format: `docs/design.md`
//! §8): clients pin and validate with no system call; the daemon claims a slot before it
//! changes what the slot holds, and never while a client has it pinned.
//!
//! A header's `seq` is a seqlock counter: even while the slot's identity (`file`, `block`) and
//! validity are stable, odd while the daemon changes them. `pins` is a bitmap of clients (bit
//! `c`: client `c` holds at least one pin); one `fetch_or` pins, one `fetch_and` unpins, so a
//! client that dies holds nothing the daemon cannot see and clear.
//!
//! Why it is safe (Dekker): a client pins with `fetch_or` *then* re-reads `seq`; the daemon
//! makes `seq` odd *then* reads `pins`, each with a `SeqCst` fence between its two steps (the
//! fences, not only `SeqCst` accesses, so that loom models it exactly). In their order either the
//! client's pin comes before the daemon's read of `pins` (the daemon sees it and gives up the
//! slot) or the daemon's odd `seq` comes before the client's re-read (the client sees `seq`
//! changed, drops its pin and treats the block as missing). So a slot the daemon reuses has no
//! pin that a client relies on, and a pin that a client relies on is on a slot whose identity
//! and validity did not change since the client checked them.

#[cfg(loom)]
use loom::sync::atomic::fence;
#[cfg(loom)]
use loom::sync::atomic::{AtomicU32, AtomicU64};
#[cfg(not(loom))]
use std::sync::atomic::fence;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicU32, AtomicU64};

/// `flags` bit: the slot's bytes hold `block` of `file` (cleared before any change).
pub const VALID: u32 = 1;

/// One slot's header: 64 bytes, `repr(C)`, laid out as `docs/design.md` §8 says.
#[repr(C)]
#[derive(Debug)]
pub struct SlotHeader {
    /// Seqlock counter (even: stable).
    pub seq: AtomicU64,
    /// Which file (the BACKING inode number, the manager's `FileId`).
    pub file: AtomicU64,
    /// Which block of it.
    pub block: AtomicU64,
    /// Bitmap of the clients holding a pin.
    pub pins: AtomicU64,
    /// [`VALID`].
    pub flags: AtomicU32,
    pub reserved0: AtomicU32,
    /// Dirty sequence of the slot's bytes: bumped by the daemon when a write is committed and
    /// by a client when it ends an in-place update; write-back marks a block clean only if it
    /// is unchanged since the copy it wrote.
    pub wseq: AtomicU64,
    /// Bitmap of the clients updating the slot in place now (never marked clean meanwhile).
    pub writers: AtomicU64,
    pub reserved1: AtomicU64,
}

/// A pin `try_pin` validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pinned {
    /// Whether this call set the client's bit (false: the client already held a pin on it).
    pub newly: bool,
}

impl Default for SlotHeader {
    fn default() -> Self {
        Self {
            seq: AtomicU64::new(0),
            file: AtomicU64::new(0),
            block: AtomicU64::new(0),
            pins: AtomicU64::new(0),
            flags: AtomicU32::new(0),
            reserved0: AtomicU32::new(0),
            wseq: AtomicU64::new(0),
            writers: AtomicU64::new(0),
            reserved1: AtomicU64::new(0),
        }
    }
}

impl SlotHeader {
    /// Client: pins the slot for client bit `bit` if it holds `block` of `file`, valid, and
    /// keeps doing so after the pin is visible. `None`: not there (or changing): a miss.
    pub fn try_pin(&self, file: u64, block: u64, bit: u64) -> Option<Pinned> {
        let s0 = self.seq.load(Acquire);
        if s0 & 1 == 1 {
            return None;
        }
        if self.file.load(Relaxed) != file
            || self.block.load(Relaxed) != block
            || self.flags.load(Relaxed) & VALID == 0
        {
            return None;
        }
        let before = self.pins.fetch_or(bit, SeqCst);
        // Dekker with `begin`'s fence: the pin above or the daemon's odd `seq` is seen by the
        // other side. Also an acquire fence for the loads above (a seqlock read): if one of
        // them saw a store of a change window, the re-read of `seq` sees that window's `seq`.
        fence(SeqCst);
        let newly = before & bit == 0;
        if self.seq.load(SeqCst) != s0 {
            if newly {
                self.pins.fetch_and(!bit, SeqCst);
            }
            return None;
        }
        Some(Pinned { newly })
    }

    /// Client: drops its bit (its last pin on the slot).
    pub fn unpin(&self, bit: u64) {
        self.pins.fetch_and(!bit, SeqCst);
    }

    /// Daemon: opens a change window (`seq` odd) and reports whether any client holds a pin.
    fn begin(&self) -> bool {
        self.seq.fetch_add(1, SeqCst);
        // Dekker with `try_pin`'s fence; also a release fence: a client that sees any store of
        // this window sees the odd `seq` (or later) when it re-reads it.
        fence(SeqCst);
        self.pins.load(SeqCst) != 0
    }

    fn end(&self) {
        self.seq.fetch_add(1, Release);
    }

    /// Daemon: takes the slot for reuse (eviction). `false` (nothing changed but `seq`) when a
    /// client holds a pin; otherwise the slot is invalid from now on and no client can pin it
    /// until [`SlotHeader::publish`] and [`SlotHeader::set_valid`].
    pub fn claim(&self) -> bool {
        // Visibly pinned: leave `seq` alone (a refused claim would make pinning clients retry).
        if self.pins.load(SeqCst) != 0 {
            return false;
        }
        let pinned = self.begin();
        if !pinned {
            self.flags.store(0, Relaxed);
        }
        self.end();
        !pinned
    }

    /// Daemon: the slot now holds (not yet valid) `block` of `file`. Only for a slot that is
    /// invalid (claimed, retired, or never used): no client can hold a pin it relies on.
    pub fn publish(&self, file: u64, block: u64) {
        self.begin();
        self.flags.store(0, Relaxed);
        self.file.store(file, Relaxed);
        self.block.store(block, Relaxed);
        self.end();
    }

    /// Daemon: the slot's bytes now hold what it was published with.
    pub fn set_valid(&self) {
        self.flags.store(VALID, Release);
    }

    /// Daemon: the slot leaves the cache (dropped, truncated, invalid). Returns whether a
    /// client holds a pin: then the slot must not be reused until `pins` is zero.
    pub fn retire(&self) -> bool {
        let pinned = self.begin();
        self.flags.store(0, Relaxed);
        self.end();
        pinned
    }

    /// Daemon: whether any client holds a pin now.
    pub fn pinned(&self) -> bool {
        self.pins.load(SeqCst) != 0
    }

    /// Daemon, for client `bit` (which holds a pin): it may update the slot in place from now
    /// on. Set *before* the block is marked dirty for it, so write-back cannot mark it clean
    /// until [`SlotHeader::end_write`].
    pub fn begin_write(&self, bit: u64) {
        self.writers.fetch_or(bit, SeqCst);
    }

    /// Client: its in-place update is over (its last mutable reference went). The sequence is
    /// bumped first: write-back that sees no writer also sees the bytes changed.
    pub fn end_write(&self, bit: u64) {
        self.wseq.fetch_add(1, SeqCst);
        self.writers.fetch_and(!bit, SeqCst);
    }

    /// Whether a client is updating the slot in place.
    pub fn writing(&self) -> bool {
        self.writers.load(SeqCst) != 0
    }

    /// Daemon: drops every pin and write of a client that is gone (a write it left half done
    /// is still written back: the sequence moves).
    pub fn release_client(&self, bit: u64) {
        if self.writers.load(SeqCst) & bit != 0 {
            self.end_write(bit);
        }
        self.pins.fetch_and(!bit, SeqCst);
    }
}

/// The hint-table bucket of `block` of `file` (`mask` = buckets − 1): a splitmix64 mix, the
/// same in the daemon and in every client.
#[inline]
pub fn bucket(file: u64, block: u64, mask: u64) -> usize {
    let mut z = file ^ block.rotate_left(29).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z & mask) as usize
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn header_is_64_bytes() {
        assert_eq!(std::mem::size_of::<SlotHeader>(), 64);
        assert_eq!(std::mem::align_of::<SlotHeader>(), 8);
    }

    #[test]
    fn pin_needs_a_published_valid_slot_and_blocks_claims() {
        let h = SlotHeader::default();
        assert_eq!(h.try_pin(7, 3, 1), None, "never published");
        h.publish(7, 3);
        assert_eq!(h.try_pin(7, 3, 1), None, "not valid yet");
        h.set_valid();
        assert_eq!(h.try_pin(7, 4, 1), None, "another block");
        let p = h.try_pin(7, 3, 1).expect("pinned");
        assert!(p.newly);
        assert!(!h.try_pin(7, 3, 1).expect("again").newly);
        assert!(!h.claim(), "a pinned slot is not claimed");
        assert!(
            h.try_pin(7, 3, 2).is_some(),
            "a refused claim leaves the slot valid"
        );
        h.unpin(1);
        h.unpin(2);
        assert!(h.claim());
        assert_eq!(h.try_pin(7, 3, 1), None, "claimed: invalid");
    }

    #[test]
    fn retire_reports_pins_and_release_client_clears_them() {
        let h = SlotHeader::default();
        h.publish(1, 1);
        h.set_valid();
        h.try_pin(1, 1, 1 << 5).expect("pinned");
        assert!(h.retire());
        assert!(h.pinned());
        h.release_client(1 << 5);
        assert!(!h.pinned());
        assert!(!h.retire());
    }

    #[test]
    fn buckets_spread() {
        let mask = 1023;
        let mut seen = vec![0u32; 1024];
        for b in 0..4096 {
            seen[bucket(42, b, mask)] += 1;
        }
        assert!(seen.iter().all(|&n| n < 24), "{:?}", seen.iter().max());
    }
}
