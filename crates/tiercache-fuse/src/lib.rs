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
//! (node table), `attr` (stat conversion), `data` (data path trait and the
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
mod killpriv;
mod mount;
mod ops_dir;
mod ops_entry;
mod ops_file;
mod ops_xattr;
mod sys;
mod validate;

pub use creds::BackingIdentity;
pub use data::{
    AttrSnapshot, BackingStamp, DataPath, FileHandleInfo, PassThrough, StatFn, TimesOverride,
};
pub use error::FuseError;
pub use handle::raise_nofile_limit;
pub use inode::InodeStats;
pub use killpriv::clear_setid_for_write;
pub use mount::{mount, run, InodeStatsReader, MountHandle, MountOptions};
pub use validate::unescape_mountinfo;
