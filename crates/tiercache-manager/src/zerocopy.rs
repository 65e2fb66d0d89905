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
            let past_eof = |i: u64| {
                let size = self.lock().files.get(&file).map_or(0, |f| f.size);
                (first + i).saturating_mul(self.bs as u64) >= size
            };
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
    /// before EOF; one past EOF is installed zero-filled (`pin_past_eof`).
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
                return self.pin_past_eof(file, block, bit);
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
                if f.size % self.bs as u64 != 0 && (f.size - 1) / self.bs as u64 == block {
                    f.zc_past_eof = true;
                }
                (slot.0, f.fkey)
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

    /// `pin_for_write` of a block wholly past EOF: a zero-filled block is installed (nothing
    /// is read: past EOF the file has no bytes), pinned for the client's update and dirty. It
    /// is part of the file once `sync_extend` covers it; a growth of the file otherwise drops
    /// it first (`zero_past_eof_for_growth`).
    fn pin_past_eof(&self, file: FileId, block: u64, bit: u64) -> io::Result<u32> {
        let region = self.region().ok_or_else(|| {
            io::Error::new(io::ErrorKind::Unsupported, "the cache is not zero-copy")
        })?;
        let shared = self.shared(file)?;
        let _op = crate::cache::read_lock(&shared.op);
        let mut eng = self.lock();
        let class = eng
            .files
            .get(&file)
            .map(|f| f.class)
            .ok_or_else(|| crate::error::unknown_file(file))?;
        let key = Self::key(file, block);
        let slot = match eng.tier.peek(&key) {
            Some(s) => s,
            None => {
                let s = eng
                    .insert_fresh(&self.arena, key, class)
                    .ok_or_else(|| io::Error::from_raw_os_error(libc::EAGAIN))?;
                // Fresh and pinned by us: nobody holds its lock.
                match self.arena.try_write(s) {
                    Some(mut g) => {
                        g.data_mut().fill(0);
                        g.set_state(tiercache_memtier::SlotState {
                            key: Some(key),
                            valid: true,
                        });
                    }
                    None => {
                        eng.unpin(s);
                        eng.reap(&self.arena, key, s);
                        return Err(io::Error::from_raw_os_error(libc::EAGAIN));
                    }
                }
                eng.unpin(s);
                s
            }
        };
        let h = region
            .header(slot.0)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EAGAIN))?;
        if h.try_pin(file.0, block, bit).is_none() {
            return Err(io::Error::from_raw_os_error(libc::EAGAIN));
        }
        h.begin_write(bit);
        eng.commit_write(&self.arena, key, slot, std::time::Instant::now());
        if let Some(f) = eng.files.get_mut(&file) {
            f.zc_past_eof = true;
        }
        Ok(slot.0)
    }

    /// 003's syncblock: the file's logical size grows to `new_size` if that is larger — over
    /// the blocks a client updated in place there (the one holding the new EOF must be cached;
    /// they are committed dirty, bytes past the new EOF zeroed); then dirty blocks go to
    /// BACKING and BACKING is synced, with the mtime of now.
    pub(crate) fn sync_extend(&self, file: FileId, new_size: Option<u64>) -> io::Result<u64> {
        let shared = self.shared(file)?;
        {
            let _op = crate::cache::write_lock(&shared.op);
            let mut eng = self.lock();
            let size = eng.files.get(&file).map_or(0, |f| f.size);
            if let Some(n) = new_size.filter(|&n| n > size) {
                let bs = self.bs as u64;
                let (first, last) = (size / bs, (n - 1) / bs);
                let tail = Self::key(file, last);
                let Some(tail_slot) = eng.tier.peek(&tail) else {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!(
                            "block {last} (holding the new EOF) is not in the cache: update it \
                             in place (write_block) before extending to {n}"
                        ),
                    ));
                };
                // The blocks the file grows over become its data: dirty, so they reach
                // BACKING (ones the client never wrote read as holes: zeros).
                let now = std::time::Instant::now();
                for b in first..=last {
                    let key = Self::key(file, b);
                    if let Some(slot) = eng.tier.peek(&key) {
                        eng.commit_write(&self.arena, key, slot, now);
                    }
                }
                // Past the new EOF stays zero (the client may have written further).
                let at = (n % bs) as usize;
                if at != 0 {
                    zero_in_slot(&self.arena, tail, tail_slot, at, self.bs);
                }
                if let Some(f) = eng.files.get_mut(&file) {
                    f.size = n;
                    f.zc_past_eof = f.blocks.range(last + 1..).next().is_some();
                    f.generation += 1;
                    f.shared
                        .change
                        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
            }
            if let Some(f) = eng.files.get_mut(&file) {
                if !f.dirty.is_empty() {
                    f.mtime = Some(std::time::SystemTime::now());
                }
            }
        }
        self.fsync(file, false)?;
        Ok(self.lock().files.get(&file).map_or(0, |f| f.size))
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

/// Zeroes bytes `from..to` of `slot` (holding `key`) if nobody in this process holds its lock
/// (called under the engine lock: only `try_write`). Zero-copy clients do not take slot
/// locks; what they store there afterwards is theirs.
pub(crate) fn zero_in_slot(
    arena: &tiercache_memtier::Arena,
    key: tiercache_core::BlockKey,
    slot: tiercache_core::SlotId,
    from: usize,
    to: usize,
) {
    match arena.try_write(slot) {
        Some(mut g) if g.state().holds(key) => g.data_mut()[from..to].fill(0),
        Some(_) => {}
        None => log::warn!(
            "file {} block {}: bytes past EOF not zeroed (slot busy)",
            key.file.0,
            key.block.0
        ),
    }
}

impl crate::engine::Engine {
    /// Before `file` grows past `old_size` (to `to`): if a zero-copy client updated blocks at
    /// or past EOF in place (`FileState::zc_past_eof`), the bytes past `old_size` in the tail
    /// block are zeroed up to `to`, and cached blocks wholly past `old_size` are dropped — as
    /// the kernel zeroes a page's tail when a file grows, so what a client stored past EOF
    /// and never extended over is never exposed (dropped blocks read as zeros).
    pub(crate) fn zero_past_eof_for_growth(
        &mut self,
        arena: &tiercache_memtier::Arena,
        file: FileId,
        old_size: u64,
        to: u64,
        bs: usize,
    ) {
        let Some(f) = self.files.get_mut(&file) else {
            return;
        };
        if !f.zc_past_eof {
            return;
        }
        f.zc_past_eof = false;
        let bs64 = bs as u64;
        let first_whole = old_size.div_ceil(bs64);
        let beyond: Vec<u64> = f.blocks.range(first_whole..).copied().collect();
        for b in beyond {
            let _ = self.drop_block(Inner::key(file, b), true);
        }
        let (block, at) = (old_size / bs64, (old_size % bs64) as usize);
        if at == 0 {
            return;
        }
        let end = to.min((block + 1) * bs64) - block * bs64;
        let key = Inner::key(file, block);
        if let Some(slot) = self.tier.peek(&key) {
            zero_in_slot(arena, key, slot, at, end as usize);
        }
    }
}
