//! The manager's side of the zero-copy client (paper 003): with `MemConfig::zero_copy` the
//! arena lives in a shared region (`tiercache_memtier::shm`) that clients map. A client hits
//! with no help from here; what it asks for is done here:
//! - `pin_blocks`: 003's readblock miss path — reads the blocks through the ordinary read path
//!   (lower tiers, then BACKING; the blocks land in the arena) and pins them for the client,
//!   under the engine lock, so no eviction or removal can come in between;
//! - `release_client`: a client that is gone lets go of every pin it held, and the slots held
//!   back for it (removed while it pinned them) become free.
//!
//! Slot identities in the region are `(FileId, block)`, the keys of the engine's index.

use crate::cache::Inner;
use std::io;
use std::sync::Arc;
use tiercache_core::FileId;
use tiercache_memtier::shm::Region;

/// How often `pin_blocks` reads a block again when it was evicted between its read and its
/// pin (only under heavy eviction pressure).
const PIN_TRIES: usize = 4;

/// Blocks one `pin_blocks` request may ask for.
pub const MAX_PIN: u64 = 4096;

impl Inner {
    pub(crate) fn region(&self) -> Option<&Arc<Region>> {
        self.arena.shared()
    }

    /// Reads blocks `first..first+count` of `file` into the cache and pins each for client
    /// `bit`. Returns each block's slot, `None` past EOF or when it could not be kept.
    pub(crate) fn pin_blocks(
        &self,
        file: FileId,
        first: u64,
        count: u64,
        bit: u64,
    ) -> io::Result<Vec<Option<u32>>> {
        let region = self.region().ok_or_else(|| {
            io::Error::new(io::ErrorKind::Unsupported, "the cache is not zero-copy")
        })?;
        let too_far = || io::Error::new(io::ErrorKind::InvalidInput, "block range out of bounds");
        let end = first.checked_add(count).ok_or_else(too_far)?;
        end.checked_mul(self.bs as u64)
            .filter(|&e| e <= i64::MAX as u64)
            .ok_or_else(too_far)?;
        if count > MAX_PIN {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("at most {MAX_PIN} blocks per request"),
            ));
        }
        let mut out = vec![None; count as usize];
        let mut scratch = vec![0u8; self.bs * count.min(64) as usize];
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
                let buf = &mut scratch[..self.bs * n as usize];
                let got = match self.read_into(file, (first + b) * self.bs as u64, buf) {
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
            let size = eng.files.get(&file).map_or(0, |f| f.size);
            for &i in &missing {
                let block = first + i;
                if block.saturating_mul(self.bs as u64) >= size {
                    continue;
                }
                let key = Self::key(file, block);
                let Some(slot) = eng.tier.peek(&key) else {
                    continue;
                };
                // Under the engine lock no claim or retire runs: a valid slot pins for sure.
                if let Some(h) = region.header(slot.0) {
                    if h.try_pin(file.0, block, bit).is_some() {
                        out[i as usize] = Some(slot.0);
                    }
                }
            }
            drop(eng);
            let past_eof = |i: u64| (first + i).saturating_mul(self.bs as u64) >= size;
            if (0..count).all(|i| out[i as usize].is_some() || past_eof(i)) {
                break;
            }
        }
        Ok(out)
    }

    /// Pins block `block` of `file` for client `bit` to update in place and marks it dirty (003's
    /// mutable block). The block is read into the cache first; then, under the file's `op` lock
    /// (as a write) and the engine lock, the client's pin and writer bit are set *before* the
    /// block is committed dirty — so write-back cannot mark it clean until the client ends its
    /// update — and, as for a write, the file's generation and change counter move, its mtime
    /// is now, and copies of the block below memory are invalidated. Only blocks that begin
    /// before EOF; one past EOF is installed zero-filled (`zerocopy_eof`).
    pub(crate) fn pin_for_write(&self, file: FileId, block: u64, bit: u64) -> io::Result<u32> {
        let region = self.region().ok_or_else(|| {
            io::Error::new(io::ErrorKind::Unsupported, "the cache is not zero-copy")
        })?;
        let off = block
            .checked_mul(self.bs as u64)
            .filter(|&o| o <= i64::MAX as u64)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "block out of bounds"))?;
        let mut buf = vec![0u8; self.bs];
        for _ in 0..PIN_TRIES {
            let size = self.lock().files.get(&file).map_or(0, |f| f.size);
            if off >= size {
                match self.pin_past_eof(file, block, bit)? {
                    Some(slot) => return Ok(slot),
                    None => continue, // the file grew over it meanwhile: read it
                }
            }
            self.read_into(file, off, &mut buf)?;
            let shared = self.shared(file)?;
            let _op = crate::cache::read_lock(&shared.op);
            let key = Self::key(file, block);
            let fkey = {
                let mut eng = self.lock();
                let Some(slot) = eng.tier.peek(&key) else {
                    continue;
                };
                let Some(h) = region.header(slot.0) else {
                    continue;
                };
                if h.try_pin(file.0, block, bit).is_none() {
                    continue;
                }
                h.begin_write(bit);
                eng.commit_write(&self.arena, key, slot, std::time::Instant::now());
                let Some(f) = eng.files.get_mut(&file) else {
                    h.end_write(bit);
                    h.unpin(bit);
                    return Err(crate::error::unknown_file(file));
                };
                f.generation += 1;
                f.shared
                    .change
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                f.mtime = Some(std::time::SystemTime::now());
                let eof_block =
                    f.size % self.bs as u64 != 0 && (f.size - 1) / self.bs as u64 == block;
                let fk = f.fkey;
                if eof_block {
                    // Bytes the client stores past EOF there are its own until a sync covers
                    // them: the block stays in memory meanwhile (`zerocopy_eof`).
                    Self::hold_for_zc(&mut eng, file, block, slot);
                }
                (slot.0, fk)
            };
            if let (Some(lower), (_, Some(fk))) = (&self.lower, fkey) {
                shared
                    .change
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                lower.invalidate(tiercache_tier::TierKey::new(fk, block));
            }
            return Ok(fkey.0);
        }
        Err(io::Error::from_raw_os_error(libc::EAGAIN))
    }

    /// Client `bit` is gone: its pins go, and slots held back for it are freed.
    pub(crate) fn release_client(&self, bit: u64) {
        if let Some(r) = self.region() {
            r.release_client(bit);
            self.lock().release_held();
        }
    }

    /// Slots held back because a client pinned them when they were removed.
    pub(crate) fn held_slots(&self) -> usize {
        self.lock().held.len()
    }
}
