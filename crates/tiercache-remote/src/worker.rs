//! The tier's background worker: lands queued stores as quiet pipelined `ms` batches (one per
//! server, ended by `mn`), sends queued deletes the same way, and probes ejected servers.
//!
//! Order within one batch of jobs: deletes first, then stores, then deletes for stores that
//! landed after their entry was dropped. A delete queued before a store of the same key (an
//! invalidation, then a refill) thus never removes the refilled value; a delete queued after
//! one (a fill, then an invalidation) may run first, and the landed store is then deleted in
//! the last step. Either way visibility is the index's business: a store only becomes
//! readable by `Index::mark_ready` with its own `seq`.

use crate::tier::Shared;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;
use tiercache_tier::TierKey;

/// Jobs taken from the queue at once.
const MAX_JOBS: usize = 128;
/// Values per pipelined `ms` batch.
const SET_BATCH: usize = 32;
/// Keys per pipelined `md` batch.
const DELETE_BATCH: usize = 128;

/// Work for the background thread.
#[derive(Debug)]
pub enum Job {
    Store(StoreJob),
    Delete {
        server: u8,
        key: TierKey,
        version: u64,
    },
}

/// A sealed value to land on `server` under `name`, made readable as store `seq` of `key`.
#[derive(Debug)]
pub struct StoreJob {
    pub key: TierKey,
    pub seq: u64,
    pub server: u8,
    pub name: String,
    pub value: Vec<u8>,
}

/// Runs until the tier stops or drops the queue's sender.
pub fn run(shared: Arc<Shared>, rx: Receiver<Job>) {
    let tick =
        (shared.retry_after / 4).clamp(Duration::from_millis(10), Duration::from_millis(200));
    while !shared.stop.load(Ordering::Acquire) {
        match rx.recv_timeout(tick) {
            Ok(job) => {
                let mut jobs = vec![job];
                while jobs.len() < MAX_JOBS {
                    match rx.try_recv() {
                        Ok(j) => jobs.push(j),
                        Err(_) => break,
                    }
                }
                let n = jobs.len() as u64;
                process(&shared, jobs);
                shared.pending.fetch_sub(n, Ordering::AcqRel);
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        shared.pool.probe_due();
    }
}

fn process(shared: &Shared, jobs: Vec<Job>) {
    let mut stores: BTreeMap<u8, Vec<StoreJob>> = BTreeMap::new();
    let mut deletes: BTreeMap<u8, Vec<String>> = BTreeMap::new();
    for job in jobs {
        match job {
            Job::Store(j) => stores.entry(j.server).or_default().push(j),
            Job::Delete {
                server,
                key,
                version,
            } => deletes
                .entry(server)
                .or_default()
                .push(shared.crypt.key_name(&key, version).text),
        }
    }
    send_deletes(shared, &deletes);
    let mut late: BTreeMap<u8, Vec<String>> = BTreeMap::new();
    for (server, items) in stores {
        for chunk in items.chunks(SET_BATCH) {
            store_chunk(shared, server, chunk, &mut late);
        }
    }
    send_deletes(shared, &late);
}

fn store_chunk(
    shared: &Shared,
    server: u8,
    chunk: &[StoreJob],
    late: &mut BTreeMap<u8, Vec<String>>,
) {
    let i = usize::from(server);
    let result = match shared.pool.server(i) {
        Some(s) if shared.pool.is_up(i) && !shared.stop.load(Ordering::Acquire) => {
            let items: Vec<(&str, &[u8])> = chunk
                .iter()
                .map(|j| (j.name.as_str(), j.value.as_slice()))
                .collect();
            let r = s.client.set_batch(&items);
            match &r {
                Ok(_) => shared.pool.success(i),
                Err(e) => {
                    log::debug!("{}: store batch failed: {e}", shared.name);
                    shared.c.errors.fetch_add(1, Ordering::Relaxed);
                    shared.pool.failure(i);
                }
            }
            r.ok()
        }
        _ => None,
    };
    let mut ix = shared.index();
    for (n, job) in chunk.iter().enumerate() {
        let (key, seq, name) = (&job.key, &job.seq, &job.name);
        let landed = result.as_ref().is_some_and(|r| r.get(n) == Some(&true));
        if landed {
            shared.c.stores.fetch_add(1, Ordering::Relaxed);
            if !ix.mark_ready(key, *seq) && ix.get(key).is_none() {
                // Dropped while in flight: nobody will read it; free the server's memory.
                late.entry(server).or_default().push(name.clone());
            }
        } else {
            shared.c.store_failures.fetch_add(1, Ordering::Relaxed);
            ix.remove_if_seq(key, *seq);
        }
    }
}

fn send_deletes(shared: &Shared, deletes: &BTreeMap<u8, Vec<String>>) {
    for (&server, names) in deletes {
        let i = usize::from(server);
        let Some(s) = shared.pool.server(i) else {
            continue;
        };
        for chunk in names.chunks(DELETE_BATCH) {
            if !shared.pool.is_up(i) || shared.stop.load(Ordering::Acquire) {
                break;
            }
            let keys: Vec<&str> = chunk.iter().map(String::as_str).collect();
            match s.client.delete_batch(&keys) {
                Ok(()) => shared.pool.success(i),
                Err(e) => {
                    log::debug!("{}: delete batch failed: {e}", shared.name);
                    shared.c.errors.fetch_add(1, Ordering::Relaxed);
                    shared.pool.failure(i);
                }
            }
        }
    }
}
