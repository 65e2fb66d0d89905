//! Trace readers (in progress).
