//! What wakes the background threads (the flushers and the lower tier's cleaner): kicks
//! (dirty data went above the background limit) and the stop at shutdown.
//!
//! Invariant: once [`Wake::stop`] was called, every wait returns `false` at once and keeps
//! doing so; a kick is never lost: a flusher remembers the kicks it has seen, so one sent
//! while it was busy (or before its first wait) ends its next wait at once.

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

    /// Waits until `period` passed or a kick came that this thread has not seen (`seen`: the
    /// kicks it had seen, updated here), so a kick sent before the wait began is not lost;
    /// `false` when stopping.
    pub(crate) fn wait_for_kick(&self, period: Duration, seen: &mut u64) -> bool {
        let st = lock(&self.state);
        if st.stop {
            return false;
        }
        let (st, _) = self
            .cv
            .wait_timeout_while(st, period, |s| !s.stop && s.kicks == *seen)
            .unwrap_or_else(PoisonError::into_inner);
        *seen = st.kicks;
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// Bug: a flusher read the kick count only when it began to wait, so a kick sent before
    /// (at start-up, or during its round) was lost and dirty data waited a whole interval.
    #[test]
    fn a_kick_sent_before_the_wait_ends_it_at_once() {
        let w = Wake::default();
        let mut seen = 0;
        w.kick();
        let t0 = Instant::now();
        assert!(w.wait_for_kick(Duration::from_secs(10), &mut seen));
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        assert_eq!(seen, 1);
        // Seen now: the next wait lasts its period.
        let t0 = Instant::now();
        assert!(w.wait_for_kick(Duration::from_millis(100), &mut seen));
        assert!(t0.elapsed() >= Duration::from_millis(100));
    }

    #[test]
    fn stop_ends_every_wait() {
        let w = Wake::default();
        w.stop();
        let mut seen = 0;
        assert!(!w.wait_for_kick(Duration::from_secs(10), &mut seen));
        assert!(!w.wait_once(Duration::from_secs(10)));
        assert!(w.stopping());
    }
}
