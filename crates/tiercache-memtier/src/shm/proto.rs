//! The lock-free protocol between a slot header of the shared region and the clients' pins
//! (format: `docs/design.md` §8): clients pin and validate with no system call; the daemon
//! claims a slot before it changes what the slot holds, and never while a client has it pinned.
//!
//! A header's `seq` is a seqlock counter: even while the slot's identity (`file`, `block`) and
//! validity are stable, odd while the daemon changes them. Headers live in the read-only part
//! of the region: only the daemon stores into them. Pins do not live there: each client has a
//! pin area of its own (a bitmap, bit `s % 64` of word `s / 64` for slot `s`) that only it and
//! the daemon map, so no client can set, clear or forge another client's pin, and nothing a
//! client stores can change a header.
//!
//! Why it is safe (Dekker): a client sets its pin bit *then* re-reads `seq`; the daemon makes
//! `seq` odd *then* reads every client's pin bit for the slot, each with a `SeqCst` fence
//! between its two steps (the fences, not only `SeqCst` accesses, so that loom models it
//! exactly). In their order either the client's pin comes before the daemon's read of it (the
//! daemon sees it and gives up the slot) or the daemon's odd `seq` comes before the client's
//! re-read (the client sees `seq` changed, drops its pin and treats the block as missing). So
//! a slot the daemon reuses has no pin that a client relies on, and a pin that a client relies
//! on is on a slot whose identity and validity did not change since the client checked them.
//! A pin bit a client sets without following the protocol (scribbling its own area) can only
//! keep slots from being reused; it never makes the daemon read or write other bytes.

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

/// One slot's header: 32 bytes, `repr(C)`, laid out as `docs/design.md` §8 says. Written by
/// the daemon only (clients map it read-only).
#[repr(C)]
#[derive(Debug)]
pub struct SlotHeader {
    /// Seqlock counter (even: stable).
    pub seq: AtomicU64,
    /// Which file (the BACKING inode number, the manager's `FileId`).
    pub file: AtomicU64,
    /// Which block of it.
    pub block: AtomicU64,
    /// [`VALID`].
    pub flags: AtomicU32,
    pub reserved: AtomicU32,
}

/// A pin `try_pin` validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pinned {
    /// Whether this call set the bit (false: the client already held a pin on the slot).
    pub newly: bool,
}

impl Default for SlotHeader {
    fn default() -> Self {
        Self {
            seq: AtomicU64::new(0),
            file: AtomicU64::new(0),
            block: AtomicU64::new(0),
            flags: AtomicU32::new(0),
            reserved: AtomicU32::new(0),
        }
    }
}

/// The bit of `slot` in its pin word (word `slot / 64` of a pin area).
#[inline]
pub fn pin_mask(slot: u32) -> u64 {
    1u64 << (slot % 64)
}

/// Client: drops its pin bit `mask` in `word` (its last reference to the slot went).
#[inline]
pub fn unpin(word: &AtomicU64, mask: u64) {
    word.fetch_and(!mask, SeqCst);
}

impl SlotHeader {
    /// Client (or the daemon on a client's behalf): pins the slot with bit `mask` of the
    /// client's pin `word` if it holds `block` of `file`, valid, and keeps doing so after the
    /// pin is visible. `None`: not there (or changing): a miss.
    ///
    /// Every load from the header is `Relaxed`, ordered by fences: a client maps headers
    /// read-only, where only `Relaxed` atomic loads of at most 8 bytes (64-bit targets) are
    /// defined (`std::sync::atomic`, "Atomic accesses to read-only memory"), so an acquire
    /// load is a relaxed load and an acquire fence.
    pub fn try_pin(&self, file: u64, block: u64, word: &AtomicU64, mask: u64) -> Option<Pinned> {
        let s0 = self.seq.load(Relaxed);
        // Pairs with `end`'s release: the identity read below is at least that window's.
        fence(Acquire);
        if s0 & 1 == 1 {
            return None;
        }
        if self.file.load(Relaxed) != file
            || self.block.load(Relaxed) != block
            || self.flags.load(Relaxed) & VALID == 0
        {
            return None;
        }
        let before = word.fetch_or(mask, SeqCst);
        // Dekker with `begin`'s fence: the pin above or the daemon's odd `seq` is seen by the
        // other side. Also an acquire fence for the loads above (a seqlock read): if one of
        // them saw a store of a change window, the re-read of `seq` sees that window's `seq`;
        // and for `flags`: VALID seen means the bytes `set_valid` published are seen.
        fence(SeqCst);
        let newly = before & mask == 0;
        if self.seq.load(Relaxed) != s0 {
            if newly {
                unpin(word, mask);
            }
            return None;
        }
        Some(Pinned { newly })
    }

    /// Daemon: opens a change window (`seq` odd); then `pinned` reads the clients' pins.
    fn begin(&self, pinned: impl FnOnce() -> bool) -> bool {
        self.seq.fetch_add(1, SeqCst);
        // Dekker with `try_pin`'s fence; also a release fence: a client that sees any store of
        // this window sees the odd `seq` (or later) when it re-reads it.
        fence(SeqCst);
        pinned()
    }

    fn end(&self) {
        self.seq.fetch_add(1, Release);
    }

    /// Daemon: takes the slot for reuse (eviction). `pinned` says whether any client's pin bit
    /// for this slot is set (SeqCst loads). `false` (nothing changed but maybe `seq`) when a
    /// client holds a pin; otherwise the slot is invalid from now on and no client can pin it
    /// until [`SlotHeader::publish`] and [`SlotHeader::set_valid`].
    pub fn claim(&self, pinned: impl Fn() -> bool) -> bool {
        // Visibly pinned: leave `seq` alone (a refused claim would make pinning clients retry).
        if pinned() {
            return false;
        }
        let pinned = self.begin(pinned);
        if !pinned {
            self.flags.store(0, Relaxed);
        }
        self.end();
        !pinned
    }

    /// Daemon: the slot now holds (not yet valid) `block` of `file`. Only for a slot that is
    /// invalid (claimed, retired, or never used): no client can hold a pin it relies on.
    pub fn publish(&self, file: u64, block: u64) {
        self.begin(|| false);
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
    /// client holds a pin (`pinned`, read inside the change window): then the slot must not be
    /// reused until no pin bit for it is set.
    pub fn retire(&self, pinned: impl FnOnce() -> bool) -> bool {
        let pinned = self.begin(pinned);
        self.flags.store(0, Relaxed);
        self.end();
        pinned
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
    fn header_is_32_bytes() {
        assert_eq!(std::mem::size_of::<SlotHeader>(), 32);
        assert_eq!(std::mem::align_of::<SlotHeader>(), 8);
    }

    #[test]
    fn pin_needs_a_published_valid_slot_and_blocks_claims() {
        let h = SlotHeader::default();
        let (a, b) = (AtomicU64::new(0), AtomicU64::new(0));
        let m = pin_mask(3);
        let pinned = || (a.load(SeqCst) | b.load(SeqCst)) & m != 0;
        assert_eq!(h.try_pin(7, 3, &a, m), None, "never published");
        h.publish(7, 3);
        assert_eq!(h.try_pin(7, 3, &a, m), None, "not valid yet");
        h.set_valid();
        assert_eq!(h.try_pin(7, 4, &a, m), None, "another block");
        let p = h.try_pin(7, 3, &a, m).expect("pinned");
        assert!(p.newly);
        assert!(!h.try_pin(7, 3, &a, m).expect("again").newly);
        assert!(!h.claim(pinned), "a pinned slot is not claimed");
        assert!(
            h.try_pin(7, 3, &b, m).is_some(),
            "a refused claim leaves the slot valid"
        );
        unpin(&a, m);
        unpin(&b, m);
        assert!(h.claim(pinned));
        assert_eq!(h.try_pin(7, 3, &a, m), None, "claimed: invalid");
    }

    #[test]
    fn retire_reports_pins() {
        let h = SlotHeader::default();
        let w = AtomicU64::new(0);
        let m = pin_mask(70);
        h.publish(1, 1);
        h.set_valid();
        h.try_pin(1, 1, &w, m).expect("pinned");
        assert!(h.retire(|| w.load(SeqCst) & m != 0));
        unpin(&w, m);
        assert!(!h.retire(|| w.load(SeqCst) & m != 0));
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
