//! [`RemoteTier`]: the [`DataTier`] over a memcached pool.
//!
//! - Clean data only: dirty stores are rejected; nothing survives a restart.
//! - The index of what is remote lives here (module `index`): a block it lacks is a miss
//!   without I/O. `read`/`take` go to the recorded server with the request timeout; any
//!   remote failure (I/O, timeout, protocol, server down, authentication, wrong `seq`, `EN`)
//!   is counted and returned as `Ok(Lookup::Miss)` — the caller then reads the next source,
//!   so a lost server costs speed, never an error or a wrong byte.
//! - `fill`/`demote` seal the block, register a not-yet-readable entry under the index lock
//!   (where `current` is asked), and queue the store for the background worker; the entry
//!   becomes readable only when that store has landed and the entry still has its `seq`.
//!   When `queue_depth` jobs are already pending (queued or being sent) the store is rejected
//!   before the index is touched, so a rejected store changes nothing.
//! - `invalidate`/`discard`/`invalidate_file` only touch the index and queue best-effort
//!   deletes: no network I/O, no blocking (they may run under the manager's lock).
//! - Dropping the tier stops the worker and waits for it: at most about one request timeout
//!   (the request in flight), however many servers are unresponsive.

use crate::config::{self, RemoteConfig};
use crate::crypt::{self, Crypt};
use crate::error::RemoteError;
use crate::index::{Entry, Index};
use crate::pool::Pool;
use crate::setup;
use crate::worker::{self, Job, StoreJob};
use crate::ServerClient;
use serde::Serialize;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tiercache_tier::{
    Admit, DataTier, FileKey, Lookup, StoreKind, TierError, TierInfo, TierKey, TierKind,
    TierSnapshot,
};

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub stores: AtomicU64,
    pub store_failures: AtomicU64,
    pub invalidations: AtomicU64,
    pub auth_failures: AtomicU64,
    pub stale_seq: AtomicU64,
    pub errors: AtomicU64,
    pub rejected: AtomicU64,
    pub fills: AtomicU64,
    pub demotions_in: AtomicU64,
    pub promotions_out: AtomicU64,
    pub deletes_dropped: AtomicU64,
}

/// State shared with the background worker.
#[derive(Debug)]
pub(crate) struct Shared {
    pub name: String,
    pub pool: Pool,
    pub crypt: Crypt,
    index: Mutex<Index>,
    pub c: Counters,
    pub stop: AtomicBool,
    /// Jobs queued and not yet processed.
    pub pending: AtomicU64,
    pub retry_after: Duration,
}

impl Shared {
    pub fn index(&self) -> MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Counters for `stats --json` (`remote.*`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RemoteStats {
    pub hits: u64,
    pub misses: u64,
    /// Values that landed on a server.
    pub stores: u64,
    /// Queued stores that did not land (server down or failing, `NS`, a per-item
    /// `SERVER_ERROR` such as `out of memory storing object`).
    pub store_failures: u64,
    pub invalidations: u64,
    /// Values that failed authentication (garbage, another key's or namespace's value).
    pub auth_failures: u64,
    /// Authentic values of an older store than the index's (a late overwrite).
    pub stale_seq: u64,
    /// Requests that failed (I/O, timeout, protocol, error replies).
    pub errors: u64,
    pub servers_up: u64,
    pub servers: u64,
    /// Stores turned down (`current()` false, no server up, queue full).
    pub rejected: u64,
    /// Deletes not sent: the queue was full, the server was down or failed the batch, or the
    /// tier was shutting down (harmless: the index decides visibility; memcached's LRU
    /// reclaims the values).
    pub deletes_dropped: u64,
    pub ram_bytes_per_block: f64,
    pub used_blocks: u64,
    pub capacity_blocks: u64,
    /// Stores and deletes queued for the background worker and not yet processed.
    pub pending_stores: u64,
}

/// A cache tier on a pool of memcached servers; see the module docs.
#[derive(Debug)]
pub struct RemoteTier {
    info: TierInfo,
    shared: Arc<Shared>,
    tx: Option<SyncSender<Job>>,
    worker: Option<JoinHandle<()>>,
    next_seq: AtomicU64,
    /// Jobs that may be pending at once (`RemoteConfig::queue_depth`).
    queue_depth: u64,
}

impl RemoteTier {
    /// A new per-request timeout for every server (a reload); must be above zero.
    pub fn set_timeout(&self, timeout: Duration) -> Result<(), RemoteError> {
        if timeout.is_zero() {
            return Err(RemoteError::Config("timeout must be above zero".into()));
        }
        for i in 0..self.shared.pool.len() {
            if let Some(s) = self.shared.pool.server(i) {
                s.client.set_timeout(timeout);
            }
        }
        Ok(())
    }

    /// The per-request timeout in force.
    pub fn timeout(&self) -> Option<Duration> {
        self.shared.pool.server(0).map(|s| s.client.timeout())
    }

    /// Builds the tier and starts its worker. Every server is asked for its `stats settings`
    /// at once, so connecting takes at most about one timeout however many servers are
    /// silent. Servers that do not answer now start ejected and are probed after
    /// `retry_after`: that is not an error. An unusable address is, and so is a server whose
    /// `item_size_max` (`-I`) cannot hold one block's item (the error names the server, the
    /// size needed and the `-I` to start memcached with).
    pub fn connect(cfg: RemoteConfig) -> Result<RemoteTier, RemoteError> {
        if cfg.servers.is_empty() {
            return Err(RemoteError::Config("no memcached servers".into()));
        }
        if cfg.servers.len() > usize::from(u8::MAX) {
            return Err(RemoteError::Config(format!(
                "{} servers; at most 255",
                cfg.servers.len()
            )));
        }
        if cfg.block_size == 0 || cfg.timeout.is_zero() || cfg.queue_depth == 0 {
            return Err(RemoteError::Config(
                "block size, timeout and queue depth must be positive".into(),
            ));
        }
        // Values of another length are not ours and fail authentication; only far larger
        // ones (a misbehaving server) are protocol errors that cost the connection.
        let max_value = 2 * (cfg.block_size + crypt::OVERHEAD) + 64 * 1024;
        let mut clients = Vec::with_capacity(cfg.servers.len());
        for s in &cfg.servers {
            let addr = config::resolve(s)?;
            clients.push(ServerClient::new(s.clone(), addr, cfg.timeout, max_value));
        }
        let pool = Pool::new(clients, cfg.eject_after, cfg.retry_after);
        let mut reported: Option<u64> = None;
        for (i, answer) in setup::probe_all(&pool).into_iter().enumerate() {
            let Some(s) = pool.server(i) else { continue };
            match answer {
                Ok(settings) => {
                    setup::check_item_size(&cfg.name, s.client.name(), &settings, cfg.block_size)?;
                    if let Some(b) = settings.maxbytes {
                        reported = Some(reported.unwrap_or(0).saturating_add(b));
                    }
                }
                Err(e) => {
                    log::warn!(
                        "{}: memcached {s:?} not usable at start: {e}",
                        cfg.name,
                        s = s.client.name()
                    );
                    pool.eject(i);
                }
            }
        }
        let capacity = match cfg.capacity_blocks {
            Some(c) => c.max(1),
            None => setup::derived_capacity(&cfg.name, reported, pool.len(), cfg.block_size),
        };
        let info = TierInfo {
            name: cfg.name.clone(),
            kind: TierKind::Remote,
            capacity_blocks: capacity,
            block_size: cfg.block_size,
            accepts_dirty: false,
            persistent: false,
        };
        let shared = Arc::new(Shared {
            name: cfg.name.clone(),
            pool,
            crypt: Crypt::new(&cfg.key, &cfg.namespace),
            index: Mutex::new(Index::new(capacity)),
            c: Counters::default(),
            stop: AtomicBool::new(false),
            pending: AtomicU64::new(0),
            retry_after: cfg.retry_after,
        });
        let (tx, rx) = mpsc::sync_channel(cfg.queue_depth);
        let w = Arc::clone(&shared);
        let worker = std::thread::Builder::new()
            .name(format!("{}-remote", cfg.name))
            .spawn(move || worker::run(w, rx))
            .map_err(|e| RemoteError::Io {
                server: cfg.name.clone(),
                source: e,
            })?;
        // Sequence numbers start at a random point so a value from an earlier run can never
        // carry a `seq` this run's index expects (63 bits: no wrap in practice).
        let seq0 = rand::random::<u64>() >> 1;
        Ok(RemoteTier {
            info,
            shared,
            tx: Some(tx),
            worker: Some(worker),
            next_seq: AtomicU64::new(seq0),
            queue_depth: cfg.queue_depth as u64,
        })
    }

    /// Counters and occupancy.
    pub fn remote_stats(&self) -> RemoteStats {
        let c = &self.shared.c;
        let (used, ram) = {
            let ix = self.shared.index();
            (ix.len(), ix.ram_bytes_per_block())
        };
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        RemoteStats {
            hits: get(&c.hits),
            misses: get(&c.misses),
            stores: get(&c.stores),
            store_failures: get(&c.store_failures),
            invalidations: get(&c.invalidations),
            auth_failures: get(&c.auth_failures),
            stale_seq: get(&c.stale_seq),
            errors: get(&c.errors),
            servers_up: self.shared.pool.servers_up() as u64,
            servers: self.shared.pool.len() as u64,
            rejected: get(&c.rejected),
            deletes_dropped: get(&c.deletes_dropped),
            ram_bytes_per_block: ram,
            used_blocks: used,
            capacity_blocks: self.info.capacity_blocks,
            pending_stores: self.shared.pending.load(Ordering::Acquire),
        }
    }

    /// The memcached key this tier uses for `key` at `version` (diagnostics and tests).
    pub fn key_name(&self, key: &TierKey, version: u64) -> String {
        self.shared.crypt.key_name(key, version).text
    }

    /// The configured address of the server the index records for `key`, if any.
    pub fn server_of(&self, key: &TierKey) -> Option<String> {
        let e = self.shared.index().get(key)?;
        let s = self.shared.pool.server(usize::from(e.server))?;
        Some(s.client.name().to_string())
    }

    /// Waits until every queued store and delete has been processed (or `timeout` passed);
    /// `true` when the queue drained. For tests, benchmarks and orderly shutdown.
    pub fn flush(&self, timeout: Duration) -> bool {
        let until = Instant::now() + timeout;
        loop {
            if self.shared.pending.load(Ordering::Acquire) == 0 {
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Reserves a place in the queue; `false` when `queue_depth` jobs are pending. `pending`
    /// counts jobs from reservation until the worker has processed them, so it is never below
    /// the channel's occupancy: a reservation guarantees the send finds room.
    fn reserve(&self) -> bool {
        let depth = self.queue_depth;
        self.shared
            .pending
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |p| {
                (p < depth).then_some(p + 1)
            })
            .is_ok()
    }

    /// Sends `job` on a reserved place; `false` (place released) only if the worker is gone.
    fn send_reserved(&self, job: Job) -> bool {
        let sent = self.tx.as_ref().is_some_and(|tx| match tx.try_send(job) {
            Ok(()) => true,
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => false,
        });
        if !sent {
            self.shared.pending.fetch_sub(1, Ordering::AcqRel);
        }
        sent
    }

    /// Queues `job`; `false` when the queue is full (or the worker is gone).
    fn enqueue(&self, job: Job) -> bool {
        self.reserve() && self.send_reserved(job)
    }

    /// Queues a best-effort delete of a dropped entry's value.
    fn queue_delete(&self, key: &TierKey, e: &Entry) {
        let job = Job::Delete {
            server: e.server,
            key: *key,
            version: e.version,
        };
        if !self.enqueue(job) {
            self.shared
                .c
                .deletes_dropped
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    fn miss(&self) -> Result<Lookup, TierError> {
        self.shared.c.misses.fetch_add(1, Ordering::Relaxed);
        Ok(Lookup::Miss)
    }

    fn lookup(
        &self,
        key: &TierKey,
        version: u64,
        buf: &mut [u8],
        take: bool,
    ) -> Result<Lookup, TierError> {
        let bs = self.info.block_size;
        if buf.len() < bs {
            return Err(self.invalid(format!(
                "read buffer of {} bytes, block size {bs}",
                buf.len()
            )));
        }
        let sh = &self.shared;
        let entry = {
            let mut ix = sh.index();
            match ix.get(key) {
                None => None,
                Some(e) if e.version != version => {
                    // Another version is never served; the stale clean copy goes.
                    ix.remove(key);
                    drop(ix);
                    self.queue_delete(key, &e);
                    None
                }
                Some(e) if !e.ready || !sh.pool.is_up(usize::from(e.server)) => None,
                Some(e) => Some(e),
            }
        };
        let Some(e) = entry else {
            return self.miss();
        };
        let server = usize::from(e.server);
        let Some(s) = sh.pool.server(server) else {
            return self.miss();
        };
        let name = sh.crypt.key_name(key, version).text;
        let value = match s.client.get(&name) {
            Ok(v) => {
                sh.pool.success(server);
                v
            }
            Err(err) => {
                log::debug!(
                    "{}: read from {} failed: {err}",
                    self.info.name,
                    s.client.name()
                );
                sh.c.errors.fetch_add(1, Ordering::Relaxed);
                sh.pool.failure(server);
                return self.miss();
            }
        };
        let Some(value) = value else {
            // memcached evicted it (or lost it in a restart).
            sh.index().remove_if_seq(key, e.seq);
            return self.miss();
        };
        let data = match sh.crypt.open(&name, value) {
            Ok((seq, data)) if seq == e.seq && data.len() == bs => data,
            Ok(_) => {
                // Authentic but not the store the index made visible: a late older store.
                sh.c.stale_seq.fetch_add(1, Ordering::Relaxed);
                self.drop_entry(key, &e);
                return self.miss();
            }
            Err(crypt::OpenError::Auth) => {
                log::warn!(
                    "{}: value under {name} on {} failed authentication",
                    self.info.name,
                    s.client.name()
                );
                sh.c.auth_failures.fetch_add(1, Ordering::Relaxed);
                self.drop_entry(key, &e);
                return self.miss();
            }
        };
        // Linearise with invalidations: the bytes count only if the entry is still the one
        // that was read (an invalidate during the round trip makes this a miss).
        {
            let mut ix = sh.index();
            if ix.get(key) != Some(e) {
                drop(ix);
                return self.miss();
            }
            if take {
                ix.remove(key);
            }
            buf[..bs].copy_from_slice(&data);
        }
        if take {
            sh.c.promotions_out.fetch_add(1, Ordering::Relaxed);
            self.queue_delete(key, &e);
        }
        sh.c.hits.fetch_add(1, Ordering::Relaxed);
        Ok(Lookup::Hit { dirty: false })
    }

    /// Drops the entry `e` of `key` (if still current) and queues a delete of its value.
    fn drop_entry(&self, key: &TierKey, e: &Entry) {
        let removed = self.shared.index().remove_if_seq(key, e.seq);
        if let Some(e) = removed {
            self.queue_delete(key, &e);
        }
    }

    fn invalid(&self, why: String) -> TierError {
        TierError::Io {
            tier: self.info.name.clone(),
            source: io::Error::new(io::ErrorKind::InvalidInput, why),
        }
    }

    fn reject(&self) -> Result<Admit, TierError> {
        self.shared.c.rejected.fetch_add(1, Ordering::Relaxed);
        Ok(Admit::Rejected)
    }

    fn put(
        &self,
        key: &TierKey,
        version: u64,
        data: &[u8],
        current: &dyn Fn() -> bool,
        demote: bool,
    ) -> Result<Admit, TierError> {
        let bs = self.info.block_size;
        if data.len() != bs {
            return Err(self.invalid(format!("store of {} bytes, block size {bs}", data.len())));
        }
        let sh = &self.shared;
        let name = sh.crypt.key_name(key, version);
        let Some(server) = sh.pool.pick(name.hash) else {
            return self.reject();
        };
        let server = u8::try_from(server).map_err(|_| self.invalid("server index".into()))?;
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        let value = sh.crypt.seal(&name.text, seq, data);
        let mut doomed = Vec::new();
        {
            let mut ix = sh.index();
            if !current() {
                drop(ix);
                return self.reject();
            }
            if let Some(old) = ix.get(key) {
                if old.version == version && old.ready && old.server == server {
                    // Already there (same bytes by the version contract): nothing to send.
                    drop(ix);
                    self.count_store(demote);
                    return Ok(Admit::Stored);
                }
            }
            // A full queue rejects before the index is touched: a rejected store changes
            // nothing (no replaced entry, no FIFO victim lost).
            if !self.reserve() {
                drop(ix);
                return self.reject();
            }
            let entry = Entry {
                version,
                seq,
                server,
                ready: false,
            };
            let (old, evicted) = ix.insert(*key, entry);
            let job = Job::Store(StoreJob {
                key: *key,
                version,
                seq,
                server,
                name: name.text,
                value,
            });
            // Queued under the lock: the entry and its job appear together. The send fails
            // only when the worker is gone (it panicked); then nothing will land anyway.
            if !self.send_reserved(job) {
                ix.remove_if_seq(key, seq);
                if let Some(o) = old {
                    ix.insert(*key, o);
                }
                drop(ix);
                for (k, e) in evicted {
                    self.queue_delete(&k, &e);
                }
                return self.reject();
            }
            doomed.extend(old.filter(|o| o.version != version).map(|o| (*key, o)));
            doomed.extend(evicted);
        }
        for (k, e) in doomed {
            self.queue_delete(&k, &e);
        }
        self.count_store(demote);
        Ok(Admit::Stored)
    }

    fn count_store(&self, demote: bool) {
        let c = &self.shared.c;
        if demote {
            c.demotions_in.fetch_add(1, Ordering::Relaxed);
        } else {
            c.fills.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn drop_key(&self, key: &TierKey) {
        let removed = self.shared.index().remove(key);
        if let Some(e) = removed {
            self.shared.c.invalidations.fetch_add(1, Ordering::Relaxed);
            self.queue_delete(key, &e);
        }
    }
}

impl Drop for RemoteTier {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.tx = None;
        if let Some(w) = self.worker.take() {
            if w.join().is_err() {
                log::error!("{}: remote worker panicked", self.info.name);
            }
        }
    }
}

impl DataTier for RemoteTier {
    fn info(&self) -> &TierInfo {
        &self.info
    }

    fn contains(&self, key: &TierKey) -> bool {
        self.shared.index().get(key).is_some()
    }

    fn read(&self, key: &TierKey, version: u64, buf: &mut [u8]) -> Result<Lookup, TierError> {
        self.lookup(key, version, buf, false)
    }

    fn take(&self, key: &TierKey, version: u64, buf: &mut [u8]) -> Result<Lookup, TierError> {
        self.lookup(key, version, buf, true)
    }

    /// Clean data only (BACKING or a local tier always holds the truth): a dirty store is
    /// turned down. Nothing is spilled: memcached evicts on its own.
    fn store(
        &self,
        req: &tiercache_tier::Store<'_>,
        current: &dyn Fn() -> bool,
    ) -> Result<Admit, TierError> {
        match req.kind {
            StoreKind::Fill => self.put(&req.key, req.version, req.data, current, false),
            StoreKind::Demote => self.put(&req.key, req.version, req.data, current, true),
            StoreKind::WriteDirty => self.reject(),
        }
    }

    fn invalidate(&self, key: &TierKey) {
        self.drop_key(key);
    }

    /// The index lock is never held across network I/O, and the delete is queued.
    fn try_invalidate(&self, key: &TierKey) -> bool {
        self.drop_key(key);
        true
    }

    fn discard(&self, key: &TierKey) {
        self.drop_key(key);
    }

    fn invalidate_file(&self, file: &FileKey, from_block: u64) {
        let gone = self.shared.index().remove_file_from(file, from_block);
        self.shared
            .c
            .invalidations
            .fetch_add(gone.len() as u64, Ordering::Relaxed);
        for (k, e) in gone {
            self.queue_delete(&k, &e);
        }
    }

    fn sync(&self) -> Result<(), TierError> {
        Ok(())
    }

    fn stats(&self) -> TierSnapshot {
        let r = self.remote_stats();
        let c = &self.shared.c;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        TierSnapshot {
            name: self.info.name.clone(),
            kind: TierKind::Remote.to_string(),
            capacity_blocks: r.capacity_blocks,
            used_blocks: r.used_blocks,
            dirty_blocks: 0,
            hits: r.hits,
            misses: r.misses,
            demotions_in: get(&c.demotions_in),
            promotions_out: get(&c.promotions_out),
            fills: get(&c.fills),
            writebacks_in: 0,
            cleaned: 0,
            rejected: r.rejected,
            errors: r.errors,
        }
    }
}
