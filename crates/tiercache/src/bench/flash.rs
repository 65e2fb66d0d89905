//! `tiercache bench flash`: paper 001's table (Nishina, Sato, Namiki: an SSD as a write-back
//! cache for an HDD, with idle-time cleaning) as ratios, in one run. BACKING is behind the HDD
//! device MODEL (`--emulate hdd`: modelled seek and transfer times, not a real disk); the SSD
//! tier's cache file lives on this machine's own device.
//!
//! Four configurations run the same workloads in 001's order, with an idle gap before each but
//! the first — `seq_write` (a file 1.5 times the cache, ending with `fsync`), `rand_write`
//! (4 KiB writes at random blocks of that file, ending with `fsync`), `seq_read` and
//! `rand_read` of the file:
//! - `idle`: the SSD tier with 001's idle-time cleaner (cleans only after `--flash-wait` without
//!   requests; with no set free of dirty blocks, write-back goes straight to BACKING);
//! - `eager`: the SSD tier with 001's old scheme (cleans the LRU dirty set in the request path
//!   while free sets are below the floor);
//! - `none`: no SSD tier (memory, then BACKING on the HDD model);
//! - `raw`: no tiercache: the same I/O on a file of the device that holds the cache file
//!   (001's "SSD" row).
//!
//! Both tier configurations use 1 MiB sets, a floor of half the sets (001: 1000 of ~2000) and
//! no sequential cutoff and no dirty-fraction safety valve (001 has neither), so the only
//! difference is when cleaning happens. The gaps are not timed: they wait until the idle
//! cleaner is back in `normal` (the floor refilled). Reads are cold: the memory tier is small,
//! and the page cache of the cache file (and of the raw file) is dropped before each read.

use crate::bench::BenchError;
mod report;

use super::fuse::{start_tiercache, Mounts};
use super::pages;
use super::remote::stats;
use crate::cmd::progress;
use clap::Args;
use rand::seq::index::sample;
use rand::SeedableRng;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub struct FlashBenchArgs {
    /// Size of the SSD tier's cache file (001: 2 GB); sets are 1 MiB.
    #[arg(long, default_value = "256M")]
    pub cache: String,
    /// Size of the sequential write and read [default: 1.5 × --cache, as 001's 3 GB for 2 GB].
    #[arg(long)]
    pub seq_size: Option<String>,
    /// Memory tier size (small, so that reads are cold for memory).
    #[arg(long, default_value = "4M")]
    pub memory: String,
    /// Random 4 KiB writes, at distinct blocks of the sequential file (001: 3000).
    #[arg(long, default_value_t = 192)]
    pub rand_writes: u64,
    /// Random 4 KiB reads, at distinct blocks of the sequential file (001: 3000).
    #[arg(long, default_value_t = 400)]
    pub rand_reads: u64,
    /// `--flash-free-floor` of both tier configurations (001: 1000 sets of ~2000).
    #[arg(long, default_value = "50%")]
    pub free_floor: String,
    /// `--flash-wait` in ms: quiet time before idle cleaning starts.
    #[arg(long, default_value_t = 1000)]
    pub wait_ms: u64,
    /// Work directory (default: a new directory under /tmp); the cache file and the raw file
    /// are made there. Must not be on a FUSE mount.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Also draw the seconds as bars (per workload and configuration) into this PNG.
    #[arg(long, value_name = "FILE.png")]
    pub plot: Option<PathBuf>,
    /// Write from buffers 16 bytes past a page boundary instead of page-aligned ones (001 used
    /// direct I/O, which needs aligned buffers; FUSE splits an unaligned 1 MiB write in two
    /// requests at a page boundary, not at a block boundary).
    #[arg(long)]
    pub unaligned: bool,
    /// `--flash-io` of both tier configurations (how the cache file is read and written)
    /// [default: the mount's, auto].
    #[arg(long, value_name = "MODE")]
    pub flash_io: Option<String>,
    /// `--backing-cache` of both tier configurations (`keep`: BACKING's pages stay in the kernel
    /// page cache, as before the mount dropped them) [default: the mount's, drop].
    #[arg(long, value_name = "keep|drop")]
    pub backing_cache: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// The configurations, in the order they run and are shown.
const CONFIGS: [&str; 4] = ["idle", "eager", "none", "raw"];
/// The workloads, in the order they run (001's table order).
const WORKLOADS: [&str; 4] = ["seq_write", "rand_write", "seq_read", "rand_read"];
/// Requests of the sequential workloads.
const SEQ_CHUNK: usize = 1 << 20;
const BLOCK: u64 = 4096;
/// Effectively no sequential cutoff: 001 caches sequential writes too.
const NO_SEQ_CUTOFF: &str = "1T";
/// The longest idle gap waited for (the cleaner back in `normal`).
const GAP_TIMEOUT: Duration = Duration::from_secs(120);

/// Seconds of one workload in each configuration.
#[derive(Serialize, Debug, Clone, Default)]
struct Times {
    idle: f64,
    eager: f64,
    none: f64,
    raw: f64,
    /// idle ÷ eager (write workloads).
    #[serde(skip_serializing_if = "Option::is_none")]
    idle_over_eager: Option<f64>,
    /// The target for idle ÷ eager (001's NEW ÷ OLD).
    #[serde(skip_serializing_if = "Option::is_none")]
    target_idle_over_eager: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    target_met: Option<bool>,
}

impl Times {
    fn set(&mut self, config: &str, secs: f64) {
        match config {
            "idle" => self.idle = secs,
            "eager" => self.eager = secs,
            "none" => self.none = secs,
            _ => self.raw = secs,
        }
    }

    fn get(&self, config: &str) -> f64 {
        match config {
            "idle" => self.idle,
            "eager" => self.eager,
            "none" => self.none,
            _ => self.raw,
        }
    }

    fn with_target(mut self, target: f64) -> Self {
        let r = self.idle / self.eager.max(1e-9);
        self.idle_over_eager = Some(r);
        self.target_idle_over_eager = Some(target);
        self.target_met = Some(r <= target);
        self
    }
}

/// What the SSD tier and BACKING did during one workload (tier configurations only).
#[derive(Serialize, Debug, Clone, Default)]
struct Detail {
    secs: f64,
    /// Untimed idle gap before the workload, seconds.
    gap_before_secs: f64,
    /// `flash.state` and `flash.free_sets` when the workload started and ended.
    state_before: String,
    free_sets_before: u64,
    free_sets_after: u64,
    dirty_blocks_after: u64,
    /// Bytes the tier cleaned to BACKING during the workload (in the request path for
    /// `eager`; `idle` cleans in the gaps).
    bytes_cleaned: u64,
    /// Write-back batches told to bypass the tier (no set free of dirty blocks).
    bypassed: u64,
    /// Bytes written to / read from BACKING (the HDD model) during the workload.
    backing_bytes_written: u64,
    backing_bytes_read: u64,
    /// Requests the HDD model served, and how many of them paid seek + rotation.
    backing_requests: u64,
    backing_seeks: u64,
    /// Blocks served by the SSD tier during the workload.
    flash_hits: u64,
    /// Set records the tier wrote, and device syncs, during the workload.
    record_writes: u64,
    device_syncs: u64,
    /// Requests the I/O workers ran (`stats` `io.*.completed`): reads and writes that could not
    /// be answered on the FUSE request thread, plus every `fsync` and writer's `release`.
    worker_requests: u64,
    /// Bytes of the cache file (`raw`: of its file) in the page cache when it ended.
    page_cache_bytes: u64,
}

#[derive(Serialize, Debug)]
struct FlashBench {
    device_model: &'static str,
    cache_bytes: u64,
    sets: u64,
    free_floor: u64,
    memory_bytes: u64,
    seq_bytes: u64,
    rand_writes: u64,
    rand_reads: u64,
    wait_ms: u64,
    /// Writes from buffers not page-aligned (`--unaligned`).
    unaligned: bool,
    /// The `--flash*` flags both tier configurations used (plus `--flash-cleaner`).
    flash_flags: Vec<String>,
    /// How the tier read and wrote its cache file (`stats` `flash.io_mode`).
    flash_io_mode: String,
    seq_write: Times,
    rand_write: Times,
    seq_read: Times,
    rand_read: Times,
    /// Per mounted configuration and workload: what the tier and BACKING did.
    details: BTreeMap<String, BTreeMap<String, Detail>>,
}

/// The counters a [`Detail`] is made of, at one moment.
#[derive(Debug, Clone, Default)]
struct Counters {
    state: String,
    free_sets: u64,
    dirty_blocks: u64,
    bytes_cleaned: u64,
    bypassed: u64,
    written: u64,
    read: u64,
    flash_hits: u64,
    requests: u64,
    seeks: u64,
    records: u64,
    syncs: u64,
    worker_requests: u64,
}

impl Counters {
    fn of(v: &Value) -> Self {
        let f = &v["flash"];
        let u = |x: &Value| x.as_u64().unwrap_or(0);
        let flash_hits = v["tiers"]
            .as_array()
            .and_then(|t| t.iter().find(|t| t["kind"] == "flash"))
            .map_or(0, |t| u(&t["hits"]));
        Counters {
            state: f["state"].as_str().unwrap_or("-").to_string(),
            free_sets: u(&f["free_sets"]),
            dirty_blocks: u(&f["dirty_blocks"]),
            bytes_cleaned: u(&f["bytes_cleaned"]),
            bypassed: u(&f["bypassed"]),
            written: u(&v["backing"]["bytes_written"]),
            read: u(&v["backing"]["bytes_read"]),
            flash_hits,
            requests: u(&v["device_model"]["requests"]),
            seeks: u(&v["device_model"]["seeks"]),
            records: u(&f["record_writes"]),
            syncs: u(&f["device_syncs"]),
            worker_requests: u(&v["io"]["normal"]["completed"])
                + u(&v["io"]["priority"]["completed"]),
        }
    }

    fn detail(&self, after: &Counters, secs: f64, gap: f64, page_cache_bytes: u64) -> Detail {
        Detail {
            secs,
            gap_before_secs: gap,
            state_before: self.state.clone(),
            free_sets_before: self.free_sets,
            free_sets_after: after.free_sets,
            dirty_blocks_after: after.dirty_blocks,
            bytes_cleaned: after.bytes_cleaned.saturating_sub(self.bytes_cleaned),
            bypassed: after.bypassed.saturating_sub(self.bypassed),
            backing_bytes_written: after.written.saturating_sub(self.written),
            backing_bytes_read: after.read.saturating_sub(self.read),
            backing_requests: after.requests.saturating_sub(self.requests),
            backing_seeks: after.seeks.saturating_sub(self.seeks),
            flash_hits: after.flash_hits.saturating_sub(self.flash_hits),
            record_writes: after.records.saturating_sub(self.records),
            device_syncs: after.syncs.saturating_sub(self.syncs),
            worker_requests: after.worker_requests.saturating_sub(self.worker_requests),
            page_cache_bytes,
        }
    }
}

fn io_err<'a>(path: &'a Path, what: &'a str) -> impl Fn(std::io::Error) -> BenchError + 'a {
    move |e| BenchError::io(format!("{}: {what}", path.display()), e)
}

/// Writes `size` bytes front to back in 1 MiB requests, then `fsync`; returns seconds.
fn seq_write(path: &Path, size: u64, data: &[u8]) -> Result<f64, BenchError> {
    let f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .map_err(io_err(path, "open"))?;
    let t0 = Instant::now();
    let mut off = 0u64;
    while off < size {
        let n = (size - off).min(data.len() as u64) as usize;
        f.write_all_at(&data[..n], off)
            .map_err(io_err(path, "write"))?;
        off += n as u64;
    }
    f.sync_all().map_err(io_err(path, "fsync"))?;
    Ok(t0.elapsed().as_secs_f64())
}

/// Writes one 4 KiB block at each of `blocks`, in that order, then `fsync`; returns seconds.
fn rand_write(path: &Path, blocks: &[u64], data: &[u8]) -> Result<f64, BenchError> {
    let f = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(io_err(path, "open"))?;
    let t0 = Instant::now();
    for (i, &b) in blocks.iter().enumerate() {
        let at = (i * BLOCK as usize) % (data.len() - BLOCK as usize);
        f.write_all_at(&data[at..at + BLOCK as usize], b * BLOCK)
            .map_err(io_err(path, "write"))?;
    }
    f.sync_all().map_err(io_err(path, "fsync"))?;
    Ok(t0.elapsed().as_secs_f64())
}

/// Reads `size` bytes front to back in 1 MiB requests; returns seconds.
fn seq_read(path: &Path, size: u64) -> Result<f64, BenchError> {
    let f = File::open(path).map_err(io_err(path, "open"))?;
    let mut buf = vec![0u8; SEQ_CHUNK];
    let t0 = Instant::now();
    let mut off = 0u64;
    while off < size {
        let n = f.read_at(&mut buf, off).map_err(io_err(path, "read"))?;
        if n == 0 {
            return Err(BenchError::scenario(format!(
                "{}: short at {off}",
                path.display()
            )));
        }
        off += n as u64;
    }
    Ok(t0.elapsed().as_secs_f64())
}

/// Reads the 4 KiB block at each of `blocks`; returns seconds.
fn rand_read(path: &Path, blocks: &[u64]) -> Result<f64, BenchError> {
    let f = File::open(path).map_err(io_err(path, "open"))?;
    let mut buf = vec![0u8; BLOCK as usize];
    let t0 = Instant::now();
    for &b in blocks {
        f.read_exact_at(&mut buf, b * BLOCK)
            .map_err(io_err(path, "read"))?;
    }
    Ok(t0.elapsed().as_secs_f64())
}

/// What one run of the four workloads needs.
struct Plan {
    root: PathBuf,
    memory: u64,
    cache: u64,
    seq: u64,
    write_blocks: Vec<u64>,
    read_blocks: Vec<u64>,
    /// `data_len` bytes at `data_at` are what the writes write.
    buf: Vec<u8>,
    data_at: usize,
    flash_flags: Vec<String>,
    min_gap: Duration,
}

impl Plan {
    fn data(&self) -> &[u8] {
        &self.buf[self.data_at..self.data_at + SEQ_CHUNK]
    }
}

/// The mount's flash figures once it is up: (sets, free floor).
type Geometry = (u64, u64);

impl Plan {
    /// Runs the workloads on `file` in 001's order; `gap` is called before each (it returns
    /// the seconds waited), `cold` before each read, `probe` around each workload; `cached`
    /// (the page cache `cached` holds) after each.
    #[allow(clippy::too_many_arguments)]
    fn workloads(
        &self,
        file: &Path,
        gap: &mut dyn FnMut() -> Result<f64, BenchError>,
        cold: &dyn Fn() -> Result<(), BenchError>,
        probe: &dyn Fn() -> Result<Counters, BenchError>,
        cached: &Path,
        bar: &Option<indicatif::ProgressBar>,
        label: &str,
    ) -> Result<Vec<Detail>, BenchError> {
        let mut out = Vec::new();
        for (i, w) in WORKLOADS.iter().enumerate() {
            progress::step(bar, format!("{label}: {w}"));
            let g = if i == 0 { 0.0 } else { gap()? };
            if i >= 2 {
                cold()?;
            }
            let before = probe()?;
            let secs = match i {
                0 => seq_write(file, self.seq, self.data())?,
                1 => rand_write(file, &self.write_blocks, self.data())?,
                2 => seq_read(file, self.seq)?,
                _ => rand_read(file, &self.read_blocks)?,
            };
            let after = probe()?;
            out.push(before.detail(&after, secs, g, pages::resident_bytes(cached)?));
        }
        Ok(out)
    }

    /// One configuration through a mount (`cleaner`: `Some` for an SSD tier).
    fn mounted(
        &self,
        cleaner: Option<&str>,
        bar: &Option<indicatif::ProgressBar>,
    ) -> Result<(Vec<Detail>, Geometry, String), BenchError> {
        let label = cleaner.unwrap_or("none");
        let backing = self.root.join(format!("backing-{label}"));
        let mp = self.root.join(format!("mnt-{label}"));
        let cache = self.root.join(format!("flash-{label}.cache"));
        for d in [&backing, &mp] {
            std::fs::create_dir_all(d).map_err(io_err(d, "mkdir"))?;
        }
        let _ = std::fs::remove_file(&cache);
        let mut args: Vec<String> = vec!["--emulate".into(), "hdd".into()];
        if let Some(c) = cleaner {
            args.push("--flash".into());
            args.push(format!("{}:{}", cache.display(), self.cache));
            args.extend(self.flash_flags.iter().cloned());
            args.extend(["--flash-cleaner".into(), c.into()]);
        }
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let child = start_tiercache(&backing, &mp, self.memory, &argv)?;
        let mounts = Mounts {
            daemons: vec![(child, mp.clone())],
            bindfs: Vec::new(),
        };
        let v = stats(&mp)?;
        let geo = (
            v["flash"]["sets"].as_u64().unwrap_or(0),
            v["flash"]["free_floor"].as_u64().unwrap_or(0),
        );
        let io_mode = v["flash"]["io_mode"].as_str().unwrap_or("-").to_string();
        let flash = cleaner.is_some();
        let min_gap = self.min_gap;
        let mut gap = || -> Result<f64, BenchError> {
            let t0 = Instant::now();
            std::thread::sleep(min_gap);
            // The idle cleaner refills the floor once no request came for --flash-wait: wait
            // until it is back in `normal` (eager stays in `normal`).
            while flash && stats(&mp)?["flash"]["state"] != "normal" {
                if t0.elapsed() > GAP_TIMEOUT {
                    return Err(BenchError::scenario(format!(
                        "{label}: the cleaner did not reach its floor within {} s",
                        GAP_TIMEOUT.as_secs()
                    )));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            Ok(t0.elapsed().as_secs_f64())
        };
        let cold = || {
            if flash {
                pages::drop_cached(&cache)
            } else {
                Ok(())
            }
        };
        let probe = || stats(&mp).map(|v| Counters::of(&v));
        // Without a tier: the page cache of BACKING's copy.
        let cached = if flash {
            cache.clone()
        } else {
            backing.join("seq.dat")
        };
        let file = mp.join("seq.dat");
        let details = self.workloads(&file, &mut gap, &cold, &probe, &cached, bar, label)?;
        drop(mounts);
        let _ = std::fs::remove_file(&cache);
        let _ = std::fs::remove_dir_all(&backing);
        Ok((details, geo, io_mode))
    }

    /// The raw configuration: the same I/O on a file next to the cache files.
    fn raw(&self, bar: &Option<indicatif::ProgressBar>) -> Result<Vec<Detail>, BenchError> {
        let file = self.root.join("raw.dat");
        let min_gap = self.min_gap;
        let mut gap = || {
            std::thread::sleep(min_gap);
            Ok(min_gap.as_secs_f64())
        };
        let cold = || pages::drop_cached(&file);
        let probe = || Ok(Counters::default());
        let r = self.workloads(&file, &mut gap, &cold, &probe, &file, bar, "raw");
        let _ = std::fs::remove_file(&file);
        r
    }
}

/// `n` distinct blocks of `0..blocks` in a random order (seeded).
fn distinct_blocks(blocks: u64, n: u64, seed: u64) -> Vec<u64> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    sample(&mut rng, blocks as usize, n as usize)
        .into_iter()
        .map(|b| b as u64)
        .collect()
}

/// 1 MiB of incompressible bytes (xorshift) in a buffer, and where they start in it: at a page
/// boundary, or 16 bytes past one (`unaligned`).
fn pattern(unaligned: bool) -> (Vec<u8>, usize) {
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut v = vec![0u8; SEQ_CHUNK + 8192];
    let at = v.as_ptr().align_offset(4096) + if unaligned { 16 } else { 0 };
    for w in v[at..at + SEQ_CHUNK].chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        w.copy_from_slice(&x.to_le_bytes()[..w.len()]);
    }
    (v, at)
}

/// The flags' sizes: (memory tier bytes, cache bytes, sequential file bytes).
fn sizes(a: &FlashBenchArgs) -> Result<(u64, u64, u64), BenchError> {
    let size = |flag: &str, s: &str| {
        crate::live::size::parse_size(s).map_err(|e| BenchError::flag(flag, e))
    };
    let memory = size("memory", &a.memory)?;
    let cache = size("cache", &a.cache)?;
    if cache < (4 << 20) {
        return Err(BenchError::scenario(
            "--cache: at least 4M (four 1 MiB sets)",
        ));
    }
    let seq = match &a.seq_size {
        Some(s) => size("seq-size", s)?,
        None => cache / 2 * 3,
    } / SEQ_CHUNK as u64
        * SEQ_CHUNK as u64;
    if seq < (1 << 20) {
        return Err(BenchError::scenario("--seq-size: at least 1M"));
    }
    let blocks = seq / BLOCK;
    if a.rand_writes == 0 || a.rand_reads == 0 {
        return Err(BenchError::scenario(
            "--rand-writes and --rand-reads must be positive",
        ));
    }
    if a.rand_writes > blocks || a.rand_reads > blocks {
        return Err(BenchError::scenario(format!(
            "--rand-writes/--rand-reads: at most {blocks} (the blocks of the sequential file)"
        )));
    }
    Ok((memory, cache, seq))
}

/// The work directory: `--dir`, or a new private one under the temporary directory.
fn work_dir(a: &FlashBenchArgs) -> Result<PathBuf, BenchError> {
    Ok(match &a.dir {
        Some(d) => {
            std::fs::create_dir_all(d).map_err(io_err(d, "mkdir"))?;
            d.clone()
        }
        None => {
            // A new private directory (never one someone else made under that name): the
            // cache files made there hold the benchmark's blocks.
            use std::os::unix::fs::DirBuilderExt;
            let d =
                std::env::temp_dir().join(format!("tiercache-bench-flash-{}", std::process::id()));
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(&d)
                .map_err(io_err(&d, "mkdir"))?;
            d
        }
    })
}

/// The `--flash*` (and `--backing-cache`) flags both tier configurations mount with.
fn tier_flags(a: &FlashBenchArgs) -> Vec<String> {
    [
        "--flash-free-floor",
        &a.free_floor,
        "--flash-wait",
        &a.wait_ms.to_string(),
        "--flash-seq-cutoff",
        NO_SEQ_CUTOFF,
        "--flash-dirty-max",
        "100%",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain(
        a.flash_io
            .iter()
            .flat_map(|m| ["--flash-io".to_string(), m.clone()]),
    )
    .chain(
        a.backing_cache
            .iter()
            .flat_map(|m| ["--backing-cache".to_string(), m.clone()]),
    )
    .collect()
}

pub fn run(a: FlashBenchArgs) -> Result<(), BenchError> {
    let (memory, cache, seq) = sizes(&a)?;
    let blocks = seq / BLOCK;
    let root = work_dir(&a)?;
    let flash_flags = tier_flags(&a);
    let (buf, data_at) = pattern(a.unaligned);
    let plan = Plan {
        root: root.clone(),
        memory,
        cache,
        seq,
        write_blocks: distinct_blocks(blocks, a.rand_writes, 1),
        read_blocks: distinct_blocks(blocks, a.rand_reads, 2),
        buf,
        data_at,
        flash_flags: flash_flags.clone(),
        min_gap: Duration::from_millis(a.wait_ms + 500),
    };
    let bar = progress::steps((CONFIGS.len() * WORKLOADS.len()) as u64, a.json);
    let mut times: [Times; 4] = Default::default();
    let mut details: BTreeMap<String, BTreeMap<String, Detail>> = BTreeMap::new();
    let mut geo = (0, 0);
    let mut io_mode = String::new();
    let result = (|| -> Result<(), BenchError> {
        for c in CONFIGS {
            let d = match c {
                "raw" => plan.raw(&bar)?,
                mounted => {
                    let cleaner = (mounted != "none").then_some(mounted);
                    let (d, g, io) = plan.mounted(cleaner, &bar)?;
                    if cleaner.is_some() {
                        geo = g;
                        io_mode = io;
                    }
                    details.insert(
                        c.to_string(),
                        WORKLOADS
                            .iter()
                            .map(|w| w.to_string())
                            .zip(d.iter().cloned())
                            .collect(),
                    );
                    d
                }
            };
            for (i, det) in d.iter().enumerate() {
                times[i].set(c, det.secs);
                progress::done(&bar);
            }
        }
        Ok(())
    })();
    progress::finish(bar);
    if a.dir.is_none() {
        let _ = std::fs::remove_dir_all(&root);
    }
    result?;
    let [sw, rw, sr, rr] = times;
    let r = FlashBench {
        device_model: "hdd (emulated: modelled seek and transfer times, not a disk)",
        cache_bytes: cache,
        sets: geo.0,
        free_floor: geo.1,
        memory_bytes: memory,
        seq_bytes: seq,
        rand_writes: a.rand_writes,
        rand_reads: a.rand_reads,
        wait_ms: a.wait_ms,
        unaligned: a.unaligned,
        flash_flags,
        flash_io_mode: io_mode,
        seq_write: sw.with_target(0.72),
        rand_write: rw.with_target(0.013),
        seq_read: sr,
        rand_read: rr,
        details,
    };
    if let Some(p) = &a.plot {
        report::bars(p, &r.title(), &r.rows())?;
    }
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&r).map_err(|e| BenchError::json("report", e))?
        );
    } else {
        r.print();
        if let Some(p) = &a.plot {
            println!("plot: {}", p.display());
        }
    }
    Ok(())
}
