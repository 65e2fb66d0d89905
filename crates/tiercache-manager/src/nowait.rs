//! Requests a caller does not want to wait for: [`NoWait`], the answer of
//! [`crate::MemCache::try_read_into`] and [`crate::MemCache::try_write`].
//!
//! A FUSE request thread asks first; what needs BACKING, a lower tier, write-back or a sync it
//! hands to an I/O worker, which then makes the ordinary, waiting call. "Without waiting" means
//! no device I/O and no lock held across I/O: only the engine lock, a file's `op` lock when
//! free, and slot locks held to copy.

use std::io;
use tiercache_core::Class;

/// The outcome of a request made without waiting.
#[derive(Debug)]
#[must_use]
pub enum NoWait<T> {
    /// Served (or failed) without waiting.
    Done(io::Result<T>),
    /// Not served, nothing changed: it would have to wait (for BACKING, a lower tier,
    /// write-back or a lock held across I/O). The file's class, to queue it by.
    Wait(Class),
}
