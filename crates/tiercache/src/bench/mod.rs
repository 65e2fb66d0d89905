//! The benchmark scenarios behind `tiercache bench …` (the flags and the dispatch are in
//! `cmd::bench`): each starts its own mounts, servers and device models (or, for `classes`,
//! replays in the simulator), runs the cases side by side in one run and returns or prints
//! the ratios README quotes.

pub mod classes;
mod classes_eval;
mod error;
pub mod flash;
pub mod fuse;
pub mod meta;
mod meta_write;
mod pages;
pub mod remote;
pub mod web;
pub mod web_env;
pub mod zerocopy;

pub use error::BenchError;

/// `sync(2)`: every file system's dirty data out before a timed run, so an earlier step's
/// write-back does not land in it.
pub(crate) fn sync_file_systems() {
    // SAFETY: sync(2) takes no arguments, touches no memory of ours and cannot fail.
    unsafe { libc::sync() };
}
