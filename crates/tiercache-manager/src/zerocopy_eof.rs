//! Zero-copy updates at and past EOF (paper 003's syncblock with extend).
//!
//! A client may store bytes past a file's EOF in place — in the block holding EOF, or in
//! blocks wholly past it (installed zero-filled) — and make them the file's with
//! `sync_extend`. Until then they are the client's, not the file's:
//! - each such block is *held*: one pin of the engine's own (`FileState::zc_held`), so it is
//!   never evicted or demoted and its bytes past EOF never leave memory — write-back clips at
//!   EOF (a block wholly past EOF is written nowhere) and may mark it clean, which is harmless
//!   while it stays;
//! - when the file's size is settled otherwise — it grows through the mount (truncate up, a
//!   write past EOF), shrinks, or the client goes — `zc_settle` zeroes every held byte past the
//!   size that counts, commits those blocks dirty (the zeros supersede any copy below), and
//!   lets the holds go: what a client stored past EOF and never synced is never exposed, as
//!   the kernel zeroes a page's tail when a file grows.
//!
//! At most `MAX_HELD` blocks per file are held; more updates past EOF get `EAGAIN`.

use crate::cache::Inner;
use crate::engine::Engine;
use std::io;
use tiercache_core::{FileId, SlotId};
use tiercache_memtier::SlotState;

/// Blocks at or past EOF one file may hold for clients' updates.
pub const MAX_HELD: usize = 1024;

fn again() -> io::Error {
    io::Error::from_raw_os_error(libc::EAGAIN)
}

impl Inner {
    /// Holds `slot` (block `block` of `file`) for a client's update at or past EOF. False when
    /// the file holds `MAX_HELD` blocks already.
    pub(crate) fn hold_for_zc(eng: &mut Engine, file: FileId, block: u64, slot: SlotId) -> bool {
        let Some(f) = eng.files.get_mut(&file) else {
            return false;
        };
        if f.zc_held.iter().any(|&(b, _)| b == block) {
            return true;
        }
        if f.zc_held.len() >= MAX_HELD {
            return false;
        }
        f.zc_held.push((block, slot));
        eng.pin(slot);
        true
    }

    /// `pin_for_write` of a block wholly past EOF: a zero-filled block is installed (nothing to
    /// read: past EOF the file has no bytes), held, pinned for the client's update and dirty.
    /// `None`: the file grew over the block meanwhile (the caller reads it instead).
    pub(crate) fn pin_past_eof(
        &self,
        file: FileId,
        block: u64,
        bit: u64,
    ) -> io::Result<Option<u32>> {
        let region = self.region().ok_or_else(|| {
            io::Error::new(io::ErrorKind::Unsupported, "the cache is not zero-copy")
        })?;
        let shared = self.shared(file)?;
        let _op = crate::cache::read_lock(&shared.op);
        let mut eng = self.lock();
        let (class, size) = eng
            .files
            .get(&file)
            .map(|f| (f.class, f.size))
            .ok_or_else(|| crate::error::unknown_file(file))?;
        if block.saturating_mul(self.bs as u64) < size {
            return Ok(None);
        }
        let key = Self::key(file, block);
        let slot = match eng.tier.peek(&key) {
            Some(s) => s,
            None => {
                let s = eng
                    .insert_fresh(&self.arena, key, class)
                    .ok_or_else(again)?;
                // Fresh and pinned by us: nobody holds its lock.
                match self.arena.try_write(s) {
                    Some(mut g) => {
                        g.data_mut().fill(0);
                        g.set_state(SlotState {
                            key: Some(key),
                            valid: true,
                        });
                    }
                    None => {
                        eng.unpin(s);
                        eng.reap(&self.arena, key, s);
                        return Err(again());
                    }
                }
                eng.unpin(s);
                s
            }
        };
        if !Self::hold_for_zc(&mut eng, file, block, slot) {
            return Err(again());
        }
        let h = region.header(slot.0).ok_or_else(again)?;
        if h.try_pin(file.0, block, bit).is_none() {
            return Err(again());
        }
        h.begin_write(bit);
        eng.commit_write(&self.arena, key, slot, std::time::Instant::now());
        Ok(Some(slot.0))
    }

    /// 003's syncblock: the file's logical size grows to `new_size` if that is larger — over
    /// the blocks clients updated in place there (the one holding the new EOF must be
    /// cached); then held bytes past the size are settled (`zc_settle`), dirty blocks go to
    /// BACKING and BACKING is synced, with the mtime of now.
    pub(crate) fn sync_extend(&self, file: FileId, new_size: Option<u64>) -> io::Result<u64> {
        let shared = self.shared(file)?;
        {
            let _op = crate::cache::write_lock(&shared.op);
            let grown = {
                let mut eng = self.lock();
                let size = eng.files.get(&file).map_or(0, |f| f.size);
                match new_size.filter(|&n| n > size) {
                    None => None,
                    Some(n) => {
                        let bs = self.bs as u64;
                        let (first, last) = (size / bs, (n - 1) / bs);
                        if eng.tier.peek(&Self::key(file, last)).is_none() {
                            return Err(io::Error::new(
                                io::ErrorKind::InvalidInput,
                                format!(
                                    "block {last} (holding the new EOF) is not in the cache: \\
                                     update it in place (write_block) before extending to {n}"
                                ),
                            ));
                        }
                        // The blocks the file grows over become its data: dirty, so they
                        // reach BACKING (ones no client wrote read as holes: zeros).
                        let now = std::time::Instant::now();
                        for b in first..=last {
                            let key = Self::key(file, b);
                            if let Some(slot) = eng.tier.peek(&key) {
                                eng.commit_write(&self.arena, key, slot, now);
                            }
                        }
                        if let Some(f) = eng.files.get_mut(&file) {
                            f.size = n;
                            f.generation += 1;
                            f.shared
                                .change
                                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        }
                        Some(n)
                    }
                }
            };
            if let Some(n) = grown {
                // Past the new EOF nothing held is the file's.
                self.zc_settle(file, n);
            }
            if let Some(f) = self.lock().files.get_mut(&file) {
                if !f.dirty.is_empty() {
                    f.mtime = Some(std::time::SystemTime::now());
                }
            }
        }
        self.fsync(file, false)?;
        Ok(self.lock().files.get(&file).map_or(0, |f| f.size))
    }

    /// Whether `file` holds blocks for clients' updates at or past EOF.
    pub(crate) fn zc_holds(&self, file: FileId) -> bool {
        self.lock()
            .files
            .get(&file)
            .is_some_and(|f| !f.zc_held.is_empty())
    }

    /// Every held byte of `file` past `keep` is zeroed (it is not the file's), those blocks are
    /// committed dirty (the zeros supersede copies below memory), and the holds go. The
    /// caller holds the file's `op` lock (as a writer, or as a write that grows the file).
    pub(crate) fn zc_settle(&self, file: FileId, keep: u64) {
        let bs = self.bs as u64;
        let held = match self.lock().files.get_mut(&file) {
            Some(f) => std::mem::take(&mut f.zc_held),
            None => return,
        };
        if held.is_empty() {
            return;
        }
        let mut zeroed = Vec::new();
        for &(block, slot) in &held {
            let start = block * bs;
            if keep >= start + bs {
                continue;
            }
            let from = keep.saturating_sub(start) as usize;
            let key = Self::key(file, block);
            // The hold keeps the slot this block's: a blocking lock is safe here (no engine
            // lock held; readers and write-back hold slot locks only briefly).
            let mut g = self.arena.write(slot);
            if g.state().holds(key) {
                g.data_mut()[from..].fill(0);
                zeroed.push((key, slot));
            }
        }
        let fkey = {
            let mut eng = self.lock();
            let now = std::time::Instant::now();
            for &(key, slot) in &zeroed {
                eng.commit_write(&self.arena, key, slot, now);
            }
            for &(_, slot) in &held {
                eng.unpin(slot);
            }
            eng.files.get(&file).and_then(|f| f.fkey)
        };
        if let (Some(lower), Some(fk)) = (&self.lower, fkey) {
            if let Ok(shared) = self.shared(file) {
                shared
                    .change
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            for (key, _) in zeroed {
                lower.invalidate(tiercache_tier::TierKey::new(fk, key.block.0));
            }
        }
    }

    /// A client is done with `file` without syncing (closed it, or is gone): what it stored
    /// past EOF is dropped (zeroed, holds released).
    pub(crate) fn zc_discard(&self, file: FileId) {
        if !self.zc_holds(file) {
            return;
        }
        let Ok(shared) = self.shared(file) else {
            return;
        };
        let _op = crate::cache::write_lock(&shared.op);
        let size = self.lock().files.get(&file).map_or(0, |f| f.size);
        self.zc_settle(file, size);
    }
}
