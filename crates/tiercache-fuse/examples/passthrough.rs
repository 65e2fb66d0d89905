//! Foreground pass-through daemon:
//! `passthrough BACKING MOUNTPOINT [--threads N] [--kernel-cache] [--allow-other]`.
//! Serves until unmounted from outside (`umount MOUNTPOINT`).

use std::path::PathBuf;
use std::sync::Arc;

use tiercache_fuse::{run, MountOptions, PassThrough};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args_os().skip(1);
    let usage =
        "usage: passthrough BACKING MOUNTPOINT [--threads N] [--kernel-cache] [--allow-other]";
    let backing = PathBuf::from(args.next().ok_or(usage)?);
    let mountpoint = PathBuf::from(args.next().ok_or(usage)?);
    let mut opts = MountOptions::default();
    while let Some(a) = args.next() {
        match a.to_str() {
            Some("--threads") => {
                let n = args.next().ok_or(usage)?;
                opts.threads = n.to_str().ok_or(usage)?.parse()?;
            }
            Some("--kernel-cache") => opts.kernel_cache = tiercache_fuse::KernelCacheMode::All,
            Some("--allow-other") => opts.allow_other = true,
            _ => return Err(usage.into()),
        }
    }
    run(&backing, &mountpoint, opts, Arc::new(PassThrough))?;
    Ok(())
}
