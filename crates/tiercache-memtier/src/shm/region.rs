//! The shared region: one sealed memfd holding the superblock, the slot headers, the hint
//! table and the slot bytes (format: `docs/design.md` §8). The daemon creates it; a client maps
//! the descriptor it receives and checks the superblock before trusting any offset in it.

use super::proto::{bucket, SlotHeader};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicU32, AtomicU64};

pub const MAGIC: [u8; 8] = *b"TCZCSHM1";
pub const VERSION: u32 = 1;
/// Bytes of the superblock page.
pub const SUPER_BYTES: u64 = 4096;
/// Bytes of one slot header.
pub const HEADER_BYTES: u64 = 64;
/// Clients that may map the region at once (one bit each in a header's `pins`).
pub const MAX_CLIENTS: usize = 64;
/// Entries per hint-table set (a set is 16 bytes).
pub const WAYS: usize = 4;
/// Offset in the superblock page of the per-client hit counters (one `u64` per client bit).
pub const CLIENT_HITS_OFF: u64 = 128;
/// `Superblock::state`: serving.
pub const STATE_SERVING: u32 = 1;
/// `Superblock::state`: the daemon is gone or shutting down; pins mean nothing any more.
pub const STATE_CLOSED: u32 = 2;

/// The first bytes of the region, `repr(C)`; written once before the region is shared
/// (`state` excepted).
#[repr(C)]
#[derive(Debug)]
pub struct Superblock {
    pub magic: [u8; 8],
    pub version: u32,
    pub block_size: u32,
    pub slots: u32,
    pub buckets: u32,
    pub headers_off: u64,
    pub table_off: u64,
    pub data_off: u64,
    pub total_len: u64,
    /// Random per daemon start: tells a client's cached view from a new daemon's.
    pub epoch: u64,
    pub state: AtomicU32,
    pub reserved: u32,
}

/// Offsets of a region for `slots` slots of `block` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub block: u64,
    pub slots: u64,
    pub buckets: u64,
    pub headers_off: u64,
    pub table_off: u64,
    pub data_off: u64,
    pub total: u64,
}

fn round_up(x: u64, to: u64) -> Option<u64> {
    x.checked_add(to - 1).map(|v| v / to * to)
}

impl Layout {
    pub fn new(slots: u64, block: u64) -> Option<Self> {
        if slots == 0 || slots > u64::from(u32::MAX) || block == 0 || !block.is_power_of_two() {
            return None;
        }
        // Sets of WAYS entries, twice as many entries as slots (rounded to a power of two):
        // a hint is rarely pushed out by another one.
        let buckets = slots.div_ceil(2).next_power_of_two();
        let headers_off = SUPER_BYTES;
        let table_off = round_up(headers_off + slots.checked_mul(HEADER_BYTES)?, 4096)?;
        let data_off = round_up(
            table_off + buckets.checked_mul(4 * WAYS as u64)?,
            block.max(4096),
        )?;
        let total = data_off.checked_add(slots.checked_mul(block)?)?;
        (buckets <= u64::from(u32::MAX) && total <= isize::MAX as u64).then_some(Self {
            block,
            slots,
            buckets,
            headers_off,
            table_off,
            data_off,
            total,
        })
    }
}

/// A mapping of the region (the daemon's or a client's). Unmapped on drop.
#[derive(Debug)]
pub struct Region {
    base: *mut u8,
    /// Read once (clients may scribble over the superblock; nothing is re-read from it but
    /// the atomic `state`).
    epoch: u64,
    layout: Layout,
    file: File,
}

// SAFETY: the mapping is plain shared memory; every field the region hands out is either
// atomic (headers, table, superblock state) or raw bytes reached through raw pointers whose
// synchronisation is the caller's (the arena's slot locks in the daemon, pins in clients).
unsafe impl Send for Region {}
// SAFETY: as above.
unsafe impl Sync for Region {}

impl Region {
    /// Daemon: a new zeroed region in a sealed memfd (size fixed: a client mapping it can
    /// never be cut short, so no SIGBUS).
    pub fn create(slots: usize, block: usize, epoch: u64) -> io::Result<Self> {
        let layout = Layout::new(slots as u64, block as u64).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("no shared region for {slots} slots of {block} bytes"),
            )
        })?;
        // SAFETY: a NUL-terminated name and valid flags; the result is checked.
        let fd = unsafe {
            libc::memfd_create(
                c"tiercache-arena".as_ptr(),
                libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just created and is owned by nobody else.
        let file = unsafe { File::from_raw_fd(fd) };
        file.set_len(layout.total)?;
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        // SAFETY: F_ADD_SEALS on our own memfd with valid seal bits.
        if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } < 0 {
            return Err(io::Error::last_os_error());
        }
        let region = Self::map(file, layout)?;
        // SAFETY: the superblock lies at offset 0 of a mapping at least SUPER_BYTES long,
        // page aligned; nobody else has the descriptor yet, so these plain writes race with
        // nothing.
        unsafe {
            let sb = region.base.cast::<Superblock>();
            std::ptr::addr_of_mut!((*sb).magic).write(MAGIC);
            std::ptr::addr_of_mut!((*sb).version).write(VERSION);
            std::ptr::addr_of_mut!((*sb).block_size).write(block as u32);
            std::ptr::addr_of_mut!((*sb).slots).write(slots as u32);
            std::ptr::addr_of_mut!((*sb).buckets).write(layout.buckets as u32);
            std::ptr::addr_of_mut!((*sb).headers_off).write(layout.headers_off);
            std::ptr::addr_of_mut!((*sb).table_off).write(layout.table_off);
            std::ptr::addr_of_mut!((*sb).data_off).write(layout.data_off);
            std::ptr::addr_of_mut!((*sb).total_len).write(layout.total);
            std::ptr::addr_of_mut!((*sb).epoch).write(epoch);
        }
        let mut region = region;
        region.epoch = epoch;
        region.state().store(STATE_SERVING, Release);
        Ok(region)
    }

    /// Client: maps a region received from the daemon, after checking its superblock and size.
    pub fn open(file: File) -> io::Result<Self> {
        let bad = |why: String| io::Error::new(io::ErrorKind::InvalidData, why);
        let len = file.metadata()?.len();
        if len < SUPER_BYTES {
            return Err(bad(format!("shared region of {len} bytes is too small")));
        }
        let mut sb = [0u8; 72];
        std::os::unix::fs::FileExt::read_exact_at(&file, &mut sb, 0)?;
        if sb[..8] != MAGIC {
            return Err(bad("not a tiercache shared region (bad magic)".into()));
        }
        let u32_at = |o: usize| u32::from_le_bytes([sb[o], sb[o + 1], sb[o + 2], sb[o + 3]]);
        let version = u32_at(8);
        if version != VERSION {
            return Err(bad(format!(
                "shared region version {version}, this client speaks {VERSION}"
            )));
        }
        let (block, slots) = (u64::from(u32_at(12)), u64::from(u32_at(16)));
        let layout = Layout::new(slots, block)
            .ok_or_else(|| bad(format!("bad region geometry: {slots} slots of {block} B")))?;
        let u64_at = |o: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&sb[o..o + 8]);
            u64::from_le_bytes(b)
        };
        let stored = (
            u64::from(u32_at(20)),
            u64_at(24),
            u64_at(32),
            u64_at(40),
            u64_at(48),
        );
        let want = (
            layout.buckets,
            layout.headers_off,
            layout.table_off,
            layout.data_off,
            layout.total,
        );
        if stored != want || len < layout.total {
            return Err(bad(format!(
                "shared region layout {stored:?} (size {len}) is not {want:?}"
            )));
        }
        let mut region = Self::map(file, layout)?;
        region.epoch = u64_at(56);
        Ok(region)
    }

    fn map(file: File, layout: Layout) -> io::Result<Self> {
        let len = usize::try_from(layout.total)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "region too large"))?;
        // SAFETY: a fresh shared mapping of `len` bytes of `file` (at least that long, checked
        // by the callers); the result is checked against MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            base: p.cast(),
            epoch: 0,
            layout,
            file,
        })
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The memfd (to send to a client).
    pub fn file(&self) -> &File {
        &self.file
    }

    /// The superblock's `state` (the only field read after the region is shared).
    fn state(&self) -> &AtomicU32 {
        // SAFETY: offset 64 of a live, page-aligned mapping at least SUPER_BYTES long, 4-byte
        // aligned; only ever accessed atomically.
        unsafe { &*self.base.add(64).cast::<AtomicU32>() }
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    pub fn serving(&self) -> bool {
        self.state().load(Acquire) == STATE_SERVING
    }

    /// Daemon: tells clients the region is no longer served.
    pub fn close(&self) {
        self.state().store(STATE_CLOSED, Release);
    }

    /// Header of `slot`; `None` out of range (a client may be handed garbage).
    #[inline]
    pub fn header(&self, slot: u32) -> Option<&SlotHeader> {
        if u64::from(slot) >= self.layout.slots {
            return None;
        }
        let off = self.layout.headers_off + u64::from(slot) * HEADER_BYTES;
        // SAFETY: in range (checked), 64-byte aligned (headers_off is 4096, headers are 64 B),
        // inside the mapping; `SlotHeader` is all atomics, valid for any bit pattern (zero
        // included), and only ever accessed atomically.
        Some(unsafe { &*self.base.add(off as usize).cast::<SlotHeader>() })
    }

    /// The hint-table set of `block` of `file`: WAYS cells.
    fn set_of(&self, file: u64, block: u64) -> &[AtomicU32; WAYS] {
        let set = bucket(file, block, self.layout.buckets - 1);
        let off = self.layout.table_off as usize + 4 * WAYS * set;
        // SAFETY: `set < buckets` (masked), so the 16 bytes lie inside the table, 4-byte
        // aligned; atomics only.
        unsafe { &*self.base.add(off).cast::<[AtomicU32; WAYS]>() }
    }

    /// The slots the hint table names for `block` of `file` (0..=WAYS of them; validate each
    /// with its header).
    #[inline]
    pub fn hints(&self, file: u64, block: u64) -> impl Iterator<Item = u32> + '_ {
        self.set_of(file, block)
            .iter()
            .filter_map(|c| c.load(Acquire).checked_sub(1))
    }

    /// Daemon: names `slot` for `block` of `file` in its set: an empty cell, else one whose
    /// slot holds no valid block of this set any more, else one chosen by the key.
    pub fn set_hint(&self, file: u64, block: u64, slot: u32) {
        let cells = self.set_of(file, block);
        let v = slot.saturating_add(1);
        if cells.iter().any(|c| c.load(Relaxed) == v) {
            return;
        }
        let set = bucket(file, block, self.layout.buckets - 1);
        for c in cells {
            let old = c.load(Relaxed);
            let stale = old == 0
                || self.header(old - 1).is_none_or(|h| {
                    h.flags.load(Relaxed) & super::VALID == 0
                        || bucket(
                            h.file.load(Relaxed),
                            h.block.load(Relaxed),
                            self.layout.buckets - 1,
                        ) != set
                });
            if stale && c.compare_exchange(old, v, Release, Relaxed).is_ok() {
                return;
            }
        }
        cells[((file ^ block) as usize) % WAYS].store(v, Release);
    }

    /// Daemon: clears `slot` from the set of `block` of `file`.
    pub fn clear_hint(&self, file: u64, block: u64, slot: u32) {
        let v = slot.saturating_add(1);
        for c in self.set_of(file, block) {
            let _ = c.compare_exchange(v, 0, Release, Relaxed);
        }
    }

    /// Pointer to the first byte of `slot` (panics if out of range).
    pub fn data_ptr(&self, slot: u32) -> *mut u8 {
        // Never a pointer outside the mapping, whatever the caller passes.
        assert!(
            u64::from(slot) < self.layout.slots,
            "slot {slot} out of range"
        );
        let off = self.layout.data_off + u64::from(slot) * self.layout.block;
        // SAFETY: `slot < slots` (checked), so the offset lies inside the mapping.
        unsafe { self.base.add(off as usize) }
    }

    /// Client `index`'s hit counter (bumped by the client itself, summed by the daemon).
    pub fn client_hits(&self, index: u32) -> Option<&AtomicU64> {
        if index as usize >= MAX_CLIENTS {
            return None;
        }
        let off = CLIENT_HITS_OFF as usize + 8 * index as usize;
        // SAFETY: 128 + 8·63 + 8 ≤ 4096 = SUPER_BYTES, 8-byte aligned, inside the mapping;
        // atomics only.
        Some(unsafe { &*self.base.add(off).cast::<AtomicU64>() })
    }

    /// Hits of every client so far.
    pub fn total_client_hits(&self) -> u64 {
        (0..MAX_CLIENTS as u32)
            .filter_map(|i| self.client_hits(i))
            .map(|c| c.load(Relaxed))
            .sum()
    }

    /// Daemon: drops every pin held by client `bit`.
    pub fn release_client(&self, bit: u64) {
        for s in 0..self.layout.slots as u32 {
            if let Some(h) = self.header(s) {
                h.release_client(bit);
            }
        }
    }

    /// Whether a client is updating any slot in place.
    pub fn any_writing(&self) -> bool {
        (0..self.layout.slots as u32).any(|s| self.header(s).is_some_and(SlotHeader::writing))
    }

    /// Slots some client holds a pin on.
    pub fn pinned_slots(&self) -> u64 {
        (0..self.layout.slots as u32)
            .filter(|&s| self.header(s).is_some_and(SlotHeader::pinned))
            .count() as u64
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: `base`/`total` are exactly what `mmap` returned and was asked for; nothing
        // borrowed from the region outlives it (borrows are tied to `&self`).
        unsafe {
            libc::munmap(self.base.cast(), self.layout.total as usize);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn superblock_fields_are_where_the_format_says() {
        assert_eq!(std::mem::offset_of!(Superblock, epoch), 56);
        assert_eq!(std::mem::offset_of!(Superblock, state), 64);
        assert!(std::mem::size_of::<Superblock>() <= CLIENT_HITS_OFF as usize);
    }

    #[test]
    fn layout_is_aligned_and_covers_everything() {
        let l = Layout::new(1000, 4096).expect("layout");
        assert_eq!(l.headers_off, 4096);
        assert_eq!(l.buckets, 512);
        assert_eq!(l.table_off % 4096, 0);
        assert!(l.table_off >= 4096 + 64 * 1000);
        assert_eq!(l.data_off % 4096, 0);
        assert!(l.data_off >= l.table_off + 16 * 512);
        assert_eq!(l.total, l.data_off + 1000 * 4096);
        assert!(Layout::new(0, 4096).is_none());
        assert!(Layout::new(10, 3000).is_none());
    }

    #[test]
    fn a_client_mapping_sees_the_daemons_headers_and_bytes() {
        let d = Region::create(16, 4096, 99).expect("create");
        let fd = d.file().try_clone().expect("dup");
        let c = Region::open(fd).expect("open");
        assert_eq!(c.epoch(), 99);
        assert!(c.serving());
        let h = d.header(3).expect("header");
        h.publish(10, 2);
        // SAFETY: slot 3 is in range and nothing else touches it in this test.
        unsafe { d.data_ptr(3).write_bytes(0xab, 4096) };
        h.set_valid();
        d.set_hint(10, 2, 3);
        assert_eq!(c.hints(10, 2).collect::<Vec<_>>(), vec![3]);
        let p = c.header(3).expect("h").try_pin(10, 2, 1).expect("pin");
        assert!(p.newly);
        // SAFETY: pinned, in range.
        assert_eq!(unsafe { *c.data_ptr(3).add(4095) }, 0xab);
        assert!(!d.header(3).expect("h").claim());
        d.release_client(1);
        assert!(d.header(3).expect("h").claim());
        assert!(c.header(16).is_none());
        d.close();
        assert!(!c.serving());
    }

    #[test]
    fn a_file_that_is_not_a_region_is_refused() {
        let f = tempfile_in_memfd(b"hello, not a region");
        let e = Region::open(f).expect_err("refused");
        assert!(e.to_string().contains("too small") || e.to_string().contains("magic"));
    }

    fn tempfile_in_memfd(bytes: &[u8]) -> File {
        // SAFETY: NUL-terminated name, valid flags, checked result.
        let fd = unsafe { libc::memfd_create(c"t".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0);
        // SAFETY: fresh descriptor owned here.
        let f = unsafe { File::from_raw_fd(fd) };
        std::os::unix::fs::FileExt::write_all_at(&f, bytes, 0).expect("write");
        f
    }
}
