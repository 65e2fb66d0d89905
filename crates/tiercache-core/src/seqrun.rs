//! Sequential-run bypass (paper 002): a tier that is slower than BACKING for long sequential
//! reads — a remote tier pays a round trip per block, a disk pays one positioning and then
//! streams — is skipped by reads within a sequential run of at least `n` blocks. Shorter runs
//! use the tier when it holds the block. Shared by the simulator and the live cache: both track
//! runs with [`SeqRun`], decide with [`Threshold::bypasses`], and `auto` picks `n` with
//! [`choose_threshold`] from measured costs.

use crate::error::ParseError;
use std::fmt;
use std::str::FromStr;

/// Length of the current sequential run of one stream (a file, or an object in a trace).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SeqRun {
    next: u64,
    run: u64,
}

impl SeqRun {
    /// Notes an access to blocks `[first, first + count)` and returns the length in blocks of
    /// the sequential run it belongs to (itself included). An access that starts in the last
    /// block of the previous one continues the run: a reader whose request size is not a
    /// multiple of the block size starts each request inside the block the last one ended in.
    #[inline]
    pub fn advance(&mut self, first: u64, count: u64) -> u64 {
        let end = first.saturating_add(count);
        let continues =
            self.run > 0 && (first == self.next || first.saturating_add(1) == self.next);
        self.run = if continues {
            self.run.saturating_add(end.saturating_sub(self.next))
        } else {
            count
        };
        self.next = if continues { end.max(self.next) } else { end };
        self.run
    }
}

/// The run length from which a tier is bypassed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Threshold {
    /// Runs of at least this many blocks bypass the tier.
    Fixed(u64),
    /// Chosen from measured BACKING and tier costs ([`choose_threshold`]); starts at the
    /// default until there are measurements.
    Auto,
}

impl Threshold {
    /// Paper 002's n: 32 blocks of 4 KiB = 128 KiB.
    pub const DEFAULT: u64 = 32;
    /// Largest threshold `auto` picks (and the cap of a measured "always use the tier").
    pub const MAX: u64 = 4096;

    /// Whether a read in a run of `run` blocks skips the tier, given the current `n`.
    #[inline]
    pub fn bypasses(n: u64, run: u64) -> bool {
        run >= n
    }
}

impl Default for Threshold {
    fn default() -> Self {
        Threshold::Fixed(Self::DEFAULT)
    }
}

impl fmt::Display for Threshold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Threshold::Fixed(n) => write!(f, "{n}"),
            Threshold::Auto => f.write_str("auto"),
        }
    }
}

impl FromStr for Threshold {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "auto" {
            return Ok(Threshold::Auto);
        }
        match s.parse::<u64>() {
            Ok(n) if n >= 1 => Ok(Threshold::Fixed(n)),
            _ => Err(ParseError::invalid(
                s,
                "expected a run length in blocks (≥ 1) or `auto`",
            )),
        }
    }
}

/// Measured costs, in seconds: one positioning of BACKING (seek + rotation), streaming one
/// block from BACKING, and reading one block from the tier.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Costs {
    pub backing_seek: f64,
    pub backing_block: f64,
    pub tier_block: f64,
}

/// The `n` minimising expected read time: a run of `n` blocks costs `seek + n·block` from
/// BACKING and `n·tier` from the tier, so BACKING wins from `n ≥ seek / (tier − block)`.
/// When the tier is no slower per block than streaming, it always wins: [`Threshold::MAX`].
pub fn choose_threshold(c: &Costs) -> u64 {
    let per_block_gain = c.tier_block - c.backing_block;
    // NaN (no measurement) counts as "the tier is not slower".
    let tier_slower = per_block_gain > 0.0;
    if !tier_slower {
        return Threshold::MAX;
    }
    if !c.backing_seek.is_finite() || c.backing_seek <= 0.0 {
        return 1;
    }
    let n = (c.backing_seek / per_block_gain).ceil();
    if n >= Threshold::MAX as f64 {
        Threshold::MAX
    } else {
        (n as u64).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_grow_while_contiguous_and_restart_on_a_jump() {
        let mut r = SeqRun::default();
        assert_eq!(r.advance(10, 4), 4);
        assert_eq!(r.advance(14, 4), 8);
        assert_eq!(r.advance(18, 1), 9);
        assert_eq!(r.advance(3, 2), 2);
        assert_eq!(r.advance(5, 32), 34);
        assert!(Threshold::bypasses(32, 34));
        assert!(!Threshold::bypasses(32, 31));
    }

    #[test]
    fn unaligned_sequential_reads_build_a_run() {
        // 6000-byte reads over 4 KiB blocks: each starts inside the block the last ended in.
        let mut r = SeqRun::default();
        let mut longest = 0;
        for i in 0..1000u64 {
            let (off, end) = (i * 6000, (i + 1) * 6000);
            longest = r.advance(off / 4096, (end - 1) / 4096 - off / 4096 + 1);
        }
        assert_eq!(longest, (1000 * 6000 - 1) / 4096 + 1);
        // A re-read of the same block does not grow the run.
        let mut r = SeqRun::default();
        assert_eq!(r.advance(7, 1), 1);
        assert_eq!(r.advance(7, 1), 1);
        assert_eq!(r.advance(8, 1), 2);
    }

    #[test]
    fn threshold_parses_numbers_and_auto_and_names_bad_input() {
        assert_eq!("32".parse::<Threshold>(), Ok(Threshold::Fixed(32)));
        assert_eq!("auto".parse::<Threshold>(), Ok(Threshold::Auto));
        let e = "0".parse::<Threshold>().unwrap_err();
        assert!(e.to_string().contains("`0`"), "{e}");
        assert!("x".parse::<Threshold>().is_err());
    }

    #[test]
    fn auto_threshold_balances_one_seek_against_the_per_block_difference() {
        // HDD: 8 ms positioning, 100 MB/s; remote 0.5 ms per 4 KiB block.
        let hdd = Costs {
            backing_seek: 8e-3,
            backing_block: 4096.0 / 100e6,
            tier_block: 0.5e-3,
        };
        let n = choose_threshold(&hdd);
        assert_eq!(n, (8e-3_f64 / (0.5e-3 - 4096.0 / 100e6)).ceil() as u64);
        assert!((15..=20).contains(&n), "{n}");
        // A tier as fast as streaming always wins; a free seek never loses to the tier.
        let fast = Costs {
            tier_block: hdd.backing_block,
            ..hdd
        };
        assert_eq!(choose_threshold(&fast), Threshold::MAX);
        let ssd = Costs {
            backing_seek: 0.0,
            ..hdd
        };
        assert_eq!(choose_threshold(&ssd), 1);
    }
}
