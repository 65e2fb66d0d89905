//! What wakes the background threads (the flushers and the lower tier's cleaner): kicks
//! (dirty data went above the background limit) and the stop at shutdown.
//!
//! Invariant: once [`Wake::stop`] was called, every wait returns `false` at once and keeps
//! doing so; a kick never gets lost between a thread's look at the state and its wait (both
//! under the one mutex).

use crate::locks::lock;
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::Duration;

#[derive(Debug, Default)]
struct State {
    stop: bool,
    kicks: u64,
}

/// The background threads' wake-up.
#[derive(Debug, Default)]
pub(crate) struct Wake {
    state: Mutex<State>,
    cv: Condvar,
}

impl Wake {
    /// Wakes every waiting thread early (a flusher: dirty data above the background limit).
    pub(crate) fn kick(&self) {
        lock(&self.state).kicks += 1;
        // All: the cleaning thread waits on the same condition variable.
        self.cv.notify_all();
    }

    /// Stops the background threads: every wait returns `false` from now on.
    pub(crate) fn stop(&self) {
        lock(&self.state).stop = true;
        self.cv.notify_all();
    }

    /// Whether [`Wake::stop`] was called.
    pub(crate) fn stopping(&self) -> bool {
        lock(&self.state).stop
    }

    /// Waits until `period` passed or a kick came (a flusher's round); `false` when stopping.
    pub(crate) fn wait_for_kick(&self, period: Duration) -> bool {
        let st = lock(&self.state);
        if st.stop {
            return false;
        }
        let kicks = st.kicks;
        let (st, _) = self
            .cv
            .wait_timeout_while(st, period, |s| !s.stop && s.kicks == kicks)
            .unwrap_or_else(PoisonError::into_inner);
        !st.stop
    }

    /// Waits until `period` passed or anything woke the threads (the cleaner's tick);
    /// `false` when stopping.
    pub(crate) fn wait_once(&self, period: Duration) -> bool {
        let st = lock(&self.state);
        if st.stop {
            return false;
        }
        let (st, _) = self
            .cv
            .wait_timeout(st, period)
            .unwrap_or_else(PoisonError::into_inner);
        !st.stop
    }
}
