//! MSR Cambridge CSV reader: byte-range requests split into one access per block touched, one
//! file id per (hostname, disk) pair (see [`super`] for the exact format).

use std::path::Path;

use rustc_hash::FxHashMap;
use tiercache_core::{Access, BlockKey, Class};

use super::{field_count, full, parse_error, parse_u64, quote, trim};
use super::{Lines, Location, TraceError, TraceOptions, MAX_BLOCKS_PER_REQUEST};

/// Column names, in file order.
const COLUMNS: [&str; 7] = [
    "Timestamp",
    "Hostname",
    "DiskNumber",
    "Type",
    "Offset",
    "Size",
    "ResponseTime",
];

/// Assigns dense file ids to (hostname, disk) pairs in order of first appearance.
#[derive(Debug, Default)]
struct Volumes {
    ids: FxHashMap<Vec<u8>, FxHashMap<u64, u64>>,
    next: u64,
}

impl Volumes {
    fn id(&mut self, host: &[u8], disk: u64) -> u64 {
        if let Some(&id) = self.ids.get(host).and_then(|disks| disks.get(&disk)) {
            return id;
        }
        let id = self.next;
        self.next += 1;
        match self.ids.get_mut(host) {
            Some(disks) => {
                disks.insert(disk, id);
            }
            None => {
                self.ids
                    .insert(host.to_vec(), FxHashMap::from_iter([(disk, id)]));
            }
        }
        id
    }
}

/// Reads an MSR Cambridge trace.
pub(super) fn read(path: &Path, opts: &TraceOptions) -> Result<Vec<Access>, TraceError> {
    let mut lines = Lines::open(path)?;
    let mut volumes = Volumes::default();
    let shift = opts.block_size.shift();
    let mut out = Vec::new();
    while !full(&out, opts.limit) {
        let Some((line_no, line)) = lines.next_line()? else {
            break;
        };
        let fail = |reason: String| parse_error(path, Location::Line(line_no), reason);
        let found = field_count(line);
        if found != COLUMNS.len() {
            return Err(fail(format!(
                "expected {} columns ({}), found {found}",
                COLUMNS.len(),
                COLUMNS.join(",")
            )));
        }
        let mut fields = [&[][..]; 7];
        for (slot, field) in fields.iter_mut().zip(line.split(|&b| b == b',')) {
            *slot = trim(field);
        }
        let [timestamp, host, disk, kind, offset, size, response] = fields;
        let column_err =
            |i: usize, msg: String| fail(format!("column {} ({}): {msg}", i + 1, COLUMNS[i]));
        let number =
            |i: usize, field: &[u8]| parse_u64(field).map_err(|m| column_err(i, m.to_string()));
        number(0, timestamp)?;
        if host.is_empty() {
            return Err(column_err(1, "empty value".to_string()));
        }
        let disk = number(2, disk)?;
        let write = if kind.eq_ignore_ascii_case(b"write") {
            true
        } else if kind.eq_ignore_ascii_case(b"read") {
            false
        } else {
            return Err(column_err(
                3,
                format!("expected Read or Write, got {}", quote(kind)),
            ));
        };
        let offset = number(4, offset)?;
        let size = number(5, size)?;
        number(6, response)?;
        let last_byte = offset
            .checked_add(size.saturating_sub(1))
            .ok_or_else(|| column_err(5, format!("offset {offset} + size {size} overflows")))?;
        let (first, last) = (offset >> shift, last_byte >> shift);
        let blocks = last - first + 1;
        if blocks > MAX_BLOCKS_PER_REQUEST {
            return Err(column_err(
                5,
                format!("request spans {blocks} blocks (at most {MAX_BLOCKS_PER_REQUEST} allowed)"),
            ));
        }
        let file = volumes.id(host, disk);
        for block in first..=last {
            if full(&out, opts.limit) {
                break;
            }
            out.push(Access {
                key: BlockKey::new(file, block),
                class: Class::NORMAL,
                write,
            });
        }
    }
    Ok(out)
}
