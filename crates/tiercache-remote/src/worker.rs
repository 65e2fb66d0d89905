//! The tier's background worker: lands queued stores as quiet pipelined `ms` batches (one per
//! server, ended by `mn`), sends queued deletes the same way, and probes ejected servers.
//!
//! Order within one batch of jobs: deletes first, then stores, then deletes for stores that
//! landed after their entry was dropped. A delete queued before a store of the same key (an
//! invalidation, then a refill) thus never removes the refilled value; a delete queued after
//! one (a fill, then an invalidation) may run first, and the landed store is then deleted in
//! the last step. Either way visibility is the index's business: a store only becomes
//! readable by `Index::mark_ready` with its own `seq`.
//!
//! A store batch to one server holds values up to [`SET_BATCH_BYTES`] in all (at least one
//! value): the request timeout is the deadline of one whole pipelined batch, so the bytes of a
//! batch are bounded rather than only their count.
//!
//! A store that landed after its entry was dropped or replaced is unreachable garbage and is
//! deleted, unless the index now holds the same memcached key (same version) on the same
//! server: then the name is the current entry's too, and a delete could remove its value.
//! Deletes that cannot be sent (server down or failing, shutting down) are counted in
//! `deletes_dropped`; memcached's LRU reclaims what they would have freed.
//!
//! Shutdown: the worker checks `stop` before every batch and between probes, so dropping the
//! tier waits for at most one request (one timeout).

use crate::tier::Shared;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;
use tiercache_tier::TierKey;

/// Jobs taken from the queue at once.
const MAX_JOBS: usize = 128;
/// Value bytes per pipelined `ms` batch (a larger single value goes alone).
pub const SET_BATCH_BYTES: usize = 256 * 1024;
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
    pub version: u64,
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
        shared.pool.probe_due(&shared.stop);
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
        let mut rest = items.as_slice();
        while !rest.is_empty() {
            let n = batch_len(rest);
            let (chunk, tail) = rest.split_at(n);
            store_chunk(shared, server, chunk, &mut late);
            rest = tail;
        }
    }
    send_deletes(shared, &late);
}

/// How many of `jobs` go in the next batch: values up to [`SET_BATCH_BYTES`], at least one.
fn batch_len(jobs: &[StoreJob]) -> usize {
    let mut bytes = 0usize;
    let mut n = 0;
    for j in jobs {
        bytes = bytes.saturating_add(j.value.len() + j.name.len());
        if n > 0 && bytes > SET_BATCH_BYTES {
            break;
        }
        n += 1;
    }
    n
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
            if !ix.mark_ready(key, *seq) {
                // Dropped or replaced while in flight: nobody will read it; free the server's
                // memory — unless the current entry is under the same name on the same server.
                let same_name = ix
                    .get(key)
                    .is_some_and(|e| e.version == job.version && e.server == server);
                if !same_name {
                    late.entry(server).or_default().push(name.clone());
                }
            }
        } else {
            shared.c.store_failures.fetch_add(1, Ordering::Relaxed);
            ix.remove_if_seq(key, *seq);
        }
    }
}

fn send_deletes(shared: &Shared, deletes: &BTreeMap<u8, Vec<String>>) {
    let dropped = |n: usize| {
        shared
            .c
            .deletes_dropped
            .fetch_add(n as u64, Ordering::Relaxed);
    };
    for (&server, names) in deletes {
        let i = usize::from(server);
        let Some(s) = shared.pool.server(i) else {
            dropped(names.len());
            continue;
        };
        for chunk in names.chunks(DELETE_BATCH) {
            if !shared.pool.is_up(i) || shared.stop.load(Ordering::Acquire) {
                dropped(chunk.len());
                continue;
            }
            let keys: Vec<&str> = chunk.iter().map(String::as_str).collect();
            match s.client.delete_batch(&keys) {
                Ok(()) => shared.pool.success(i),
                Err(e) => {
                    log::debug!("{}: delete batch failed: {e}", shared.name);
                    shared.c.errors.fetch_add(1, Ordering::Relaxed);
                    dropped(chunk.len());
                    shared.pool.failure(i);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(len: usize) -> StoreJob {
        StoreJob {
            key: TierKey::new(
                tiercache_tier::FileKey {
                    dev: 1,
                    ino: 1,
                    birth: 0,
                },
                0,
            ),
            version: 1,
            seq: 1,
            server: 0,
            name: "k".repeat(34),
            value: vec![0; len],
        }
    }

    #[test]
    fn batches_are_bounded_by_bytes_with_at_least_one_value() {
        let small: Vec<StoreJob> = (0..200).map(|_| job(4096 + 48)).collect();
        let n = batch_len(&small);
        let bytes: usize = small[..n]
            .iter()
            .map(|j| j.value.len() + j.name.len())
            .sum();
        assert!(
            bytes <= SET_BATCH_BYTES && n > 32,
            "{n} values, {bytes} bytes"
        );
        let big: Vec<StoreJob> = (0..3).map(|_| job(1 << 20)).collect();
        assert_eq!(batch_len(&big), 1, "a value over the bound goes alone");
        assert_eq!(batch_len(&big[..0]), 0);
    }
}
