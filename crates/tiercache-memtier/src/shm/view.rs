//! A client's side of the shared memory: the region mapped read-only (it is sealed: it cannot
//! be mapped otherwise) and the client's own pin area mapped read-write. Every offset is
//! checked against the superblock and the file sizes before use.

use super::layout::{
    ClientId, Layout, Mapped, Mapping, PinArea, MAGIC, PIN_HEADER_BYTES, PIN_MAGIC, SUPER_BYTES,
    VERSION,
};
use super::proto::{pin_mask, unpin, Pinned};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::atomic::AtomicU64;

// A client loads the region's 8-byte header words from a read-only mapping: only relaxed
// atomic loads of at most the register width are defined there (`std::sync::atomic`, "Atomic
// accesses to read-only memory"), 8 bytes on these targets, 4 on the 32-bit ones.
#[cfg(not(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "loongarch64",
    target_arch = "mips64",
    target_arch = "mips64r6",
    target_arch = "powerpc64",
    target_arch = "riscv64",
    target_arch = "sparc64",
    target_arch = "s390x"
)))]
compile_error!("zero-copy clients need 8-byte relaxed atomic loads from read-only memory");

/// A client's view of a region and its pin area. Unmapped on drop.
#[derive(Debug)]
pub struct RegionView {
    mapped: Mapped,
    epoch: u64,
    pins: PinArea,
}

fn bad(why: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why)
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(w)
}

impl RegionView {
    /// Maps a region and a pin area received from the daemon, after checking the region's
    /// superblock and both sizes.
    pub fn open(region: File, pins: File, id: ClientId) -> io::Result<Self> {
        let (layout, epoch) = check_region(&region)?;
        check_pins(&pins, &layout, id)?;
        let mapped = Mapped::new(Mapping::new(&region, layout.total, false)?, layout);
        let pins = PinArea::new(
            Mapping::new(&pins, PIN_HEADER_BYTES + 8 * layout.pin_words(), true)?,
            layout.pin_words(),
        );
        Ok(Self {
            mapped,
            epoch,
            pins,
        })
    }

    pub fn layout(&self) -> &Layout {
        self.mapped.layout()
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    pub fn serving(&self) -> bool {
        self.mapped.serving()
    }

    /// The slots the hint table names for `block` of `file` (0..=4; `try_pin` validates).
    #[inline]
    pub fn hints(&self, file: u64, block: u64) -> impl Iterator<Item = u32> + '_ {
        self.mapped.hints(file, block)
    }

    /// Pins `slot` if it holds `block` of `file`, valid (see `proto`). `None`: a miss.
    #[inline]
    pub fn try_pin(&self, slot: u32, file: u64, block: u64) -> Option<Pinned> {
        let h = self.mapped.header(slot)?;
        let w = self.pins.word(slot)?;
        h.try_pin(file, block, w, pin_mask(slot))
    }

    /// Takes this client's pin bit for `slot` (after its last reference went, or a pin set for
    /// it by the daemon that it does not use).
    pub fn unpin(&self, slot: u32) {
        if let Some(w) = self.pins.word(slot) {
            unpin(w, pin_mask(slot));
        }
    }

    /// Whether `slot`'s header names `block` of `file` right now (valid, or retired while
    /// pinned): a pinned slot always does. Not a pin.
    pub fn names(&self, slot: u32, file: u64, block: u64) -> bool {
        use std::sync::atomic::{fence, Ordering::Acquire, Ordering::Relaxed};
        // Relaxed loads and a fence: the header is read-only here (see `Mapped::serving`).
        let named = self
            .mapped
            .header(slot)
            .is_some_and(|h| h.file.load(Relaxed) == file && h.block.load(Relaxed) == block);
        fence(Acquire);
        named
    }

    /// Pointer to the first byte of `slot` (panics if out of range). Read-only memory that the
    /// daemon may store into: read it through raw pointers, never as a `&[u8]` that must not
    /// change.
    pub fn data_ptr(&self, slot: u32) -> *const u8 {
        self.mapped.data_ptr(slot).cast_const()
    }

    /// This client's hit counter (the daemon sums them for `stats`).
    pub fn hits(&self) -> &AtomicU64 {
        self.pins.hits()
    }

    /// Start of the pin area (tests scribble over it to show the daemon does not care).
    pub fn pin_area_ptr(&self) -> *mut u8 {
        self.pins.base()
    }
}

/// Checks the region's superblock and size; its layout and epoch.
fn check_region(region: &File) -> io::Result<(Layout, u64)> {
    let len = region.metadata()?.len();
    if len < SUPER_BYTES {
        return Err(bad(format!("shared region of {len} bytes is too small")));
    }
    let mut sb = [0u8; 72];
    region.read_exact_at(&mut sb, 0)?;
    if sb[..8] != MAGIC {
        return Err(bad("not a tiercache shared region (bad magic)".into()));
    }
    let version = u32_at(&sb, 8);
    if version != VERSION {
        return Err(bad(format!(
            "shared region version {version}, this client speaks {VERSION}"
        )));
    }
    let (block, slots) = (u64::from(u32_at(&sb, 12)), u64::from(u32_at(&sb, 16)));
    let layout = Layout::new(slots, block)
        .ok_or_else(|| bad(format!("bad region geometry: {slots} slots of {block} B")))?;
    let stored = (
        u64::from(u32_at(&sb, 20)),
        u64_at(&sb, 24),
        u64_at(&sb, 32),
        u64_at(&sb, 40),
        u64_at(&sb, 48),
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
    Ok((layout, u64_at(&sb, 56)))
}

/// Checks a pin area's header and size against the region's layout and the client's index.
fn check_pins(pins: &File, layout: &Layout, id: ClientId) -> io::Result<()> {
    let len = pins.metadata()?.len();
    if len < PIN_HEADER_BYTES + 8 * layout.pin_words() {
        return Err(bad(format!("pin area of {len} bytes is too small")));
    }
    let mut h = [0u8; 24];
    pins.read_exact_at(&mut h, 0)?;
    if h[..8] != PIN_MAGIC || u64::from(u32_at(&h, 12)) != layout.slots || u32_at(&h, 16) != id.0 {
        return Err(bad("not this client's pin area".into()));
    }
    Ok(())
}
