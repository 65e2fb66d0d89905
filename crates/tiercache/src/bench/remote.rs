//! `tiercache bench remote`: paper 002's random-read table as ratios, in one run. BACKING is
//! behind the HDD device MODEL (`--emulate hdd`: modelled seek and transfer times, not a real
//! disk); memcached servers run on loopback.
//!
//! - Random: a file twice the memory tier, read in 4 KiB blocks in a random order (every block
//!   once per pass), two passes; without a remote tier, then with 1, 2 and 4 servers. The first
//!   pass stores what it reads in the remote tier (in the background); the second finds there
//!   what memory could not keep. `rand_second_pass_speedup` = second pass without ÷ with
//!   (1 server).
//! - Sequential: a larger file read in 128 KiB requests, two passes, with and without the
//!   remote tier, in two alternating rounds (these runs reach the threshold, so they go to
//!   BACKING): `seq_with_remote_over_without` = throughput with ÷ without; and with the remote
//!   tier but no bypass (threshold 4096), to show what the bypass saves:
//!   `seq_no_bypass_over_without`.

use super::fuse::{need, start_tiercache, write_random_file, Mounts};
use crate::bench::BenchError;
use crate::cmd::progress;
use clap::Args;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde::Serialize;
use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use tiercache_remote::local::LocalMemcached;

#[derive(Args, Debug)]
pub struct RemoteBenchArgs {
    /// Memory tier size; the random-read file is twice this.
    #[arg(long, default_value = "2M")]
    pub memory: String,
    /// Size of the sequential-read file.
    #[arg(long, default_value = "64M")]
    pub seq_size: String,
    /// Server counts to measure, comma-separated.
    #[arg(long, default_value = "1,2,4")]
    pub servers: String,
    /// Work directory (default: a new directory under /tmp). Must not be on a FUSE mount.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// One random-read configuration: both passes' times and what the remote tier did.
#[derive(Serialize, Debug, Clone)]
struct RandRun {
    servers: usize,
    first_pass_secs: f64,
    second_pass_secs: f64,
    /// Remote hits during the second pass.
    second_pass_remote_hits: u64,
}

#[derive(Serialize, Debug)]
struct RemoteBench {
    device_model: &'static str,
    memory_bytes: u64,
    rand_file_bytes: u64,
    seq_file_bytes: u64,
    rand_without: RandRun,
    rand_with: Vec<RandRun>,
    /// Second random pass without the remote tier ÷ with it (1 server).
    rand_second_pass_speedup: f64,
    /// The same for each server count.
    rand_second_pass_speedup_by_servers: BTreeMap<usize, f64>,
    seq_without_mbps: f64,
    seq_with_mbps: f64,
    seq_with_remote_over_without: f64,
    /// The remote tier without the sequential bypass (threshold 4096 blocks).
    seq_no_bypass_mbps: f64,
    seq_no_bypass_over_without: f64,
    /// Blocks the second passes without bypass read from the remote tier.
    seq_no_bypass_remote_hits: u64,
    /// Sequential run length (blocks) from which reads bypass the remote tier.
    threshold: u64,
}

/// memcached servers on loopback, killed on drop.
struct Servers {
    procs: Vec<LocalMemcached>,
}

impl Servers {
    fn start(n: usize) -> Result<Servers, BenchError> {
        let procs = (0..n)
            .map(|_| LocalMemcached::start_with(256))
            .collect::<Result<_, _>>()
            .map_err(|e| BenchError::tool(format!("memcached: {e}")))?;
        Ok(Servers { procs })
    }

    fn url(&self, n: usize) -> String {
        let list: Vec<String> = self.procs[..n].iter().map(LocalMemcached::addr).collect();
        format!("memcached://{}", list.join(","))
    }
}

/// `tiercache stats MP --json` of a running mount.
pub(super) fn stats(mp: &Path) -> Result<serde_json::Value, BenchError> {
    let exe = std::env::current_exe().map_err(|e| BenchError::io("current_exe", e))?;
    let out = Command::new(exe)
        .arg("stats")
        .arg(mp)
        .arg("--json")
        .output()
        .map_err(|e| BenchError::io("tiercache stats", e))?;
    if !out.status.success() {
        return Err(BenchError::scenario(format!(
            "stats {}: {}",
            mp.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| BenchError::json("stats", e))
}

fn remote_hits(mp: &Path) -> Result<u64, BenchError> {
    Ok(stats(mp)?["remote"]["hits"].as_u64().unwrap_or(0))
}

fn remote_hits_or_zero(mp: &Path, remote: bool) -> Result<u64, BenchError> {
    if remote {
        remote_hits(mp)
    } else {
        Ok(0)
    }
}

/// Waits until the background stores into lower tiers are done (at most 30 s).
fn settle(mp: &Path) -> Result<(), BenchError> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let v = stats(mp)?;
        let transit = v["lower"]["transit_blocks"].as_u64().unwrap_or(0);
        let pending = v["remote"]["pending_stores"].as_u64().unwrap_or(0);
        if transit == 0 && pending == 0 {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(BenchError::scenario(format!(
        "{}: background stores did not finish in 30 s",
        mp.display()
    )))
}

/// Reads every 4 KiB block of `file` once, in the order of `order`; returns seconds.
fn random_pass(file: &Path, order: &[u64]) -> Result<f64, BenchError> {
    let f =
        std::fs::File::open(file).map_err(|e| BenchError::io(format!("{}", file.display()), e))?;
    let mut buf = vec![0u8; 4096];
    let t0 = Instant::now();
    for &b in order {
        f.read_exact_at(&mut buf, b * 4096)
            .map_err(|e| BenchError::io(format!("{}: read at {}", file.display(), b * 4096), e))?;
    }
    Ok(t0.elapsed().as_secs_f64())
}

/// Reads `file` front to back in 128 KiB requests; returns seconds.
fn sequential_pass(file: &Path, size: u64) -> Result<f64, BenchError> {
    let f =
        std::fs::File::open(file).map_err(|e| BenchError::io(format!("{}", file.display()), e))?;
    let mut buf = vec![0u8; 128 << 10];
    let t0 = Instant::now();
    let mut off = 0;
    while off < size {
        let n = f
            .read_at(&mut buf, off)
            .map_err(|e| BenchError::io(format!("{}: read at {off}", file.display()), e))?;
        if n == 0 {
            break;
        }
        off += n as u64;
    }
    Ok(t0.elapsed().as_secs_f64())
}

/// Rounds of the sequential comparison (each: two passes without, then two with).
const SEQ_ROUNDS: u64 = 2;

struct Setup {
    backing: PathBuf,
    mp: PathBuf,
    key: PathBuf,
    memory: u64,
}

impl Setup {
    /// Mounts with the HDD model, and with a remote tier on `url` if given.
    fn mount(&self, remote: Option<(&str, &str)>, extra: &[&str]) -> Result<Mounts, BenchError> {
        let key = self.key.display().to_string();
        let mut args = vec!["--emulate", "hdd"];
        args.extend_from_slice(extra);
        if let Some((url, ns)) = remote {
            args.extend([
                "--remote",
                url,
                "--remote-key",
                &key,
                "--remote-namespace",
                ns,
            ]);
        }
        let child = start_tiercache(&self.backing, &self.mp, self.memory, &args)?;
        Ok(Mounts {
            daemons: vec![(child, self.mp.clone())],
            bindfs: Vec::new(),
        })
    }

    fn rand_run(
        &self,
        remote: Option<(&str, &str)>,
        servers: usize,
        orders: &[Vec<u64>; 2],
    ) -> Result<RandRun, BenchError> {
        let _m = self.mount(remote, &[])?;
        let file = self.mp.join("rand.dat");
        let first = random_pass(&file, &orders[0])?;
        let hits0 = if remote.is_some() {
            settle(&self.mp)?;
            remote_hits(&self.mp)?
        } else {
            0
        };
        let second = random_pass(&file, &orders[1])?;
        let hits1 = if remote.is_some() {
            remote_hits(&self.mp)?
        } else {
            0
        };
        Ok(RandRun {
            servers,
            first_pass_secs: first,
            second_pass_secs: second,
            second_pass_remote_hits: hits1 - hits0,
        })
    }
}

/// The flags' values: (memory tier bytes, sequential file bytes, server counts).
fn checked(a: &RemoteBenchArgs) -> Result<(u64, u64, Vec<usize>), BenchError> {
    let memory =
        crate::live::size::parse_size(&a.memory).map_err(|e| BenchError::flag("memory", e))?;
    let seq_size =
        crate::live::size::parse_size(&a.seq_size).map_err(|e| BenchError::flag("seq-size", e))?;
    if memory < (256 << 10) {
        return Err(BenchError::scenario("--memory: at least 256K"));
    }
    if seq_size < (1 << 20) {
        return Err(BenchError::scenario("--seq-size: at least 1M"));
    }
    let counts: Vec<usize> = a
        .servers
        .split(',')
        .map(|s| {
            s.trim()
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=16).contains(n))
        })
        .collect::<Option<_>>()
        .ok_or_else(|| {
            BenchError::flag(
                "servers",
                format!("`{}`: expected counts 1..16, e.g. 1,2,4", a.servers),
            )
        })?;
    Ok((memory, seq_size, counts))
}

/// The sequential passes, in alternating rounds; (seconds per kind, blocks the no-bypass
/// kind read from the remote tier, the remote tier's threshold).
fn seq_rounds(
    setup: &Setup,
    servers: &Servers,
    seq_size: u64,
    bar: &Option<indicatif::ProgressBar>,
) -> Result<([f64; 3], u64, u64), BenchError> {
    // Alternating rounds (without, with, with but no bypass, ...) so drift on a shared machine
    // hits every side alike. "No bypass" (threshold 4096 blocks) shows what the bypass saves.
    let kinds: [(&str, Option<&[&str]>); 3] = [
        ("without remote tier", None),
        ("with remote tier", Some(&[])),
        (
            "with remote tier, no bypass",
            Some(&["--remote-threshold", "4096"]),
        ),
    ];
    let mut seq = [0.0f64; 3];
    let mut threshold = 0;
    let mut no_bypass_hits = 0;
    for round in 0..SEQ_ROUNDS {
        for (i, (label, remote)) in kinds.iter().enumerate() {
            progress::step(
                bar,
                format!(
                    "sequential reads, two passes, {label} (round {})",
                    round + 1
                ),
            );
            // A fresh namespace per mount: nothing stored by an earlier one is found.
            let ns = format!("bench-{}-seq-{round}-{i}", std::process::id());
            let url = servers.url(1);
            let _m = setup.mount(
                remote.map(|_| (url.as_str(), ns.as_str())),
                remote.unwrap_or(&[]),
            )?;
            let file = setup.mp.join("seq.dat");
            seq[i] += sequential_pass(&file, seq_size)?;
            if remote.is_some() {
                // Let the background stores land (not timed): the second pass then finds in
                // the remote tier whatever the first stored there.
                settle(&setup.mp)?;
            }
            let hits = remote_hits_or_zero(&setup.mp, remote.is_some())?;
            seq[i] += sequential_pass(&file, seq_size)?;
            if i == 2 {
                no_bypass_hits += remote_hits_or_zero(&setup.mp, true)? - hits;
            }
            if i == 1 {
                threshold = stats(&setup.mp)?["remote"]["threshold"]
                    .as_u64()
                    .unwrap_or(0);
            }
            progress::done(bar);
        }
    }
    Ok((seq, no_bypass_hits, threshold))
}

/// The human-readable table of a run.
fn print_table(r: &RemoteBench, without: &RandRun, with: &[RandRun]) {
    let speedup = |x: &RandRun| without.second_pass_secs / x.second_pass_secs.max(1e-9);
    let (memory, rand_size, seq_size) = (r.memory_bytes, r.rand_file_bytes, r.seq_file_bytes);
    println!(
        "BACKING behind the HDD device MODEL; memory tier {} KiB; random file {} KiB, 4 KiB reads",
        memory >> 10,
        rand_size >> 10
    );
    println!(
        "{:<24} {:>12} {:>12} {:>12} {:>10}",
        "", "pass 1 (s)", "pass 2 (s)", "remote hits", "speedup"
    );
    println!(
        "{:<24} {:>12.2} {:>12.2} {:>12} {:>10}",
        "without remote tier", without.first_pass_secs, without.second_pass_secs, "-", "1.00"
    );
    for w in with {
        println!(
            "{:<24} {:>12.2} {:>12.2} {:>12} {:>10.1}",
            format!("{} memcached server(s)", w.servers),
            w.first_pass_secs,
            w.second_pass_secs,
            w.second_pass_remote_hits,
            speedup(w)
        );
    }
    println!(
        "sequential 128 KiB reads of {} MiB, two passes × {SEQ_ROUNDS} rounds: {:.0} MB/s without, \
         {:.0} MB/s with the remote tier (ratio {:.2}; threshold {} blocks), {:.0} MB/s with it \
         but no bypass (ratio {:.2}; {} blocks read from the remote tier)",
        seq_size >> 20,
        r.seq_without_mbps,
        r.seq_with_mbps,
        r.seq_with_remote_over_without,
        r.threshold,
        r.seq_no_bypass_mbps,
        r.seq_no_bypass_over_without,
        r.seq_no_bypass_remote_hits
    );
}

pub fn run(a: RemoteBenchArgs) -> Result<(), BenchError> {
    need("memcached", "memcached")?;
    let (memory, seq_size, counts) = checked(&a)?;
    let root = a.dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("tiercache-bench-remote-{}", std::process::id()))
    });
    let backing = root.join("backing");
    let mp = root.join("mnt");
    for d in [&backing, &mp] {
        std::fs::create_dir_all(d).map_err(|e| BenchError::io(format!("{}", d.display()), e))?;
    }
    let steps = 2 + 3 * SEQ_ROUNDS + counts.len() as u64;
    let bar = progress::steps(steps, a.json);
    progress::step(&bar, "writing test files and a key, starting memcached");
    let rand_size = 2 * memory;
    write_random_file(&backing.join("rand.dat"), rand_size)?;
    write_random_file(&backing.join("seq.dat"), seq_size)?;
    let key = root.join("remote.key");
    let _ = std::fs::remove_file(&key);
    tiercache_remote::keyfile::generate(&key)
        .map_err(|e| BenchError::scenario(format!("{}: {e}", key.display())))?;
    let max = counts.iter().copied().max().unwrap_or(1);
    let servers = Servers::start(max)?;
    progress::done(&bar);
    let setup = Setup {
        backing,
        mp,
        key,
        memory,
    };
    let blocks = rand_size / 4096;
    let mut rng = rand::rngs::StdRng::seed_from_u64(2);
    let orders: [Vec<u64>; 2] = std::array::from_fn(|_| {
        let mut o: Vec<u64> = (0..blocks).collect();
        o.shuffle(&mut rng);
        o
    });
    progress::step(&bar, "random reads, two passes, without remote tier");
    let without = setup.rand_run(None, 0, &orders)?;
    progress::done(&bar);
    let mut with = Vec::new();
    for &n in &counts {
        progress::step(
            &bar,
            format!("random reads, two passes, {n} memcached server(s)"),
        );
        // A fresh namespace per run: nothing stored by an earlier run is found.
        let ns = format!("bench-{}-{n}", std::process::id());
        with.push(setup.rand_run(Some((&servers.url(n), &ns)), n, &orders)?);
        progress::done(&bar);
    }
    let (seq, no_bypass_hits, threshold) = seq_rounds(&setup, &servers, seq_size, &bar)?;
    progress::finish(bar);
    drop(servers);
    if a.dir.is_none() {
        let _ = std::fs::remove_dir_all(&root);
    }
    let speedup = |r: &RandRun| without.second_pass_secs / r.second_pass_secs.max(1e-9);
    let by: BTreeMap<usize, f64> = with.iter().map(|r| (r.servers, speedup(r))).collect();
    let mbps = |secs: f64| (2 * SEQ_ROUNDS) as f64 * seq_size as f64 / 1e6 / secs.max(1e-9);
    let r = RemoteBench {
        device_model: "hdd (emulated: modelled seek and transfer times)",
        memory_bytes: memory,
        rand_file_bytes: rand_size,
        seq_file_bytes: seq_size,
        rand_second_pass_speedup: with.first().map_or(0.0, speedup),
        rand_second_pass_speedup_by_servers: by,
        rand_without: without.clone(),
        rand_with: with.clone(),
        seq_without_mbps: mbps(seq[0]),
        seq_with_mbps: mbps(seq[1]),
        seq_with_remote_over_without: seq[0] / seq[1].max(1e-9),
        seq_no_bypass_mbps: mbps(seq[2]),
        seq_no_bypass_over_without: seq[0] / seq[2].max(1e-9),
        seq_no_bypass_remote_hits: no_bypass_hits,
        threshold,
    };
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&r).map_err(|e| BenchError::json("report", e))?
        );
    } else {
        print_table(&r, &without, &with);
    }
    Ok(())
}
