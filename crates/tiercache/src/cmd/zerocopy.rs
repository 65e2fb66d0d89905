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
    }
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
    for chunk in view.chunks() {
        out.write_all(chunk).map_err(|e| format!("stdout: {e}"))?;
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
