//! The state behind `sync_batch`: when the last background sync round began, and how many
//! closed files hold a backing descriptor against what budget. Atomics read on every `release`
//! (no lock, no `getrlimit` per close); the rules that read them live here with them.

use crate::locks::lock;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Least time between two background `syncfs` rounds of BACKING.
pub(crate) const SYNC_PERIOD: Duration = Duration::from_secs(1);

/// How many closed files may hold a backing descriptor while their write-back is pending: half
/// the open-files limit (the FUSE layer's descriptor cache takes at most a quarter, its callers'
/// status files a 64th). Past half of it, closes write back and sync the oldest at once (a
/// `tar x` of many small files must not run the daemon out of descriptors).
fn closed_fd_budget() -> usize {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid out pointer.
    let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        lim.rlim_cur
    } else {
        1024
    };
    usize::try_from(soft / 2)
        .unwrap_or(usize::MAX)
        .clamp(8, 65_536)
}

/// The sync rounds' clock and the count behind the bound on descriptors of closed files.
#[derive(Debug)]
pub(crate) struct SyncState {
    /// The clock's zero (the cache's start).
    start: Instant,
    /// When the last background sync round began, in ms since `start`.
    last_sync_ms: AtomicU64,
    /// Closed files still holding their backing descriptor (dirty or not yet synced): exact
    /// after each [`SyncState::recount`], counted up by [`SyncState::count_closed`] in between.
    closed_fds: AtomicUsize,
    /// `closed_fd_budget()` as of the last [`SyncState::refresh_budget`].
    fd_budget: AtomicUsize,
    /// One closing thread at a time bounds the descriptors ([`SyncState::gate`]).
    gate: Mutex<()>,
}

impl SyncState {
    pub(crate) fn new(start: Instant) -> Self {
        Self {
            start,
            last_sync_ms: AtomicU64::new(0),
            closed_fds: AtomicUsize::new(0),
            fd_budget: AtomicUsize::new(closed_fd_budget()),
            gate: Mutex::new(()),
        }
    }

    fn now_ms(&self) -> u64 {
        ms(self.start.elapsed())
    }

    /// Whether [`SYNC_PERIOD`] has passed since the last background sync round began.
    pub(crate) fn due(&self) -> bool {
        let last = self.last_sync_ms.load(Ordering::Relaxed);
        self.now_ms().saturating_sub(last) >= ms(SYNC_PERIOD)
    }

    /// A sync round begins now.
    pub(crate) fn round_began(&self) {
        self.last_sync_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    /// Reads the descriptor limit again; returns the budget now in force.
    pub(crate) fn refresh_budget(&self) -> usize {
        let budget = closed_fd_budget();
        self.fd_budget.store(budget, Ordering::Relaxed);
        budget
    }

    /// The exact count of closed files holding a descriptor, after a look at them all.
    pub(crate) fn recount(&self, held: usize) {
        self.closed_fds.store(held, Ordering::Relaxed);
    }

    /// Whether one more closed file holding its descriptor would make the closing thread
    /// bound them ([`SyncState::count_closed`]); a hint, as others may close meanwhile.
    pub(crate) fn near_bound(&self) -> bool {
        let n = self.closed_fds.load(Ordering::Relaxed);
        self.over(n)
    }

    /// Counts one more closed file holding its descriptor; `true` when that takes the count
    /// past half the budget (with a sync round due) or to the budget: the closing thread then
    /// takes the [`SyncState::gate`] and asks [`SyncState::still_over`].
    pub(crate) fn count_closed(&self) -> bool {
        let n = self.closed_fds.fetch_add(1, Ordering::Relaxed);
        self.over(n)
    }

    /// Under the gate: whether the count is still over (another thread may have bounded it).
    pub(crate) fn still_over(&self) -> bool {
        let n = self.closed_fds.load(Ordering::Relaxed);
        self.over(n)
    }

    /// One closing thread at a time bounds the descriptors; the others wait here and look
    /// again.
    pub(crate) fn gate(&self) -> MutexGuard<'_, ()> {
        lock(&self.gate)
    }

    /// `n` closed files are over the bound: at the budget, or past half of it with a sync
    /// round due.
    fn over(&self, n: usize) -> bool {
        let budget = self.fd_budget.load(Ordering::Relaxed);
        n >= budget || (n >= budget / 2 && self.due())
    }
}

/// Whole milliseconds of `d`.
fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
