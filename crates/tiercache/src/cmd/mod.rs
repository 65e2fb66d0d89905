//! Subcommands.

pub mod assets;
pub mod bench;
pub mod bench_flash;
pub mod bench_fuse;
pub mod bench_meta;
mod bench_meta_write;
pub mod bench_remote;
pub mod bench_web;
pub mod bench_web_env;
pub mod bench_zerocopy;
pub mod ctl;
pub mod detach;
pub mod flash;
pub mod mount;
pub mod mounts;
pub mod partition_flags;
pub mod progress;
pub mod reload;
pub mod sim;
pub mod zerocopy;
