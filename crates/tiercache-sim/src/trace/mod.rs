//! Trace readers: turn a block trace file into a `Vec<Access>` for replay.
//!
//! Entry point: [`read_trace`] with a [`TraceFormat`] and [`TraceOptions`]. Every reader streams
//! through a [`BufReader`], never panics on bad input, and reports the first fault as a
//! [`TraceError`] whose `Display` is one line naming the file, the line (text) or record (binary)
//! number, and what is wrong.
//!
//! # Formats
//!
//! ## `csv` — libCacheSim CSV ([`TraceFormat::Csv`])
//!
//! Comma-separated text; fields are trimmed of surrounding ASCII whitespace, quoting is not
//! supported, a trailing `\r` is ignored.
//!
//! - **A header line is required** (the first line). Columns are found by name, compared
//!   case-insensitively:
//!   - object id (required): the first of `obj_id`, `id`, `lbn`, `key`, `obj-id` present in the
//!     header (in that order of preference); an unsigned decimal integer;
//!   - `time` (optional): unsigned decimal integer, checked but not used;
//!   - `size`, else `obj_size` (optional): unsigned decimal integer, checked but not used;
//!   - `op` (optional): the access is a **write** if the value is `2a` or `8a` (SCSI WRITE(10) /
//!     WRITE(16) opcodes in hex), `w`, `write` or `set`, case-insensitively; **any other value
//!     (including empty) is a read**;
//!   - `class` (optional): `priority` or `normal` (case-insensitive); default `normal`;
//!   - `file` (optional): unsigned decimal file id; default 0.
//!
//!   Other columns are ignored.
//! - Each row is **one** access to block `obj_id` of file `file` (libCacheSim's object-count
//!   mode: results compare with libCacheSim run with `--ignore-obj-size`).
//! - Every row must have exactly as many fields as the header. Blank lines are allowed only at the
//!   end of the file. An empty file is an error (no header).
//!
//! ## `msr` — MSR Cambridge CSV ([`TraceFormat::Msr`])
//!
//! No header; each line is `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime`, with
//! unsigned decimal integers except `Hostname` (non-empty text) and `Type` (`Read` or `Write`,
//! case-insensitive). A request covering bytes `[Offset, Offset + Size)` becomes one access per
//! block it touches, in ascending order: blocks `Offset / B ..= (Offset + Size - 1) / B` for
//! block size `B` = [`TraceOptions::block_size`]; `Size` 0 gives one access to the block holding
//! `Offset`. A request spanning more than [`MAX_BLOCKS_PER_REQUEST`] blocks is an error. The file
//! id is a small integer assigned to each distinct (`Hostname`, `DiskNumber`) pair in order of
//! first appearance, starting at 0. Class is always `normal`. Blank lines are allowed only at the
//! end; an empty file gives no accesses.
//!
//! ## `oracle-general` — libCacheSim oracleGeneral binary ([`TraceFormat::OracleGeneral`])
//!
//! Fixed 24-byte little-endian records `u32 time, u64 obj_id, u32 obj_size, i64
//! next_access_vtime`; each record is one read of block `obj_id` of file 0, class `normal`. If
//! the file name ends in `.zst` the file is decompressed on the fly with zstd (multi-frame
//! streams are fine). A trailing partial record is an error naming its 1-based record number; an
//! empty file gives no accesses.

mod csv;
mod msr;
mod oracle;

use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use thiserror::Error;
use tiercache_core::{Access, BlockSize, ParseError};

/// Largest number of blocks one MSR request may expand to; larger requests are rejected rather
/// than exhausting memory.
pub const MAX_BLOCKS_PER_REQUEST: u64 = 1 << 20;

/// Read buffer size for trace files.
const BUF_SIZE: usize = 1 << 16;

/// A trace file format. Parses from and prints as `csv`, `msr`, `oracle-general`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TraceFormat {
    /// libCacheSim CSV with a header line.
    Csv,
    /// MSR Cambridge block I/O CSV.
    Msr,
    /// libCacheSim oracleGeneral binary, plain or `.zst`.
    OracleGeneral,
}

impl TraceFormat {
    pub const ALL: [TraceFormat; 3] = [
        TraceFormat::Csv,
        TraceFormat::Msr,
        TraceFormat::OracleGeneral,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            TraceFormat::Csv => "csv",
            TraceFormat::Msr => "msr",
            TraceFormat::OracleGeneral => "oracle-general",
        }
    }
}

impl fmt::Display for TraceFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TraceFormat {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|f| f.as_str() == s)
            .ok_or_else(|| ParseError::unknown("trace format", s, "csv|msr|oracle-general"))
    }
}

/// How to read a trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TraceOptions {
    /// Block size used to split byte ranges into blocks (only the `msr` format has byte ranges).
    pub block_size: BlockSize,
    /// Stop after this many accesses (`None`: read the whole file).
    pub limit: Option<usize>,
}

/// Where in a trace file a fault is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Location {
    /// 1-based line number (text formats).
    Line(u64),
    /// 1-based record number (binary formats).
    Record(u64),
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Line(n) => write!(f, "line {n}"),
            Location::Record(n) => write!(f, "record {n}"),
        }
    }
}

/// Why a trace could not be read. `Display` is a single line starting with the file path.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum TraceError {
    /// Opening or reading the file failed.
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
    /// The content is malformed. Displays as `path:LINE: reason` or `path: record N: reason`.
    #[error("{}", parse_message(path, *location, reason))]
    Parse {
        path: PathBuf,
        location: Location,
        reason: String,
    },
    /// A `.zst` file is not a valid (or complete) zstd stream.
    #[error("{}: corrupt zstd stream: {source}", path.display())]
    Decompress { path: PathBuf, source: io::Error },
}

impl TraceError {
    /// The trace file the error is about.
    pub fn path(&self) -> &Path {
        match self {
            TraceError::Io { path, .. }
            | TraceError::Parse { path, .. }
            | TraceError::Decompress { path, .. } => path,
        }
    }
}

fn parse_message(path: &Path, location: Location, reason: &str) -> String {
    match location {
        Location::Line(n) => format!("{}:{n}: {reason}", path.display()),
        Location::Record(n) => format!("{}: record {n}: {reason}", path.display()),
    }
}

/// Reads the whole trace at `path` (or its first `opts.limit` accesses).
pub fn read_trace(
    path: &Path,
    format: TraceFormat,
    opts: &TraceOptions,
) -> Result<Vec<Access>, TraceError> {
    match format {
        TraceFormat::Csv => csv::read(path, opts),
        TraceFormat::Msr => msr::read(path, opts),
        TraceFormat::OracleGeneral => oracle::read(path, opts),
    }
}

pub(crate) fn io_error(path: &Path, source: io::Error) -> TraceError {
    TraceError::Io {
        path: path.to_path_buf(),
        source,
    }
}

pub(crate) fn parse_error(path: &Path, location: Location, reason: String) -> TraceError {
    TraceError::Parse {
        path: path.to_path_buf(),
        location,
        reason,
    }
}

pub(crate) fn open(path: &Path) -> Result<File, TraceError> {
    File::open(path).map_err(|e| io_error(path, e))
}

/// Whether `out` already holds `limit` accesses.
#[inline]
pub(crate) fn full(out: &[Access], limit: Option<usize>) -> bool {
    limit.is_some_and(|l| out.len() >= l)
}

/// A line reader reusing one buffer; skips blank lines at the end of the file and rejects them
/// elsewhere.
pub(crate) struct Lines<'p> {
    reader: BufReader<File>,
    path: &'p Path,
    buf: Vec<u8>,
    line_no: u64,
    first_blank: Option<u64>,
}

impl<'p> Lines<'p> {
    pub(crate) fn open(path: &'p Path) -> Result<Self, TraceError> {
        Ok(Self {
            reader: BufReader::with_capacity(BUF_SIZE, open(path)?),
            path,
            buf: Vec::with_capacity(256),
            line_no: 0,
            first_blank: None,
        })
    }

    /// The next non-blank line without its terminator, with its 1-based number; `None` at EOF.
    pub(crate) fn next_line(&mut self) -> Result<Option<(u64, &[u8])>, TraceError> {
        loop {
            self.buf.clear();
            let n = self
                .reader
                .read_until(b'\n', &mut self.buf)
                .map_err(|e| io_error(self.path, e))?;
            if n == 0 {
                return Ok(None);
            }
            self.line_no += 1;
            if trim(&self.buf).is_empty() {
                self.first_blank.get_or_insert(self.line_no);
                continue;
            }
            if let Some(blank) = self.first_blank {
                return Err(parse_error(
                    self.path,
                    Location::Line(blank),
                    "empty line (only allowed at the end of the file)".to_string(),
                ));
            }
            return Ok(Some((self.line_no, strip_eol(&self.buf))));
        }
    }
}

fn strip_eol(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// `field` without leading and trailing ASCII whitespace.
pub(crate) fn trim(field: &[u8]) -> &[u8] {
    field.trim_ascii()
}

/// Number of comma-separated fields in `line`.
pub(crate) fn field_count(line: &[u8]) -> usize {
    line.iter().filter(|&&b| b == b',').count() + 1
}

/// Why a field is not an unsigned decimal integer.
#[derive(Debug, Error)]
pub(crate) enum BadNumber {
    #[error("empty value")]
    Empty,
    #[error("invalid digit {0}")]
    Digit(String),
    #[error("number too large {0}")]
    TooLarge(String),
}

/// Parses an unsigned decimal integer (already trimmed).
pub(crate) fn parse_u64(field: &[u8]) -> Result<u64, BadNumber> {
    if field.is_empty() {
        return Err(BadNumber::Empty);
    }
    let mut value: u64 = 0;
    for &b in field {
        let digit = b.wrapping_sub(b'0');
        if digit > 9 {
            return Err(BadNumber::Digit(quote(field)));
        }
        value = value
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(digit)))
            .ok_or_else(|| BadNumber::TooLarge(quote(field)))?;
    }
    Ok(value)
}

/// `field` as a quoted, escaped, length-capped string for error messages.
pub(crate) fn quote(field: &[u8]) -> String {
    const MAX: usize = 40;
    let text = String::from_utf8_lossy(field);
    if text.chars().count() > MAX {
        let cut: String = text.chars().take(MAX).collect();
        format!("{cut:?}…")
    } else {
        format!("{text:?}")
    }
}
