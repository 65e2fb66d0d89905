//! `tiercache bench web`: paper 000's web scenario. nginx (one worker, `sendfile off`) serves
//! small pages from a priority directory of the mount while `tar` backup streams read a bulk
//! tree through the same mount; BACKING is behind the HDD device MODEL (`--emulate hdd`:
//! modelled seek and transfer times, not a disk). `wrk` on loopback measures requests per
//! second warm (no backup) and, during the backup, requests per second, average and 99th
//! percentile latency.
//!
//! Configurations, each on a fresh mount, the same RAM for caching on both sides:
//! - `tiercache`: the default mount (`dirprio`) with a memory tier of `--memory`, the pages'
//!   directory named with `--priority`;
//! - `tiercache_lru`: the same with `--partition none` (one LRU pool);
//! - `page_cache`: the kernel's page cache given the same RAM: tiercache mounted only as the
//!   HDD model (`--kernel-cache --memory 256K --partition none`).
//!
//! nginx and tar run in a memory cgroup (v1 or v2): `--app-memory` (their own memory) in the
//! tiercache runs, `--memory` more in the page-cache run, so page cache they use is charged.
//! With more than one backup stream the default mount is also measured with one stream, for
//! the ratios to it in the same run.

use super::fuse::{need, stop_daemon, wait_mounted};
use super::web_env::{loadavg, write_tree, wrk, Backups, Cgroup, Nginx, WrkRun};
use crate::bench::BenchError;
use crate::cmd::progress;
use crate::live::size::parse_size;
use clap::Args;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

#[derive(Args, Debug)]
pub struct WebBenchArgs {
    /// Concurrent `tar` streams reading the bulk tree during the backup (1..=8).
    #[arg(long, default_value_t = 1)]
    pub backup_streams: usize,
    /// Seconds of each `wrk` run (warm, then during the backup).
    #[arg(long, default_value_t = 15)]
    pub seconds: u64,
    /// Pages in the priority directory (1..=100).
    #[arg(long, default_value_t = 50)]
    pub pages: usize,
    /// Size of each page.
    #[arg(long, default_value = "200K")]
    pub page_size: String,
    /// Size of the bulk tree the backups read (eight parts, files of 4 KiB to 1 MiB).
    #[arg(long, default_value = "246M")]
    pub bulk: String,
    /// RAM for caching: tiercache's memory tier, and the page cache's share of the cgroup.
    #[arg(long, default_value = "64M")]
    pub memory: String,
    /// Memory of nginx and tar themselves (the cgroup's limit in the tiercache runs).
    #[arg(long, default_value = "16M")]
    pub app_memory: String,
    /// `wrk` connections (one thread).
    #[arg(long, default_value_t = 4)]
    pub connections: usize,
    /// Configurations to run, comma-separated: `page_cache`, `tiercache`, `tiercache_lru`.
    #[arg(long, default_value = "page_cache,tiercache,tiercache_lru")]
    pub configs: String,
    /// One more flag for the tiercache mounts (repeatable), e.g. `--mount-arg=--io-workers=4`.
    #[arg(long, value_name = "FLAG", allow_hyphen_values = true)]
    pub mount_arg: Vec<String>,
    /// The `tiercache` binary whose mounts are measured [default: this one], to compare builds.
    #[arg(long, value_name = "BINARY")]
    pub mount_with: Option<PathBuf>,
    /// Work directory (default: a new directory under /tmp). Must not be on a FUSE mount.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// One configuration's figures.
#[derive(Serialize, Debug, Clone, Copy)]
struct WebRun {
    warm_rps: f64,
    load_rps: f64,
    load_avg_ms: f64,
    load_p99_ms: f64,
    /// What the backup streams read (their archives' bytes) while `wrk` measured.
    backup_mb_per_s: f64,
    warm_requests: u64,
    load_requests: u64,
}

#[derive(Serialize, Debug)]
struct WebBench {
    backup_streams: usize,
    seconds: u64,
    connections: usize,
    pages: usize,
    page_bytes: u64,
    bulk_bytes: u64,
    memory_bytes: u64,
    app_memory_bytes: u64,
    device_model: &'static str,
    mount_args: Vec<String>,
    page_cache: Option<WebRun>,
    tiercache: Option<WebRun>,
    tiercache_lru: Option<WebRun>,
    warm_rps_vs_page_cache: Option<f64>,
    load_p99_vs_page_cache: Option<f64>,
    /// The default mount with one stream (measured when `backup_streams` > 1).
    tiercache_one_stream: Option<WebRun>,
    load_p99_vs_one_stream: Option<f64>,
    load_rps_vs_one_stream: Option<f64>,
    /// 1-, 5- and 15-minute load averages before and after (the machine may be shared).
    loadavg_before: [f64; 3],
    loadavg_after: [f64; 3],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    PageCache,
    Tiercache,
    TiercacheLru,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::PageCache => "page_cache",
            Kind::Tiercache => "tiercache",
            Kind::TiercacheLru => "tiercache_lru",
        }
    }

    fn parse_list(s: &str) -> Result<Vec<Kind>, BenchError> {
        let mut v = Vec::new();
        for name in s.split(',').map(str::trim).filter(|x| !x.is_empty()) {
            let k = [Kind::PageCache, Kind::Tiercache, Kind::TiercacheLru]
                .into_iter()
                .find(|k| k.name() == name)
                .ok_or_else(|| {
                    BenchError::flag(
                        "configs",
                        format!("unknown `{name}` (page_cache, tiercache, tiercache_lru)"),
                    )
                })?;
            if !v.contains(&k) {
                v.push(k);
            }
        }
        if v.is_empty() {
            return Err(BenchError::scenario(
                "--configs: name at least one configuration",
            ));
        }
        Ok(v)
    }
}

/// Validated sizes and paths of one bench run.
struct Env {
    exe: PathBuf,
    backing: PathBuf,
    mnt: PathBuf,
    work: PathBuf,
    parts: Vec<String>,
    page_bytes: u64,
    memory: u64,
    app_memory: u64,
}

/// Starts `exe mount BACKING MNT --foreground ARGS` and waits until it is mounted.
fn start_mount(
    exe: &Path,
    backing: &Path,
    mnt: &Path,
    args: &[String],
) -> Result<Child, BenchError> {
    let mut child = Command::new(exe)
        .arg("mount")
        .arg(backing)
        .arg(mnt)
        .arg("--foreground")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| BenchError::io(format!("cannot start {}", exe.display()), e))?;
    if let Err(e) = wait_mounted(mnt, Some(&mut child)) {
        stop_daemon(&mut child, mnt);
        return Err(e);
    }
    Ok(child)
}

/// The mount daemon, stopped (and the mount point freed) when dropped.
struct Daemon(Child, PathBuf);

impl Drop for Daemon {
    fn drop(&mut self) {
        stop_daemon(&mut self.0, &self.1);
    }
}

/// One configuration on a fresh mount: warm, then with `streams` backup streams.
fn run_config(
    a: &WebBenchArgs,
    env: &Env,
    kind: Kind,
    streams: usize,
) -> Result<WebRun, BenchError> {
    let memory = env.memory.to_string();
    let (mut args, limit): (Vec<String>, u64) = match kind {
        Kind::PageCache => (
            ["--kernel-cache", "--memory", "256K", "--partition", "none"]
                .map(String::from)
                .to_vec(),
            env.memory + env.app_memory,
        ),
        Kind::Tiercache | Kind::TiercacheLru => {
            let mut v = vec!["--memory".into(), memory, "--priority".into(), "www".into()];
            if kind == Kind::TiercacheLru {
                v.extend(["--partition".into(), "none".into()]);
            }
            v.extend(a.mount_arg.iter().cloned());
            (v, env.app_memory)
        }
    };
    args.extend(["--emulate".into(), "hdd".into()]);
    let _daemon = Daemon(
        start_mount(&env.exe, &env.backing, &env.mnt, &args)?,
        env.mnt.clone(),
    );
    let cg = Cgroup::new(
        &format!("tiercache-bench-web-{}-{}", std::process::id(), kind.name()),
        limit,
    )?;
    let nginx = Nginx::start(&env.work, &env.mnt.join("www"), &cg)?;
    // Every page read twice through nginx: cached, and charged to the cgroup.
    for _ in 0..2 {
        for i in 0..a.pages {
            let n = nginx.get(&format!("/p{i:02}.html"))?;
            if n as u64 != env.page_bytes {
                return Err(BenchError::scenario(format!(
                    "nginx sent {n} bytes of page {i}"
                )));
            }
        }
    }
    let warm = wrk(&env.work, nginx.addr, a.pages, a.connections, a.seconds)?;
    let mut backups = Backups::start(&env.mnt.join("bulk"), &env.parts, streams, &cg)?;
    // The scan in its stride (the cache under its pressure) before measuring.
    std::thread::sleep(Duration::from_secs_f64((a.seconds as f64 / 3.0).min(3.0)));
    backups.check()?;
    let (b0, t0) = backups.progress();
    let load: WrkRun = wrk(&env.work, nginx.addr, a.pages, a.connections, a.seconds)?;
    let (b1, t1) = backups.progress();
    backups.check()?;
    Ok(WebRun {
        warm_rps: warm.rps,
        load_rps: load.rps,
        load_avg_ms: load.avg_ms,
        load_p99_ms: load.p99_ms,
        backup_mb_per_s: (b1 - b0) as f64 / 1e6 / (t1 - t0).max(1e-9),
        warm_requests: warm.requests,
        load_requests: load.requests,
    })
}

/// Checks the arguments; the work tree's paths and sizes.
fn prepare(a: &WebBenchArgs, root: &Path) -> Result<(Env, u64), BenchError> {
    if !(1..=8).contains(&a.backup_streams) {
        return Err(BenchError::scenario(format!(
            "--backup-streams {}: must be in 1..=8",
            a.backup_streams
        )));
    }
    if !(1..=100).contains(&a.pages) {
        return Err(BenchError::scenario(format!(
            "--pages {}: must be in 1..=100",
            a.pages
        )));
    }
    if !(1..=3600).contains(&a.seconds) {
        return Err(BenchError::scenario(format!(
            "--seconds {}: must be in 1..=3600",
            a.seconds
        )));
    }
    if !(1..=1000).contains(&a.connections) {
        return Err(BenchError::scenario(format!(
            "--connections {}: must be in 1..=1000",
            a.connections
        )));
    }
    let size = |flag: &str, v: &str| parse_size(v).map_err(|e| BenchError::flag(flag, e));
    let page_bytes = size("page-size", &a.page_size)?;
    let bulk = size("bulk", &a.bulk)?;
    let memory = size("memory", &a.memory)?;
    let app_memory = size("app-memory", &a.app_memory)?;
    if page_bytes == 0 || bulk < (1 << 20) || app_memory < (4 << 20) {
        return Err(BenchError::scenario(
            "--page-size: above 0; --bulk: at least 1M; --app-memory: at least 4M",
        ));
    }
    let exe = match &a.mount_with {
        Some(p) => p.clone(),
        None => std::env::current_exe().map_err(|e| BenchError::io("current_exe", e))?,
    };
    if !exe.is_file() {
        return Err(BenchError::scenario(format!(
            "--mount-with {}: not a file",
            exe.display()
        )));
    }
    let env = Env {
        exe,
        backing: root.join("backing"),
        mnt: root.join("mnt"),
        work: root.join("work"),
        parts: Vec::new(),
        page_bytes,
        memory,
        app_memory,
    };
    for d in [&env.backing, &env.mnt, &env.work] {
        std::fs::create_dir_all(d).map_err(|e| BenchError::io(format!("{}", d.display()), e))?;
    }
    Ok((env, bulk))
}

fn ratio(x: Option<&WebRun>, y: Option<&WebRun>, f: fn(&WebRun) -> f64) -> Option<f64> {
    Some(f(x?) / f(y?))
}

pub fn run(a: WebBenchArgs) -> Result<(), BenchError> {
    need("nginx", "nginx")?;
    need("wrk", "wrk")?;
    need("tar", "tar")?;
    let kinds = Kind::parse_list(&a.configs)?;
    let root = a.dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("tiercache-bench-web-{}", std::process::id()))
    });
    let (mut env, bulk) = prepare(&a, &root)?;
    let extra = usize::from(a.backup_streams > 1 && kinds.contains(&Kind::Tiercache));
    let bar = progress::steps((1 + kinds.len() + extra) as u64, a.json);
    progress::step(
        &bar,
        format!("writing {} pages and a {} MiB tree", a.pages, bulk >> 20),
    );
    env.parts = write_tree(&env.backing, a.pages, env.page_bytes, bulk)?;
    // The tree on disk before measuring: its write-back would otherwise run during the runs.
    crate::bench::sync_file_systems();
    progress::done(&bar);
    let before = loadavg();
    let mut runs: Vec<(Kind, WebRun)> = Vec::new();
    for &k in &kinds {
        progress::step(
            &bar,
            format!("{} ({} backup streams)", k.name(), a.backup_streams),
        );
        runs.push((k, run_config(&a, &env, k, a.backup_streams)?));
        progress::done(&bar);
    }
    let one = if extra == 1 {
        progress::step(&bar, "tiercache with one backup stream");
        let r = run_config(&a, &env, Kind::Tiercache, 1)?;
        progress::done(&bar);
        Some(r)
    } else {
        None
    };
    progress::finish(bar);
    let after = loadavg();
    if a.dir.is_none() {
        let _ = std::fs::remove_dir_all(&root);
    }
    let get = |k: Kind| runs.iter().find(|(x, _)| *x == k).map(|(_, r)| *r);
    let (pc, tc) = (get(Kind::PageCache), get(Kind::Tiercache));
    let r = WebBench {
        backup_streams: a.backup_streams,
        seconds: a.seconds,
        connections: a.connections,
        pages: a.pages,
        page_bytes: env.page_bytes,
        bulk_bytes: bulk,
        memory_bytes: env.memory,
        app_memory_bytes: env.app_memory,
        device_model: "hdd",
        mount_args: a.mount_arg.clone(),
        page_cache: pc,
        tiercache: tc,
        tiercache_lru: get(Kind::TiercacheLru),
        warm_rps_vs_page_cache: ratio(tc.as_ref(), pc.as_ref(), |r| r.warm_rps),
        load_p99_vs_page_cache: ratio(tc.as_ref(), pc.as_ref(), |r| r.load_p99_ms),
        tiercache_one_stream: one,
        load_p99_vs_one_stream: ratio(tc.as_ref(), one.as_ref(), |r| r.load_p99_ms),
        load_rps_vs_one_stream: ratio(tc.as_ref(), one.as_ref(), |r| r.load_rps),
        loadavg_before: before,
        loadavg_after: after,
    };
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&r).map_err(|e| BenchError::json("report", e))?
        );
    } else {
        print_text(&r);
    }
    Ok(())
}

fn print_text(r: &WebBench) {
    println!(
        "nginx (1 worker, sendfile off): {} pages of {} KiB in a priority directory; wrk 1 thread, \
         {} connections, {} s per run; {} backup stream(s) over a {} MiB tree; BACKING behind \
         the HDD device MODEL; {} MiB for caching; load average {:.2} before, {:.2} after",
        r.pages,
        r.page_bytes >> 10,
        r.connections,
        r.seconds,
        r.backup_streams,
        r.bulk_bytes >> 20,
        r.memory_bytes >> 20,
        r.loadavg_before[0],
        r.loadavg_after[0],
    );
    println!(
        "{:<30} {:>11} {:>13} {:>9} {:>9} {:>11}",
        "", "warm req/s", "backup req/s", "avg ms", "p99 ms", "backup MB/s"
    );
    let rows = [
        ("kernel page cache, same RAM", r.page_cache),
        ("tiercache (dirprio)", r.tiercache),
        ("tiercache, one LRU", r.tiercache_lru),
        ("tiercache, one backup stream", r.tiercache_one_stream),
    ];
    for (name, run) in rows {
        if let Some(x) = run {
            println!(
                "{name:<30} {:>11.0} {:>13.0} {:>9.2} {:>9.2} {:>11.1}",
                x.warm_rps, x.load_rps, x.load_avg_ms, x.load_p99_ms, x.backup_mb_per_s
            );
        }
    }
    if let (Some(w), Some(p)) = (r.warm_rps_vs_page_cache, r.load_p99_vs_page_cache) {
        println!("tiercache ÷ page cache: warm req/s {w:.2}, p99 during the backup {p:.3}");
    }
    if let (Some(p), Some(q)) = (r.load_p99_vs_one_stream, r.load_rps_vs_one_stream) {
        println!(
            "tiercache, {} streams ÷ one stream: p99 {p:.2}, req/s {q:.2}",
            r.backup_streams
        );
    }
}
