//! The daemon's side of the shared memory: the region (superblock, slot headers, hint table,
//! slot bytes in one memfd) and the pin area of each admitted client (format:
//! `docs/design.md` §8).
//!
//! Who may store into what — the whole security argument:
//! - the region is mapped read-write by the daemon *before* it is sealed with
//!   `F_SEAL_FUTURE_WRITE`; from then on no new writable mapping, `write`, hole punch or
//!   resize of it can be made by anyone (a client's descriptor, or one reopened through
//!   `/proc`, only maps read-only). So only the daemon stores into headers, hints and bytes;
//! - each client's pin area is a memfd of its own, shared by that client and the daemon only.
//!   The daemon reads nothing from it but pin bits (a set bit keeps a slot from reuse) and
//!   the hit counter (stats); so nothing a client stores can make the daemon read or write
//!   another block's bytes.

use super::layout::{
    add_seals, sized_memfd, ClientId, Layout, Mapped, Mapping, PinArea, Superblock, MAGIC,
    MAX_CLIENTS, PIN_MAGIC, PIN_VERSION, STATE_CLOSED, STATE_SERVING, VERSION,
};
use super::proto::{pin_mask, SlotHeader, VALID};
use std::fs::File;
use std::io;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{Relaxed, Release, SeqCst};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard};

/// The daemon's mapping of the region and its clients' pin areas. Unmapped on drop.
#[derive(Debug)]
pub struct Region {
    mapped: Mapped,
    epoch: u64,
    file: File,
    /// Pin area of each admitted client (`None`: the index is free).
    clients: RwLock<Vec<Option<Arc<PinArea>>>>,
    /// Hits of clients that are gone (their counters went with their areas).
    gone_hits: AtomicU64,
}

impl Region {
    /// A new zeroed region in a memfd that nobody but this mapping can ever write (sealed).
    pub fn create(slots: usize, block: usize, epoch: u64) -> io::Result<Self> {
        let layout = Layout::new(slots as u64, block as u64).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("no shared region for {slots} slots of {block} bytes"),
            )
        })?;
        let file = sized_memfd(c"tiercache-arena", layout.total)?;
        let map = Mapping::new(&file, layout.total, true)?;
        // SAFETY: the superblock lies at offset 0 of a mapping at least SUPER_BYTES long,
        // page aligned; nobody else has the descriptor yet, so these plain writes race with
        // nothing.
        unsafe {
            let sb = map.base().cast::<Superblock>();
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
        // Our writable mapping exists: from now on nobody can make another one.
        add_seals(&file, libc::F_SEAL_FUTURE_WRITE | libc::F_SEAL_SEAL)?;
        let mapped = Mapped::new(map, layout);
        mapped.state().store(STATE_SERVING, Release);
        Ok(Self {
            mapped,
            epoch,
            file,
            clients: RwLock::new((0..MAX_CLIENTS).map(|_| None).collect()),
            gone_hits: AtomicU64::new(0),
        })
    }

    pub fn layout(&self) -> &Layout {
        self.mapped.layout()
    }

    /// The region's memfd (to send to a client; it can only map it read-only).
    pub fn file(&self) -> &File {
        &self.file
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    pub fn serving(&self) -> bool {
        self.mapped.serving()
    }

    /// Tells clients the region is no longer served.
    pub fn close(&self) {
        self.mapped.state().store(STATE_CLOSED, Release);
    }

    /// Header of `slot`; `None` out of range.
    #[inline]
    pub fn header(&self, slot: u32) -> Option<&SlotHeader> {
        self.mapped.header(slot)
    }

    /// Pointer to the first byte of `slot` (panics if out of range). Writable: this is the
    /// daemon's mapping.
    pub fn data_ptr(&self, slot: u32) -> *mut u8 {
        self.mapped.data_ptr(slot)
    }

    fn clients(&self) -> RwLockReadGuard<'_, Vec<Option<Arc<PinArea>>>> {
        self.clients.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Gives client `id` a fresh pin area (zeroed) and returns its memfd, to send to the
    /// client. Sealed against resizing: the client cannot cut the daemon's mapping short.
    pub fn add_client(&self, id: ClientId) -> io::Result<File> {
        let idx = id.0 as usize;
        if idx >= MAX_CLIENTS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("client index {} out of range", id.0),
            ));
        }
        let layout = self.layout();
        let file = sized_memfd(c"tiercache-pins", layout.pin_area_bytes())?;
        add_seals(&file, libc::F_SEAL_SEAL)?;
        let map = Mapping::new(&file, layout.pin_area_bytes(), true)?;
        // SAFETY: the header lies in the first 64 bytes of a fresh mapping at least one page
        // long; nobody else has the descriptor yet.
        unsafe {
            let p = map.base();
            p.cast::<[u8; 8]>().write(PIN_MAGIC);
            p.add(8).cast::<u32>().write(PIN_VERSION);
            p.add(12).cast::<u32>().write(layout.slots as u32);
            p.add(16).cast::<u32>().write(id.0);
            p.add(24).cast::<u64>().write(self.epoch);
        }
        let area = Arc::new(PinArea::new(map, layout.pin_words()));
        let mut clients = self.clients.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(old) = clients[idx].replace(area) {
            self.gone_hits.fetch_add(old.hits().load(Relaxed), Relaxed);
        }
        Ok(file)
    }

    /// Client `id` is gone: its pins no longer count (the caller then frees held slots).
    pub fn remove_client(&self, id: ClientId) {
        let mut clients = self.clients.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(old) = clients.get_mut(id.0 as usize).and_then(Option::take) {
            self.gone_hits.fetch_add(old.hits().load(Relaxed), Relaxed);
        }
    }

    /// Whether any client's pin bit for `slot` is set (SeqCst loads: the daemon's half of the
    /// Dekker pair in `proto`).
    pub fn pinned(&self, slot: u32) -> bool {
        let mask = pin_mask(slot);
        self.clients()
            .iter()
            .flatten()
            .any(|a| a.word(slot).is_some_and(|w| w.load(SeqCst) & mask != 0))
    }

    /// Takes `slot` for reuse (eviction) unless a client pins it; see `SlotHeader::claim`.
    pub fn claim(&self, slot: u32) -> bool {
        self.header(slot)
            .is_none_or(|h| h.claim(|| self.pinned(slot)))
    }

    /// `slot` leaves the cache; whether a client still pins it (see `SlotHeader::retire`).
    pub fn retire(&self, slot: u32) -> bool {
        self.header(slot)
            .is_some_and(|h| h.retire(|| self.pinned(slot)))
    }

    /// Pins `slot` for client `id` if it holds `block` of `file` (a miss served by the daemon).
    pub fn pin_for(&self, id: ClientId, slot: u32, file: u64, block: u64) -> bool {
        let (Some(h), Some(area)) = (
            self.header(slot),
            self.clients().get(id.0 as usize).cloned().flatten(),
        ) else {
            return false;
        };
        area.word(slot)
            .is_some_and(|w| h.try_pin(file, block, w, pin_mask(slot)).is_some())
    }

    /// Names `slot` for `block` of `file` in its hint set: an empty cell, else one whose slot
    /// holds no valid block of this set any more, else one chosen by the key.
    pub fn set_hint(&self, file: u64, block: u64, slot: u32) {
        let (set, cells) = self.mapped.set_of(file, block);
        let v = slot.saturating_add(1);
        if cells.iter().any(|c| c.load(Relaxed) == v) {
            return;
        }
        let mask = self.layout().buckets - 1;
        for c in cells {
            let old = c.load(Relaxed);
            let stale = old == 0
                || self.header(old - 1).is_none_or(|h| {
                    h.flags.load(Relaxed) & VALID == 0
                        || super::proto::bucket(h.file.load(Relaxed), h.block.load(Relaxed), mask)
                            != set
                });
            if stale && c.compare_exchange(old, v, Release, Relaxed).is_ok() {
                return;
            }
        }
        cells[((file ^ block) as usize) % cells.len()].store(v, Release);
    }

    /// Clears `slot` from the hint set of `block` of `file`.
    pub fn clear_hint(&self, file: u64, block: u64, slot: u32) {
        let v = slot.saturating_add(1);
        for c in self.mapped.set_of(file, block).1 {
            let _ = c.compare_exchange(v, 0, Release, Relaxed);
        }
    }

    /// Hits of every client so far (counted by the clients in their pin areas).
    pub fn total_client_hits(&self) -> u64 {
        let live: u64 = self
            .clients()
            .iter()
            .flatten()
            .map(|a| a.hits().load(Relaxed))
            .fold(0, u64::saturating_add);
        live.saturating_add(self.gone_hits.load(Relaxed))
    }

    /// Slots some client holds a pin on.
    pub fn pinned_slots(&self) -> u64 {
        let clients = self.clients();
        let words = self.layout().pin_words() as usize;
        let mut any = vec![0u64; words];
        for a in clients.iter().flatten() {
            for (acc, w) in any.iter_mut().zip(a.words()) {
                *acc |= w.load(Relaxed);
            }
        }
        // Bits past the last slot mean nothing (a client may set them).
        let tail = self.layout().slots % 64;
        if let (Some(last), true) = (any.last_mut(), tail != 0) {
            *last &= (1u64 << tail) - 1;
        }
        any.iter().map(|w| u64::from(w.count_ones())).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::super::view::RegionView;
    use super::*;

    #[test]
    fn a_client_sees_the_daemons_headers_and_bytes_and_its_pins_hold_slots() {
        let d = Region::create(100, 4096, 99).expect("create");
        let pins = d.add_client(ClientId(2)).expect("client");
        let c =
            RegionView::open(d.file().try_clone().expect("dup"), pins, ClientId(2)).expect("open");
        assert_eq!(c.epoch(), 99);
        assert!(c.serving());
        let h = d.header(70).expect("header");
        h.publish(10, 2);
        // SAFETY: slot 70 is in range and nothing else touches it in this test.
        unsafe { d.data_ptr(70).write_bytes(0xab, 4096) };
        h.set_valid();
        d.set_hint(10, 2, 70);
        assert_eq!(c.hints(10, 2).collect::<Vec<_>>(), vec![70]);
        assert!(c.try_pin(70, 10, 2).expect("pin").newly);
        // SAFETY: pinned, in range.
        assert_eq!(unsafe { *c.data_ptr(70).add(4095) }, 0xab);
        assert!(d.pinned(70));
        assert_eq!(d.pinned_slots(), 1);
        assert!(!d.claim(70), "pinned");
        c.unpin(70);
        assert!(d.claim(70));
        assert!(c.try_pin(70, 10, 2).is_none(), "claimed");
        d.close();
        assert!(!c.serving());
    }

    #[test]
    fn a_gone_clients_pins_stop_counting() {
        let d = Region::create(16, 4096, 1).expect("create");
        let pins = d.add_client(ClientId(0)).expect("client");
        let c =
            RegionView::open(d.file().try_clone().expect("dup"), pins, ClientId(0)).expect("open");
        let h = d.header(3).expect("h");
        h.publish(1, 1);
        h.set_valid();
        c.try_pin(3, 1, 1).expect("pin");
        c.hits().fetch_add(5, Relaxed);
        assert!(d.retire(3));
        d.remove_client(ClientId(0));
        assert!(!d.pinned(3));
        assert_eq!(d.total_client_hits(), 5);
    }
}
