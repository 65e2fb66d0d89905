//! The I/O worker pool: requests that may wait — a read the data path cannot serve from memory,
//! a write that needs BACKING or waits for write-back, `fsync`, `fallocate` — are answered by
//! a bounded set of worker threads, so the FUSE request threads stay free for hits and
//! metadata (fuser's replies may be sent from any thread).
//!
//! The pool owns the per-class queues and counts; which request starts next is decided by
//! [`Policy`](crate::iopolicy::Policy) (priority first, a capped normal class, a bound on the
//! normal class's starvation: see `iopolicy.rs`).
//!
//! The queues are not capped: each queued request is one the kernel sent and waits for, so
//! their number is bounded by the callers (threads blocked in a system call, plus the kernel's
//! background requests, `max_background`).
//!
//! Invariant: every job runs exactly once, also at shutdown (dropping the pool drains the
//! queues before the workers exit), so every request gets its reply.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use crate::iopolicy::{Load, Policy};

/// The class a request is queued in: the data path's, from the file's class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum IoClass {
    /// Files of priority directories: started first, with reserved workers.
    Priority,
    /// Everything else.
    Normal,
}

impl IoClass {
    pub(crate) fn index(self) -> usize {
        match self {
            IoClass::Priority => 0,
            IoClass::Normal => 1,
        }
    }
}

/// One class's figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoClassStats {
    /// Requests waiting for a worker.
    pub queued: u64,
    /// Requests a worker is running.
    pub in_flight: u64,
    /// Workers the class may occupy at once.
    pub workers: u64,
    /// Requests finished since the mount.
    pub completed: u64,
}

/// The pool's figures (all zero when the pool is off).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoStats {
    /// Worker threads (0: the pool is off, requests that wait run on the request threads).
    pub workers: u64,
    /// Workers the normal class cannot occupy.
    pub reserved: u64,
    pub priority: IoClassStats,
    pub normal: IoClassStats,
}

type Job = Box<dyn FnOnce() + Send + 'static>;

struct State {
    queued: [VecDeque<Job>; 2],
    in_flight: [usize; 2],
    completed: [u64; 2],
    policy: Policy,
    stop: bool,
}

impl State {
    /// The oldest request of the class the policy picks, counted as running.
    fn start_next(&mut self) -> Option<(usize, Job)> {
        let load = Load {
            queued: [self.queued[0].len(), self.queued[1].len()],
            in_flight: self.in_flight,
        };
        let i = self.policy.pick(&load)?.index();
        let job = self.queued[i].pop_front()?;
        self.in_flight[i] += 1;
        Some((i, job))
    }
}

/// What the workers and the stats readers share.
struct Shared {
    state: Mutex<State>,
    work: Condvar,
    /// The policy's figures, for the stats readers.
    workers: usize,
    reserved: usize,
    normal_cap: usize,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn stats(&self) -> IoStats {
        let st = self.lock();
        let class = |i: usize, workers: usize| IoClassStats {
            queued: st.queued[i].len() as u64,
            in_flight: st.in_flight[i] as u64,
            workers: workers as u64,
            completed: st.completed[i],
        };
        IoStats {
            workers: self.workers as u64,
            reserved: self.reserved as u64,
            priority: class(0, self.workers),
            normal: class(1, self.normal_cap),
        }
    }

    fn worker_loop(&self) {
        loop {
            let (class, job) = {
                let mut st = self.lock();
                loop {
                    if let Some(started) = st.start_next() {
                        break started;
                    }
                    if st.stop && st.queued.iter().all(VecDeque::is_empty) {
                        return;
                    }
                    st = self.work.wait(st).unwrap_or_else(PoisonError::into_inner);
                }
            };
            // A panicking job loses only its own reply (fuser answers EIO when a reply is
            // dropped unsent); the worker stays.
            if catch_unwind(AssertUnwindSafe(job)).is_err() {
                log::error!("an I/O worker's request panicked; it was answered with EIO");
            }
            let mut st = self.lock();
            st.in_flight[class] -= 1;
            st.completed[class] += 1;
            // This worker looks for the next job itself (one the cap held back included);
            // at shutdown, idle workers that saw only capped jobs look again, or exit.
            if st.stop {
                self.work.notify_all();
            }
        }
    }
}

/// Reads a pool's figures; cheap to clone and keep (it does not keep the workers alive).
#[derive(Clone)]
pub struct IoStatsReader(Option<Arc<Shared>>);

impl std::fmt::Debug for IoStatsReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("IoStatsReader").field(&self.stats()).finish()
    }
}

impl IoStatsReader {
    /// Queued and running requests per class, and the worker counts.
    pub fn stats(&self) -> IoStats {
        self.0.as_ref().map(|s| s.stats()).unwrap_or_default()
    }
}

/// The workers; dropping the pool finishes every queued job, then joins them.
pub(crate) struct IoPool {
    shared: Option<Arc<Shared>>,
    threads: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for IoPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IoPool")
            .field("workers", &self.threads.len())
            .finish_non_exhaustive()
    }
}

impl IoPool {
    /// Starts `workers` threads; 0 makes a pool that runs every job on the calling thread.
    pub(crate) fn new(workers: usize) -> std::io::Result<Self> {
        if workers == 0 {
            return Ok(Self {
                shared: None,
                threads: Vec::new(),
            });
        }
        let policy = Policy::new(workers);
        let shared = Arc::new(Shared {
            workers: policy.workers(),
            reserved: policy.reserved(),
            normal_cap: policy.normal_cap(),
            state: Mutex::new(State {
                queued: Default::default(),
                in_flight: [0; 2],
                completed: [0; 2],
                policy,
                stop: false,
            }),
            work: Condvar::new(),
        });
        let mut pool = Self {
            shared: Some(Arc::clone(&shared)),
            threads: Vec::with_capacity(workers),
        };
        for i in 0..workers {
            let s = Arc::clone(&shared);
            let t = std::thread::Builder::new()
                .name(format!("tiercache-io-{i}"))
                .spawn(move || s.worker_loop())?;
            pool.threads.push(t);
        }
        Ok(pool)
    }

    /// Whether requests that may wait are handed to workers (else run where they arrive).
    pub(crate) fn enabled(&self) -> bool {
        self.shared.is_some()
    }

    /// Queues `job` in `class` (or runs it now when the pool is off).
    pub(crate) fn submit(&self, class: IoClass, job: impl FnOnce() + Send + 'static) {
        let Some(shared) = &self.shared else {
            job();
            return;
        };
        shared.lock().queued[class.index()].push_back(Box::new(job));
        shared.work.notify_one();
    }

    pub(crate) fn stats_reader(&self) -> IoStatsReader {
        IoStatsReader(self.shared.clone())
    }
}

impl Drop for IoPool {
    fn drop(&mut self) {
        if let Some(s) = &self.shared {
            s.lock().stop = true;
            s.work.notify_all();
        }
        for t in self.threads.drain(..) {
            if t.join().is_err() {
                log::error!("an I/O worker thread panicked");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    /// A job that reports its label when it starts, then waits for `gate` to be dropped.
    fn gated(
        started: &mpsc::Sender<&'static str>,
        label: &'static str,
        gate: &Arc<Mutex<()>>,
    ) -> impl FnOnce() + Send + 'static {
        let (started, gate) = (started.clone(), Arc::clone(gate));
        move || {
            started.send(label).unwrap();
            drop(gate.lock().unwrap());
        }
    }

    fn next(rx: &mpsc::Receiver<&'static str>) -> &'static str {
        rx.recv_timeout(Duration::from_secs(10)).unwrap()
    }

    #[test]
    fn normal_requests_never_take_the_reserved_workers() {
        let pool = IoPool::new(4).unwrap();
        let gate = Arc::new(Mutex::new(()));
        let held = gate.lock().unwrap();
        let (tx, rx) = mpsc::channel();
        for _ in 0..6 {
            pool.submit(IoClass::Normal, gated(&tx, "normal", &gate));
        }
        for _ in 0..3 {
            assert_eq!(next(&rx), "normal");
        }
        let s = pool.stats_reader().stats();
        assert_eq!((s.normal.in_flight, s.normal.queued), (3, 3));
        assert_eq!((s.workers, s.reserved, s.normal.workers), (4, 1, 3));
        // The fourth worker is free for a priority request while three normal ones wait.
        let (ptx, prx) = mpsc::channel();
        pool.submit(IoClass::Priority, move || ptx.send(()).unwrap());
        prx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert!(rx.try_recv().is_err(), "a queued normal request started");
        drop(held);
        for _ in 0..3 {
            assert_eq!(next(&rx), "normal");
        }
        drop(pool);
    }

    #[test]
    fn dropping_the_pool_runs_every_queued_job() {
        let pool = IoPool::new(2).unwrap();
        let (tx, rx) = mpsc::channel();
        for i in 0..50u32 {
            let tx = tx.clone();
            let class = if i % 3 == 0 {
                IoClass::Priority
            } else {
                IoClass::Normal
            };
            pool.submit(class, move || {
                std::thread::sleep(Duration::from_micros(200));
                tx.send(i).unwrap();
            });
        }
        drop(pool);
        drop(tx);
        let mut got: Vec<u32> = rx.iter().collect();
        got.sort_unstable();
        assert_eq!(got, (0..50).collect::<Vec<_>>());
    }

    #[test]
    fn a_panicking_job_keeps_its_worker() {
        let pool = IoPool::new(1).unwrap();
        pool.submit(IoClass::Normal, || panic!("boom"));
        let (tx, rx) = mpsc::channel();
        pool.submit(IoClass::Normal, move || tx.send(()).unwrap());
        rx.recv_timeout(Duration::from_secs(10)).unwrap();
        let reader = pool.stats_reader();
        drop(pool);
        assert_eq!(reader.stats().normal.completed, 2);
    }

    #[test]
    fn an_off_pool_runs_jobs_at_once() {
        let pool = IoPool::new(0).unwrap();
        assert!(!pool.enabled());
        let ran = Arc::new(Mutex::new(false));
        let r = Arc::clone(&ran);
        pool.submit(IoClass::Priority, move || *r.lock().unwrap() = true);
        assert!(*ran.lock().unwrap());
        assert_eq!(pool.stats_reader().stats(), IoStats::default());
    }
}
