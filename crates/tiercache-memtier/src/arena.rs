//! The data arena: one contiguous, zero-initialised allocation of `capacity × block_size` bytes,
//! cut into fixed-size slots indexed by [`SlotId`], each with a small header.
//!
//! Why one allocation: the zero-copy clients (paper 003) map the arena from a memfd
//! ([`Arena::new_shared`]); slot index + per-slot header (state lock, dirty sequence) is the
//! layout they need.
//!
//! Why `unsafe`: a per-slot `RwLock` cannot own a sub-slice of one allocation in safe Rust
//! without leaking the allocation (`Box::leak` + `chunks_mut`) or giving up the single
//! allocation (one `Box<[u8]>` per slot). Instead the bytes live in `Box<[UnsafeCell<u8>]>`
//! (zeroed lazily by the allocator, so a large arena costs nothing until used) and each slot's
//! `RwLock` guards its range; the three `unsafe` blocks that build slices are confined to the
//! guard types below. A memfd mapping will need the same raw-pointer handling anyway.
//!
//! A *shared* arena ([`Arena::new_shared`]) keeps the bytes in a zero-copy region (`shm`) that
//! clients map read-only; each slot's header there follows the slot's state
//! (`WriteSlot::set_state`).
//!
//! Invariants:
//! - slot `i` owns bytes `[i·bs, (i+1)·bs)`; ranges of different slots are disjoint;
//! - those bytes are only touched through a guard of slot `i`'s `RwLock` (shared to read,
//!   exclusive to write), which is what makes the `unsafe` slice creation below sound;
//! - a thread locks a slot only while it holds a pin on it (taken under the engine lock), so a
//!   slot with zero pins has no lock holder and `try_write` on it cannot fail;
//! - a thread holds at most one slot guard while it may block on another lock, and the engine
//!   lock is never held while blocking on a slot lock (only `try_*` there): no lock cycles.
//! - `SlotState::valid` is true only when the bytes hold `key`'s current data; cached bytes at or
//!   beyond the file's logical size are zero.

use crate::shm::Region;
use std::cell::UnsafeCell;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard, TryLockError};
use tiercache_core::{BlockKey, SlotId};

/// The arena could not be allocated.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ArenaError {
    #[error("cannot allocate a memory tier of {bytes} bytes")]
    Alloc { bytes: u64 },
    #[error("cannot create the zero-copy shared region: {0}")]
    Shared(#[source] io::Error),
}

/// What a slot's bytes hold, guarded by the slot's lock together with the bytes.
#[derive(Debug, Clone, Copy, Default)]
pub struct SlotState {
    /// The block this slot was given to by the engine (set at insertion).
    pub key: Option<BlockKey>,
    /// The bytes hold `key`'s data (false while it is being filled, or after a failed fill).
    pub valid: bool,
}

impl SlotState {
    #[inline]
    pub fn holds(&self, key: BlockKey) -> bool {
        self.valid && self.key == Some(key)
    }
}

/// Per-slot header.
#[derive(Debug, Default)]
pub struct Slot {
    state: RwLock<SlotState>,
    /// Dirty sequence: bumped (under the engine lock) each time a write to the slot is
    /// committed. The flusher marks a block clean only if it is unchanged since the snapshot
    /// (taken with the logical size it clipped at).
    pub seq: AtomicU64,
}

/// The arena. See the module docs for its invariants.
pub struct Arena {
    bytes: Bytes,
    slots: Box<[Slot]>,
    block: usize,
}

/// Where the slot bytes live.
enum Bytes {
    /// A private allocation.
    Heap(Box<[UnsafeCell<u8>]>),
    /// The data part of a zero-copy shared region (clients map it too; see `shm`).
    Shared(Arc<Region>),
}

impl std::fmt::Debug for Arena {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Arena")
            .field("slots", &self.slots.len())
            .field("block", &self.block)
            .finish()
    }
}

// SAFETY: the only non-`Sync` part is the byte array (`UnsafeCell`s, or the shared mapping).
// Every access to a slot's bytes goes through a guard of that slot's `RwLock` (see
// `ReadSlot`/`WriteSlot`), so shared access is read-only and mutation is exclusive, per slot,
// with disjoint byte ranges per slot. In a shared arena no other process can store into the
// bytes: clients can only map the sealed region read-only (`shm::region`).
unsafe impl Sync for Arena {}

impl Arena {
    /// `capacity` slots of `block` bytes each, zeroed (lazily, by the allocator).
    pub fn new(capacity: usize, block: usize) -> Result<Self, ArenaError> {
        let total = capacity
            .checked_mul(block)
            .filter(|&t| t > 0 && t <= isize::MAX as usize)
            .ok_or(ArenaError::Alloc {
                bytes: (capacity as u64).saturating_mul(block as u64),
            })?;
        let layout = std::alloc::Layout::array::<u8>(total).map_err(|_| ArenaError::Alloc {
            bytes: total as u64,
        })?;
        // SAFETY: `layout` has a non-zero size (checked above).
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(ArenaError::Alloc {
                bytes: total as u64,
            });
        }
        // SAFETY: `ptr` was just allocated by the global allocator with the layout of `[u8;
        // total]`, which is also the layout of `[UnsafeCell<u8>; total]` (`UnsafeCell` is
        // `repr(transparent)`); it is zero-initialised, a valid `u8` value; ownership moves into
        // the box, which frees it with the same layout.
        let bytes: Box<[UnsafeCell<u8>]> = unsafe {
            Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                ptr.cast::<UnsafeCell<u8>>(),
                total,
            ))
        };
        let slots = (0..capacity).map(|_| Slot::default()).collect();
        Ok(Self {
            bytes: Bytes::Heap(bytes),
            slots,
            block,
        })
    }

    /// `capacity` slots of `block` bytes in a new zero-copy shared region (`shm`), zeroed.
    pub fn new_shared(capacity: usize, block: usize, epoch: u64) -> Result<Self, ArenaError> {
        let region = Region::create(capacity, block, epoch).map_err(ArenaError::Shared)?;
        let slots = (0..capacity).map(|_| Slot::default()).collect();
        Ok(Self {
            bytes: Bytes::Shared(Arc::new(region)),
            slots,
            block,
        })
    }

    /// The dirty sequence of `slot` (bumped by every committed write; only this process
    /// changes it: zero-copy clients cannot store into the region).
    #[inline]
    pub fn seq(&self, slot: SlotId) -> &AtomicU64 {
        &self.slot(slot).seq
    }

    /// The shared region, when the arena is one.
    pub fn shared(&self) -> Option<&Arc<Region>> {
        match &self.bytes {
            Bytes::Shared(r) => Some(r),
            Bytes::Heap(_) => None,
        }
    }

    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    pub fn block_size(&self) -> usize {
        self.block
    }

    /// The header of `slot`. Slot ids come from the tier, which only hands out `0..capacity`.
    #[inline]
    pub fn slot(&self, slot: SlotId) -> &Slot {
        &self.slots[slot.index()]
    }

    /// Pointer to the first byte of `slot`'s range (bounds-checked).
    #[inline]
    fn base(&self, slot: SlotId) -> *mut u8 {
        match &self.bytes {
            Bytes::Heap(bytes) => {
                let start = slot.index() * self.block;
                let cells = &bytes[start..start + self.block];
                UnsafeCell::raw_get(cells.as_ptr())
            }
            Bytes::Shared(r) => {
                assert!(
                    slot.index() < self.slots.len(),
                    "slot {} out of range",
                    slot.0
                );
                r.data_ptr(slot.0)
            }
        }
    }

    fn shm(&self, slot: SlotId) -> Option<(&Region, u32)> {
        self.shared().map(|r| (&**r, slot.0))
    }

    /// Shared access to `slot` (blocks while a writer holds it).
    pub fn read(&self, slot: SlotId) -> ReadSlot<'_> {
        let guard = self
            .slot(slot)
            .state
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        ReadSlot {
            guard,
            ptr: self.base(slot),
            len: self.block,
        }
    }

    /// Exclusive access to `slot` (blocks while anyone holds it).
    pub fn write(&self, slot: SlotId) -> WriteSlot<'_> {
        let guard = self
            .slot(slot)
            .state
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        WriteSlot {
            guard,
            ptr: self.base(slot),
            len: self.block,
            shm: self.shm(slot),
        }
    }

    /// Exclusive access if nobody holds `slot`; used under the engine lock on unpinned slots.
    pub fn try_write(&self, slot: SlotId) -> Option<WriteSlot<'_>> {
        let guard = match self.slot(slot).state.try_write() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return None,
        };
        Some(WriteSlot {
            guard,
            ptr: self.base(slot),
            len: self.block,
            shm: self.shm(slot),
        })
    }

    /// The state of `slot` if nobody holds it exclusively; used under the engine lock.
    pub fn try_state(&self, slot: SlotId) -> Option<SlotState> {
        match self.slot(slot).state.try_read() {
            Ok(g) => Some(*g),
            Err(TryLockError::Poisoned(p)) => Some(*p.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }
}

/// A shared guard over one slot's state and bytes.
pub struct ReadSlot<'a> {
    guard: RwLockReadGuard<'a, SlotState>,
    ptr: *mut u8,
    len: usize,
}

impl ReadSlot<'_> {
    pub fn state(&self) -> SlotState {
        *self.guard
    }
    pub fn data(&self) -> &[u8] {
        // SAFETY: `ptr..ptr+len` is this slot's byte range inside the live arena (it outlives
        // the guard's borrow); we hold the slot's read lock, so no `WriteSlot` of this slot
        // exists and nothing mutates these bytes while the slice lives (no other process can:
        // clients map a shared arena read-only).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// An exclusive guard over one slot's state and bytes.
pub struct WriteSlot<'a> {
    guard: RwLockWriteGuard<'a, SlotState>,
    ptr: *mut u8,
    len: usize,
    /// The slot's header in the shared region, which `set_state` keeps in step.
    shm: Option<(&'a Region, u32)>,
}

impl WriteSlot<'_> {
    pub fn state(&self) -> SlotState {
        *self.guard
    }
    /// Sets what the slot holds. In a shared arena the header follows: a new identity is
    /// published (invalid: clients cannot pin it), validity makes it pinnable and points the
    /// hint table at it. The caller made the slot unpinnable first (a claimed victim, a retired
    /// or never used slot): identities never change under a client's pin.
    pub fn set_state(&mut self, state: SlotState) {
        if let (Some((r, i)), Some(k)) = (self.shm, state.key) {
            if let Some(h) = r.header(i) {
                let old = *self.guard;
                if old.key != state.key || !state.valid {
                    h.publish(k.file.0, k.block.0);
                }
                if state.valid {
                    h.set_valid();
                    r.set_hint(k.file.0, k.block.0, i);
                }
            }
        }
        *self.guard = state;
    }
    pub fn data(&self) -> &[u8] {
        // SAFETY: as in `ReadSlot::data`; we hold the slot's write lock, so nobody else reads
        // or writes the range, and `&self` prevents a concurrent `data_mut`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
    pub fn data_mut(&mut self) -> &mut [u8] {
        // SAFETY: the pointer comes from `UnsafeCell::raw_get` (heap arena) or a writable
        // shared mapping (shared arena), so writing through it is allowed; we hold the slot's
        // write lock (exclusive in this process for this disjoint range) and `&mut self` makes
        // the returned slice the only live reference to it here.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

/// Slot guards are used only inside one function on one thread; the raw pointer makes them
/// `!Send`, which is what we want.
impl std::fmt::Debug for ReadSlot<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadSlot")
            .field("state", &*self.guard)
            .finish()
    }
}

impl std::fmt::Debug for WriteSlot<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteSlot")
            .field("state", &*self.guard)
            .finish()
    }
}

/// Loads with sequentially consistent ordering: these counters are read and bumped under the
/// engine lock or together with a slot guard, so the ordering is belt and braces.
pub const ORD: Ordering = Ordering::SeqCst;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_disjoint_and_zeroed() {
        let a = Arena::new(4, 512).expect("arena");
        for i in 0..4u32 {
            let mut w = a.write(SlotId(i));
            assert!(w.data().iter().all(|&b| b == 0));
            w.data_mut().fill(i as u8 + 1);
        }
        for i in 0..4u32 {
            let r = a.read(SlotId(i));
            assert!(r.data().iter().all(|&b| b == i as u8 + 1));
        }
    }

    #[test]
    fn try_write_fails_while_read_held() {
        let a = Arena::new(2, 512).expect("arena");
        let r = a.read(SlotId(1));
        assert!(a.try_write(SlotId(1)).is_none());
        assert!(a.try_write(SlotId(0)).is_some());
        drop(r);
        assert!(a.try_write(SlotId(1)).is_some());
    }
}
