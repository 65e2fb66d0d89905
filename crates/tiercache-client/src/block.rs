//! What a [`ZcFile`] hands out: [`BlockRef`] (a pinned block of the cache, read in place),
//! [`ByteView`] (a byte range over pinned blocks), [`BlockMut`] (an update: a private copy,
//! committed as a write).
//!
//! Soundness: a pinned block stays *this* block until its reference goes, but its bytes may
//! change under it — the daemon stores into them when the file is written (through the mount,
//! or by another client's commit) or truncated, as with any shared mapping. A `&[u8]` over
//! them would promise the compiler they do not change, so the safe API reads them only through
//! atomic loads ([`BlockRef::copy_to`], [`BlockRef::words`], [`BlockRef::byte`]); a slice is
//! `unsafe` ([`BlockRef::as_slice`]) with that contract; raw pointers are there for C.

use crate::client::Client;
use crate::file::ZcFile;
use crate::Result;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};

/// One pinned block of the cache, read in place (see the module docs for what may change).
#[derive(Debug)]
pub struct BlockRef<'c> {
    client: &'c Client,
    slot: u32,
}

impl<'c> BlockRef<'c> {
    pub(crate) fn new(client: &'c Client, slot: u32) -> Self {
        Self { client, slot }
    }

    /// The slot it lives in.
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// Bytes in the block (the cache's block size; past EOF they are zero).
    pub fn len(&self) -> usize {
        self.client.block_size()
    }

    /// Never: a block has at least 512 bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The block's first byte: `len()` readable bytes, valid while `self` lives, read-only
    /// (the mapping is), and other processes may store into them meanwhile.
    pub fn as_ptr(&self) -> *const u8 {
        self.client.region.data_ptr(self.slot)
    }

    /// The block's bytes as a slice, in place.
    ///
    /// # Safety
    /// Nobody may change the block while the slice lives: no write to this part of the file
    /// through the mount or by a zero-copy client's commit, and no truncate or `fallocate`
    /// (hole punch, zero range) of the file that reaches the block — a truncate that ends
    /// inside it zeroes the cut-off bytes in place (e.g. nobody writes or truncates the file).
    /// The pin keeps the block from being replaced by another; it does not freeze its bytes.
    pub unsafe fn as_slice(&self) -> &[u8] {
        // SAFETY: `as_ptr` names `len()` bytes of the live, pinned mapping (in range, checked
        // by `data_ptr`), valid for `&self`'s lifetime; the caller promises no store into them
        // while the slice lives (the contract above).
        unsafe { std::slice::from_raw_parts(self.as_ptr(), self.len()) }
    }

    /// The block as little-endian 64-bit words, each read with one atomic load: in place, no
    /// copy, and sound whatever other processes store meanwhile (a word may be older or newer
    /// than its neighbours).
    pub fn words(&self) -> impl ExactSizeIterator<Item = u64> + '_ {
        let p = self.as_ptr().cast::<AtomicU64>();
        (0..self.len() / 8).map(move |i| {
            // SAFETY: slot bytes are page-aligned (`docs/design.md` §8) and `i < len / 8`, so
            // the word is aligned and inside the pinned block, which `&self` keeps mapped;
            // read-only memory is only loaded from.
            u64::from_le(unsafe { &*p.add(i) }.load(Relaxed))
        })
    }

    /// Byte `i` (one atomic load); `None` past the block.
    pub fn byte(&self, i: usize) -> Option<u8> {
        (i < self.len()).then(|| {
            // SAFETY: `i < len()`: inside the pinned block, which `&self` keeps mapped; an
            // `AtomicU8` has no alignment needs; only loaded from.
            unsafe { &*self.as_ptr().add(i).cast::<AtomicU8>() }.load(Relaxed)
        })
    }

    /// Copies bytes `from..from + out.len()` of the block into `out` (word by word, atomic
    /// loads; `from + out.len()` must not pass the block).
    pub fn copy_range(&self, from: usize, out: &mut [u8]) {
        assert!(
            from.checked_add(out.len()).is_some_and(|e| e <= self.len()),
            "range past the block"
        );
        let mut at = from;
        let mut o = 0;
        while o < out.len() {
            if at.is_multiple_of(8) && out.len() - o >= 8 {
                // SAFETY: aligned (at % 8 == 0 on a page-aligned block) and inside it (checked
                // above); only loaded from.
                let w = unsafe { &*self.as_ptr().add(at).cast::<AtomicU64>() }.load(Relaxed);
                out[o..o + 8].copy_from_slice(&w.to_ne_bytes());
                at += 8;
                o += 8;
            } else {
                out[o] = self.byte(at).unwrap_or(0);
                at += 1;
                o += 1;
            }
        }
    }

    /// Copies the block into `out` (its first `min(len, out.len())` bytes).
    pub fn copy_to(&self, out: &mut [u8]) {
        let n = out.len().min(self.len());
        self.copy_range(0, &mut out[..n]);
    }
}

impl Drop for BlockRef<'_> {
    fn drop(&mut self) {
        self.client.release(self.slot);
    }
}

/// A byte range of a file over pinned blocks (003's readbyte).
#[derive(Debug)]
pub struct ByteView<'c> {
    blocks: Vec<BlockRef<'c>>,
    skip: usize,
    len: usize,
}

impl<'c> ByteView<'c> {
    pub(crate) fn new(blocks: Vec<BlockRef<'c>>, skip: usize, len: usize) -> Self {
        Self { blocks, skip, len }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The pinned blocks under the range.
    pub fn blocks(&self) -> &[BlockRef<'c>] {
        &self.blocks
    }

    /// Byte `i` of the range.
    pub fn get(&self, i: usize) -> Option<u8> {
        if i >= self.len {
            return None;
        }
        let bs = self.blocks.first()?.len();
        let p = self.skip + i;
        self.blocks.get(p / bs)?.byte(p % bs)
    }

    /// The range as (block, start within it, bytes) pieces, in order.
    pub fn pieces(&self) -> impl Iterator<Item = (&BlockRef<'c>, usize, usize)> {
        let mut skip = self.skip;
        let mut left = self.len;
        self.blocks.iter().map_while(move |b| {
            if left == 0 {
                return None;
            }
            let n = (b.len() - skip).min(left);
            let piece = (b, skip, n);
            skip = 0;
            left -= n;
            Some(piece)
        })
    }

    /// Copies the range into `out` (its first `min(len(), out.len())` bytes).
    pub fn copy_to(&self, out: &mut [u8]) {
        let mut at = 0;
        for (b, from, n) in self.pieces() {
            let n = n.min(out.len() - at);
            b.copy_range(from, &mut out[at..at + n]);
            at += n;
            if at == out.len() {
                break;
            }
        }
    }

    /// The range, copied.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.len];
        self.copy_to(&mut v);
        v
    }
}

/// An update of one block ([`ZcFile::write_block`]): a private copy of the block's bytes,
/// changed through `&mut [u8]` with no system call, whose changed bytes are written to the
/// file (one request) by [`BlockMut::commit`] or when it is dropped, unless
/// [`BlockMut::discard`]ed. Private memory: no other process sees it before the commit, so
/// plain slices over it are sound.
///
/// Each changed byte is sent at most once: a commit (or the drop) sends what changed since the
/// last commit, whether that one succeeded or not. A failed request may still have reached the
/// file (its answer lost with the connection), and sending the same bytes again later could
/// undo what another writer wrote meanwhile; to retry, make the update again.
#[derive(Debug)]
pub struct BlockMut<'f> {
    file: &'f ZcFile<'f>,
    offset: u64,
    /// The bytes as of the last commit (or the start): what is not different is not written.
    twin: Box<[u8]>,
    work: Box<[u8]>,
    /// Discarded: its drop writes nothing.
    discarded: bool,
}

impl<'f> BlockMut<'f> {
    pub(crate) fn new(file: &'f ZcFile<'f>, offset: u64, twin: Vec<u8>) -> Self {
        let work = twin.clone().into_boxed_slice();
        Self {
            file,
            offset,
            twin: twin.into_boxed_slice(),
            work,
            discarded: false,
        }
    }

    /// The block's index in the file.
    pub fn block(&self) -> u64 {
        self.offset / self.work.len() as u64
    }

    /// The private copy, to change.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.work
    }

    /// The private copy's first byte (for C).
    pub fn as_ptr(&self) -> *const u8 {
        self.work.as_ptr()
    }

    /// Writes the bytes changed since the copy was made (or last committed) to the file: one
    /// request, none if nothing changed. Then other processes and the mount see them. Tried
    /// once: if it fails, those bytes are not sent again, by a later commit or the drop (see
    /// the type's docs).
    pub fn commit(&mut self) -> Result<()> {
        let (runs, payload) = changed_runs(&self.twin, &self.work);
        if runs.is_empty() {
            return Ok(());
        }
        // Sent now, whatever the answer: never again.
        self.twin.copy_from_slice(&self.work);
        self.file.write_runs(self.offset, runs, &payload)
    }

    /// Drops the update, writing nothing changed since the last commit.
    pub fn discard(mut self) {
        self.discarded = true;
    }
}

impl std::ops::Deref for BlockMut<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.work
    }
}

impl std::ops::DerefMut for BlockMut<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.work
    }
}

impl Drop for BlockMut<'_> {
    fn drop(&mut self) {
        if self.discarded || self.file.client().same_process().is_err() {
            return; // discarded; or a forked child: the update is not its to make
        }
        if let Err(e) = self.commit() {
            self.file.defer(&e);
        }
    }
}

/// The runs of bytes where `new` differs from `old` (`[start, len]`) and those bytes.
pub(crate) fn changed_runs(old: &[u8], new: &[u8]) -> (Vec<[u32; 2]>, Vec<u8>) {
    let mut runs = Vec::new();
    let mut payload = Vec::new();
    let mut i = 0;
    let n = old.len().min(new.len());
    while i < n {
        // Whole equal words are skipped eight bytes at a time.
        if i.is_multiple_of(8) && i + 8 <= n && old[i..i + 8] == new[i..i + 8] {
            i += 8;
            continue;
        }
        if old[i] == new[i] {
            i += 1;
            continue;
        }
        let start = i;
        while i < n && old[i] != new[i] {
            i += 1;
        }
        runs.push([start as u32, (i - start) as u32]);
        payload.extend_from_slice(&new[start..i]);
    }
    (runs, payload)
}

#[cfg(test)]
mod tests {
    use super::changed_runs;

    #[test]
    fn only_changed_bytes_are_runs() {
        let old = vec![0u8; 64];
        let mut new = old.clone();
        assert_eq!(changed_runs(&old, &new), (vec![], vec![]));
        new[3] = 1;
        new[9] = 2;
        new[10] = 3;
        new[63] = 4;
        let (runs, bytes) = changed_runs(&old, &new);
        assert_eq!(runs, vec![[3, 1], [9, 2], [63, 1]]);
        assert_eq!(bytes, vec![1, 2, 3, 4]);
    }
}
