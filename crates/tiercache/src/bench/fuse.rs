//! `tiercache bench fuse`: fio through a tiercache mount vs through bindfs (a plain FUSE
//! pass-through) vs the native directory, in one run, on the same warm file; then cold reads
//! through tiercache with the HDD device MODEL (`--emulate hdd`); then one cold sequential pass
//! over the file through a memory tier a quarter of its size on the real BACKING (no model),
//! with the native cold pass beside it and what the pass left in the page cache.
//!
//! Fairness: tiercache serves every read in user space (FUSE direct I/O, its default), so bindfs
//! runs with `-o direct_io --multithreaded` too; "native" is the backing directory through the
//! kernel page cache, the upper bound. fio: psync engine, one job, queue depth 1.

use super::pages;
use crate::bench::BenchError;
use crate::cmd::mounts::is_mounted;
use crate::cmd::progress;
use clap::Args;
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub struct FuseBenchArgs {
    /// Size of the test file.
    #[arg(long, default_value = "256M")]
    pub file_size: String,
    /// Seconds per fio run.
    #[arg(long, default_value_t = 5)]
    pub runtime: u64,
    /// Work directory (default: a new directory under /tmp). Must not be on a FUSE mount.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// How requests reach the tiercache mounts (`tiercache mount --transport`): dev-fuse,
    /// io-uring (needs the kernel's `enable_uring` switch) or auto.
    #[arg(long, value_name = "HOW", default_value = "dev-fuse", value_parser = crate::bench::meta::parse_transport)]
    pub transport: tiercache_fuse::Transport,
}

#[derive(Serialize, Debug)]
struct FuseBench {
    file_bytes: u64,
    runtime_secs: u64,
    /// `--transport` of the tiercache mounts.
    transport: &'static str,
    tiercache_4k_iops: f64,
    /// The same file in a priority directory: the kernel page cache serves its hits.
    tiercache_priority_4k_iops: f64,
    bindfs_4k_iops: f64,
    native_4k_iops: f64,
    tiercache_1m_mbps: f64,
    bindfs_1m_mbps: f64,
    native_1m_mbps: f64,
    tiercache_vs_bindfs_4k: f64,
    tiercache_vs_bindfs_1m: f64,
    priority_4k_vs_native: f64,
    cold_hdd_model_4k_iops: f64,
    cold_hdd_model_1m_mbps: f64,
    /// Cold 1 MiB sequential pass through a memory tier of a quarter of the file, real BACKING.
    seq_over_memory_mbps: f64,
    /// The same pass on the native file, its page cache dropped first.
    seq_over_memory_native_mbps: f64,
    /// BACKING's file in the page cache after the tiercache pass, MiB.
    seq_over_memory_backing_cached_mib: f64,
}

/// Unmounts and stops whatever the bench started, even on error.
pub(crate) struct Mounts {
    pub(crate) daemons: Vec<(Child, PathBuf)>,
    pub(crate) bindfs: Vec<PathBuf>,
}

impl Mounts {
    /// Mounts BACKING with bindfs (`-o direct_io --multithreaded`, as the benchmarks compare)
    /// and waits until it is mounted; it is unmounted with the others.
    pub(crate) fn start_bindfs(&mut self, backing: &Path, mp: &Path) -> Result<(), BenchError> {
        let st = Command::new("bindfs")
            .args(["-o", "direct_io", "--multithreaded", "--no-allow-other"])
            .arg(backing)
            .arg(mp)
            .status()
            .map_err(|e| BenchError::io("bindfs", e))?;
        if !st.success() {
            return Err(BenchError::scenario(format!("bindfs exited with {st}")));
        }
        self.bindfs.push(mp.to_path_buf());
        wait_mounted(mp, None)
    }
}

impl Drop for Mounts {
    fn drop(&mut self) {
        for (mut child, mp) in self.daemons.drain(..) {
            stop_daemon(&mut child, &mp);
        }
        for mp in self.bindfs.drain(..) {
            let _ = Command::new("fusermount3").arg("-u").arg(&mp).status();
        }
    }
}

pub(crate) fn stop_daemon(child: &mut Child, mp: &Path) {
    // SAFETY: plain kill(2) of our own child.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let _ = child.wait();
    if is_mounted(mp) {
        let _ = Command::new("fusermount3").arg("-uz").arg(mp).status();
    }
}

pub(crate) fn need(tool: &str, package: &str) -> Result<(), BenchError> {
    match Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
    {
        Ok(_) => Ok(()),
        Err(_) => Err(BenchError::scenario(format!(
            "`{tool}` not found: install it (apt-get install -y {package})"
        ))),
    }
}

pub(crate) fn wait_mounted(mp: &Path, child: Option<&mut Child>) -> Result<(), BenchError> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut child = child;
    while Instant::now() < deadline {
        if is_mounted(mp) {
            return Ok(());
        }
        if let Some(c) = child.as_deref_mut() {
            if let Ok(Some(st)) = c.try_wait() {
                return Err(BenchError::scenario(format!(
                    "{}: mount exited with {st}",
                    mp.display()
                )));
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(BenchError::scenario(format!(
        "{}: not mounted after 30 s",
        mp.display()
    )))
}

pub(crate) fn start_tiercache(
    backing: &Path,
    mp: &Path,
    memory: u64,
    extra: &[&str],
) -> Result<Child, BenchError> {
    let exe = std::env::current_exe().map_err(|e| BenchError::io("current_exe", e))?;
    let mut child = Command::new(exe)
        .arg("mount")
        .arg(backing)
        .arg(mp)
        .args(["--memory", &memory.to_string(), "--foreground"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| BenchError::io("cannot start tiercache", e))?;
    wait_mounted(mp, Some(&mut child))?;
    Ok(child)
}

/// Writes `size` bytes of pseudo-random data (xorshift; incompressible) to `path`.
pub(crate) fn write_random_file(path: &Path, size: u64) -> Result<(), BenchError> {
    let mut f = std::io::BufWriter::new(
        std::fs::File::create(path)
            .map_err(|e| BenchError::io(format!("{}", path.display()), e))?,
    );
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ size;
    let mut chunk = vec![0u8; 1 << 20];
    let mut left = size;
    while left > 0 {
        for w in chunk.chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            w.copy_from_slice(&x.to_le_bytes()[..w.len()]);
        }
        let n = left.min(chunk.len() as u64) as usize;
        f.write_all(&chunk[..n])
            .map_err(|e| BenchError::io(path.display().to_string(), e))?;
        left -= n as u64;
    }
    f.flush()
        .map_err(|e| BenchError::io(format!("{}", path.display()), e))
}

/// Runs fio for `runtime` seconds (or, with `runtime` 0, one pass over the file); returns
/// (IOPS, MB/s).
fn fio(file: &Path, rw: &str, bs: &str, runtime: u64) -> Result<(f64, f64), BenchError> {
    let timed: Vec<String> = if runtime > 0 {
        vec![format!("--runtime={runtime}"), "--time_based".into()]
    } else {
        Vec::new()
    };
    let out = Command::new("fio")
        .args([
            "--name=bench",
            "--ioengine=psync",
            "--numjobs=1",
            "--iodepth=1",
            "--direct=0",
        ])
        .arg(format!("--filename={}", file.display()))
        .arg(format!("--rw={rw}"))
        .arg(format!("--bs={bs}"))
        .args(&timed)
        .args(["--output-format=json", "--randrepeat=1", "--invalidate=0"])
        .output()
        .map_err(|e| BenchError::io("fio", e))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(BenchError::scenario(format!(
            "fio on {} failed: {}",
            file.display(),
            err.lines().next().unwrap_or("")
        )));
    }
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).map_err(|e| BenchError::json("fio output", e))?;
    let read = &v["jobs"][0]["read"];
    let iops = read["iops"]
        .as_f64()
        .ok_or_else(|| BenchError::tool("fio output has no read.iops"))?;
    let bw = read["bw_bytes"]
        .as_f64()
        .ok_or_else(|| BenchError::tool("fio output has no read.bw_bytes"))?;
    Ok((iops, bw / 1e6))
}

fn warm(file: &Path) -> Result<(), BenchError> {
    use std::io::Read;
    let mut f =
        std::fs::File::open(file).map_err(|e| BenchError::io(format!("{}", file.display()), e))?;
    let mut buf = vec![0u8; 1 << 20];
    while f
        .read(&mut buf)
        .map_err(|e| BenchError::io(format!("{}", file.display()), e))?
        > 0
    {}
    Ok(())
}

/// One cold sequential pass over `backing/data.bin` through a mount whose memory tier holds a
/// quarter of it (real BACKING, no model), then the same pass natively; both start with the
/// file out of the page cache. Returns (tiercache MB/s, native MB/s, MiB the tiercache pass
/// left cached).
fn seq_over_memory(
    backing: &Path,
    mp: &Path,
    size: u64,
    how: &[&str],
) -> Result<(f64, f64, f64), BenchError> {
    let data = backing.join("data.bin");
    pages::drop_cached(&data)?;
    let child = start_tiercache(backing, mp, (size / 4).max(1 << 20), how)?;
    let mounts = Mounts {
        daemons: vec![(child, mp.to_path_buf())],
        bindfs: Vec::new(),
    };
    let tc = fio(&mp.join("data.bin"), "read", "1m", 0)?.1;
    drop(mounts);
    let left = pages::resident_bytes(&data)? as f64 / (1 << 20) as f64;
    pages::drop_cached(&data)?;
    let native = fio(&data, "read", "1m", 0)?.1;
    Ok((tc, native, left))
}

/// One fio run on a fresh mount with `--emulate hdd`.
fn cold_run(
    backing: &Path,
    mp: &Path,
    memory: u64,
    rw: &str,
    bs: &str,
    runtime: u64,
    how: &[&str],
) -> Result<(f64, f64), BenchError> {
    let args = [how, &["--emulate", "hdd"]].concat();
    let child = start_tiercache(backing, mp, memory, &args)?;
    let _mounts = Mounts {
        daemons: vec![(child, mp.to_path_buf())],
        bindfs: Vec::new(),
    };
    fio(&mp.join("data.bin"), rw, bs, runtime)
}

/// The warm runs through tiercache, bindfs and natively: (4 KiB IOPS per target,
/// 1 MiB MB/s per target, tiercache's priority file 4 KiB IOPS). The mounts go at the end.
fn warm_runs(
    backing: &Path,
    (mp_tc, mp_bind): (&Path, &Path),
    data: &Path,
    memory: u64,
    runtime: u64,
    bar: &Option<indicatif::ProgressBar>,
    how: &[&str],
) -> Result<(Vec<f64>, Vec<f64>, f64), BenchError> {
    let mut mounts = Mounts {
        daemons: Vec::new(),
        bindfs: Vec::new(),
    };
    let args = [how, &["--priority", "hot"]].concat();
    let tc = start_tiercache(backing, mp_tc, memory, &args)?;
    mounts.daemons.push((tc, mp_tc.to_path_buf()));
    mounts.start_bindfs(backing, mp_bind)?;
    let targets = [
        mp_tc.join("data.bin"),
        mp_bind.join("data.bin"),
        data.to_path_buf(),
    ];
    progress::done(bar);
    let names = ["tiercache", "bindfs", "native"];
    for (t, name) in targets.iter().zip(names) {
        progress::step(bar, format!("warming {name}"));
        warm(t)?;
        progress::done(bar);
    }
    let mut r4 = Vec::new();
    let mut r1 = Vec::new();
    for (t, name) in targets.iter().zip(names) {
        progress::step(bar, format!("fio 4 KiB random reads, {name}"));
        r4.push(fio(t, "randread", "4k", runtime)?.0);
        progress::done(bar);
        progress::step(bar, format!("fio 1 MiB sequential reads, {name}"));
        r1.push(fio(t, "read", "1m", runtime)?.1);
        progress::done(bar);
    }
    progress::step(bar, "fio 4 KiB random reads, tiercache priority file");
    let hot_file = mp_tc.join("hot/data.bin");
    warm(&hot_file)?;
    let priority4 = fio(&hot_file, "randread", "4k", runtime)?.0;
    progress::done(bar);
    drop(mounts);
    Ok((r4, r1, priority4))
}

pub fn run(a: FuseBenchArgs) -> Result<(), BenchError> {
    need("fio", "fio")?;
    need("bindfs", "bindfs")?;
    let size = crate::live::size::parse_size(&a.file_size)
        .map_err(|e| BenchError::flag("file-size", e))?;
    if size < (4 << 20) {
        return Err(BenchError::scenario("--file-size: at least 4M"));
    }
    if a.runtime == 0 {
        return Err(BenchError::scenario("--runtime: at least 1 second"));
    }
    let how = ["--transport", a.transport.name()];
    let root = a.dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("tiercache-bench-{}", std::process::id()))
    });
    let (backing, mp_tc, mp_bind) = (
        root.join("backing"),
        root.join("tiercache"),
        root.join("bindfs"),
    );
    for d in [&backing, &mp_tc, &mp_bind] {
        std::fs::create_dir_all(d).map_err(|e| BenchError::io(format!("{}", d.display()), e))?;
    }
    // Steps: write the files, mount, warm 3 targets, 6 fio runs, the priority file, 2 cold
    // runs, 1 pass larger than memory.
    let bar = progress::steps(15, a.json);
    progress::step(&bar, format!("writing a {} MiB test file", size >> 20));
    let data = backing.join("data.bin");
    write_random_file(&data, size)?;
    // A copy (not a link: the path decides the class) in a priority directory.
    let hot = backing.join("hot");
    std::fs::create_dir_all(&hot).map_err(|e| BenchError::io(format!("{}", hot.display()), e))?;
    std::fs::copy(&data, hot.join("data.bin"))
        .map_err(|e| BenchError::io(format!("{}", hot.display()), e))?;
    progress::done(&bar);
    progress::step(&bar, "mounting tiercache and bindfs");
    // Memory holds both files plus room: the warm runs measure hits.
    let memory = 2 * size + size / 4 + (16 << 20);
    let (r4, r1, priority4) = warm_runs(
        &backing,
        (&mp_tc, &mp_bind),
        &data,
        memory,
        a.runtime,
        &bar,
        &how,
    )?;
    // Cold: each run on a fresh tiercache mount behind the HDD device MODEL; the sequential run
    // makes one pass, since a timed run would wrap around and re-read what it just cached.
    progress::step(&bar, "cold 4 KiB random reads, HDD model");
    let cold4 = cold_run(&backing, &mp_tc, memory, "randread", "4k", a.runtime, &how)?.0;
    progress::done(&bar);
    progress::step(&bar, "cold 1 MiB sequential pass, HDD model");
    let cold1 = cold_run(&backing, &mp_tc, memory, "read", "1m", 0, &how)?.1;
    progress::done(&bar);
    progress::step(
        &bar,
        "cold sequential pass, memory a quarter of the file, no model",
    );
    let (over, over_native, over_left) = seq_over_memory(&backing, &mp_tc, size, &how)?;
    progress::finish(bar);
    if a.dir.is_none() {
        let _ = std::fs::remove_dir_all(&root);
    }
    let r = FuseBench {
        file_bytes: size,
        runtime_secs: a.runtime,
        transport: a.transport.name(),
        tiercache_4k_iops: r4[0],
        tiercache_priority_4k_iops: priority4,
        bindfs_4k_iops: r4[1],
        native_4k_iops: r4[2],
        tiercache_1m_mbps: r1[0],
        bindfs_1m_mbps: r1[1],
        native_1m_mbps: r1[2],
        tiercache_vs_bindfs_4k: r4[0] / r4[1],
        tiercache_vs_bindfs_1m: r1[0] / r1[1],
        priority_4k_vs_native: priority4 / r4[2],
        cold_hdd_model_4k_iops: cold4,
        cold_hdd_model_1m_mbps: cold1,
        seq_over_memory_mbps: over,
        seq_over_memory_native_mbps: over_native,
        seq_over_memory_backing_cached_mib: over_left,
    };
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&r).map_err(|e| BenchError::json("report", e))?
        );
    } else {
        print_table(&r, size, a.runtime);
    }
    Ok(())
}

/// The human-readable form of `r`.
fn print_table(r: &FuseBench, size: u64, runtime: u64) {
    println!(
        "warm reads of a {} MiB file, fio psync, 1 job, {} s per run",
        size >> 20,
        runtime
    );
    println!("{:<28} {:>12} {:>12}", "", "4 KiB IOPS", "1 MiB MB/s");
    println!(
        "{:<28} {:>12.0} {:>12.0}",
        "tiercache (direct I/O)", r.tiercache_4k_iops, r.tiercache_1m_mbps
    );
    println!(
        "{:<28} {:>12.0} {:>12}",
        "tiercache priority file", r.tiercache_priority_4k_iops, "-"
    );
    println!(
        "{:<28} {:>12.0} {:>12.0}",
        "bindfs -o direct_io", r.bindfs_4k_iops, r.bindfs_1m_mbps
    );
    println!(
        "{:<28} {:>12.0} {:>12.0}",
        "native (page cache)", r.native_4k_iops, r.native_1m_mbps
    );
    println!(
        "{:<28} {:>12.2} {:>12.2}",
        "tiercache / bindfs", r.tiercache_vs_bindfs_4k, r.tiercache_vs_bindfs_1m
    );
    println!(
        "{:<28} {:>12.2} {:>12}",
        "priority file / native", r.priority_4k_vs_native, "-"
    );
    println!(
        "{:<28} {:>12.0} {:>12.0}",
        "cold, HDD device MODEL", r.cold_hdd_model_4k_iops, r.cold_hdd_model_1m_mbps
    );
    println!(
        "cold 1 MiB pass, memory tier {} MiB (a quarter of the file), real BACKING: \
         tiercache {:.0} MB/s, native {:.0} MB/s; BACKING's file left {:.1} MiB in the page cache",
        (size / 4) >> 20,
        r.seq_over_memory_mbps,
        r.seq_over_memory_native_mbps,
        r.seq_over_memory_backing_cached_mib
    );
}
