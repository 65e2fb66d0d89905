//! Settings a running cache changes in place (a reload of the mount's configuration): the
//! flusher's timings, the partitioner's parameters, a lower tier's sequential-run threshold.
//! Each setter checks its values first and changes nothing on an error, so a caller that
//! checked everything before calling any of them never leaves a half-applied reload.

use crate::cache::MemCache;
use crate::error::MemError;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;
use tiercache_core::partition::DirprioParams;
use tiercache_core::seqrun::Threshold;

/// The flusher's timings in force, in nanoseconds (read at every flusher round).
#[derive(Debug)]
pub(crate) struct FlushTimings {
    interval_ns: AtomicU64,
    dirty_expire_ns: AtomicU64,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl FlushTimings {
    pub fn new(interval: Duration, dirty_expire: Duration) -> Self {
        Self {
            interval_ns: AtomicU64::new(nanos(interval)),
            dirty_expire_ns: AtomicU64::new(nanos(dirty_expire)),
        }
    }
    /// How often the background flusher wakes.
    pub fn interval(&self) -> Duration {
        Duration::from_nanos(self.interval_ns.load(Relaxed))
    }
    /// A file dirty for longer than this is written back by the flusher.
    pub fn dirty_expire(&self) -> Duration {
        Duration::from_nanos(self.dirty_expire_ns.load(Relaxed))
    }
}

impl MemCache {
    /// The flusher's interval and dirty-expiry time in force (`config()` keeps the values the
    /// cache was built with).
    pub fn flush_timings(&self) -> (Duration, Duration) {
        let t = &self.inner().timings;
        (t.interval(), t.dirty_expire())
    }

    /// New flusher timings; the flusher is woken so that a shorter interval applies at once.
    pub fn set_flush_timings(
        &self,
        interval: Duration,
        dirty_expire: Duration,
    ) -> Result<(), MemError> {
        if interval.is_zero() {
            return Err(MemError::config("flush-interval", "must be above zero"));
        }
        let t = &self.inner().timings;
        t.interval_ns.store(nanos(interval), Relaxed);
        t.dirty_expire_ns.store(nanos(dirty_expire), Relaxed);
        self.inner().kick_flusher();
        Ok(())
    }

    /// New parameters of the memory tier's partitioner (`dirprio`: ω, T_p, T_n, B_pmin,
    /// B_nmin; `static`: its target B_pmin); checked against the tier's capacity first.
    pub fn set_partition_params(&self, params: DirprioParams) -> Result<(), MemError> {
        self.inner().lock().tier.set_partition_params(params)?;
        Ok(())
    }

    /// A new sequential-run threshold for lower tier `k` (top first), which must have one.
    pub fn set_seq_threshold(&self, k: usize, t: Threshold) -> Result<(), MemError> {
        let lower = self.inner().lower.as_ref();
        if lower.is_some_and(|l| l.bypass.set_threshold(k, t)) {
            Ok(())
        } else {
            Err(MemError::config(
                "threshold",
                format!("lower tier {k} has no sequential-run threshold"),
            ))
        }
    }
}
