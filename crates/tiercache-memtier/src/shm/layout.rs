//! What the daemon and its clients both see of the shared memory (format: `docs/design.md` §8):
//! the region's layout and a mapping of it (`Mapped`: superblock state, headers, hint table,
//! slot bytes), and a client's pin area ([`PinArea`]). Creating them (daemon) is in `region`,
//! mapping what was received (client) in `view`.

use super::proto::{bucket, SlotHeader};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::atomic::fence;
use std::sync::atomic::Ordering::{Acquire, Relaxed};
use std::sync::atomic::{AtomicU32, AtomicU64};

pub const MAGIC: [u8; 8] = *b"TCZCSHM2";
pub const VERSION: u32 = 2;
/// Bytes of the superblock page.
pub const SUPER_BYTES: u64 = 4096;
/// Bytes of one slot header.
pub const HEADER_BYTES: u64 = 32;
/// Clients that may map the region at once.
pub const MAX_CLIENTS: usize = 64;
/// Entries per hint-table set (a set is 16 bytes).
pub const WAYS: usize = 4;
/// `Superblock::state`: serving.
pub const STATE_SERVING: u32 = 1;
/// `Superblock::state`: the daemon is gone or shutting down; pins mean nothing any more.
pub const STATE_CLOSED: u32 = 2;
/// Offset of `state` in the superblock.
const STATE_OFF: usize = 64;

pub const PIN_MAGIC: [u8; 8] = *b"TCZCPIN1";
pub const PIN_VERSION: u32 = 1;
/// Bytes of a pin area's header; the pin words follow.
pub const PIN_HEADER_BYTES: u64 = 64;
/// Offset of the client's hit counter in its pin area.
const PIN_HITS_OFF: usize = 32;

/// Which client: its index among the daemon's at most [`MAX_CLIENTS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClientId(pub u32);

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

pub(crate) fn round_up(x: u64, to: u64) -> Option<u64> {
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

    /// Words of a pin area's bitmap (one bit per slot).
    pub fn pin_words(&self) -> u64 {
        self.slots.div_ceil(64)
    }

    /// Bytes of a client's pin area.
    pub fn pin_area_bytes(&self) -> u64 {
        round_up(PIN_HEADER_BYTES + 8 * self.pin_words(), 4096).unwrap_or(u64::MAX)
    }
}

/// A new memfd of `len` bytes, sealed against shrinking and growing (a mapping of it can never
/// be cut short, so no SIGBUS) but not yet against further seals.
pub(crate) fn sized_memfd(name: &std::ffi::CStr, len: u64) -> io::Result<File> {
    // SAFETY: a NUL-terminated name and valid flags; the result is checked.
    let fd =
        unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just created and is owned by nobody else.
    let file = unsafe { File::from_raw_fd(fd) };
    file.set_len(len)?;
    add_seals(&file, libc::F_SEAL_SHRINK | libc::F_SEAL_GROW)?;
    Ok(file)
}

pub(crate) fn add_seals(file: &File, seals: i32) -> io::Result<()> {
    // SAFETY: F_ADD_SEALS on a memfd we own, with valid seal bits.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// One `mmap` of a file; unmapped on drop.
#[derive(Debug)]
pub(crate) struct Mapping {
    base: *mut u8,
    len: usize,
}

impl Mapping {
    /// Maps the first `len` bytes of `file` (at least that long: the callers check) shared,
    /// writable or read-only.
    pub(crate) fn new(file: &File, len: u64, writable: bool) -> io::Result<Self> {
        let len = usize::try_from(len)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "mapping too large"))?;
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        // SAFETY: a fresh shared mapping of `len` bytes of `file`; the result is checked
        // against MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
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
            len,
        })
    }

    pub(crate) fn base(&self) -> *mut u8 {
        self.base
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are exactly what `mmap` returned and was asked for; nothing
        // borrowed from the mapping outlives it (borrows are tied to its owner's `&self`).
        unsafe {
            libc::munmap(self.base.cast(), self.len);
        }
    }
}

// SAFETY: the mapping is plain shared memory reached only through atomics (headers, table,
// state, pins) or raw pointers whose synchronisation is the owner's business.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

/// A mapping of the region with its (checked) layout: what both sides read.
#[derive(Debug)]
pub(crate) struct Mapped {
    map: Mapping,
    layout: Layout,
}

impl Mapped {
    /// `map` covers at least `layout.total` bytes (the callers check).
    pub(crate) fn new(map: Mapping, layout: Layout) -> Self {
        debug_assert!(map.len() as u64 >= layout.total);
        Self { map, layout }
    }

    pub(crate) fn layout(&self) -> &Layout {
        &self.layout
    }

    pub(crate) fn base(&self) -> *mut u8 {
        self.map.base()
    }

    /// The superblock's `state` (the only field read after the region is shared).
    pub(crate) fn state(&self) -> &AtomicU32 {
        // SAFETY: offset 64 of a live, page-aligned mapping at least SUPER_BYTES long, 4-byte
        // aligned; only ever accessed atomically.
        unsafe { &*self.base().add(STATE_OFF).cast::<AtomicU32>() }
    }

    /// Whether the daemon serves the region. A relaxed load and an acquire fence, not an
    /// acquire load: a client's mapping is read-only, where only relaxed atomic loads (of at
    /// most 8 bytes on 64-bit targets) are defined (`std::sync::atomic`, "Atomic accesses to
    /// read-only memory"). The same for every load from the region below.
    pub(crate) fn serving(&self) -> bool {
        let state = self.state().load(Relaxed);
        fence(Acquire);
        state == STATE_SERVING
    }

    /// Header of `slot`; `None` out of range.
    #[inline]
    pub(crate) fn header(&self, slot: u32) -> Option<&SlotHeader> {
        if u64::from(slot) >= self.layout.slots {
            return None;
        }
        let off = self.layout.headers_off + u64::from(slot) * HEADER_BYTES;
        // SAFETY: in range (checked), 32-byte aligned (headers_off is 4096, headers are 32 B),
        // inside the mapping; `SlotHeader` is all atomics, valid for any bit pattern, and only
        // ever accessed atomically (a client's mapping is read-only: it only does relaxed loads).
        Some(unsafe { &*self.base().add(off as usize).cast::<SlotHeader>() })
    }

    /// The hint-table set of `block` of `file`: WAYS cells.
    pub(crate) fn set_of(&self, file: u64, block: u64) -> (usize, &[AtomicU32; WAYS]) {
        let set = bucket(file, block, self.layout.buckets - 1);
        let off = self.layout.table_off as usize + 4 * WAYS * set;
        // SAFETY: `set < buckets` (masked), so the 16 bytes lie inside the table, 4-byte
        // aligned; atomics only.
        (set, unsafe {
            &*self.base().add(off).cast::<[AtomicU32; WAYS]>()
        })
    }

    /// The slots the hint table names for `block` of `file` (validate each with its header).
    #[inline]
    pub(crate) fn hints(&self, file: u64, block: u64) -> impl Iterator<Item = u32> + '_ {
        self.set_of(file, block)
            .1
            .iter()
            // Relaxed: a hint is validated by `try_pin`, whose fences order what it reads.
            .filter_map(|c| c.load(Relaxed).checked_sub(1))
    }

    /// Pointer to the first byte of `slot` (panics if out of range).
    pub(crate) fn data_ptr(&self, slot: u32) -> *mut u8 {
        // Never a pointer outside the mapping, whatever the caller passes.
        assert!(
            u64::from(slot) < self.layout.slots,
            "slot {slot} out of range"
        );
        let off = self.layout.data_off + u64::from(slot) * self.layout.block;
        // SAFETY: `slot < slots` (checked), so the offset lies inside the mapping.
        unsafe { self.base().add(off as usize) }
    }
}

/// A client's pin area: a 64-byte header (the client's hit counter at 32) and one bit per
/// slot. Mapped read-write by its client and by the daemon, by nobody else.
#[derive(Debug)]
pub struct PinArea {
    map: Mapping,
    words: u64,
}

impl PinArea {
    /// `map` covers at least `PIN_HEADER_BYTES + 8 * words` bytes (the callers check).
    pub(crate) fn new(map: Mapping, words: u64) -> Self {
        debug_assert!(map.len() as u64 >= PIN_HEADER_BYTES + 8 * words);
        Self { map, words }
    }

    /// The pin word holding `slot`'s bit; `None` out of range.
    #[inline]
    pub fn word(&self, slot: u32) -> Option<&AtomicU64> {
        let w = u64::from(slot / 64);
        if w >= self.words {
            return None;
        }
        // SAFETY: `w < words`, so the 8 bytes lie inside the mapping (checked at creation),
        // 8-byte aligned (PIN_HEADER_BYTES is 64); atomics only.
        Some(unsafe {
            &*self
                .map
                .base()
                .add((PIN_HEADER_BYTES + 8 * w) as usize)
                .cast::<AtomicU64>()
        })
    }

    /// The client's hit counter (bumped by the client, read by the daemon's stats).
    pub fn hits(&self) -> &AtomicU64 {
        // SAFETY: offset 32 < PIN_HEADER_BYTES, inside the mapping, 8-byte aligned; atomics only.
        unsafe { &*self.map.base().add(PIN_HITS_OFF).cast::<AtomicU64>() }
    }

    /// Every pin word (the daemon's stats).
    pub(crate) fn words(&self) -> impl Iterator<Item = &AtomicU64> + '_ {
        (0..self.words).filter_map(move |w| self.word((w * 64) as u32))
    }

    pub(crate) fn base(&self) -> *mut u8 {
        self.map.base()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn superblock_fields_are_where_the_format_says() {
        assert_eq!(std::mem::offset_of!(Superblock, epoch), 56);
        assert_eq!(std::mem::offset_of!(Superblock, state), STATE_OFF);
        assert!(std::mem::size_of::<Superblock>() <= 128);
    }

    #[test]
    fn layout_is_aligned_and_covers_everything() {
        let l = Layout::new(1000, 4096).expect("layout");
        assert_eq!(l.headers_off, 4096);
        assert_eq!(l.buckets, 512);
        assert_eq!(l.table_off % 4096, 0);
        assert!(l.table_off >= 4096 + 32 * 1000);
        assert_eq!(l.data_off % 4096, 0);
        assert!(l.data_off >= l.table_off + 16 * 512);
        assert_eq!(l.total, l.data_off + 1000 * 4096);
        assert_eq!(l.pin_words(), 16);
        assert_eq!(l.pin_area_bytes(), 4096);
        assert!(Layout::new(0, 4096).is_none());
        assert!(Layout::new(10, 3000).is_none());
    }
}
