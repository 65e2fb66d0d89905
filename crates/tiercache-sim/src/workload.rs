//! Synthetic workloads: `KIND:key=value,...` streams, interleaved at random by weight.
//!
//! Kinds: `uniform`, `zipf` (`alpha`, default 1.0; rank r → block r − 1, so low blocks are hot),
//! `exponential` (`mean` in blocks, default blocks/5 as in paper 004; samples ≥ blocks are drawn
//! again), `loop` (0, 1, …, blocks − 1, 0, 1, …), `scan` (0, 1, 2, … never repeating: a backup
//! or batch job streaming through; `blocks` is ignored). Keys common to all: `blocks` (default
//! 10000), `class=NAME` (`priority`, `normal` (the default) or a class of the table), `weight` (default 1), `file` (default: the
//! stream's own number).

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Exp, Zipf};
use std::fmt;
use std::str::FromStr;
use tiercache_core::partition::{is_class_name, ClassTable};
use tiercache_core::{Access, BlockKey, Class};

/// The access pattern of one stream.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum Pattern {
    Uniform,
    Zipf { alpha: f64 },
    Exponential { mean: f64 },
    Loop,
    Scan,
}

/// One `--workload` stream.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamSpec {
    pub pattern: Pattern,
    pub blocks: u64,
    /// The class as named (`class=NAME`); [`resolve_classes`] maps it to `class`.
    pub class_name: String,
    /// Built-in names map at once; others once resolved against the class table.
    pub class: Class,
    pub weight: f64,
    pub file: Option<u64>,
    /// The part of the run the stream is active in, as fractions of the requests
    /// (`from=0.5,until=1`: the second half; a phase change). Default: all of it.
    pub from: f64,
    pub until: f64,
}

impl fmt::Display for StreamSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.pattern {
            Pattern::Uniform => "uniform".to_string(),
            Pattern::Zipf { alpha } => format!("zipf(alpha={alpha})"),
            Pattern::Exponential { mean } => format!("exponential(mean={mean})"),
            Pattern::Loop => "loop".to_string(),
            Pattern::Scan => "scan".to_string(),
        };
        write!(
            f,
            "{kind} blocks={} class={} weight={}",
            self.blocks, self.class_name, self.weight
        )?;
        if self.from > 0.0 || self.until < 1.0 {
            write!(f, " from={} until={}", self.from, self.until)?;
        }
        Ok(())
    }
}

/// A workload spec or stream set that cannot be generated; says what is wrong.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum WorkloadError {
    /// A `--workload` spec that does not parse (`why` names the part).
    #[error("workload `{spec}`: {why}")]
    Spec { spec: String, why: String },
    #[error("no --workload or --trace given")]
    NoStreams,
    /// A stream's class is not in the class table.
    #[error("workload `{spec}`: class {class} is not defined (add --class {class}::TARGET)")]
    UnknownClass { spec: String, class: String },
    /// A distribution its parameters do not define.
    #[error("{kind} stream: {why}")]
    Distribution { kind: &'static str, why: String },
}

impl FromStr for StreamSpec {
    type Err = WorkloadError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |why: String| WorkloadError::Spec {
            spec: s.to_string(),
            why,
        };
        let (kind, rest) = s.split_once(':').unwrap_or((s, ""));
        let mut blocks = 10_000u64;
        let mut class_name = Class::NORMAL.to_string();
        let mut weight = 1.0f64;
        let mut file = None;
        let mut alpha = None;
        let mut mean = None;
        let (mut from, mut until) = (0.0f64, 1.0f64);
        for kv in rest.split(',').filter(|p| !p.is_empty()) {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| bad(format!("`{kv}` is not key=value")))?;
            let num = |what: &str| -> Result<f64, WorkloadError> {
                v.parse::<f64>()
                    .ok()
                    .filter(|x| x.is_finite() && *x > 0.0)
                    .ok_or_else(|| bad(format!("{what} `{v}` must be a positive number")))
            };
            match k {
                "blocks" => {
                    blocks =
                        v.parse().ok().filter(|&b| b > 0).ok_or_else(|| {
                            bad(format!("blocks `{v}` must be a positive integer"))
                        })?
                }
                "class" if is_class_name(v) => class_name = v.to_string(),
                "class" => return Err(bad(format!("class `{v}` is not a class name"))),
                "weight" => weight = num("weight")?,
                "file" => {
                    file = Some(
                        v.parse()
                            .map_err(|_| bad(format!("file `{v}` must be an integer")))?,
                    )
                }
                "alpha" => alpha = Some(num("alpha")?),
                "mean" => mean = Some(num("mean")?),
                "from" | "until" => {
                    let x = v
                        .parse::<f64>()
                        .ok()
                        .filter(|x| (0.0..=1.0).contains(x))
                        .ok_or_else(|| bad(format!("{k} `{v}` must be a fraction in 0..=1")))?;
                    if k == "from" {
                        from = x;
                    } else {
                        until = x;
                    }
                }
                _ => return Err(bad(format!("unknown key `{k}`"))),
            }
        }
        let pattern = match kind {
            "uniform" => Pattern::Uniform,
            "zipf" => Pattern::Zipf {
                alpha: alpha.unwrap_or(1.0),
            },
            "exponential" => Pattern::Exponential {
                mean: mean.unwrap_or(blocks as f64 / 5.0),
            },
            "loop" => Pattern::Loop,
            "scan" => Pattern::Scan,
            _ => {
                return Err(bad(format!(
                    "unknown kind `{kind}` (expected uniform|zipf|exponential|loop|scan)"
                )))
            }
        };
        let misplaced = match (alpha, mean, pattern) {
            (Some(_), _, p) if !matches!(p, Pattern::Zipf { .. }) => Some("alpha"),
            (_, Some(_), p) if !matches!(p, Pattern::Exponential { .. }) => Some("mean"),
            _ => None,
        };
        if let Some(k) = misplaced {
            return Err(bad(format!("`{k}` does not apply to {kind}")));
        }
        if from >= until {
            return Err(bad(format!("from {from} must be below until {until}")));
        }
        Ok(StreamSpec {
            pattern,
            blocks,
            class: class_name.parse().unwrap_or_default(),
            class_name,
            weight,
            file,
            from,
            until,
        })
    }
}

/// Maps every stream's class name to its class in `table`; an unknown name is an error.
pub fn resolve_classes(specs: &mut [StreamSpec], table: &ClassTable) -> Result<(), WorkloadError> {
    for s in specs {
        s.class = table
            .by_name(&s.class_name)
            .ok_or_else(|| WorkloadError::UnknownClass {
                spec: s.to_string(),
                class: s.class_name.clone(),
            })?;
    }
    Ok(())
}

fn dist(kind: &'static str, e: impl std::fmt::Display) -> WorkloadError {
    WorkloadError::Distribution {
        kind,
        why: e.to_string(),
    }
}

enum Sampler {
    Uniform,
    Zipf(Zipf<f64>),
    Exp(Exp<f64>),
    Seq { next: u64 },
}

/// Chooses the stream of each request among those active at that point of the run, by
/// weight; the active set and its cumulative weights are computed again only when the run
/// passes a stream's `from` or `until`.
#[derive(Default)]
struct Picker {
    active: Vec<usize>,
    cumulative: Vec<f64>,
    /// The next `from`/`until` ahead (`None`: not computed yet).
    next_change: Option<f64>,
}

impl Picker {
    fn stream(&mut self, specs: &[StreamSpec], at: f64, rng: &mut SmallRng) -> Option<usize> {
        if self.next_change.is_none_or(|c| at >= c) {
            self.active = (0..specs.len())
                .filter(|&i| specs[i].from <= at && at < specs[i].until)
                .collect();
            let total: f64 = self.active.iter().map(|&i| specs[i].weight).sum();
            let mut acc = 0.0;
            self.cumulative = self
                .active
                .iter()
                .map(|&i| {
                    acc += specs[i].weight / total;
                    acc
                })
                .collect();
            let ahead = specs.iter().flat_map(|s| [s.from, s.until]);
            self.next_change = Some(ahead.filter(|&b| b > at).fold(f64::INFINITY, f64::min));
        }
        match self.active.len() {
            0 => None,
            1 => Some(self.active[0]),
            n => {
                let x: f64 = rng.gen();
                let k = self.cumulative.iter().position(|&c| x < c).unwrap_or(n - 1);
                Some(self.active[k])
            }
        }
    }
}

/// Generates the interleaved request stream of several specs, deterministically from a seed.
pub fn generate(
    specs: &[StreamSpec],
    requests: usize,
    seed: u64,
) -> Result<Vec<Access>, WorkloadError> {
    if specs.is_empty() {
        return Err(WorkloadError::NoStreams);
    }
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut samplers = Vec::with_capacity(specs.len());
    for s in specs {
        samplers.push(match s.pattern {
            Pattern::Uniform => Sampler::Uniform,
            Pattern::Zipf { alpha } => {
                Sampler::Zipf(Zipf::new(s.blocks, alpha).map_err(|e| dist("zipf", e))?)
            }
            Pattern::Exponential { mean } => {
                Sampler::Exp(Exp::new(1.0 / mean).map_err(|e| dist("exponential", e))?)
            }
            Pattern::Loop | Pattern::Scan => Sampler::Seq { next: 0 },
        });
    }
    let mut out = Vec::with_capacity(requests);
    let mut pick = Picker::default();
    for r in 0..requests {
        let at = r as f64 / requests.max(1) as f64;
        let Some(i) = pick.stream(specs, at, &mut rng) else {
            continue; // no stream active at this point of the run
        };
        let s = &specs[i];
        let block = match &mut samplers[i] {
            Sampler::Uniform => rng.gen_range(0..s.blocks),
            Sampler::Zipf(z) => (z.sample(&mut rng) as u64)
                .saturating_sub(1)
                .min(s.blocks - 1),
            Sampler::Exp(e) => loop {
                let x = e.sample(&mut rng) as u64;
                if x < s.blocks {
                    break x;
                }
            },
            Sampler::Seq { next } => {
                let b = *next;
                *next = match s.pattern {
                    Pattern::Loop => (b + 1) % s.blocks,
                    _ => b + 1,
                };
                b
            }
        };
        let file = s.file.unwrap_or(i as u64);
        out.push(Access::read(BlockKey::new(file, block), s.class));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_phase_change_switches_streams_at_its_fraction_of_the_run() {
        let specs: Vec<StreamSpec> = [
            "loop:blocks=10,class=priority,until=0.5,file=1",
            "scan:class=normal,from=0.5,file=2",
            "uniform:blocks=5,file=3,weight=0.5",
        ]
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
        let out = generate(&specs, 1000, 7).unwrap();
        assert_eq!(out.len(), 1000);
        let (first, second) = out.split_at(500);
        let files = |part: &[Access]| -> std::collections::BTreeSet<u64> {
            part.iter().map(|a| a.key.file.0).collect()
        };
        assert_eq!(files(first), [1, 3].into());
        assert_eq!(files(second), [2, 3].into());
    }

    #[test]
    fn parses_every_kind_and_rejects_bad_keys() {
        let z: StreamSpec = "zipf:alpha=0.8,blocks=500,class=priority,weight=2,file=7"
            .parse()
            .unwrap();
        assert_eq!(z.pattern, Pattern::Zipf { alpha: 0.8 });
        assert_eq!(
            (z.blocks, z.class, z.weight, z.file),
            (500, Class::PRIORITY, 2.0, Some(7))
        );
        let e: StreamSpec = "exponential:blocks=1000".parse().unwrap();
        assert_eq!(e.pattern, Pattern::Exponential { mean: 200.0 });
        assert!("scan".parse::<StreamSpec>().is_ok());
        for bad in [
            "zipf:blocks=0",
            "loop:alpha=1",
            "uniform:colour=red",
            "gauss",
            "uniform:weight=-1",
            "uniform:blocks",
            "loop:from=0.5,until=0.5",
            "loop:until=1.5",
        ] {
            let e = bad.parse::<StreamSpec>().unwrap_err();
            assert!(
                e.to_string().contains(bad.split(':').next().unwrap_or(bad)),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn streams_stay_in_range_and_interleave_by_weight() {
        let specs: Vec<StreamSpec> = [
            "uniform:blocks=100,weight=3",
            "loop:blocks=10,class=priority",
        ]
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
        let reqs = generate(&specs, 40_000, 1).unwrap();
        let prio = reqs.iter().filter(|a| a.class == Class::PRIORITY).count();
        assert!(
            (9_000..11_000).contains(&prio),
            "weight 1 of 4 → ~10000, got {prio}"
        );
        assert!(reqs.iter().all(|a| a.key.block.0 < 100));
        let loop_blocks: Vec<u64> = reqs
            .iter()
            .filter(|a| a.key.file.0 == 1)
            .take(12)
            .map(|a| a.key.block.0)
            .collect();
        assert_eq!(loop_blocks, vec![0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1]);
        assert_eq!(
            generate(&specs, 1000, 9).unwrap(),
            generate(&specs, 1000, 9).unwrap()
        );
    }

    #[test]
    fn zipf_is_skewed_and_scan_never_repeats() {
        let z = generate(&["zipf:blocks=1000,alpha=1.2".parse().unwrap()], 20_000, 3).unwrap();
        let hot = z.iter().filter(|a| a.key.block.0 < 10).count();
        assert!(
            hot > 20_000 / 3,
            "top 1 % of blocks should draw most accesses, got {hot}"
        );
        let s = generate(&["scan:blocks=5".parse().unwrap()], 100, 3).unwrap();
        assert!(s
            .windows(2)
            .all(|w| w[1].key.block.0 == w[0].key.block.0 + 1));
    }
}
