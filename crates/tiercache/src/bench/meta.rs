//! `tiercache bench meta`: metadata speed. One tree of small files is walked (every entry
//! listed and stat'ed, as `find -size` does) natively, through a tiercache mount and through
//! bindfs, each cold (page, dentry and inode caches dropped, a fresh mount) and warm (the
//! median of three walks right after). `--as UID:GID` walks as that caller (its file-system uid
//! and gid, no supplementary groups, on the walking thread only): a root caller skips the
//! mount's per-caller credential switch, so this is how its cost shows. The write side (`tar x`
//! and `rm -rf` of a tree of small files, and `tar x` with the HDD model) is in
//! `meta_write`; `--side` picks what runs.

use crate::bench::fuse::{need, start_tiercache, Mounts};
use crate::bench::BenchError;
use crate::cmd::progress;
use clap::Args;
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(Args, Debug)]
pub struct MetaBenchArgs {
    /// Files in the tree.
    #[arg(long, default_value_t = 200_000)]
    pub files: usize,
    /// Directories they are spread over.
    #[arg(long, default_value_t = 2_000)]
    pub dirs: usize,
    /// Work directory (default: a new directory under /tmp). Must not be on a FUSE mount.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Walk as this caller (`UID:GID`, no supplementary groups) instead of root.
    #[arg(long = "as", value_name = "UID:GID", value_parser = parse_caller)]
    pub caller: Option<(u32, u32)>,
    /// What to measure: `read` (the walks), `write` (`tar x`, `rm -rf`) or `both`.
    #[arg(long, value_enum, default_value_t = Side::Both)]
    pub side: Side,
    /// Files in the tree `tar x` writes.
    #[arg(long, default_value_t = 50_000)]
    pub write_files: usize,
    /// Directories they are spread over.
    #[arg(long, default_value_t = 100)]
    pub write_dirs: usize,
    /// Files in the tree `tar x` writes through the HDD model (0: skip that run).
    #[arg(long, default_value_t = 5_000)]
    pub hdd_files: usize,
    /// How requests reach the tiercache mounts (`tiercache mount --transport`): dev-fuse,
    /// io-uring (needs the kernel's `enable_uring` switch) or auto.
    #[arg(long, value_name = "HOW", default_value = "dev-fuse", value_parser = parse_transport)]
    pub transport: tiercache_fuse::Transport,
}

pub(crate) fn parse_transport(s: &str) -> Result<tiercache_fuse::Transport, BenchError> {
    s.parse()
        .map_err(|e: tiercache_fuse::BadTransport| BenchError::flag("transport", e))
}

/// Which side of the benchmark runs.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Read,
    Write,
    Both,
}

/// `UID:GID`, both numeric.
fn parse_caller(s: &str) -> Result<(u32, u32), BenchError> {
    let bad = || {
        BenchError::flag(
            "as",
            format!("{s:?}: expected UID:GID, two numbers (e.g. 65534:65534)"),
        )
    };
    let (u, g) = s.split_once(':').ok_or_else(bad)?;
    Ok((u.parse().map_err(|_| bad())?, g.parse().map_err(|_| bad())?))
}

#[derive(Serialize, Debug, Clone, Copy)]
struct Walk {
    cold: f64,
    warm: f64,
}

#[derive(Serialize, Debug)]
struct ReadSide {
    files: usize,
    dirs: usize,
    /// `UID:GID` of `--as`, `None` for root.
    walked_as: Option<String>,
    tiercache_walk_secs: Walk,
    bindfs_walk_secs: Walk,
    native_walk_secs: Walk,
    tiercache_vs_bindfs_warm: f64,
    tiercache_vs_bindfs_cold: f64,
}

#[derive(Serialize, Debug)]
struct MetaBench {
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    read: Option<ReadSide>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    write: Option<crate::bench::meta_write::WriteSide>,
}

/// Lists and stats every entry below `root`; returns how many entries were seen.
fn walk(root: &Path) -> Result<usize, BenchError> {
    let mut n = 0usize;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let rd =
            std::fs::read_dir(&dir).map_err(|e| BenchError::io(format!("{}", dir.display()), e))?;
        for e in rd {
            let e = e.map_err(|e| BenchError::io(format!("{}", dir.display()), e))?;
            let p = e.path();
            let m = std::fs::symlink_metadata(&p)
                .map_err(|e| BenchError::io(format!("{}", p.display()), e))?;
            n += 1;
            if m.is_dir() {
                stack.push(p);
            }
        }
    }
    Ok(n)
}

/// Sets this thread's supplementary groups (none), fsgid and fsuid with the raw system calls,
/// which change the calling thread only; each is read back.
fn act_as(uid: u32, gid: u32) -> Result<(), BenchError> {
    // SAFETY: setgroups with a count of 0 reads no memory; the raw call changes only this
    // thread's credentials.
    if unsafe {
        libc::syscall(
            libc::SYS_setgroups,
            0 as libc::c_long,
            std::ptr::null::<u32>(),
        )
    } != 0
    {
        return Err(BenchError::scenario(format!(
            "--as: setgroups: {}",
            std::io::Error::last_os_error()
        )));
    }
    for (call, id, what) in [
        (libc::SYS_setfsgid, gid, "gid"),
        (libc::SYS_setfsuid, uid, "uid"),
    ] {
        // SAFETY: setfsuid/setfsgid take an integer and change only this thread; -1 changes
        // nothing and returns the current value.
        let now = unsafe {
            libc::syscall(call, libc::c_long::from(id));
            libc::syscall(call, -1 as libc::c_long)
        };
        if now != libc::c_long::from(id) {
            return Err(BenchError::scenario(format!(
                "--as: cannot switch to file-system {what} {id} (needs root)"
            )));
        }
    }
    Ok(())
}

fn timed_walk(root: &Path, want: usize, caller: Option<(u32, u32)>) -> Result<f64, BenchError> {
    let t = Instant::now();
    let n = match caller {
        None => walk(root)?,
        Some((uid, gid)) => std::thread::scope(|s| {
            s.spawn(|| act_as(uid, gid).and_then(|()| walk(root)))
                .join()
                .unwrap_or_else(|_| Err(BenchError::scenario("the walking thread panicked")))
        })?,
    };
    let secs = t.elapsed().as_secs_f64();
    if n != want {
        return Err(BenchError::scenario(format!(
            "{}: walked {n} entries, expected {want} (an incomplete listing)",
            root.display()
        )));
    }
    Ok(secs)
}

/// Drops the page, dentry and inode caches (root only).
fn drop_caches() -> Result<(), BenchError> {
    crate::bench::sync_file_systems();
    std::fs::write("/proc/sys/vm/drop_caches", b"3")
        .map_err(|e| BenchError::io("/proc/sys/vm/drop_caches (the benchmark needs root)", e))
}

fn cold_and_warm(root: &Path, want: usize, caller: Option<(u32, u32)>) -> Result<Walk, BenchError> {
    drop_caches()?;
    let cold = timed_walk(root, want, caller)?;
    let mut warm = [0.0f64; 3];
    for w in &mut warm {
        *w = timed_walk(root, want, caller)?;
    }
    warm.sort_by(f64::total_cmp);
    Ok(Walk {
        cold,
        warm: warm[1],
    })
}

/// Writes `files` files of 0 to `max_len` bytes, spread over `dirs` directories `dNNNNN` under
/// `root` (`bench meta` walks such a tree, `bench meta`'s write side archives one).
pub(super) fn make_tree(
    root: &Path,
    dirs: usize,
    files: usize,
    max_len: usize,
) -> Result<(), BenchError> {
    let io = |p: &Path, e: std::io::Error| BenchError::io(p.display().to_string(), e);
    let buf = vec![0x5au8; max_len];
    for d in 0..dirs {
        let dir = root.join(format!("d{d:05}"));
        std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
        for f in (d..files).step_by(dirs) {
            let p = dir.join(format!("f{f:07}"));
            let mut file = std::fs::File::create(&p).map_err(|e| io(&p, e))?;
            file.write_all(&buf[..(f * 7919) % buf.len()])
                .map_err(|e| io(&p, e))?;
        }
    }
    Ok(())
}

pub fn run(a: MetaBenchArgs) -> Result<(), BenchError> {
    need("bindfs", "bindfs")?;
    if a.dirs == 0 || a.files < a.dirs {
        return Err(BenchError::scenario(
            "--dirs must be positive and at most --files",
        ));
    }
    if a.write_dirs == 0 || a.write_files < a.write_dirs {
        return Err(BenchError::scenario(
            "--write-dirs must be positive and at most --write-files",
        ));
    }
    need("tar", "tar")?;
    let root = a.dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("tiercache-bench-meta-{}", std::process::id()))
    });
    let read = match a.side {
        Side::Write => None,
        Side::Read | Side::Both => Some(read_side(&a, &root)?),
    };
    let write = match a.side {
        Side::Read => None,
        Side::Write | Side::Both => {
            let work = root.join("write");
            std::fs::create_dir_all(&work)
                .map_err(|e| BenchError::io(format!("{}", work.display()), e))?;
            let bar = progress::steps(5, a.json);
            let step = |what: String| {
                progress::done(&bar);
                progress::step(&bar, what);
            };
            let w = crate::bench::meta_write::run(
                &work,
                &["--transport", a.transport.name()],
                a.write_dirs,
                a.write_files,
                a.hdd_files,
                &step,
            );
            progress::finish(bar);
            Some(w?)
        }
    };
    let _ = std::fs::remove_dir_all(&root);
    let r = MetaBench { read, write };
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&r).map_err(|e| BenchError::json("report", e))?
        );
        return Ok(());
    }
    if let Some(r) = &r.read {
        print_read(r);
    }
    if let Some(w) = &r.write {
        crate::bench::meta_write::print(w);
    }
    Ok(())
}

/// Walks the tree natively, through tiercache and through bindfs.
fn read_side(a: &MetaBenchArgs, root: &Path) -> Result<ReadSide, BenchError> {
    let (backing, mp_tc, mp_bind) = (
        root.join("backing"),
        root.join("tiercache"),
        root.join("bindfs"),
    );
    for d in [&mp_tc, &mp_bind] {
        std::fs::create_dir_all(d).map_err(|e| BenchError::io(format!("{}", d.display()), e))?;
    }
    let bar = progress::steps(4, a.json);
    progress::step(
        &bar,
        format!("writing {} files in {} directories", a.files, a.dirs),
    );
    make_tree(&backing, a.dirs, a.files, 4000)?;
    let want = a.files + a.dirs;
    progress::done(&bar);
    progress::step(&bar, "walking the backing directory");
    let native = cold_and_warm(&backing, want, a.caller)?;
    progress::done(&bar);
    let mut mounts = Mounts {
        daemons: Vec::new(),
        bindfs: Vec::new(),
    };
    progress::step(&bar, "walking through tiercache");
    drop_caches()?;
    // Another caller than the mount's owner is served only with --allow-other.
    let extra: &[&str] = if a.caller.is_some() {
        &["--allow-other"]
    } else {
        &[]
    };
    let extra = [extra, &["--transport", a.transport.name()]].concat();
    let tc = start_tiercache(&backing, &mp_tc, 64 << 20, &extra)?;
    mounts.daemons.push((tc, mp_tc.clone()));
    let tiercache = cold_and_warm(&mp_tc, want, a.caller)?;
    drop(mounts);
    progress::done(&bar);
    progress::step(&bar, "walking through bindfs");
    let mut mounts = Mounts {
        daemons: Vec::new(),
        bindfs: Vec::new(),
    };
    drop_caches()?;
    mounts.start_bindfs(&backing, &mp_bind)?;
    let bindfs = cold_and_warm(&mp_bind, want, a.caller)?;
    drop(mounts);
    progress::done(&bar);
    progress::finish(bar);
    let _ = std::fs::remove_dir_all(&backing);
    Ok(ReadSide {
        files: a.files,
        dirs: a.dirs,
        walked_as: a.caller.map(|(u, g)| format!("{u}:{g}")),
        tiercache_vs_bindfs_warm: bindfs.warm / tiercache.warm,
        tiercache_vs_bindfs_cold: bindfs.cold / tiercache.cold,
        tiercache_walk_secs: tiercache,
        bindfs_walk_secs: bindfs,
        native_walk_secs: native,
    })
}

fn print_read(r: &ReadSide) {
    println!(
        "walk of {} files in {} directories (list + stat every entry{}), seconds:",
        r.files,
        r.dirs,
        r.walked_as
            .as_deref()
            .map_or(String::new(), |c| format!(", as {c}"))
    );
    println!("{:<12} {:>10} {:>10}", "", "cold", "warm");
    for (name, w) in [
        ("tiercache", r.tiercache_walk_secs),
        ("bindfs", r.bindfs_walk_secs),
        ("native", r.native_walk_secs),
    ] {
        println!("{name:<12} {:>10.3} {:>10.3}", w.cold, w.warm);
    }
    println!(
        "tiercache speed / bindfs: {:.2}x warm, {:.2}x cold",
        r.tiercache_vs_bindfs_warm, r.tiercache_vs_bindfs_cold
    );
}
