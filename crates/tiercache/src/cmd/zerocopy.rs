//! `tiercache zerocopy read MOUNTPOINT FILE`: reads a file through the zero-copy client
//! (`tiercache-client`), as a program linking it would — to check a `--zero-copy` mount, and
//! as the client process of the tests and `bench zerocopy`.

use std::io::{Read, Write};
use std::path::PathBuf;

#[derive(clap::Subcommand, Debug)]
pub enum ZeroCopyCommand {
    /// Read FILE (a path on a `--zero-copy` mount) through the zero-copy client and write its
    /// bytes to stdout.
    Read(ReadArgs),
    /// Bench worker (`bench zerocopy`, Fig. 5): bumps one byte of FILE's first block for
    /// SECONDS and prints `COUNT SECONDS`.
    #[command(hide = true)]
    Update(UpdateArgs),
}

#[derive(clap::Args, Debug)]
pub struct UpdateArgs {
    /// zerocopy (one update of a private copy, committed once at the end, then sync) |
    /// zerocopy-each (a committed update per update: one request each) | fuse | native (1-byte
    /// pread + pwrite per update).
    #[arg(long)]
    pub via: String,
    #[arg(long)]
    pub byte: usize,
    #[arg(long)]
    pub seconds: f64,
    pub mountpoint: PathBuf,
    pub file: PathBuf,
}

#[derive(clap::Args, Debug)]
pub struct ReadArgs {
    pub mountpoint: PathBuf,
    pub file: PathBuf,
    /// First byte.
    #[arg(long, default_value_t = 0)]
    pub offset: u64,
    /// Bytes to read [default: to the end of the file].
    #[arg(long)]
    pub len: Option<u64>,
    /// Keep the blocks pinned, print `pinned N` on stderr, and wait until stdin closes.
    #[arg(long)]
    pub hold: bool,
}

pub fn run(cmd: ZeroCopyCommand) -> Result<(), String> {
    match cmd {
        ZeroCopyCommand::Read(a) => read(&a),
        ZeroCopyCommand::Update(a) => update(&a),
    }
}

fn update(a: &UpdateArgs) -> Result<(), String> {
    use std::os::unix::fs::FileExt;
    let limit = std::time::Duration::from_secs_f64(a.seconds);
    let t0 = std::time::Instant::now();
    let mut n = 0u64;
    match a.via.as_str() {
        "zerocopy" => {
            let c = tiercache_client::Client::connect(&a.mountpoint).map_err(|e| e.to_string())?;
            let f = c.open_rw(&a.file).map_err(|e| e.to_string())?;
            let mut b = f.write_block(0).map_err(|e| e.to_string())?;
            let q: &mut u8 = b
                .bytes_mut()
                .get_mut(a.byte)
                .ok_or("--byte is past the block")?;
            while t0.elapsed() < limit {
                for _ in 0..4096 {
                    // Volatile: every update is a real store, as 003's are.
                    let p: *mut u8 = q;
                    // SAFETY: `p` comes from a live `&mut u8` into the update's private copy.
                    unsafe { p.write_volatile(p.read_volatile().wrapping_add(1)) };
                    n += 1;
                }
            }
            b.commit().map_err(|e| e.to_string())?;
            drop(b);
            f.sync(0, 0, false).map_err(|e| e.to_string())?;
        }
        "zerocopy-each" => {
            let c = tiercache_client::Client::connect(&a.mountpoint).map_err(|e| e.to_string())?;
            let f = c.open_rw(&a.file).map_err(|e| e.to_string())?;
            if a.byte >= c.block_size() {
                return Err("--byte is past the block".into());
            }
            while t0.elapsed() < limit {
                for _ in 0..16 {
                    let mut b = f.write_block(0).map_err(|e| e.to_string())?;
                    b[a.byte] = b[a.byte].wrapping_add(1);
                    b.commit().map_err(|e| e.to_string())?;
                    n += 1;
                }
            }
            f.sync(0, 0, false).map_err(|e| e.to_string())?;
        }
        "fuse" | "native" => {
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&a.file)
                .map_err(|e| format!("{}: {e}", a.file.display()))?;
            let off = a.byte as u64;
            let mut one = [0u8; 1];
            while t0.elapsed() < limit {
                for _ in 0..64 {
                    f.read_exact_at(&mut one, off).map_err(|e| e.to_string())?;
                    one[0] = one[0].wrapping_add(1);
                    f.write_all_at(&one, off).map_err(|e| e.to_string())?;
                    n += 1;
                }
            }
            f.sync_all().map_err(|e| e.to_string())?;
        }
        other => return Err(format!("--via: `{other}` is not zerocopy, fuse or native")),
    }
    println!("{n} {}", t0.elapsed().as_secs_f64());
    Ok(())
}

fn read(a: &ReadArgs) -> Result<(), String> {
    let client = tiercache_client::Client::connect(&a.mountpoint).map_err(|e| e.to_string())?;
    let file = client
        .open(&a.file)
        .map_err(|e| format!("{}: {e}", a.file.display()))?;
    let len = a
        .len
        .unwrap_or_else(|| file.size().saturating_sub(a.offset));
    let len = usize::try_from(len).map_err(|_| format!("--len {len} is too large"))?;
    let view = file
        .read_bytes(a.offset, len)
        .map_err(|e| format!("{}: {e}", a.file.display()))?;
    let mut out = std::io::stdout().lock();
    let mut buf = Vec::new();
    for (block, from, n) in view.pieces() {
        buf.resize(n, 0);
        block.copy_range(from, &mut buf);
        out.write_all(&buf).map_err(|e| format!("stdout: {e}"))?;
    }
    out.flush().map_err(|e| format!("stdout: {e}"))?;
    if a.hold {
        eprintln!("pinned {}", client.pinned_slots());
        let mut sink = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut sink);
    }
    drop(view);
    Ok(())
}
