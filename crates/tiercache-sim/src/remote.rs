//! The simulator's `remote` tier kind (paper 002: memory of other machines as a disk cache).
//!
//! A tier spec named `remote` (or `remote2`, `remote3`, … when there are several) is a remote
//! tier; `flash` (`flash2`, …) a set-mapped flash tier ([`TierKind::Flash`]); every other name
//! is a `local` tier, as before. A remote tier behaves like any lower
//! tier except that:
//! - reads within a sequential run of at least `n` blocks bypass it (no lookup, no fill; the
//!   network is slower than a streaming disk), shorter runs use it and fill it on a miss;
//! - writes invalidate its copy and never store one (it only ever holds clean data).
//!
//! Runs are tracked per file of the trace (`file` column of a CSV, each host/disk of an MSR
//! trace; object traces have one file, so consecutive object ids form a run): an access to block
//! `b` of file `f` continues the run when the previous access *to file `f`* was block `b − 1`,
//! whatever other files were accessed in between. A trace holds one access per block, so the
//! first `n − 1` blocks of a run still use the remote tier: a run is recognised once it is `n`
//! blocks long, as the live cache does for reads arriving one block at a time.
//!
//! `--remote-threshold auto` has no measured costs in a replay: it calls
//! [`choose_threshold`] on a [`CostModel`] (a model, not a measurement).

use crate::replay::Route;
use std::fmt;
use std::str::FromStr;
use tiercache_core::hierarchy::Hierarchy;
use tiercache_core::seqrun::{choose_threshold, Costs, SeqRun, Threshold};
use tiercache_core::Access;
use tiercache_core::ParseError;

/// What a tier spec stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TierKind {
    /// Looked up and filled by every access that reaches it.
    #[default]
    Local,
    /// Bypassed by sequential runs and by writes (see the module docs).
    Remote,
    /// Set-mapped (paper 001; `tiercache_core::setindex`): a local tier whose index maps a
    /// backing set to one cache set and replaces whole sets.
    Flash,
}

impl TierKind {
    /// `remote` (`flash`), or `remote` (`flash`) followed by digits, is a remote (flash) tier.
    pub fn of_name(name: &str) -> Self {
        let numbered = |prefix: &str| {
            name.strip_prefix(prefix)
                .is_some_and(|rest| rest.bytes().all(|b| b.is_ascii_digit()))
        };
        if numbered("remote") {
            TierKind::Remote
        } else if numbered("flash") {
            TierKind::Flash
        } else {
            TierKind::Local
        }
    }
}

impl fmt::Display for TierKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TierKind::Local => "local",
            TierKind::Remote => "remote",
            TierKind::Flash => "flash",
        })
    }
}

/// The cost model `auto` chooses `n` from: BACKING positioning (ms), BACKING streaming rate
/// (MB/s) and the remote tier's time per block (ms). Default: `--emulate hdd`'s disk (8 ms seek
/// + 4 ms rotation, 150 MB/s) and 0.25 ms per remote block.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostModel {
    pub seek_ms: f64,
    pub mb_per_s: f64,
    pub remote_ms: f64,
}

impl Default for CostModel {
    fn default() -> Self {
        CostModel {
            seek_ms: 12.0,
            mb_per_s: 150.0,
            remote_ms: 0.25,
        }
    }
}

impl CostModel {
    /// The model's costs in seconds for blocks of `block_bytes`.
    pub fn costs(&self, block_bytes: u64) -> Costs {
        Costs {
            backing_seek: self.seek_ms * 1e-3,
            backing_block: block_bytes as f64 / (self.mb_per_s * 1e6),
            tier_block: self.remote_ms * 1e-3,
        }
    }

    /// `n` for `threshold`: a fixed one as given, `auto` chosen from this model.
    pub fn resolve(&self, threshold: Threshold, block_bytes: u64) -> u64 {
        match threshold {
            Threshold::Fixed(n) => n,
            Threshold::Auto => choose_threshold(&self.costs(block_bytes)),
        }
    }
}

impl fmt::Display for CostModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{},{},{}", self.seek_ms, self.mb_per_s, self.remote_ms)
    }
}

impl FromStr for CostModel {
    type Err = ParseError;
    /// `SEEK_MS,MB_PER_S,REMOTE_MS`, each a positive number (seek may be 0).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad =
            || ParseError::invalid(s, "expected SEEK_MS,MB_PER_S,REMOTE_MS, e.g. 12,150,0.25");
        let v: Vec<f64> = s
            .split(',')
            .map(|x| x.trim().parse::<f64>().map_err(|_| bad()))
            .collect::<Result<_, _>>()?;
        match v[..] {
            [seek_ms, mb_per_s, remote_ms]
                if seek_ms.is_finite()
                    && seek_ms >= 0.0
                    && mb_per_s.is_finite()
                    && mb_per_s > 0.0
                    && remote_ms.is_finite()
                    && remote_ms > 0.0 =>
            {
                Ok(CostModel {
                    seek_ms,
                    mb_per_s,
                    remote_ms,
                })
            }
            _ => Err(bad()),
        }
    }
}

/// log2 of the slots of [`RunTable`]. Two files sharing a slot evict each other's runs: a run
/// then restarts, which only delays a bypass; the file id tag means a run is never credited to
/// the wrong file.
const RUN_BITS: u32 = 12;

/// Sequential runs per file, direct-mapped by file id: fixed size, no allocation per request.
#[derive(Debug)]
pub struct RunTable {
    /// (file id, its run); a slot whose id differs holds another file's run.
    slots: Box<[(u64, SeqRun)]>,
}

impl Default for RunTable {
    fn default() -> Self {
        RunTable {
            slots: vec![(0, SeqRun::default()); 1 << RUN_BITS].into_boxed_slice(),
        }
    }
}

impl RunTable {
    /// Notes an access to `block` of `file`; returns the length of its run in blocks.
    #[inline]
    pub fn advance(&mut self, file: u64, block: u64) -> u64 {
        let i = (file.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - RUN_BITS)) as usize;
        let slot = &mut self.slots[i];
        if slot.0 != file {
            *slot = (file, SeqRun::default());
        }
        slot.1.advance(block, 1)
    }
}

/// Per remote tier counters of a replay (indexed by tier; zero for local tiers).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RemoteCounts {
    /// Reads in a run of ≥ n blocks that missed every tier above and so skipped this one.
    pub bypassed: Vec<u64>,
    /// Writes that found a copy here and removed it.
    pub invalidations: Vec<u64>,
}

/// The replay's router when the stack has remote tiers.
#[derive(Debug)]
pub(crate) struct SeqBypass {
    runs: RunTable,
    n: u64,
    /// Bit i set: tier i is remote. Never bit 0 (the top tier is never remote).
    mask: u32,
    pub(crate) counts: RemoteCounts,
}

impl SeqBypass {
    pub(crate) fn new(mask: u32, n: u64, tiers: usize) -> Self {
        SeqBypass {
            runs: RunTable::default(),
            n,
            mask,
            counts: RemoteCounts {
                bypassed: vec![0; tiers],
                invalidations: vec![0; tiers],
            },
        }
    }
}

/// Tier indexes of the bits set in `mask`, lowest first.
#[inline]
fn bits(mut mask: u32) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        (mask != 0).then(|| {
            let i = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            i
        })
    })
}

impl Route for SeqBypass {
    #[inline]
    fn serve(&mut self, h: &mut Hierarchy, a: Access) {
        if a.write {
            // Clean data only: the write's bytes live above (or in BACKING), never remotely.
            for i in bits(self.mask) {
                if h.tier_mut(i).remove(&a.key).is_some() {
                    self.counts.invalidations[i] += 1;
                }
            }
            h.access_skipping(a, self.mask);
        } else if Threshold::bypasses(self.n, self.runs.advance(a.key.file.0, a.key.block.0)) {
            // Runs are of reads only, as on the live mount.
            // Tiers above the hit were reached (all of them on a miss).
            let reached = h.access_skipping(a, self.mask).unwrap_or(usize::MAX);
            for i in bits(self.mask).take_while(|&i| i < reached) {
                self.counts.bypassed[i] += 1;
            }
        } else {
            h.access(a);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_kind_comes_from_the_name() {
        assert_eq!(TierKind::of_name("remote"), TierKind::Remote);
        assert_eq!(TierKind::of_name("remote2"), TierKind::Remote);
        assert_eq!(TierKind::of_name("remotex"), TierKind::Local);
        assert_eq!(TierKind::of_name("mem"), TierKind::Local);
        assert_eq!(TierKind::of_name("flash"), TierKind::Flash);
        assert_eq!(TierKind::of_name("flash3"), TierKind::Flash);
        assert_eq!(TierKind::of_name("flashy"), TierKind::Local);
    }

    #[test]
    fn runs_are_per_file_across_interleaving() {
        let mut t = RunTable::default();
        assert_eq!(t.advance(1, 10), 1);
        assert_eq!(t.advance(2, 50), 1);
        assert_eq!(t.advance(1, 11), 2);
        assert_eq!(t.advance(2, 51), 2);
        assert_eq!(t.advance(1, 13), 1);
    }

    #[test]
    fn auto_uses_the_model_and_the_model_parses() {
        let m = CostModel::default();
        // 12 ms / (0.25 ms − 4096 B / 150 MB/s) = 53.9 → 54.
        assert_eq!(m.resolve(Threshold::Auto, 4096), 54);
        assert_eq!(m.resolve(Threshold::Fixed(7), 4096), 7);
        assert_eq!("12,150,0.25".parse::<CostModel>(), Ok(m));
        assert!("12,150".parse::<CostModel>().is_err());
        assert!("12,0,0.25".parse::<CostModel>().is_err());
    }
}
