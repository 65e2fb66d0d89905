//! Appends a line to a file of a `--zero-copy` mount with an update of its last block (a
//! private copy, committed as a write of the changed bytes) and 003's syncblock; the example
//! keeps to the file's last block (blocks past it work the same way, with `write_block` of
//! each):
//! `cargo run -p tiercache-client --example update -- MOUNTPOINT FILE TEXT`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(mount), Some(file), Some(text)) = (args.next(), args.next(), args.next()) else {
        return Err("usage: update MOUNTPOINT FILE TEXT".into());
    };
    let client = tiercache_client::Client::connect(&mount)?;
    let f = client.open_rw(&file)?;
    let bs = client.block_size() as u64;
    let size = f.size();
    if size == 0 {
        return Err("the file is empty: no last block to extend".into());
    }
    let (last, at) = ((size - 1) / bs, (size % bs) as usize);
    let line = format!("{text}\n");
    if at == 0 || at + line.len() > bs as usize {
        return Err("the text does not fit in the file's last block".into());
    }
    {
        let mut b = f.write_block(last)?;
        b[at..at + line.len()].copy_from_slice(line.as_bytes());
    }
    let new = f.sync(size, line.len() as u64, true)?;
    println!("{file}: {size} -> {new} bytes, on BACKING");
    Ok(())
}
