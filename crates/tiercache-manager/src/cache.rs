//! [`MemCache`]: the memory tier's public face, and `Inner`, the state shared with the flusher
//! threads (arena, engine lock, device, counters).
//!
//! Locking (see also `arena`, `engine`, `files`): per-file `io` → per-file `op` → engine
//! `Mutex` → one slot lock at a time. The engine lock is held only for metadata work — never
//! across device I/O, never while blocking on a slot. A slot may be locked while the engine lock
//! is then taken (engine holders never wait for slots), so the order cannot cycle.
//!
//! Invariant: every slot a request pins is unpinned before the request returns, on every path.

use crate::backing::{BackingIo, UncachedBacking};
use crate::config::MemConfig;
use crate::engine::Engine;
use crate::error::MemError;
use crate::file_state::OpenOutcome;
use crate::lower::{Lower, LowerTier};
use crate::nowait::NoWait;
use crate::stamp::FileStamp;
use crate::stats::{
    classes_of, pools_of, BackingStats, ClassInfo, Counters, MemStats, PathStats, WindowStats,
    Windows,
};
use crate::sync_state::SyncState;
use crate::times::LogicalTimes;
use crate::trace::TraceSink;
use crate::wake::Wake;
use std::fs::File;
use std::io::{self, Write};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Instant, SystemTime};
use tiercache_core::tier::{Tier, TierConfig};
use tiercache_core::{BlockIndex, BlockKey, Class, FileId};
use tiercache_memtier::arena::Arena;
use tiercache_memtier::shm::ClientId;
use tiercache_tier::{TierKind, TierSnapshot};

pub(crate) use crate::locks::{lock, read_lock, try_read_lock, write_lock};

/// State shared by the request paths and the flusher threads. Its fields are private: the
/// ones fixed at construction are read through the accessors below; what changes is owned by
/// types that keep their own invariants (the engine behind its lock, [`Wake`], `SyncState`,
/// the counters' atomics, the flush timings).
#[derive(Debug)]
pub(crate) struct Inner {
    cfg: MemConfig,
    bs: usize,
    shift: u32,
    arena: Arena,
    engine: Mutex<Engine>,
    /// Mount id of BACKING's root (`MemCache::set_backing_root`, once): a file on another
    /// mount (a submount) has no handle a persistent tier could reopen it by after a crash.
    backing_mount: std::sync::OnceLock<i32>,
    device: Arc<dyn BackingIo>,
    counters: Counters,
    dirty_limit: usize,
    dirty_bg_limit: usize,
    /// Wakes and stops the flushers and the cleaner.
    wake: Wake,
    trace_dropped: Arc<AtomicU64>,
    trace_thread: Mutex<Option<JoinHandle<()>>>,
    start: Instant,
    /// The sync rounds' clock and the closed files' descriptor count (see `sync_batch`).
    sync: SyncState,
    /// The tiers below memory, if any.
    lower: Option<Arc<Lower>>,
    /// The flusher's timings in force: `cfg`'s until a reload changes them
    /// ([`MemCache::set_flush_timings`]).
    timings: crate::config::FlushTimings,
}

/// What is fixed at construction, and the owned parts, for the other modules.
impl Inner {
    pub(crate) fn cfg(&self) -> &MemConfig {
        &self.cfg
    }
    /// The block size in bytes (`1 << shift()`).
    pub(crate) fn bs(&self) -> usize {
        self.bs
    }
    pub(crate) fn shift(&self) -> u32 {
        self.shift
    }
    pub(crate) fn arena(&self) -> &Arena {
        &self.arena
    }
    /// BACKING's root mount id, once `MemCache::set_backing_root` said it.
    pub(crate) fn backing_mount(&self) -> Option<i32> {
        self.backing_mount.get().copied()
    }
    pub(crate) fn device(&self) -> &Arc<dyn BackingIo> {
        &self.device
    }
    pub(crate) fn counters(&self) -> &Counters {
        &self.counters
    }
    /// Dirty blocks past which writers wait for write-back.
    pub(crate) fn dirty_limit(&self) -> usize {
        self.dirty_limit
    }
    /// Dirty blocks past which the flushers are kicked.
    pub(crate) fn dirty_bg_limit(&self) -> usize {
        self.dirty_bg_limit
    }
    pub(crate) fn wake(&self) -> &Wake {
        &self.wake
    }
    pub(crate) fn sync_state(&self) -> &SyncState {
        &self.sync
    }
    /// The tiers below memory, if any.
    pub(crate) fn lower(&self) -> Option<&Arc<Lower>> {
        self.lower.as_ref()
    }
    pub(crate) fn timings(&self) -> &crate::config::FlushTimings {
        &self.timings
    }
}

/// Nanoseconds since `t0` (saturating).
fn elapsed_ns(t0: Instant) -> u64 {
    u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

impl Inner {
    /// The class of `file` (`None`: not open nor cached).
    pub(crate) fn class_of(&self, file: FileId) -> Option<Class> {
        self.lock().files().get(&file).map(|f| f.class())
    }

    #[inline]
    pub(crate) fn lock(&self) -> MutexGuard<'_, Engine> {
        lock(&self.engine)
    }

    #[inline]
    pub(crate) fn key(file: FileId, block: u64) -> BlockKey {
        BlockKey {
            file,
            block: BlockIndex(block),
        }
    }

    /// Wakes a flusher thread early (dirty data above the background limit).
    pub(crate) fn kick_flusher(&self) {
        self.wake.kick();
    }

    pub(crate) fn dev_read(
        &self,
        file: FileId,
        fd: &File,
        buf: &mut [u8],
        off: u64,
    ) -> io::Result<usize> {
        let t0 = Instant::now();
        let n = self.device.read_at(file, fd, buf, off)?;
        Counters::add(&self.counters.backing_read_ns, elapsed_ns(t0));
        Counters::add(&self.counters.backing_reads, 1);
        Counters::add(&self.counters.backing_bytes_read, n as u64);
        Ok(n)
    }

    pub(crate) fn dev_write(
        &self,
        file: FileId,
        fd: &File,
        buf: &[u8],
        off: u64,
    ) -> io::Result<()> {
        let t0 = Instant::now();
        self.device.write_at(file, fd, buf, off)?;
        Counters::add(&self.counters.backing_write_ns, elapsed_ns(t0));
        Counters::add(&self.counters.backing_writes, 1);
        Counters::add(&self.counters.backing_bytes_written, buf.len() as u64);
        Ok(())
    }

    pub(crate) fn dev_sync(&self, file: FileId, fd: &File, datasync: bool) -> io::Result<()> {
        self.device.sync(file, fd, datasync)?;
        Counters::add(&self.counters.backing_syncs, 1);
        Ok(())
    }

    pub(crate) fn dev_sync_fs(&self, fd: &File) -> io::Result<()> {
        self.device.sync_fs(fd)?;
        Counters::add(&self.counters.backing_syncs, 1);
        Ok(())
    }

    fn stats(&self) -> MemStats {
        let now = Instant::now();
        let c = &self.counters;
        let wb_total = Counters::get(&c.writeback_blocks);
        let mut eng = self.lock();
        let (windows, current) = eng.windows_at(now);
        let rate = windows.sample_rate(now, wb_total, self.timings.interval());
        let (wsecs, complete, wstats) = windows.view(now, &current);
        let sizes = eng.tier().pool_sizes();
        let sizes = [sizes.protected() as u64, sizes.normal() as u64];
        let class_blocks: Vec<u64> = eng
            .tier()
            .classes()
            .iter()
            .map(|(c, _)| eng.tier().class_blocks(c) as u64)
            .collect();
        let tiers = vec![TierSnapshot {
            name: "memory".into(),
            kind: TierKind::Memory.to_string(),
            capacity_blocks: eng.tier().capacity() as u64,
            used_blocks: eng.tier().len() as u64,
            dirty_blocks: eng.dirty_blocks() as u64,
            hits: current.hits,
            misses: current.requests.saturating_sub(current.hits),
            demotions_in: 0,
            promotions_out: 0,
            fills: current.insertions,
            writebacks_in: 0,
            cleaned: 0,
            rejected: 0,
            errors: 0,
        }];
        let mut ms = MemStats {
            uptime_secs: now.saturating_duration_since(self.start).as_secs_f64(),
            capacity_blocks: eng.tier().capacity() as u64,
            block_size: self.bs as u64,
            used_blocks: eng.tier().len() as u64,
            dirty_blocks: eng.dirty_blocks() as u64,
            policy: self.cfg.policy.to_string(),
            partition: self.cfg.partition.kind.to_string(),
            s_target: eng.tier().s_target(),
            class_table: class_table(eng.tier()),
            s_cur: eng.tier().s_cur(),
            pools: pools_of(&current, sizes),
            classes: classes_of(&current, &class_blocks),
            window: WindowStats {
                secs: wsecs.as_secs_f64(),
                complete,
                classes: classes_of(&wstats, &class_blocks),
                pools: pools_of(&wstats, sizes),
            },
            backing: BackingStats {
                reads: Counters::get(&c.backing_reads),
                writes: Counters::get(&c.backing_writes),
                bytes_read: Counters::get(&c.backing_bytes_read),
                bytes_written: Counters::get(&c.backing_bytes_written),
                syncs: Counters::get(&c.backing_syncs),
                read_ns: Counters::get(&c.backing_read_ns),
                write_ns: Counters::get(&c.backing_write_ns),
                io_mode: self.device.io_mode(),
            },
            writeback_blocks_per_sec: rate,
            paths: PathStats {
                bypass_blocks: Counters::get(&c.bypass_blocks),
                write_through_blocks: Counters::get(&c.write_through_blocks),
                readahead_blocks: Counters::get(&c.readahead_blocks),
                writeback_blocks: wb_total,
                writeback_errors: Counters::get(&c.writeback_errors),
                throttled_writes: Counters::get(&c.throttled_writes),
                evictions: current.evictions,
                insertions: current.insertions,
            },
            trace_dropped: Counters::get(&self.trace_dropped),
            emulation: self.device.emulation(),
            tiers,
            lower: None,
        };
        // The tiers below are asked after the engine lock: a tier busy with its own I/O
        // (a flash set being reused) must not stall every request behind `stats`.
        drop(eng);
        if let Some(l) = &self.lower {
            let (s, t) = l.stats();
            ms.tiers.extend(t);
            ms.lower = Some(s);
        }
        ms
    }

    fn set_trace(&self, out: Option<Box<dyn Write + Send>>) -> io::Result<()> {
        let (sink, handle) = match out {
            Some(out) => {
                let (s, h) =
                    TraceSink::start(out, self.cfg.trace_queue, Arc::clone(&self.trace_dropped))?;
                (Some(s), Some(h))
            }
            None => (None, None),
        };
        let old = self.lock().replace_trace(sink);
        drop(old); // closes the old channel; its writer drains and exits
        let old_thread = std::mem::replace(&mut *lock(&self.trace_thread), handle);
        if let Some(t) = old_thread {
            if t.join().is_err() {
                log::error!("trace writer thread panicked");
            }
        }
        Ok(())
    }
}

/// The memory tier. Cheap to share by reference across threads (`&MemCache` is `Sync`); all
/// operations take `&self`. Dropping it stops the flushers and writes back everything.
#[derive(Debug)]
pub struct MemCache {
    inner: Arc<Inner>,
    flushers: Mutex<Vec<JoinHandle<()>>>,
    shut: Mutex<bool>,
}

/// How often a dirty tier's cleaning policy is ticked (its idle wait is counted in these).
const CLEANER_TICK: std::time::Duration = std::time::Duration::from_millis(20);

impl MemCache {
    /// Builds a tier over `device` and starts `cfg.flusher_threads` flusher threads.
    pub fn new(cfg: MemConfig, device: Arc<dyn BackingIo>) -> Result<Self, MemError> {
        Self::with_tiers(cfg, device, Vec::new())
    }

    /// Like [`MemCache::new`], with `lower` tiers (top first) below the memory tier, and a
    /// background thread that moves blocks into them.
    pub fn with_tiers(
        cfg: MemConfig,
        device: Arc<dyn BackingIo>,
        lower: Vec<LowerTier>,
    ) -> Result<Self, MemError> {
        cfg.validate()?;
        let tier_cfg = TierConfig {
            name: "memory".into(),
            capacity: cfg.capacity_blocks,
            policy: cfg.policy,
            partition: cfg.partition.clone(),
        };
        let tier = Tier::new(&tier_cfg)?;
        let bs = cfg.block_size.bytes() as usize;
        let arena = if cfg.zero_copy {
            Arena::new_shared(cfg.capacity_blocks, bs, region_epoch())?
        } else {
            Arena::new(cfg.capacity_blocks, bs)?
        };
        let start = Instant::now();
        let lower = if lower.is_empty() {
            None
        } else {
            let l = Lower::new(lower, bs)?;
            Some(Arc::new(l))
        };
        let windows = Windows::new(cfg.stats_window, start);
        let mut engine = Engine::new(tier, windows, start, lower.clone());
        engine.set_zero_copy(arena.shared().cloned());
        let inner = Arc::new(Inner {
            bs,
            shift: cfg.block_size.shift(),
            arena,
            engine: Mutex::new(engine),
            device,
            counters: Counters::default(),
            dirty_limit: cfg.dirty_limit(),
            dirty_bg_limit: cfg.dirty_background_limit(),
            wake: Wake::default(),
            sync: SyncState::new(start),
            lower: lower.clone(),
            backing_mount: std::sync::OnceLock::new(),
            trace_dropped: Arc::new(AtomicU64::new(0)),
            trace_thread: Mutex::new(None),
            start,
            timings: crate::config::FlushTimings::new(cfg.flush_interval, cfg.dirty_expire),
            cfg,
        });
        let mut flushers = Vec::new();
        for i in 0..inner.cfg.flusher_threads {
            let inner = Arc::clone(&inner);
            let h = std::thread::Builder::new()
                .name(format!("tiercache-flush-{i}"))
                .spawn(move || inner.flusher_loop())
                .map_err(MemError::Io)?;
            flushers.push(h);
        }
        if lower
            .as_ref()
            .and_then(|l| l.dirty_tier())
            .and_then(|t| t.cleaning())
            .is_some_and(|c| c.has_policy())
        {
            let inner = Arc::clone(&inner);
            let h = std::thread::Builder::new()
                .name("tiercache-clean".into())
                .spawn(move || inner.cleaner_loop(CLEANER_TICK))
                .map_err(MemError::Io)?;
            flushers.push(h);
        }
        if let Some(l) = lower {
            let inner = Arc::clone(&inner);
            let h = std::thread::Builder::new()
                .name("tiercache-lower".into())
                .spawn(move || l.worker_loop(&|k| inner.lock().holds_tier_key(k)))
                .map_err(MemError::Io)?;
            flushers.push(h);
        }
        Ok(Self {
            inner,
            flushers: Mutex::new(flushers),
            shut: Mutex::new(false),
        })
    }

    /// Names BACKING's root: only files on its mount are written back into a persistent tier
    /// (their handles reopen them after a crash); others go to BACKING.
    pub fn set_backing_root(&self, root: &File) -> io::Result<()> {
        let (_, id) = crate::handle::file_handle_and_mount(root)?;
        let _ = self.inner.backing_mount.set(id);
        Ok(())
    }

    /// A tier over the real backing files, leaving no pages in the page cache
    /// ([`UncachedBacking`], not probed: each file system's first request decides).
    pub fn with_real_device(cfg: MemConfig) -> Result<Self, MemError> {
        Self::new(cfg, Arc::new(UncachedBacking::new()))
    }

    pub fn config(&self) -> &MemConfig {
        &self.inner.cfg
    }

    pub(crate) fn inner(&self) -> &Inner {
        &self.inner
    }

    /// Bytes per block.
    pub fn block_size(&self) -> u64 {
        self.inner.bs as u64
    }

    /// Registers an open handle of `file` (the backing inode number) with its open backing file,
    /// class and current attributes. Blocks cached from an earlier version with a different
    /// stamp are dropped (clean ones; dirty ones are kept and a warning is logged).
    ///
    /// `backing` may be read-only: it becomes the file's backing handle only when the file has
    /// none or only a less capable one (read-write > read-only > write-only), so a read-only
    /// open never takes the place of the writable handle pending write-back needs.
    pub fn open(
        &self,
        file: FileId,
        backing: Arc<File>,
        class: Class,
        stamp: FileStamp,
    ) -> io::Result<OpenOutcome> {
        let mut out = self.inner.open(file, backing, class, stamp)?;
        // Read after the open: a concurrent open that found the file changed may have moved it
        // already, and the newer version is the one to report (it only drops more).
        if let Some(f) = self.inner.lock().files().get(&file) {
            out.content_version = f.version();
        }
        Ok(out)
    }

    /// A handle of `file` closed: call once per successful [`MemCache::open`]. At the last
    /// close cached blocks stay; the backing handle is kept until the file's dirty blocks are
    /// written back and BACKING is synced (by the flusher, `fsync` or `flush_all`). The last
    /// release also carries out a forget that came while the file was open, which may wait
    /// and do I/O (for a file the mount removed: a link-count `fstat`, a write-back if it has a
    /// name after all, the close of its descriptor); latency-sensitive callers use
    /// [`MemCache::try_release`] first.
    pub fn release(&self, file: FileId) {
        self.inner.release(file);
    }

    /// [`MemCache::release`] if it needs no I/O and no wait (the usual case): done, and `true`;
    /// otherwise nothing is done and `false` (make the ordinary call where waiting is fine).
    pub fn try_release(&self, file: FileId) -> bool {
        self.inner.try_release(file)
    }

    /// Reads up to `len` bytes at `offset`; short at the logical end of file.
    pub fn read(&self, file: FileId, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let mut buf = vec![0u8; len];
        let n = self.inner.read_into(file, offset, &mut buf)?;
        buf.truncate(n);
        Ok(buf)
    }

    /// Reads into `buf`; returns the bytes read (short at the logical end of file).
    pub fn read_into(&self, file: FileId, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.read_into(file, offset, buf)
    }

    /// Writes `data` at `offset` into the cache (write-back). Returns the bytes written, which
    /// is short only if an error stopped the write part-way.
    pub fn write(&self, file: FileId, offset: u64, data: &[u8]) -> io::Result<usize> {
        self.inner.write(file, offset, data)
    }

    /// [`MemCache::read_into`] if every block asked for is in memory: served with no I/O and
    /// no wait for one (for a request thread that must stay free for hits). Otherwise nothing
    /// is read or counted and the answer is [`NoWait::Wait`] with the file's class: make the
    /// ordinary call where waiting is fine.
    pub fn try_read_into(&self, file: FileId, offset: u64, buf: &mut [u8]) -> NoWait<usize> {
        self.inner.try_read_into(file, offset, buf)
    }

    /// [`MemCache::write`] if it needs no I/O and no wait (see `nowait`): into resident or
    /// whole blocks, below the dirty limit, without lower tiers. Otherwise nothing is written
    /// and the answer is [`NoWait::Wait`] with the file's class.
    pub fn try_write(&self, file: FileId, offset: u64, data: &[u8]) -> NoWait<usize> {
        self.inner.try_write(file, offset, data)
    }

    /// The class `file` was opened (or last reclassified) with; `None` for a file the tier
    /// does not know.
    pub fn class_of(&self, file: FileId) -> Option<Class> {
        self.inner.class_of(file)
    }

    /// Sets the file's size: BACKING is truncated (or extended) at once, cached blocks beyond
    /// are dropped and the tail of the last partial block is zeroed. Goes through the file's
    /// backing handle, so it fails with `EBADF` for a file without one (closed and clean); use
    /// [`MemCache::truncate_with`] when a writable descriptor is at hand.
    pub fn truncate(&self, file: FileId, new_size: u64) -> io::Result<()> {
        self.inner.truncate(file, None, new_size, false)
    }

    /// [`MemCache::truncate`] through `writable`, a descriptor of the file open for writing
    /// (`truncate(2)` by path of a closed file, whose backing handle the tier let go). A file
    /// the tier does not know is simply truncated on BACKING.
    pub fn truncate_with(&self, file: FileId, writable: &File, new_size: u64) -> io::Result<()> {
        self.inner.truncate(file, Some(writable), new_size, false)
    }

    /// The background write-back error of `file` not reported yet, if any; reporting clears it
    /// (one reporter, like Linux's errseq). Cheap: no write-back, no I/O — for `close()`, which
    /// must not wait for write-back. Later failures are remembered anew.
    pub fn take_writeback_error(&self, file: FileId) -> Option<io::Error> {
        let mut eng = self.inner.lock();
        let e = eng.files_mut().get_mut(&file)?.take_error()?;
        Some(e.to_io())
    }

    /// Returns once `file`'s dirty blocks are on BACKING and BACKING is synced
    /// (`fdatasync` when `datasync`, else `fsync`). Reports a background write-back error of the
    /// file that was not reported yet.
    pub fn fsync(&self, file: FileId, datasync: bool) -> io::Result<()> {
        self.inner.fsync(file, datasync)
    }

    /// Writes back every dirty block and syncs every file written to.
    pub fn flush_all(&self) -> io::Result<()> {
        self.inner.flush_all()
    }

    /// Stops the flusher threads and the trace, and writes back everything. The tier stays
    /// usable (without background write-back); later calls only write back again.
    pub fn shutdown(&self) -> io::Result<()> {
        let first = !std::mem::replace(&mut *lock(&self.shut), true);
        if first {
            self.inner.wake.stop();
            if let Some(l) = &self.inner.lower {
                l.stop();
            }
            for h in lock(&self.flushers).drain(..) {
                if h.join().is_err() {
                    log::error!("a flusher thread panicked");
                }
            }
        }
        let r = self.inner.flush_all();
        if first {
            if let Err(e) = self.inner.set_trace(None) {
                log::error!("closing the trace failed: {e}");
            }
        }
        r
    }

    /// Waits until no block is waiting to be stored in a lower tier (tests; `flush`).
    pub fn settle_lower(&self) {
        if let Some(l) = &self.inner.lower {
            l.drain();
        }
    }

    /// The logical size of `file` when cached writes extend it beyond BACKING.
    pub fn logical_size(&self, file: FileId) -> Option<u64> {
        self.inner.logical_size(file)
    }

    /// The times readers must see for `file` instead of BACKING's, whose ctime is
    /// `backing_ctime`: the modification time of cached writes not all on BACKING yet, and a
    /// change time that the tier's own write-back does not move (BACKING's ctime cannot be set).
    pub fn logical_times(&self, file: FileId, backing_ctime: SystemTime) -> LogicalTimes {
        self.inner.logical_times(file, backing_ctime)
    }

    /// Sets BACKING's times through `apply` (e.g. `utimensat`) serialised with everything else
    /// on `file`; when `mtime` is among them, later write-back of cached writes keeps the
    /// modification time `apply` set instead of moving it to the write-back time. `stat`
    /// describes the file afterwards (asked when the cache holds no descriptor of it): the
    /// stamp is recorded, so the next `open` keeps the file's cached blocks.
    pub fn set_times(
        &self,
        file: FileId,
        mtime: bool,
        apply: &mut dyn FnMut() -> io::Result<()>,
        stat: &mut dyn FnMut() -> io::Result<FileStamp>,
    ) -> io::Result<()> {
        self.inner.set_times(file, mtime, apply, stat)
    }

    /// Runs `apply`, which changes `file`'s metadata on BACKING but not its bytes — mode,
    /// owner, extended attributes, links, names — serialised with the file's write-back, then
    /// records the stamp `stat` gives (asked only when the cache keeps something of the file):
    /// the change time moved, and the next `open` must not take the cache's own change for an
    /// edit behind its back (which would cost the file its cached blocks).
    pub fn change_metadata(
        &self,
        file: FileId,
        apply: &mut dyn FnMut() -> io::Result<()>,
        stat: &mut dyn FnMut() -> io::Result<FileStamp>,
    ) -> io::Result<()> {
        self.inner.change_metadata(file, apply, stat)
    }

    /// `file`'s inode has no link left on BACKING after a change made through the cache (an
    /// unlink or a rename over it; BACKING's link count read after it): when the kernel forgets
    /// it — at once, or at the last release — its clean blocks go instead of being kept for a
    /// next open that no name can lead to. Dirty blocks are discarded by a forget that finds
    /// no link on the state's own descriptor (`fstat`), else written back; a forget that waited
    /// for the last release is carried out there in full when writes are pending. A later open
    /// of the inode (a name given back with `linkat`) clears the mark.
    pub fn mark_unlinked(&self, file: FileId) {
        self.inner.mark_unlinked(file);
    }

    /// Runs `op`, which changes `file`'s bytes or size on BACKING directly (fallocate, hole
    /// punching, zeroing), after writing back its dirty blocks and with every other request on
    /// the file held off; then drops its cached blocks and takes its size from BACKING.
    pub fn apply_to_backing(
        &self,
        file: FileId,
        op: &mut dyn FnMut() -> io::Result<()>,
    ) -> io::Result<()> {
        self.inner.apply_to_backing(file, op)
    }

    /// The file's generation: bumped by every write and truncate.
    pub fn generation(&self, file: FileId) -> Option<u64> {
        self.inner.generation(file)
    }

    /// Reclassifies `file`: its cached blocks move to the pool of `class`, and later fills use
    /// it (run-time priority directories).
    pub fn set_class(&self, file: FileId, class: Class) {
        self.inner.set_class(file, class);
    }

    /// Drops `file`'s clean cached blocks (dirty ones stay). Returns how many were dropped.
    pub fn invalidate(&self, file: FileId) -> usize {
        self.inner.invalidate(file)
    }

    /// The kernel forgot the inode, so the file's id may name another file from now on: writes
    /// its dirty blocks back — synchronously, without syncing BACKING; not at all when the inode
    /// is unlinked, as nobody can read them any more. Clean blocks stay when BACKING reports the
    /// inode's birth time (the next `open` reuses them only for the same stamp and birth time);
    /// otherwise all its blocks and its state (remembered error, pending sync, logical times)
    /// go. If the write-back fails, the dirty blocks are kept (and retried) but the next `open`
    /// of `file` takes it for a different file unless its stamp matches exactly. With handles
    /// still open, this happens at [`MemCache::release`]. Returns the blocks dropped.
    pub fn forget(&self, file: FileId) -> usize {
        self.inner.forget(file)
    }

    /// [`MemCache::forget`] if it needs no I/O and no wait (no tier below; a closed file with
    /// nothing to write back and no descriptor of BACKING left, or an open one, whose forget
    /// waits for its last release): done, and `true`; otherwise nothing is done and `false`
    /// (make the ordinary call where waiting is fine).
    pub fn try_forget(&self, file: FileId) -> bool {
        self.inner.try_forget(file)
    }

    /// Cached and dirty blocks of `file`.
    pub fn file_blocks(&self, file: FileId) -> (usize, usize) {
        self.inner.file_blocks(file)
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> MemStats {
        self.inner.stats()
    }

    /// Starts (or with `None` stops) recording every block access as CSV lines
    /// `time,file,obj_id,op,class` into `out`, from a writer thread.
    pub fn set_trace(&self, out: Option<Box<dyn Write + Send>>) -> io::Result<()> {
        self.inner.set_trace(out)
    }

    /// The zero-copy shared region (`MemConfig::zero_copy`), to hand to clients.
    pub fn zero_copy_region(&self) -> Option<&Arc<tiercache_memtier::shm::Region>> {
        self.inner.region()
    }

    /// Zero-copy miss path: reads blocks `first..first+count` of `file` into the cache and pins
    /// each for client `id`; each block's slot, `None` past EOF or when it could not be kept
    /// (see `zerocopy`).
    pub fn pin_blocks(
        &self,
        file: FileId,
        first: u64,
        count: u64,
        id: ClientId,
    ) -> io::Result<Vec<Option<u32>>> {
        self.inner.pin_blocks(file, first, count, id)
    }

    /// Zero-copy sync (003's syncblock): grows the file to `new_size` if it is shorter, writes
    /// the dirty blocks back and syncs BACKING. Returns the size.
    pub fn sync_extend(&self, file: FileId, new_size: Option<u64>) -> io::Result<u64> {
        self.inner.sync_extend(file, new_size)
    }

    /// A zero-copy client is gone: drops its pins and frees the slots held back for it.
    pub fn release_client(&self, id: ClientId) {
        self.inner.release_client(id);
    }

    /// Slots held back because a zero-copy client pinned them when they were removed.
    pub fn held_slots(&self) -> usize {
        self.inner.held_slots()
    }

    /// Checks the engine's invariants; meaningful only while no request is running (tests).
    pub fn check_invariants(&self) -> Result<(), tiercache_core::InvariantViolation> {
        self.inner.lock().check()
    }
}

impl Drop for MemCache {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            log::error!("memory tier: write-back at shutdown failed: {e}");
        }
    }
}

/// A value that differs between daemon starts (a zero-copy client tells regions apart by it).
fn region_epoch() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    t ^ (u64::from(std::process::id()) << 32)
}

/// The class table of `tier` as the statistics show it.
fn class_table(tier: &tiercache_core::tier::Tier) -> Vec<ClassInfo> {
    tier.classes()
        .iter()
        .map(|(class, spec)| ClassInfo {
            class,
            name: spec.name.clone(),
            target: spec.target,
            target_reachable: tier.partitioner().target_reachable(class),
            curve: tier.partitioner().curve(class, crate::stats::CURVE_POINTS),
        })
        .collect()
}
