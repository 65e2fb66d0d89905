//! The write side of `tiercache bench meta`: `tar x` of a tree of small files (0–9 KB each)
//! onto an empty directory, then `rm -rf` of it, natively, through a tiercache mount (default
//! options) and through bindfs (direct I/O); the BACKING syncs tiercache made during the
//! `tar x`; and the same `tar x` of a smaller tree through tiercache with the HDD device MODEL
//! (`--emulate hdd`), timed until `tar` returns and until BACKING holds everything
//! (`tiercache flush`), with the seeks the model counted. On each target also a program's
//! loop of create + 100-byte write + close (at most [`CREATE_FILES`] files).

use crate::bench::fuse::{start_tiercache, Mounts};
use crate::bench::remote::stats;
use crate::bench::BenchError;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// The memory tier of a default mount (`tiercache mount` without `--memory`).
const DEFAULT_MEMORY: u64 = 256 << 20;
/// Files of the create + write + close loop (fewer when the tree `tar x` writes is smaller).
pub(super) const CREATE_FILES: usize = 20_000;

/// Seconds per target.
#[derive(Serialize, Debug, Clone, Copy, Default)]
pub(super) struct PerTarget {
    pub tiercache: f64,
    pub bindfs: f64,
    pub native: f64,
}

/// The HDD model run.
#[derive(Serialize, Debug, Clone, Copy, Default)]
pub(super) struct HddRun {
    /// Until `tar x` returned.
    pub returned: f64,
    /// Until `tiercache flush` returned after it (BACKING holds everything, synced).
    pub on_backing: f64,
    /// Seeks the model counted from the start of `tar x` to the end of the flush.
    pub seeks: u64,
}

/// What the write side measured.
#[derive(Serialize, Debug, Clone, Default)]
pub(super) struct WriteSide {
    pub untar_files: usize,
    pub untar_secs: PerTarget,
    pub rm_secs: PerTarget,
    /// Syncs of BACKING tiercache made while `tar x` ran.
    pub untar_backing_syncs: u64,
    pub hdd_model_files: usize,
    pub untar_hdd_model_secs: HddRun,
    /// Files of the create + 100-byte write + close loop, and its seconds per target.
    pub create_files: usize,
    pub create_write_close_secs: PerTarget,
    /// What carried tiercache's requests in its `tar x` run (`transport.kind` of `stats`):
    /// `dev_fuse` or `io_uring`.
    pub tiercache_transport: String,
}

/// Runs `cmd`, which must succeed; returns its wall time.
fn timed(cmd: &mut Command) -> Result<f64, BenchError> {
    let what = format!("{cmd:?}");
    let t = Instant::now();
    let out = cmd
        .output()
        .map_err(|e| BenchError::io(what.to_string(), e))?;
    let secs = t.elapsed().as_secs_f64();
    if !out.status.success() {
        return Err(BenchError::scenario(format!(
            "{what} exited with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(secs)
}

/// A tar archive of a fresh tree of `files` files in `dirs` directories.
fn archive(work: &Path, name: &str, dirs: usize, files: usize) -> Result<PathBuf, BenchError> {
    let src = work.join(format!("{name}-src"));
    super::meta::make_tree(&src.join("tree"), dirs, files, 10_000)?;
    let tar = work.join(format!("{name}.tar"));
    timed(
        Command::new("tar")
            .arg("cf")
            .arg(&tar)
            .arg("-C")
            .arg(&src)
            .arg("tree"),
    )?;
    std::fs::remove_dir_all(&src).map_err(|e| BenchError::io(format!("{}", src.display()), e))?;
    Ok(tar)
}

/// `n` × (create with `O_TRUNC`, write 100 bytes, close) in a new directory `dir`, as a
/// program saving many small files does: seconds (the directory is removed afterwards, untimed).
fn create_write_close(dir: &Path, n: usize) -> Result<f64, BenchError> {
    use std::io::Write as _;
    mkdir(dir)?;
    crate::bench::sync_file_systems();
    let data = [b'x'; 100];
    let t = Instant::now();
    for i in 0..n {
        let p = dir.join(format!("f{i}"));
        // Closed on drop, as a program that does not check `close` would (an error there is
        // not looked at: a failed create or write already stops the run).
        std::fs::File::create(&p)
            .and_then(|mut f| f.write_all(&data))
            .map_err(|e| BenchError::io(format!("{}", p.display()), e))?;
    }
    let secs = t.elapsed().as_secs_f64();
    std::fs::remove_dir_all(dir).map_err(|e| BenchError::io(format!("{}", dir.display()), e))?;
    Ok(secs)
}

/// `tar x` of `tar` into `dest`, then `rm -rf` of what it made: (untar, rm) seconds.
fn untar_and_rm(tar: &Path, dest: &Path) -> Result<(f64, f64), BenchError> {
    // Earlier runs' dirty pages do not land on this one.
    crate::bench::sync_file_systems();
    let untar = timed(Command::new("tar").arg("xf").arg(tar).arg("-C").arg(dest))?;
    let rm = timed(Command::new("rm").arg("-rf").arg(dest.join("tree")))?;
    Ok((untar, rm))
}

fn counter(v: &serde_json::Value, a: &str, b: &str) -> u64 {
    v[a][b].as_u64().unwrap_or(0)
}

fn mkdir(d: &Path) -> Result<(), BenchError> {
    std::fs::create_dir_all(d).map_err(|e| BenchError::io(format!("{}", d.display()), e))
}

/// Runs the write side in `work` (which must not be on a FUSE mount).
pub(super) fn run(
    work: &Path,
    mount_args: &[&str],
    dirs: usize,
    files: usize,
    hdd_files: usize,
    step: &dyn Fn(String),
) -> Result<WriteSide, BenchError> {
    let mut r = WriteSide {
        untar_files: files,
        hdd_model_files: hdd_files,
        create_files: files.min(CREATE_FILES),
        ..WriteSide::default()
    };
    let n = r.create_files;
    step(format!(
        "archiving {files} files (0-9 KB) in {dirs} directories"
    ));
    let tar = archive(work, "untar", dirs, files)?;

    step("tar x and rm -rf natively".into());
    let native = work.join("native");
    mkdir(&native)?;
    (r.untar_secs.native, r.rm_secs.native) = untar_and_rm(&tar, &native)?;
    r.create_write_close_secs.native = create_write_close(&native.join("cwc"), n)?;

    step("tar x and rm -rf through tiercache".into());
    let (backing, mp) = (work.join("backing-tc"), work.join("mnt-tc"));
    mkdir(&backing)?;
    mkdir(&mp)?;
    let mut mounts = Mounts {
        daemons: Vec::new(),
        bindfs: Vec::new(),
    };
    mounts.daemons.push((
        start_tiercache(&backing, &mp, DEFAULT_MEMORY, mount_args)?,
        mp.clone(),
    ));
    let v = stats(&mp)?;
    let before = counter(&v, "backing", "syncs");
    r.tiercache_transport = v["transport"]["kind"].as_str().unwrap_or("?").to_owned();
    crate::bench::sync_file_systems();
    r.untar_secs.tiercache = timed(Command::new("tar").arg("xf").arg(&tar).arg("-C").arg(&mp))?;
    r.untar_backing_syncs = counter(&stats(&mp)?, "backing", "syncs").saturating_sub(before);
    r.rm_secs.tiercache = timed(Command::new("rm").arg("-rf").arg(mp.join("tree")))?;
    r.create_write_close_secs.tiercache = create_write_close(&mp.join("cwc"), n)?;
    drop(mounts);

    step("tar x and rm -rf through bindfs".into());
    let (backing, mp) = (work.join("backing-bind"), work.join("mnt-bind"));
    mkdir(&backing)?;
    mkdir(&mp)?;
    let mut mounts = Mounts {
        daemons: Vec::new(),
        bindfs: Vec::new(),
    };
    mounts.start_bindfs(&backing, &mp)?;
    (r.untar_secs.bindfs, r.rm_secs.bindfs) = untar_and_rm(&tar, &mp)?;
    r.create_write_close_secs.bindfs = create_write_close(&mp.join("cwc"), n)?;
    drop(mounts);
    std::fs::remove_file(&tar).map_err(|e| BenchError::io(format!("{}", tar.display()), e))?;

    if hdd_files > 0 {
        step(format!(
            "tar x of {hdd_files} files through tiercache, HDD model"
        ));
        r.untar_hdd_model_secs = hdd_run(work, mount_args, dirs.min(hdd_files), hdd_files)?;
    }
    Ok(r)
}

/// `tar x` through a fresh mount with `--emulate hdd`, then `tiercache flush`.
fn hdd_run(
    work: &Path,
    mount_args: &[&str],
    dirs: usize,
    files: usize,
) -> Result<HddRun, BenchError> {
    let tar = archive(work, "hdd", dirs, files)?;
    let (backing, mp) = (work.join("backing-hdd"), work.join("mnt-hdd"));
    mkdir(&backing)?;
    mkdir(&mp)?;
    let mut mounts = Mounts {
        daemons: Vec::new(),
        bindfs: Vec::new(),
    };
    let args = [mount_args, &["--emulate", "hdd"]].concat();
    let child = start_tiercache(&backing, &mp, DEFAULT_MEMORY, &args)?;
    mounts.daemons.push((child, mp.clone()));
    let before = counter(&stats(&mp)?, "device_model", "seeks");
    crate::bench::sync_file_systems();
    let t = Instant::now();
    timed(Command::new("tar").arg("xf").arg(&tar).arg("-C").arg(&mp))?;
    let returned = t.elapsed().as_secs_f64();
    let exe = std::env::current_exe().map_err(|e| BenchError::io("current_exe", e))?;
    timed(Command::new(exe).arg("flush").arg(&mp))?;
    let on_backing = t.elapsed().as_secs_f64();
    let seeks = counter(&stats(&mp)?, "device_model", "seeks").saturating_sub(before);
    drop(mounts);
    std::fs::remove_file(&tar).map_err(|e| BenchError::io(format!("{}", tar.display()), e))?;
    Ok(HddRun {
        returned,
        on_backing,
        seeks,
    })
}

/// The write side as a table.
pub(super) fn print(w: &WriteSide) {
    println!(
        "tar x and rm -rf of {} files (0-9 KB each), seconds (tiercache over {}):",
        w.untar_files, w.tiercache_transport
    );
    println!("{:<12} {:>10} {:>10}", "", "tar x", "rm -rf");
    for (name, u, r) in [
        ("tiercache", w.untar_secs.tiercache, w.rm_secs.tiercache),
        ("bindfs", w.untar_secs.bindfs, w.rm_secs.bindfs),
        ("native", w.untar_secs.native, w.rm_secs.native),
    ] {
        println!("{name:<12} {u:>10.3} {r:>10.3}");
    }
    println!(
        "tiercache tar x / bindfs: {:.2}x, / native: {:.2}x; BACKING syncs during it: {}",
        w.untar_secs.tiercache / w.untar_secs.bindfs,
        w.untar_secs.tiercache / w.untar_secs.native,
        w.untar_backing_syncs
    );
    let c = w.create_write_close_secs;
    println!(
        "create + 100 B write + close x {}: tiercache {:.3} s, bindfs {:.3} s, native {:.3} s \
         (tiercache / bindfs: {:.2}x)",
        w.create_files,
        c.tiercache,
        c.bindfs,
        c.native,
        c.tiercache / c.bindfs
    );
    if w.hdd_model_files > 0 {
        let h = w.untar_hdd_model_secs;
        println!(
            "HDD model, tar x of {} files: returned in {:.2} s, on BACKING after {:.2} s, {} seeks",
            w.hdd_model_files, h.returned, h.on_backing, h.seeks
        );
    }
}
