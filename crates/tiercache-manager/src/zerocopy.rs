//! The manager's side of the zero-copy client (paper 003): with `MemConfig::zero_copy` the
//! arena lives in a shared region (`tiercache_memtier::shm`) that clients map. A client hits
//! with no help from here; what it asks for is done here:
//! - `pin_blocks`: 003's readblock miss path — reads the blocks through the ordinary read path
//!   (lower tiers, then BACKING; the blocks land in the arena) and pins them for the client,
//!   under the engine lock, so no eviction or removal can come in between;
//! - `sync_extend`: 003's syncblock (a client's updates are ordinary writes, made by the
//!   daemon at their commit: clients cannot store into the region);
//! - `release_client`: a client that is gone lets go of every pin it held, and the slots held
//!   back for it (removed while it pinned them) become free.
//!
//! Slot identities in the region are `(FileId, block)`, the keys of the engine's index.

use crate::cache::Inner;
use std::io;
use std::sync::Arc;
use tiercache_core::FileId;
use tiercache_memtier::shm::{ClientId, Region};

/// How often `pin_blocks` reads a block again when it was evicted between its read and its
/// pin (only under heavy eviction pressure).
const PIN_TRIES: usize = 4;

/// Blocks one `pin_blocks` request may ask for.
pub const MAX_PIN: u64 = 4096;

impl Inner {
    pub(crate) fn region(&self) -> Option<&Arc<Region>> {
        self.arena().shared()
    }

    /// Reads blocks `first..first+count` of `file` into the cache and pins each for client
    /// `id`. Returns each block's slot, `None` past EOF or when it could not be kept.
    pub(crate) fn pin_blocks(
        &self,
        file: FileId,
        first: u64,
        count: u64,
        id: ClientId,
    ) -> io::Result<Vec<Option<u32>>> {
        let region = self.region().ok_or_else(|| {
            io::Error::new(io::ErrorKind::Unsupported, "the cache is not zero-copy")
        })?;
        let too_far = || io::Error::new(io::ErrorKind::InvalidInput, "block range out of bounds");
        let end = first.checked_add(count).ok_or_else(too_far)?;
        end.checked_mul(self.bs() as u64)
            .filter(|&e| e <= i64::MAX as u64)
            .ok_or_else(too_far)?;
        if count > MAX_PIN {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("at most {MAX_PIN} blocks per request"),
            ));
        }
        let mut out = vec![None; count as usize];
        let mut scratch = vec![0u8; self.bs() * count.min(64) as usize];
        for _ in 0..PIN_TRIES {
            let missing: Vec<u64> = (0..count).filter(|&i| out[i as usize].is_none()).collect();
            let Some(&lo) = missing.first() else {
                break;
            };
            let hi = missing.last().copied().unwrap_or(lo);
            // Read the span of still-missing blocks (in chunks of at most 64 blocks).
            let mut b = lo;
            let mut eof = false;
            while b <= hi && !eof {
                let n = (hi - b + 1).min(64);
                let buf = &mut scratch[..self.bs() * n as usize];
                let got = match self.read_into(file, (first + b) * self.bs() as u64, buf) {
                    Ok(n) => n,
                    // Blocks pinned in an earlier round are the client's now: hand them over
                    // (it treats the rest as not kept) rather than lose them behind an error.
                    Err(_) if out.iter().any(Option::is_some) => return Ok(out),
                    Err(e) => return Err(e),
                };
                eof = got < buf.len();
                b += n;
            }
            let eng = self.lock();
            let size = eng.files().get(&file).map_or(0, |f| f.size());
            for &i in &missing {
                let block = first + i;
                if block.saturating_mul(self.bs() as u64) >= size {
                    continue;
                }
                let key = Self::key(file, block);
                let Some(slot) = eng.tier().peek(&key) else {
                    continue;
                };
                // Under the engine lock no claim or retire runs: a valid slot pins for sure.
                if region.pin_for(id, slot.0, file.0, block) {
                    out[i as usize] = Some(slot.0);
                }
            }
            drop(eng);
            let past_eof = |i: u64| (first + i).saturating_mul(self.bs() as u64) >= size;
            if (0..count).all(|i| out[i as usize].is_some() || past_eof(i)) {
                break;
            }
        }
        Ok(out)
    }

    /// 003's syncblock: with `new_size`, the file grows to it if it is shorter (zeros, as a
    /// truncate up: the client's updates are ordinary writes, made at their commit); then its
    /// dirty blocks go to BACKING and BACKING is synced. Returns the size.
    pub(crate) fn sync_extend(&self, file: FileId, new_size: Option<u64>) -> io::Result<u64> {
        if let Some(n) = new_size {
            self.truncate(file, None, n, true)?;
        }
        self.fsync(file, false)?;
        Ok(self.lock().files().get(&file).map_or(0, |f| f.size()))
    }

    /// Client `id` is gone: its pins go, and slots held back for it are freed.
    pub(crate) fn release_client(&self, id: ClientId) {
        if let Some(r) = self.region() {
            r.remove_client(id);
            self.lock().release_held();
        }
    }

    /// Slots held back because a client pinned them when they were removed.
    pub(crate) fn held_slots(&self) -> usize {
        self.lock().held_slots()
    }
}
