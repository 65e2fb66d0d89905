//! Backpressure on opens for writing while releases are pending: the descriptor bound that
//! request threads busy with releases used to give for free.
//!
//! Every handle open for writing holds a backing descriptor until its `release` is done, and
//! that release runs on an I/O worker (it may write back). The kernel sends at most
//! `max_background` releases at a time and queues the rest, each still holding its handle
//! here; a `tar x` of many small files whose creates are answered at once would run ahead of
//! its releases and out of descriptors. So when the daemon holds `threshold` or more handles
//! open for writing while some of their releases are queued or running, a new create or open
//! for writing waits (on its request thread) until those releases are done, or `MAX_WAIT`.
//! Without pending releases nothing waits: handles the applications keep open are theirs.

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// The longest a create or open waits for pending releases (they are I/O and end on their own;
/// this only bounds the wait on a BACKING that hangs).
const MAX_WAIT: Duration = Duration::from_secs(10);

#[derive(Debug, Default)]
struct Counts {
    /// Handles open for writing, until their release is done.
    open: usize,
    /// Of those, the ones whose release is queued or running on a worker.
    releasing: usize,
    /// Creates and opens waiting in `wait_for_room`: a release wakes them only if there are
    /// some (a notify is a system call even when nobody waits, one per writer's close).
    waiting: usize,
}

/// The writable handles' counts (one per mount).
#[derive(Debug)]
pub(crate) struct Writers {
    counts: Mutex<Counts>,
    done: Condvar,
    threshold: usize,
}

impl Writers {
    /// Waits start at `threshold` handles open for writing.
    pub(crate) fn new(threshold: usize) -> Self {
        Self {
            counts: Mutex::new(Counts::default()),
            done: Condvar::new(),
            threshold: threshold.max(1),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Before a create or an open for writing: waits while the daemon holds `threshold` or
    /// more writable handles and some of their releases are pending (at most `MAX_WAIT`).
    /// Returns whether it waited.
    pub(crate) fn wait_for_room(&self) -> bool {
        let deadline = Instant::now() + MAX_WAIT;
        let mut c = self.lock();
        let mut waited = false;
        while c.open >= self.threshold && c.releasing > 0 {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                break;
            };
            waited = true;
            c.waiting += 1;
            c = self
                .done
                .wait_timeout(c, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            c.waiting -= 1;
        }
        waited
    }

    /// A handle open for writing was made.
    pub(crate) fn opened(&self) {
        self.lock().open += 1;
    }

    /// Its release was queued for a worker.
    pub(crate) fn releasing(&self) {
        self.lock().releasing += 1;
    }

    /// Its release is done (`queued`: it had been queued for a worker).
    pub(crate) fn released(&self, queued: bool) {
        let mut c = self.lock();
        c.open = c.open.saturating_sub(1);
        if queued {
            c.releasing = c.releasing.saturating_sub(1);
        }
        // Read under the lock: a waiter counts itself before its wait lets the lock go.
        let wake = c.waiting > 0;
        drop(c);
        if wake {
            self.done.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::sync::Arc;

    #[test]
    fn handles_kept_open_by_applications_never_make_an_open_wait() {
        let w = Writers::new(2);
        for _ in 0..5 {
            w.opened();
        }
        assert!(!w.wait_for_room());
    }

    #[test]
    fn an_open_waits_for_pending_releases_past_the_threshold() {
        let w = Arc::new(Writers::new(2));
        for _ in 0..3 {
            w.opened();
        }
        w.releasing();
        w.releasing();
        let w2 = Arc::clone(&w);
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            w2.released(true);
            std::thread::sleep(Duration::from_millis(100));
            w2.released(true);
        });
        let start = Instant::now();
        assert!(w.wait_for_room());
        // Down to one handle, below the threshold, after the second release — woken by it,
        // not by the wait's time limit.
        assert!(start.elapsed() >= Duration::from_millis(150));
        assert!(start.elapsed() < MAX_WAIT / 2, "{:?}", start.elapsed());
        t.join().unwrap();
        assert!(!w.wait_for_room());
    }
}
