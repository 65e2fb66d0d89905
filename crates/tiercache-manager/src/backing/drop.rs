//! What a BACKING request leaves in the page cache: the range it read or wrote out goes at
//! once, and so does each whole large folio it has passed the end of (a range drop cannot take
//! a folio that straddles its ends). Used by uncached reads and by write-behind.

use super::sys;
use std::fs::File;

/// The largest page-cache folio (2 MiB: PMD size with 4 KiB pages). Dropping a request's range
/// leaves a larger folio straddling either end; those go with their whole window once a
/// request passes its end.
pub const FOLIO_WINDOW: u64 = 2 << 20;

/// After a read, or a written-out write, of `[off, off + len)`: drops that range, the whole
/// [`FOLIO_WINDOW`]s the request has passed the end of, and everything from the range's window
/// on at end of file. Advice only: a failure leaves pages cached, never fails the request.
pub(super) fn drop_behind(fd: &File, off: u64, len: u64, eof: bool) {
    if len > 0 {
        let _ = sys::drop_pages(fd, off, len);
    }
    let lo = off / FOLIO_WINDOW * FOLIO_WINDOW;
    let hi = (off + len) / FOLIO_WINDOW * FOLIO_WINDOW;
    if eof {
        let _ = sys::drop_pages(fd, lo, 0);
    } else if hi > lo {
        let _ = sys::drop_pages(fd, lo, hi - lo);
    }
}
