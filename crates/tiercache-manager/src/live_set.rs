//! Settings a running cache changes in place (a reload of the mount's configuration): the
//! flusher's timings, the partitioner's parameters, a lower tier's sequential-run threshold.
//! Each setter checks its values first and changes nothing on an error, so a caller that
//! checked everything before calling any of them never leaves a half-applied reload.

use crate::cache::MemCache;
use crate::error::MemError;
use std::time::Duration;
use tiercache_core::partition::ClassParams;
use tiercache_core::seqrun::Threshold;

impl MemCache {
    /// The flusher's interval and dirty-expiry time in force (`config()` keeps the values the
    /// cache was built with).
    pub fn flush_timings(&self) -> (Duration, Duration) {
        let t = self.inner().timings();
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
        self.inner().timings().set(interval, dirty_expire);
        self.inner().kick_flusher();
        Ok(())
    }

    /// New parameters of the memory tier's partitioner (`dirprio`: ω, T_p, T_n, B_pmin,
    /// B_nmin; `static`: its target B_pmin); checked against the tier's capacity first.
    pub fn set_partition_params(&self, params: &ClassParams) -> Result<(), MemError> {
        self.inner().lock().set_partition_params(params)?;
        Ok(())
    }

    /// A new class table whose indices differ from the one in force (a class removed or
    /// renumbered): `remap[i]` is the new class of old class `i`. Cached blocks, file states and
    /// hit counters keep their class under its new index (see `Engine::set_classes`).
    pub fn set_classes(
        &self,
        params: &ClassParams,
        remap: &[tiercache_core::Class],
    ) -> Result<(), MemError> {
        self.inner().lock().set_classes(params, remap)?;
        Ok(())
    }

    /// A new sequential-run threshold for lower tier `k` (top first), which must have one.
    pub fn set_seq_threshold(&self, k: usize, t: Threshold) -> Result<(), MemError> {
        let lower = self.inner().lower();
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
