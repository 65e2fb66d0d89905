//! libCacheSim CSV reader: header line with named columns, one access per row (see
//! [`super`] for the exact format).

use std::path::Path;

use tiercache_core::{Access, BlockKey, Class};

use super::{field_count, full, parse_error, parse_u64, quote, trim};
use super::{Lines, Location, TraceError, TraceOptions};

/// Header names accepted for the object id, in order of preference.
const ID_NAMES: [&str; 5] = ["obj_id", "id", "lbn", "key", "obj-id"];
/// Header names accepted for the (unused, checked) object size, in order of preference.
const SIZE_NAMES: [&str; 2] = ["size", "obj_size"];
/// `op` values meaning a write (compared case-insensitively); anything else is a read.
const WRITE_OPS: [&str; 5] = ["2a", "8a", "w", "write", "set"];

/// What a column is used for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Id,
    Time,
    Size,
    Op,
    Class,
    File,
    Ignored,
}

/// The header: column names and the role of each column.
#[derive(Debug)]
struct Header {
    names: Vec<String>,
    roles: Vec<Role>,
}

impl Header {
    fn parse(path: &Path, line: &[u8]) -> Result<Self, TraceError> {
        let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
        let names: Vec<String> = line
            .split(|&b| b == b',')
            .map(|f| String::from_utf8_lossy(trim(f)).into_owned())
            .collect();
        let mut roles = vec![Role::Ignored; names.len()];
        let find = |candidates: &[&str]| {
            candidates
                .iter()
                .find_map(|c| names.iter().position(|n| n.eq_ignore_ascii_case(c)))
        };
        let Some(id) = find(&ID_NAMES) else {
            return Err(parse_error(
                path,
                Location::Line(1),
                format!(
                    "header has no object-id column (expected one of {}; a header line is \
                     required), got {}",
                    ID_NAMES.join(", "),
                    quote(line)
                ),
            ));
        };
        let optional = [
            (find(&["time"]), Role::Time),
            (find(&SIZE_NAMES), Role::Size),
            (find(&["op"]), Role::Op),
            (find(&["class"]), Role::Class),
            (find(&["file"]), Role::File),
        ];
        for (index, role) in optional {
            if let Some(i) = index {
                roles[i] = role;
            }
        }
        roles[id] = Role::Id;
        Ok(Self { names, roles })
    }
}

/// Reads a libCacheSim CSV trace.
pub(super) fn read(path: &Path, opts: &TraceOptions) -> Result<Vec<Access>, TraceError> {
    let mut lines = Lines::open(path)?;
    // Blank lines before the header are rejected by `next_line`, so the header is line 1.
    let header = match lines.next_line()? {
        Some((_, line)) => Header::parse(path, line)?,
        None => {
            return Err(parse_error(
                path,
                Location::Line(1),
                "no header line (a header line is required; the file is empty)".to_string(),
            ))
        }
    };
    let columns = header.roles.len();
    let mut out = Vec::new();
    while !full(&out, opts.limit) {
        let Some((line_no, line)) = lines.next_line()? else {
            break;
        };
        let fail = |reason: String| parse_error(path, Location::Line(line_no), reason);
        let found = field_count(line);
        if found != columns {
            return Err(fail(format!(
                "expected {columns} columns (as in the header), found {found}"
            )));
        }
        let mut id = 0;
        let mut file = 0;
        let mut write = false;
        let mut class = Class::NORMAL;
        for (i, (field, role)) in line.split(|&b| b == b',').zip(&header.roles).enumerate() {
            let field = trim(field);
            let column_err = |msg: String| {
                let name = header.names.get(i).map_or("", String::as_str);
                fail(format!("column {} ({name}): {msg}", i + 1))
            };
            match role {
                Role::Id => id = parse_u64(field).map_err(|e| column_err(e.to_string()))?,
                Role::File => file = parse_u64(field).map_err(|e| column_err(e.to_string()))?,
                Role::Time | Role::Size => {
                    parse_u64(field).map_err(|e| column_err(e.to_string()))?;
                }
                Role::Op => {
                    write = WRITE_OPS
                        .iter()
                        .any(|w| field.eq_ignore_ascii_case(w.as_bytes()))
                }
                Role::Class => {
                    class = if field.eq_ignore_ascii_case(b"priority") {
                        Class::PRIORITY
                    } else if field.eq_ignore_ascii_case(b"normal") {
                        Class::NORMAL
                    } else {
                        return Err(column_err(format!(
                            "expected priority or normal, got {}",
                            quote(field)
                        )));
                    };
                }
                Role::Ignored => {}
            }
        }
        out.push(Access {
            key: BlockKey::new(file, id),
            class,
            write,
        });
    }
    Ok(out)
}
