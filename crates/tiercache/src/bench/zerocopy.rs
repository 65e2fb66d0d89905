//! `tiercache bench zerocopy`: paper 003's Figs. 2–5 as ratios, side by side in one run on a
//! warm 128 KiB file: the zero-copy client (`tiercache-client`) vs `pread` on the FUSE mount
//! (direct I/O, tiercache's default) vs `pread` on the native directory (page cache warm).
//!
//! What one operation is, on every path: the bytes asked for are in hand and every one of them
//! is read (summed as words), so zero-copy is not credited for data it never touches; the
//! pin-only figure (003's readblock alone) is reported beside it.
//! - Fig. 2: one 4 KiB block at a random block offset;
//! - Fig. 3: n consecutive blocks, n = 1, 2, 4, 8, 16, 32;
//! - Fig. 4: n random bytes at a random offset, n = 1, 16, 256, 4096;
//! - Fig. 5: 1, 2 and 3 processes each updating its own byte of one shared block: zero-copy
//!   through one update (a private copy of the block, its changed byte committed once at the
//!   end, then sync) and, beside it, with a commit per update (one request each, what
//!   visibility after every update costs); the mount and native with a 1-byte `pread` +
//!   `pwrite` per update; at the end every process's byte is checked.
//!
//! Reads of Figs. 2–4 use `BlockRef::as_slice` (`unsafe`: its contract — nobody writes the
//! file meanwhile — holds, nothing writes `f` during them); the sound safe path (atomic word
//! loads, `BlockRef::words`) is measured beside Fig. 2.

use crate::bench::fuse::{start_tiercache, stop_daemon};
use crate::bench::BenchError;
use crate::cmd::progress;
use clap::Args;
use serde::Serialize;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub struct ZeroCopyBenchArgs {
    /// Seconds per measurement.
    #[arg(long, default_value_t = 1.0)]
    pub seconds: f64,
    /// Work directory (default: a new directory under /tmp). Must not be on a FUSE mount.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Bytes of the test file (003's 128 KiB).
const FILE: usize = 128 << 10;
const BLOCK: usize = 4096;

#[derive(Serialize, Debug, Default)]
struct Paths {
    zerocopy: f64,
    fuse: f64,
    native: f64,
    /// Fig. 5 only: a committed update (one request) per update.
    #[serde(skip_serializing_if = "Option::is_none")]
    zerocopy_commit_each: Option<f64>,
}

#[derive(Serialize, Debug)]
struct ZeroCopyBench {
    seconds: f64,
    zerocopy_4k_ops_per_s: f64,
    fuse_pread_4k_ops_per_s: f64,
    native_pread_4k_ops_per_s: f64,
    zerocopy_vs_native_4k: f64,
    zerocopy_vs_fuse_4k: f64,
    /// 003's readblock alone: pin the block, read one word, unpin.
    zerocopy_4k_pin_only_ops_per_s: f64,
    /// Fig. 2 through the safe API (every word read with an atomic load).
    zerocopy_4k_safe_ops_per_s: f64,
    /// Fig. 3: ops/s by n (blocks per read).
    nblock: Vec<(u64, Paths)>,
    /// Fig. 4: ops/s by n (bytes per read).
    nbyte: Vec<(usize, Paths)>,
    /// Fig. 5: updates/s summed over the processes, by number of processes.
    update: Vec<(usize, Paths)>,
    /// Zero-copy misses during the timed runs (0: every read was a hit).
    zerocopy_misses: u64,
}

/// Sums `bytes` as little-endian words (the "read every byte" of one operation).
///
/// Eight running sums, 64 bytes a step, so that the loop is bound by its loads wherever the
/// linker puts it. The obvious loop compiles to two 16-byte loads a step, and on the AMD EPYC
/// these figures come from it ran at half speed whenever its 28 bytes straddled a 64-byte
/// boundary of code (4 KiB summed in 87 ns instead of 47, same for 16 and 128 KiB): which
/// build had it there, not the code under test, decided Fig. 3 (see the README).
#[inline]
fn consume(bytes: &[u8]) -> u64 {
    let word = |w: &[u8]| {
        let mut x = [0u8; 8];
        x.copy_from_slice(w);
        u64::from_le_bytes(x)
    };
    let mut acc = [0u64; 8];
    let mut steps = bytes.chunks_exact(64);
    for step in &mut steps {
        for (a, w) in acc.iter_mut().zip(step.chunks_exact(8)) {
            *a = a.wrapping_add(word(w));
        }
    }
    let mut s = acc.iter().fold(0u64, |s, &a| s.wrapping_add(a));
    let mut words = steps.remainder().chunks_exact(8);
    for w in &mut words {
        s = s.wrapping_add(word(w));
    }
    for &b in words.remainder() {
        s = s.wrapping_add(u64::from(b));
    }
    s
}

/// Runs `op` (given a step counter) for `secs`; returns ops/s. Checks the clock every 64 ops.
fn rate(secs: f64, mut op: impl FnMut(u64) -> Result<u64, BenchError>) -> Result<f64, BenchError> {
    let t0 = Instant::now();
    let limit = Duration::from_secs_f64(secs);
    let (mut n, mut sink) = (0u64, 0u64);
    loop {
        for _ in 0..64 {
            sink = sink.wrapping_add(op(n)?);
            n += 1;
        }
        if t0.elapsed() >= limit {
            break;
        }
    }
    std::hint::black_box(sink);
    Ok(n as f64 / t0.elapsed().as_secs_f64())
}

/// A cheap deterministic sequence of offsets (xorshift).
fn pick(i: u64, modulo: u64) -> u64 {
    let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x2545_F491_4F6C_DD1D;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 29;
    x % modulo
}

fn pread_rate(f: &File, len: usize, secs: f64, random_bytes: bool) -> Result<f64, BenchError> {
    let mut buf = vec![0u8; len];
    rate(secs, |i| {
        let off = if random_bytes {
            pick(i, (FILE - len + 1) as u64)
        } else {
            pick(i, (FILE / BLOCK + 1 - len / BLOCK) as u64) * BLOCK as u64
        };
        let n = f
            .read_at(&mut buf, off)
            .map_err(|e| BenchError::io("pread", e))?;
        Ok(consume(&buf[..n]))
    })
}

pub fn run(a: ZeroCopyBenchArgs) -> Result<(), BenchError> {
    if !(a.seconds > 0.0 && a.seconds <= 600.0) {
        return Err(BenchError::scenario("--seconds: must be in (0, 600]"));
    }
    let root = a.dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("tiercache-bench-zc-{}", std::process::id()))
    });
    let (backing, mp) = (root.join("backing"), root.join("mnt"));
    for d in [&backing, &mp] {
        std::fs::create_dir_all(d).map_err(|e| BenchError::io(format!("{}", d.display()), e))?;
    }
    let bar = progress::steps(6, a.json);
    progress::step(&bar, "mounting tiercache --zero-copy");
    let data: Vec<u8> = (0..FILE).map(|i| (i * 7 + i / 4096) as u8).collect();
    let native = backing.join("f");
    std::fs::write(&native, &data)
        .map_err(|e| BenchError::io(format!("{}", native.display()), e))?;
    // One shared block for the mount's updaters, another for native ones (a file written
    // through the mount is not on BACKING until write-back).
    for name in ["shared", "shared-native"] {
        std::fs::write(backing.join(name), vec![0u8; BLOCK])
            .map_err(|e| BenchError::io(format!("{}", backing.display()), e))?;
    }
    let mut daemon = start_tiercache(&backing, &mp, 64 << 20, &["--zero-copy"])?;
    progress::done(&bar);
    let result = measure(&a, &bar, &backing, &mp, &data);
    stop_daemon(&mut daemon, &mp);
    let _ = std::fs::remove_dir_all(&root);
    let r = result?;
    progress::finish(bar);
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&r).map_err(|e| BenchError::json("report", e))?
        );
    } else {
        print_table(&r);
    }
    Ok(())
}

/// The open paths to the test file: through the mount, on BACKING, and the zero-copy client.
struct Readers<'c> {
    fuse: File,
    native: File,
    zf: tiercache_client::ZcFile<'c>,
}

/// Opens the three paths and reads the file once through each (cache and page cache then hold
/// it), checking every path returns BACKING's bytes.
fn warm_readers<'c>(
    client: &'c tiercache_client::Client,
    backing: &Path,
    mp: &Path,
    data: &[u8],
) -> Result<Readers<'c>, BenchError> {
    let open = |p: &Path| File::open(p).map_err(|e| BenchError::io(format!("{}", p.display()), e));
    let (fuse, native) = (open(&mp.join("f"))?, open(&backing.join("f"))?);
    let mut all = vec![0u8; FILE];
    fuse.read_exact_at(&mut all, 0)
        .map_err(|e| BenchError::io("read through the mount", e))?;
    if all != data {
        return Err(BenchError::scenario(
            "the mount returned other bytes than BACKING holds",
        ));
    }
    native
        .read_exact_at(&mut all, 0)
        .map_err(|e| BenchError::io("read of BACKING", e))?;
    let zf = client
        .open(mp.join("f"))
        .map_err(|e| BenchError::client("open", e))?;
    let whole = zf
        .read_bytes(0, FILE)
        .map_err(|e| BenchError::client("read_bytes", e))?;
    let mut check = vec![0u8; FILE];
    whole.copy_to(&mut check);
    drop(whole);
    if check != data {
        return Err(BenchError::scenario(
            "the zero-copy client read other bytes than BACKING holds",
        ));
    }
    Ok(Readers { fuse, native, zf })
}

const NBLOCKS: u64 = (FILE / BLOCK) as u64;

/// Zero-copy reads of `n` blocks at random block offsets for `secs`; reads/s.
fn zc_rate(zf: &tiercache_client::ZcFile, n: u64, secs: f64) -> Result<f64, BenchError> {
    rate(secs, |i| {
        let first = pick(i, NBLOCKS + 1 - n);
        let blocks = zf
            .read_blocks(first, n)
            .map_err(|e| BenchError::client("read_blocks", e))?;
        // SAFETY: nothing writes `f` while the reads run (as_slice's contract).
        Ok(blocks
            .iter()
            .map(|b| consume(unsafe { b.as_slice() }))
            .fold(0, u64::wrapping_add))
    })
}

/// Fig. 2's figures: (zero-copy, safe words view, pin only, FUSE pread, native pread) 4 KiB
/// reads/s.
fn fig2(r: &Readers<'_>, secs: f64) -> Result<[f64; 5], BenchError> {
    let z4 = zc_rate(&r.zf, 1, secs)?;
    let safe4 = rate(secs, |i| {
        let blocks =
            r.zf.read_blocks(pick(i, NBLOCKS), 1)
                .map_err(|e| BenchError::client("read_blocks", e))?;
        Ok(blocks
            .iter()
            .flat_map(|b| b.words())
            .fold(0, u64::wrapping_add))
    })?;
    let pin_only = rate(secs, |i| {
        let blocks =
            r.zf.read_blocks(pick(i, NBLOCKS), 1)
                .map_err(|e| BenchError::client("read_blocks", e))?;
        Ok(blocks.first().and_then(|b| b.byte(0)).map_or(0, u64::from))
    })?;
    let f4 = pread_rate(&r.fuse, BLOCK, secs, false)?;
    let n4 = pread_rate(&r.native, BLOCK, secs, false)?;
    Ok([z4, safe4, pin_only, f4, n4])
}

/// Fig. 3: n-block reads through each path.
fn fig3(r: &Readers<'_>, secs: f64) -> Result<Vec<(u64, Paths)>, BenchError> {
    let mut nblock = Vec::new();
    for n in [1u64, 2, 4, 8, 16, 32] {
        let len = n as usize * BLOCK;
        nblock.push((
            n,
            Paths {
                zerocopy: zc_rate(&r.zf, n, secs / 2.0)?,
                fuse: pread_rate(&r.fuse, len, secs / 2.0, false)?,
                native: pread_rate(&r.native, len, secs / 2.0, false)?,
                zerocopy_commit_each: None,
            },
        ));
    }
    Ok(nblock)
}

/// Fig. 4: random n-byte reads through each path.
fn fig4(r: &Readers<'_>, secs: f64) -> Result<Vec<(usize, Paths)>, BenchError> {
    let mut nbyte = Vec::new();
    for n in [1usize, 16, 256, 4096] {
        let z = rate(secs / 2.0, |i| {
            let off = pick(i, (FILE - n + 1) as u64);
            let v =
                r.zf.read_bytes(off, n)
                    .map_err(|e| BenchError::client("read_bytes", e))?;
            // SAFETY: nothing writes `f` while the reads run (as_slice's contract).
            Ok(v.pieces()
                .map(|(b, from, n)| consume(&unsafe { b.as_slice() }[from..from + n]))
                .fold(0, u64::wrapping_add))
        })?;
        nbyte.push((
            n,
            Paths {
                zerocopy: z,
                fuse: pread_rate(&r.fuse, n, secs / 2.0, true)?,
                native: pread_rate(&r.native, n, secs / 2.0, true)?,
                zerocopy_commit_each: None,
            },
        ));
    }
    Ok(nbyte)
}

/// Fig. 5: 1–3 processes updating one block, through each path.
fn fig5(backing: &Path, mp: &Path, secs: f64) -> Result<Vec<(usize, Paths)>, BenchError> {
    let mut update = Vec::new();
    for procs in 1..=3usize {
        let mut p = Paths::default();
        for (via, path, slot) in [
            ("zerocopy", mp.join("shared"), &mut p.zerocopy),
            ("fuse", mp.join("shared"), &mut p.fuse),
            ("native", backing.join("shared-native"), &mut p.native),
        ] {
            *slot = updaters(mp, &path, via, procs, secs)?;
        }
        p.zerocopy_commit_each = Some(updaters(
            mp,
            &mp.join("shared"),
            "zerocopy-each",
            procs,
            secs,
        )?);
        update.push((procs, p));
    }
    Ok(update)
}

fn measure(
    a: &ZeroCopyBenchArgs,
    bar: &Option<indicatif::ProgressBar>,
    backing: &Path,
    mp: &Path,
    data: &[u8],
) -> Result<ZeroCopyBench, BenchError> {
    let secs = a.seconds;
    let client =
        tiercache_client::Client::connect(mp).map_err(|e| BenchError::client("connect", e))?;
    let r = warm_readers(&client, backing, mp, data)?;
    let misses = || {
        client
            .stats
            .misses
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let misses0 = misses();
    progress::step(bar, "Fig. 2: 4 KiB block reads");
    let [z4, safe4, pin_only, f4, n4] = fig2(&r, secs)?;
    progress::done(bar);
    progress::step(bar, "Fig. 3: n-block reads");
    let nblock = fig3(&r, secs)?;
    progress::done(bar);
    progress::step(bar, "Fig. 4: random n-byte reads");
    let nbyte = fig4(&r, secs)?;
    progress::done(bar);
    let zerocopy_misses = misses() - misses0;
    drop(r);
    drop(client);
    progress::step(bar, "Fig. 5: processes updating one block");
    let update = fig5(backing, mp, secs)?;
    progress::done(bar);
    Ok(ZeroCopyBench {
        seconds: secs,
        zerocopy_4k_ops_per_s: z4,
        fuse_pread_4k_ops_per_s: f4,
        native_pread_4k_ops_per_s: n4,
        zerocopy_vs_native_4k: z4 / n4,
        zerocopy_vs_fuse_4k: z4 / f4,
        zerocopy_4k_pin_only_ops_per_s: pin_only,
        zerocopy_4k_safe_ops_per_s: safe4,
        nblock,
        nbyte,
        update,
        zerocopy_misses,
    })
}

/// Runs `procs` processes (`tiercache zerocopy update`) each bumping its own byte of `file`
/// for `secs`; checks that every byte ends at its process's count (mod 256); updates/s summed.
fn updaters(mp: &Path, file: &Path, via: &str, procs: usize, secs: f64) -> Result<f64, BenchError> {
    let exe = std::env::current_exe().map_err(|e| BenchError::io("current_exe", e))?;
    let children: Vec<_> = (0..procs)
        .map(|i| {
            Command::new(&exe)
                .args(["zerocopy", "update", "--via", via, "--byte"])
                .arg((i * 64).to_string())
                .arg("--seconds")
                .arg(secs.to_string())
                .arg(mp)
                .arg(file)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| BenchError::io("cannot start an updater", e))
        })
        .collect::<Result<_, _>>()?;
    let mut total = 0.0;
    let mut counts = Vec::new();
    for c in children {
        let out = c
            .wait_with_output()
            .map_err(|e| BenchError::io("updater", e))?;
        if !out.status.success() {
            return Err(BenchError::scenario(format!(
                "updater ({via}): {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let mut it = text.split_whitespace();
        let n: u64 = it
            .next()
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| BenchError::tool("updater: no count"))?;
        let secs: f64 = it
            .next()
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| BenchError::tool("updater: no time"))?;
        total += n as f64 / secs;
        counts.push(n);
    }
    // Everyone's bytes are there (each process saw the others' updates land, not undone).
    let mut got = [0u8; BLOCK];
    File::open(file)
        .and_then(|f| f.read_exact_at(&mut got, 0))
        .map_err(|e| BenchError::io(format!("{}", file.display()), e))?;
    for (i, n) in counts.iter().enumerate() {
        if got[i * 64] != (*n % 256) as u8 {
            return Err(BenchError::scenario(format!(
                "{via}: byte {} is {}, its process made {n} updates",
                i * 64,
                got[i * 64]
            )));
        }
    }
    // Start the next run from zeros.
    std::fs::write(file, [0u8; BLOCK])
        .map_err(|e| BenchError::io(file.display().to_string(), e))?;
    Ok(total)
}

fn print_table(r: &ZeroCopyBench) {
    println!("zero-copy client vs pread on the FUSE mount vs pread on native (page cache warm)");
    println!(
        "Fig. 2, 4 KiB block read:  zero-copy {:>10.0} ops/s  fuse {:>9.0}  native {:>9.0}   zero-copy/native {:.2}x  zero-copy/fuse {:.1}x",
        r.zerocopy_4k_ops_per_s,
        r.fuse_pread_4k_ops_per_s,
        r.native_pread_4k_ops_per_s,
        r.zerocopy_vs_native_4k,
        r.zerocopy_vs_fuse_4k
    );
    println!(
        "  (pin only, 003's readblock: {:.0} ops/s; the safe API's atomic word reads: {:.0} ops/s)",
        r.zerocopy_4k_pin_only_ops_per_s, r.zerocopy_4k_safe_ops_per_s
    );
    println!("Fig. 3, n-block reads (ops/s):");
    for (n, p) in &r.nblock {
        println!(
            "  n={n:>2}  zero-copy {:>10.0}  fuse {:>9.0}  native {:>9.0}",
            p.zerocopy, p.fuse, p.native
        );
    }
    println!("Fig. 4, random n-byte reads (ops/s):");
    for (n, p) in &r.nbyte {
        println!(
            "  n={n:>4}  zero-copy {:>10.0}  fuse {:>9.0}  native {:>9.0}",
            p.zerocopy, p.fuse, p.native
        );
    }
    println!("Fig. 5, processes updating their own byte of one block (updates/s, summed):");
    for (k, p) in &r.update {
        println!(
            "  {k} proc  zero-copy {:>12.0}  commit each {:>9.0}  fuse {:>9.0}  native {:>9.0}",
            p.zerocopy,
            p.zerocopy_commit_each.unwrap_or(0.0),
            p.fuse,
            p.native
        );
    }
    println!(
        "zero-copy misses during the timed runs: {}",
        r.zerocopy_misses
    );
}

#[cfg(test)]
mod tests {
    use super::consume;

    #[test]
    fn consume_sums_every_word_and_the_bytes_after_the_last() {
        // The plain sum of little-endian words plus trailing bytes, for lengths around the
        // 64-byte step and the 8-byte word.
        let data: Vec<u8> = (0..4096 + 64 + 13)
            .map(|i: usize| (i * 151 + 7) as u8)
            .collect();
        for len in [
            0,
            1,
            7,
            8,
            9,
            63,
            64,
            65,
            127,
            128,
            200,
            4095,
            4096,
            4096 + 77,
        ] {
            let bytes = &data[..len];
            let mut want = 0u64;
            for w in bytes.chunks(8) {
                want = want.wrapping_add(match <[u8; 8]>::try_from(w) {
                    Ok(w) => u64::from_le_bytes(w),
                    Err(_) => w.iter().map(|&b| u64::from(b)).sum(),
                });
            }
            assert_eq!(consume(bytes), want, "{len} bytes");
        }
    }
}
