//! Writes a file of a `--zero-copy` tiercache mount to stdout, read in place from the cache's
//! memory: `cargo run -p tiercache-client --example cat -- MOUNTPOINT FILE`.

use std::io::Write;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(mount), Some(file)) = (args.next(), args.next()) else {
        return Err("usage: cat MOUNTPOINT FILE".into());
    };
    let client = tiercache_client::Client::connect(&mount)?;
    let f = client.open(&file)?;
    let bs = client.block_size() as u64;
    let mut out = std::io::stdout().lock();
    let mut first = 0;
    while first * bs < f.size() {
        // Up to 32 blocks per call: hits cost no system call, misses one request for all.
        let view = f.read_bytes(first * bs, (32 * bs) as usize)?;
        // Copied out word by word (the safe way to read bytes another writer may change).
        out.write_all(&view.to_vec())?;
        first += 32;
    }
    eprintln!(
        "{} blocks hit in shared memory, {} read by the daemon",
        client.stats.hits.load(std::sync::atomic::Ordering::Relaxed),
        client
            .stats
            .misses
            .load(std::sync::atomic::Ordering::Relaxed)
    );
    Ok(())
}
