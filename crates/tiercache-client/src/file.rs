//! [`ZcFile`]: a file opened through a [`Client`]: 003's readblock and readbyte (pinned blocks
//! read in place), its updates (a private copy of a block, committed as a write) and syncblock.

use crate::block::{BlockMut, BlockRef, ByteView};
use crate::client::{lock, unexpected, Client, Error, Result, MAX_BLOCKS};
use crate::wire::{Request, Response};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// A file opened for zero-copy access.
#[derive(Debug)]
pub struct ZcFile<'c> {
    client: &'c Client,
    handle: u64,
    id: u64,
    size: AtomicU64,
    /// Opened read-write (updates allowed).
    writable: bool,
    /// A commit that failed where it could not be reported (a `BlockMut` dropped without
    /// `commit`): reported by the next `sync` (or `commit`), once, like the kernel's errseq.
    deferred: Mutex<Option<(String, i32)>>,
}

impl<'c> ZcFile<'c> {
    pub(crate) fn new(client: &'c Client, handle: u64, id: u64, size: u64, writable: bool) -> Self {
        Self {
            client,
            handle,
            id,
            size: AtomicU64::new(size),
            writable,
            deferred: Mutex::new(None),
        }
    }

    pub(crate) fn client(&self) -> &'c Client {
        self.client
    }

    /// The file's size as last reported by the daemon.
    pub fn size(&self) -> u64 {
        self.size.load(Relaxed)
    }

    /// 003's readblock: blocks `first..first+count`, pinned in the cache's memory and read in
    /// place. Hits cost no system call; misses are read by the daemon (lower tiers, BACKING)
    /// with one request for all of them. Stops at EOF (fewer blocks returned).
    pub fn read_blocks(&self, first: u64, count: u64) -> Result<Vec<BlockRef<'c>>> {
        let c = self.client;
        c.check_serving()?;
        if count > MAX_BLOCKS {
            return Err(Error::Refused {
                message: format!("at most {MAX_BLOCKS} blocks per call"),
                errno: libc::EINVAL,
            });
        }
        let mut out: Vec<Option<BlockRef<'c>>> = Vec::with_capacity(count as usize);
        let hits = c.pin_hits(self.id, first, count, &mut out);
        if hits < count {
            let lo = out.iter().position(Option::is_none).unwrap_or(0);
            let hi = out.iter().rposition(Option::is_none).unwrap_or(lo);
            c.stats.misses.fetch_add(count - hits, Relaxed);
            self.pin_missing(first, lo, hi, &mut out)?;
            // The range ends at the first block still missing if that is past EOF (as the
            // daemon last said); one missing before EOF fails the call (`out` lets go of the
            // others).
            if let Some(i) = out.iter().position(Option::is_none) {
                let block = first.saturating_add(i as u64);
                if block.saturating_mul(c.block_size() as u64) < self.size() {
                    return Err(Error::Refused {
                        message: format!("block {block} could not be kept in the cache"),
                        errno: libc::EAGAIN,
                    });
                }
            }
        }
        // In place (an `Option<BlockRef>` is a `BlockRef`'s size): no second allocation.
        Ok(out.into_iter().map_while(|b| b).collect())
    }

    /// Asks the daemon for blocks `first+lo..=first+hi` and fills the holes of `out` with the
    /// ones it pinned; every slot it pinned for us is either counted or let go.
    fn pin_missing(
        &self,
        first: u64,
        lo: usize,
        hi: usize,
        out: &mut [Option<BlockRef<'c>>],
    ) -> Result<()> {
        let c = self.client;
        let req = Request::Pin {
            handle: self.handle,
            first: first.saturating_add(lo as u64),
            count: (hi - lo + 1) as u64,
        };
        match c.call(&req, None, None)? {
            Response::Pinned { slots, size } => {
                self.size.store(size, Relaxed);
                c.adopt(self.id, first, lo, slots, out);
                Ok(())
            }
            other => Err(unexpected(&other)),
        }
    }

    /// 003's readbyte: bytes `offset..offset+len` (clipped at EOF) as a view over pinned
    /// blocks — a table of block pointers, no copy.
    pub fn read_bytes(&self, offset: u64, len: usize) -> Result<ByteView<'c>> {
        let bs = self.client.block_size() as u64;
        let end = offset.saturating_add(len as u64);
        if len == 0 {
            return Ok(ByteView::new(Vec::new(), 0, 0));
        }
        let (b0, b1) = (offset / bs, (end - 1) / bs);
        let blocks = self.read_blocks(b0, b1 - b0 + 1)?;
        let avail = (b0 * bs + blocks.len() as u64 * bs).min(self.size().max(offset));
        let len = avail.saturating_sub(offset).min(len as u64) as usize;
        Ok(ByteView::new(blocks, (offset - b0 * bs) as usize, len))
    }

    /// An update of block `block`: a private copy of its bytes (zeros past EOF) to change with
    /// no system call, whose changed bytes are written to the file — as `pwrite`s through the
    /// mount would, past EOF extending it — by [`BlockMut::commit`] or when it is dropped
    /// (not if [`BlockMut::discard`]ed; each changed byte is sent at most once).
    /// Other processes and the mount see the update from its commit on; [`ZcFile::sync`]
    /// makes it durable. Only changed bytes are written, so clients updating different bytes
    /// of one block do not undo each other's updates. The file must be open read-write.
    pub fn write_block(&self, block: u64) -> Result<BlockMut<'_>> {
        if !self.writable {
            return Err(Error::Refused {
                message: "the file was opened read-only (use open_rw)".into(),
                errno: libc::EBADF,
            });
        }
        let bs = self.client.block_size();
        let offset = block
            .checked_mul(bs as u64)
            .filter(|&o| o <= i64::MAX as u64)
            .ok_or_else(|| Error::Refused {
                message: format!("block {block} is out of range"),
                errno: libc::EINVAL,
            })?;
        let mut twin = vec![0u8; bs];
        if let Some(b) = self.read_blocks(block, 1)?.first() {
            b.copy_to(&mut twin);
        }
        Ok(BlockMut::new(self, offset, twin))
    }

    /// Writes `runs` (`[start, len]` within the block at `offset`, bytes concatenated in
    /// `payload`) to the file through the daemon.
    pub(crate) fn write_runs(
        &self,
        offset: u64,
        runs: Vec<[u32; 2]>,
        payload: &[u8],
    ) -> Result<()> {
        let req = Request::Write {
            handle: self.handle,
            offset,
            runs,
        };
        match self.client.call(&req, None, Some(payload))? {
            Response::Written { size } => {
                self.size.store(size, Relaxed);
                Ok(())
            }
            other => Err(unexpected(&other)),
        }
    }

    /// Keeps the error of a commit that had nobody to report to.
    pub(crate) fn defer(&self, e: &Error) {
        lock(&self.deferred).get_or_insert((e.to_string(), e.errno()));
    }

    /// The deferred commit error, once.
    pub(crate) fn take_deferred(&self) -> Result<()> {
        match lock(&self.deferred).take() {
            Some((message, errno)) => Err(Error::Refused {
                message: format!("an earlier update was not written: {message}"),
                errno,
            }),
            None => Ok(()),
        }
    }

    /// 003's syncblock: the file's dirty blocks reach BACKING and are synced; with `extend`,
    /// the size grows to `offset + len` if the file is shorter (zeros where nothing was
    /// written). Returns the file's size. Fails (once) if an update dropped without
    /// [`BlockMut::commit`] could not be written.
    pub fn sync(&self, offset: u64, len: u64, extend: bool) -> Result<u64> {
        self.take_deferred()?;
        let req = Request::Sync {
            handle: self.handle,
            offset,
            len,
            extend,
        };
        match self.client.call(&req, None, None)? {
            Response::Synced { size } => {
                self.size.store(size, Relaxed);
                Ok(size)
            }
            other => Err(unexpected(&other)),
        }
    }
}

impl Drop for ZcFile<'_> {
    fn drop(&mut self) {
        let _ = self.client.call(
            &Request::Close {
                handle: self.handle,
            },
            None,
            None,
        );
    }
}
