//! The live mount: settings, classes and priority directories, the data path over the memory
//! tier, the daemon, its control socket, statistics and metrics.

pub mod adapter;
pub mod class_ctl;
pub mod classes;
pub mod config;
pub mod config_flash;
pub mod config_remote;
pub mod control;
pub mod daemon;
pub mod error;
pub mod flash;
pub mod io;
pub mod kernel_cache;
pub mod logging;
pub mod metrics;
pub mod mount_lock;
pub mod mountinfo;
pub mod notify;
pub mod one_mount;
pub mod priority;
pub mod reload;
pub mod remote;
pub mod size;
mod stack;
pub mod stats;
pub mod transport;
mod vcpu;
pub mod zerocopy;
pub mod zerocopy_open;
