//! Subcommands.

pub mod assets;
pub mod bench;
pub mod ctl;
mod curves;
pub mod detach;
pub mod flash;
pub mod fstab;
pub mod list;
pub mod mount;
mod mount_classes;
mod mount_serving;
pub mod mounts;
pub mod partition_flags;
pub mod progress;
pub mod reload;
pub mod sim;
pub mod zerocopy;
