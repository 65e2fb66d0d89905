//! The read path: hits are copied from slots, misses are read from BACKING with contiguous
//! missing blocks coalesced into one `pread` (plus read-ahead for sequential streams) and
//! inserted; when no slot can be had the block is served from BACKING uncached (bypass).
//!
//! Steps of one read: (1) under the engine lock, count each requested block (`Tier::lookup`),
//! pin hits, give misses fresh slots ("being filled") or mark them bypass, and append
//! read-ahead blocks; (2) without the engine lock, read each run of non-hit blocks with one
//! `pread`, install the bytes into still-unfilled fresh slots and copy the requested part out;
//! then copy hits one slot lock at a time; (3) under the engine lock, unpin and give back any
//! fresh slot that is still not valid.
//!
//! Invariants: a reader never waits for write-back I/O — the flusher holds slot locks only to
//! copy (shared, like readers) and never holds the engine lock or a file's `op` lock during
//! I/O; a hit on a slot that is not valid (another request is filling it, or its fill failed)
//! is served from BACKING rather than waiting; bytes at or beyond the logical size are zero.

use crate::cache::{read_lock, try_read_lock, Inner};
use crate::engine::Engine;
use crate::error::unknown_file;
use crate::file_state::{same_state, FileShared};
use crate::stats::Counters;
use crate::NoWait;
use std::fs::File;
use std::io;
use std::ops::RangeInclusive;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;
use tiercache_core::{BlockKey, Class, FileId, SlotId};
use tiercache_memtier::arena::SlotState;
use tiercache_tier::{FileKey, TierKey};

#[derive(Debug, Clone, Copy)]
enum Plan {
    /// Resident: pinned, copy from the slot.
    Hit(SlotId),
    /// Fresh slot (pinned, not valid yet): fill from BACKING.
    Fill(SlotId),
    /// No slot: read from BACKING, do not cache.
    Bypass,
}

#[derive(Debug, Clone, Copy)]
struct Step {
    block: u64,
    plan: Plan,
    /// Part of the request (false: read-ahead).
    requested: bool,
    /// Its newest bytes are only in the tier below (see `lower_wb`): never read BACKING.
    lower_dirty: bool,
}

#[derive(Debug)]
struct ReadPlan {
    fd: Arc<File>,
    /// Logical size when planned.
    size: u64,
    offset: u64,
    end: u64,
    steps: Vec<Step>,
    class: Class,
    /// Identity and content version in the lower tiers (when there are any).
    fkey: Option<FileKey>,
    version: u64,
    /// With lower tiers only (no extra atomics on the hit path without them): the file's
    /// locks and its change counter when planned (see `lower`).
    shared: Option<Arc<FileShared>>,
    change: u64,
    /// The lower tiers this read skips for being in a long sequential run (planner bits; see
    /// `lower_bypass`).
    skip: u32,
}

/// Zeroes the bytes of `buf` (file bytes from `start` on) at or past the logical size `size`:
/// cached bytes beyond EOF read as zero, whichever tier they came from.
pub(crate) fn zero_past_eof(buf: &mut [u8], start: u64, size: u64) {
    let keep = usize::try_from(size.saturating_sub(start))
        .unwrap_or(usize::MAX)
        .min(buf.len());
    buf[keep..].fill(0);
}

/// What step (1) decided.
#[derive(Debug)]
enum Planned {
    /// At or past EOF: nothing to read.
    Eof,
    Plan(ReadPlan),
    /// Hits only were asked for and some block is not a valid resident one (nothing was
    /// counted or pinned); the file's class.
    Wait(Class),
}

/// What `plan_read`'s per-block steps share.
struct PlanBlocks {
    file: FileId,
    class: Class,
    /// The file has blocks dirty in the tier below (else none is looked up).
    any_lower_dirty: bool,
}

impl PlanBlocks {
    /// Whether `block`'s newest bytes are only in the tier below.
    fn lower_dirty(&self, eng: &Engine, block: u64) -> bool {
        self.any_lower_dirty
            && eng
                .files()
                .get(&self.file)
                .is_some_and(|f| f.lower_dirty().contains(&block))
    }
}

impl Inner {
    pub(crate) fn read_into(&self, file: FileId, offset: u64, out: &mut [u8]) -> io::Result<usize> {
        if out.is_empty() {
            return Ok(0);
        }
        let shared = self.shared(file)?;
        let _op = read_lock(&shared.op);
        let plan = match self.plan_read(file, &shared, offset, out.len(), false)? {
            Planned::Plan(plan) => plan,
            Planned::Eof | Planned::Wait(_) => return Ok(0),
        };
        let mut suspects = Vec::new();
        let result = self.run_read(file, &plan, out, &mut suspects, false);
        self.finish_read(file, &plan, &suspects);
        result.map(|()| (plan.end - plan.offset) as usize)
    }

    /// [`Inner::read_into`] if every requested block is a valid resident one: copied out with
    /// no I/O and no wait but for slot locks held to copy. Otherwise nothing is counted, pinned
    /// or read, and the answer is to wait (in the file's class): the read needs BACKING or a
    /// lower tier, or the file is held by a truncate or an invalidation.
    pub(crate) fn try_read_into(&self, file: FileId, offset: u64, out: &mut [u8]) -> NoWait<usize> {
        if out.is_empty() {
            return NoWait::Done(Ok(0));
        }
        let shared = match self.shared(file) {
            Ok(s) => s,
            Err(e) => return NoWait::Done(Err(e)),
        };
        let Some(_op) = try_read_lock(&shared.op) else {
            return NoWait::Wait(self.class_of(file).unwrap_or(Class::NORMAL));
        };
        let plan = match self.plan_read(file, &shared, offset, out.len(), true) {
            Ok(Planned::Plan(plan)) => plan,
            Ok(Planned::Eof) => return NoWait::Done(Ok(0)),
            Ok(Planned::Wait(class)) => return NoWait::Wait(class),
            Err(e) => return NoWait::Done(Err(e)),
        };
        let mut suspects = Vec::new();
        let result = self.run_read(file, &plan, out, &mut suspects, true);
        self.finish_read(file, &plan, &suspects);
        match result {
            // A pinned hit turned invalid after the plan (it never does while the `op` lock is
            // held; the check keeps BACKING off this path regardless): served by a waiter,
            // which counts the read again.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => NoWait::Wait(plan.class),
            r => NoWait::Done(r.map(|()| (plan.end - plan.offset) as usize)),
        }
    }

    /// Step (1): decide per block under the engine lock. With `hits_only`, [`Planned::Wait`]
    /// unless every requested block is resident and valid (checked before anything is
    /// counted).
    fn plan_read(
        &self,
        file: FileId,
        shared: &Arc<FileShared>,
        offset: u64,
        len: usize,
        hits_only: bool,
    ) -> io::Result<Planned> {
        // Allocated before the engine lock (nothing allocates under it on the hit path): the
        // request's blocks plus the largest read-ahead window.
        let span = ((offset.saturating_add(len as u64).saturating_sub(1) >> self.shift())
            - (offset >> self.shift())) as usize
            + 1;
        let mut steps = Vec::with_capacity(span + self.cfg().readahead_max_blocks as usize);
        let mut eng = self.lock();
        let f = eng
            .files_mut()
            .get_mut(&file)
            .ok_or_else(|| unknown_file(file))?;
        same_state(f, shared, file)?;
        let fd = f.backing().cloned().ok_or_else(|| unknown_file(file))?;
        let size = f.size();
        if offset >= size {
            return Ok(Planned::Eof);
        }
        let end = offset.saturating_add(len as u64).min(size);
        let (b0, b1) = (offset >> self.shift(), (end - 1) >> self.shift());
        let class = f.class();
        if hits_only && !self.all_valid(&eng, file, b0..=b1) {
            return Ok(Planned::Wait(class));
        }
        let f = eng
            .files_mut()
            .get_mut(&file)
            .ok_or_else(|| unknown_file(file))?;
        let window = f.advance_read_ahead(offset, end, self.cfg().readahead_max_blocks);
        let skip = match self.lower() {
            Some(l) if l.bypass.any() => {
                let run = f.advance_seq_run(b0, b1 - b0 + 1);
                l.bypass.skip_mask(run, b1 - b0 + 1)
            }
            _ => 0,
        };
        let (fkey, version) = (f.fkey(), f.version());
        let any_lower_dirty = !f.lower_dirty().is_empty();
        let last = (size - 1) >> self.shift();
        let blocks = PlanBlocks {
            file,
            class,
            any_lower_dirty,
        };
        self.plan_requested(&mut eng, &blocks, b0..=b1, &mut steps);
        // Read-ahead rides on a miss at the end of a sequential request.
        if window > 0 && matches!(steps.last(), Some(s) if matches!(s.plan, Plan::Fill(_))) {
            let ra_end = b1.saturating_add(u64::from(window)).min(last);
            self.plan_read_ahead(&mut eng, &blocks, b1 + 1..=ra_end, &mut steps);
        }
        Ok(Planned::Plan(ReadPlan {
            fd,
            size,
            offset,
            end,
            steps,
            class,
            fkey,
            version,
            shared: self.lower().map(|_| Arc::clone(shared)),
            change: match self.lower() {
                Some(_) => shared.change.load(std::sync::atomic::Ordering::SeqCst),
                None => 0,
            },
            skip,
        }))
    }

    /// Whether every block of `blocks` is resident and valid (for `hits_only` plans).
    fn all_valid(&self, eng: &Engine, file: FileId, mut blocks: RangeInclusive<u64>) -> bool {
        blocks.all(|block| {
            let key = Self::key(file, block);
            eng.tier()
                .peek(&key)
                .and_then(|slot| self.arena().try_state(slot))
                .is_some_and(|st| st.holds(key))
        })
    }

    /// Plans the requested `blocks`: hits pinned, misses given a fresh slot to fill (or
    /// bypassed when memory has none free).
    fn plan_requested(
        &self,
        eng: &mut Engine,
        p: &PlanBlocks,
        blocks: RangeInclusive<u64>,
        steps: &mut Vec<Step>,
    ) {
        for block in blocks {
            let key = Self::key(p.file, block);
            eng.trace(key, false, p.class);
            let plan = match eng.lookup(key, p.class) {
                Some(slot) => {
                    eng.pin(slot);
                    Plan::Hit(slot)
                }
                None => match eng.insert_fresh(self.arena(), key, p.class) {
                    Some(slot) => Plan::Fill(slot),
                    None => Plan::Bypass,
                },
            };
            steps.push(Step {
                block,
                plan,
                requested: true,
                lower_dirty: p.lower_dirty(eng, block),
            });
        }
    }

    /// Plans read-ahead of `blocks`, up to the first one cached or without a free slot.
    fn plan_read_ahead(
        &self,
        eng: &mut Engine,
        p: &PlanBlocks,
        blocks: RangeInclusive<u64>,
        steps: &mut Vec<Step>,
    ) {
        for block in blocks {
            let key = Self::key(p.file, block);
            if eng.tier().contains(&key) {
                break;
            }
            let lower_dirty = p.lower_dirty(eng, block);
            match eng.insert_fresh(self.arena(), key, p.class) {
                Some(slot) => steps.push(Step {
                    block,
                    plan: Plan::Fill(slot),
                    requested: false,
                    lower_dirty,
                }),
                None => break,
            }
        }
    }

    /// Copies the part of block `block` (whose bytes are `data`) that the request wants.
    fn copy_out(&self, plan: &ReadPlan, block: u64, data: &[u8], out: &mut [u8]) {
        let bstart = block << self.shift();
        let lo = bstart.max(plan.offset);
        let hi = (bstart + self.bs() as u64).min(plan.end);
        if lo >= hi {
            return;
        }
        let (o, d) = ((lo - plan.offset) as usize, (lo - bstart) as usize);
        let n = (hi - lo) as usize;
        out[o..o + n].copy_from_slice(&data[d..d + n]);
    }

    /// Reads `buf.len()` bytes of BACKING at `start`, zero-filling past BACKING's end and past
    /// the logical size `size` (cached bytes beyond EOF must be zero).
    pub(crate) fn read_backing(
        &self,
        file: FileId,
        fd: &File,
        buf: &mut [u8],
        start: u64,
        size: u64,
    ) -> io::Result<()> {
        let n = self.dev_read(file, fd, buf, start)?;
        buf[n..].fill(0);
        zero_past_eof(buf, start, size);
        Ok(())
    }

    /// Step (2).
    fn run_read(
        &self,
        file: FileId,
        plan: &ReadPlan,
        out: &mut [u8],
        suspects: &mut Vec<(BlockKey, SlotId)>,
        hits_only: bool,
    ) -> io::Result<()> {
        let bs = self.bs();
        let steps = &plan.steps;
        let is_hit = |s: &Step| matches!(s.plan, Plan::Hit(_));
        let mut i = 0;
        while i < steps.len() {
            if is_hit(&steps[i]) {
                i += 1;
                continue;
            }
            let mut j = i + 1;
            while j < steps.len() && !is_hit(&steps[j]) {
                j += 1;
            }
            // Blocks of steps[i..j] are consecutive: the tiers below memory first, then one
            // pread per run of blocks none of them had.
            let mut buf = vec![0u8; (j - i) * bs];
            self.fill_run(file, plan, &steps[i..j], &mut buf)?;
            for (k, step) in steps[i..j].iter().enumerate() {
                let data = &buf[k * bs..(k + 1) * bs];
                if let Plan::Fill(slot) = step.plan {
                    let key = Self::key(file, step.block);
                    let mut g = self.arena().write(slot);
                    let st = g.state();
                    if st.holds(key) {
                        // A writer filled it meanwhile; its bytes are the newer ones.
                        if step.requested {
                            self.copy_out(plan, step.block, g.data(), out);
                        }
                        continue;
                    }
                    if st.key == Some(key) {
                        g.data_mut().copy_from_slice(data);
                        g.set_state(SlotState {
                            key: Some(key),
                            valid: true,
                        });
                    }
                    if !step.requested {
                        Counters::add(&self.counters().readahead_blocks, 1);
                    }
                } else {
                    Counters::add(&self.counters().bypass_blocks, 1);
                }
                if step.requested {
                    self.copy_out(plan, step.block, data, out);
                }
            }
            i = j;
        }
        for step in steps {
            let Plan::Hit(slot) = step.plan else {
                continue;
            };
            let key = Self::key(file, step.block);
            {
                let g = self.arena().read(slot);
                if g.state().holds(key) {
                    self.copy_out(plan, step.block, g.data(), out);
                    continue;
                }
            }
            // Not ready (being filled elsewhere, or that fill failed): serve from below.
            suspects.push((key, slot));
            if hits_only {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let mut buf = vec![0u8; bs];
            let below = match (plan.fkey, step.lower_dirty) {
                (Some(fk), true) => {
                    self.read_lower_dirty(file, fk, plan.version, step.block, &mut buf)?
                }
                _ => false,
            };
            match below {
                true => zero_past_eof(&mut buf, step.block << self.shift(), plan.size),
                false => self.read_backing(
                    file,
                    &plan.fd,
                    &mut buf,
                    step.block << self.shift(),
                    plan.size,
                )?,
            }
            Counters::add(&self.counters().bypass_blocks, 1);
            self.copy_out(plan, step.block, &buf, out);
        }
        Ok(())
    }

    /// Fills `buf` with the blocks of `run` (consecutive, none a memory hit): from the lower
    /// tiers where they have them, else from BACKING with one pread per gap; then queues the
    /// fills the planner asks of inclusive lower tiers.
    fn fill_run(
        &self,
        file: FileId,
        plan: &ReadPlan,
        run: &[Step],
        buf: &mut [u8],
    ) -> io::Result<()> {
        let bs = self.bs();
        let start = run[0].block << self.shift();
        let (Some(lower), Some(fk), Some(shared)) = (self.lower(), plan.fkey, &plan.shared) else {
            if let Err(e) = self.read_backing(file, &plan.fd, buf, start, plan.size) {
                log::warn!("file {}: backing read at {start} failed: {e}", file.0);
                return Err(e);
            }
            return Ok(());
        };
        let depth = lower.planner.len();
        let mut from = [depth; 64];
        let mut k = 0;
        while k < run.len() {
            // Up to 64 blocks at a time keep the sources on the stack.
            let n = (run.len() - k).min(from.len());
            for (x, step) in run[k..k + n].iter().enumerate() {
                let key = TierKey::new(fk, step.block);
                let take = matches!(step.plan, Plan::Fill(_));
                let b = &mut buf[(k + x) * bs..(k + x + 1) * bs];
                from[x] = match lower.read(key, plan.version, take, plan.skip, b) {
                    Some(t) => {
                        zero_past_eof(b, step.block << self.shift(), plan.size);
                        t
                    }
                    None if step.lower_dirty => {
                        if self.read_lower_dirty(file, fk, plan.version, step.block, b)? {
                            zero_past_eof(b, step.block << self.shift(), plan.size);
                            1
                        } else {
                            depth // on BACKING by now
                        }
                    }
                    None => depth,
                };
            }
            let mut x = 0;
            while x < n {
                if from[x] != depth {
                    x += 1;
                    continue;
                }
                let mut y = x + 1;
                while y < n && from[y] == depth {
                    y += 1;
                }
                let off = run[k + x].block << self.shift();
                let part = &mut buf[(k + x) * bs..(k + y) * bs];
                let t0 = lower.bypass.measuring().then(Instant::now);
                if let Err(e) = self.read_backing(file, &plan.fd, part, off, plan.size) {
                    log::warn!("file {}: backing read at {off} failed: {e}", file.0);
                    return Err(e);
                }
                if let Some(t0) = t0 {
                    // Positioned: the file's last BACKING read ended right here.
                    let end = off + part.len() as u64;
                    let positioned = shared.backing_next.swap(end + 1, Relaxed) == off + 1;
                    lower
                        .bypass
                        .backing_sample((y - x) as u64, t0.elapsed(), positioned);
                }
                x = y;
            }
            for x in 0..n {
                let key = TierKey::new(fk, run[k + x].block);
                let b = &buf[(k + x) * bs..(k + x + 1) * bs];
                lower.after_read(
                    from[x],
                    key,
                    plan.version,
                    plan.class,
                    b,
                    shared,
                    plan.change,
                    plan.skip,
                );
            }
            k += n;
        }
        Ok(())
    }

    /// Step (3): unpin everything, give back slots left unfilled.
    fn finish_read(&self, file: FileId, plan: &ReadPlan, suspects: &[(BlockKey, SlotId)]) {
        let mut eng = self.lock();
        for step in &plan.steps {
            if let Plan::Hit(slot) | Plan::Fill(slot) = step.plan {
                eng.unpin(slot);
            }
        }
        for step in &plan.steps {
            if let Plan::Fill(slot) = step.plan {
                eng.reap(self.arena(), Self::key(file, step.block), slot);
            }
        }
        for &(key, slot) in suspects {
            eng.reap(self.arena(), key, slot);
        }
    }
}
