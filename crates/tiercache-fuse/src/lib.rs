//! tiercache-fuse: a multi-threaded pass-through FUSE file system that
//! exposes a BACKING directory at a mount point, with a pluggable
//! [`DataPath`] so the tiercache block cache can sit in the data path.
//!
//! ```no_run
//! use std::{path::Path, sync::Arc};
//! use tiercache_fuse::{mount, MountOptions, PassThrough};
//!
//! let handle = mount(
//!     Path::new("/srv/backing"),
//!     Path::new("/mnt/tier"),
//!     MountOptions::default(),
//!     Arc::new(PassThrough),
//! )?;
//! // ... use /mnt/tier ...
//! handle.unmount()?;
//! # Ok::<(), tiercache_fuse::FuseError>(())
//! ```
//!
//! Module map: `mount` (entry points, options, handle), `validate` (pre-mount
//! checks), `fs` (request dispatch), `creds` (acting with the caller's identity; `callers`: their live groups), `ops_*` (operations by topic), `inode`
//! (node table), `kcache` (which files the kernel page cache may hold, and keeping it fresh), `iopool` (the I/O workers requests that wait are answered from; `iopolicy`: which starts next; `writers`: backpressure on opens for writing), `attr` (stat conversion), `data` (data path trait and the
//! pass-through), `sys` (syscall wrappers). See `docs/design.md` (section 4) for the
//! rationale and the known limits.

mod attr;
mod callers;
mod creds;
mod data;
mod error;
mod fdcache;
mod fs;
mod handle;
mod inode;
mod iopolicy;
mod iopool;
mod kcache;
mod killpriv;
mod mount;
mod ops_dir;
mod ops_entry;
mod ops_file;
mod ops_io;
mod ops_xattr;
mod sys;
mod transport;
mod validate;
mod writers;

pub use creds::BackingIdentity;
pub use data::{
    Attempt, AttrSnapshot, BackingStamp, DataPath, FileHandleInfo, PassThrough, StatFn,
    TimesOverride,
};
pub use error::FuseError;
pub use handle::raise_nofile_limit;
pub use inode::InodeStats;
pub use iopolicy::PRIORITY_RUN;
pub use iopool::{IoClass, IoClassStats, IoStats, IoStatsReader};
pub use kcache::{
    BadKernelCacheMode, KernelCacheHandle, KernelCacheMode, KernelCacheStats, OpenAdvice,
};
pub use killpriv::clear_setid_for_write;
pub use mount::{
    mount, run, InodeStatsReader, MountFlags, MountHandle, MountOptions, DEFAULT_IO_WORKERS,
};
pub use transport::{
    kernel_ring_switch, BadTransport, Transport, TransportReader, TransportStats,
    ENABLE_URING_PARAM,
};
pub use validate::unescape_mountinfo;
