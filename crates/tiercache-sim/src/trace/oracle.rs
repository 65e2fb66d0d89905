//! libCacheSim oracleGeneral reader: fixed 24-byte little-endian records, plain or zstd
//! (see [`super`] for the exact format).

use std::io::{self, BufReader, ErrorKind, Read};
use std::path::Path;

use tiercache_core::{Access, BlockKey, Class};

use super::{full, io_error, open, parse_error, Location, TraceError, TraceOptions, BUF_SIZE};

/// Bytes per record: `u32 time, u64 obj_id, u32 obj_size, i64 next_access_vtime`.
const RECORD: usize = 24;
/// Cap on the up-front allocation, whatever the file size or limit claims.
const MAX_PREALLOC: usize = 1 << 22;

/// Reads an oracleGeneral trace; `.zst` files are decompressed on the fly.
pub(super) fn read(path: &Path, opts: &TraceOptions) -> Result<Vec<Access>, TraceError> {
    let file = open(path)?;
    let zst = path.extension().is_some_and(|e| e == "zst");
    if zst {
        let decoder = zstd::stream::read::Decoder::new(file).map_err(|e| zstd_error(path, e))?;
        read_records(
            BufReader::with_capacity(BUF_SIZE, decoder),
            path,
            true,
            0,
            opts,
        )
    } else {
        let len = file.metadata().map_err(|e| io_error(path, e))?.len();
        let records = usize::try_from(len / RECORD as u64).unwrap_or(usize::MAX);
        read_records(
            BufReader::with_capacity(BUF_SIZE, file),
            path,
            false,
            records,
            opts,
        )
    }
}

fn zstd_error(path: &Path, source: io::Error) -> TraceError {
    TraceError::Decompress {
        path: path.to_path_buf(),
        source,
    }
}

fn read_records<R: Read>(
    mut reader: R,
    path: &Path,
    zst: bool,
    expected: usize,
    opts: &TraceOptions,
) -> Result<Vec<Access>, TraceError> {
    let capacity = expected
        .min(opts.limit.unwrap_or(usize::MAX))
        .min(MAX_PREALLOC);
    let mut out = Vec::with_capacity(capacity);
    let mut record = [0u8; RECORD];
    while !full(&out, opts.limit) {
        let got = fill(&mut reader, &mut record).map_err(|e| {
            if zst {
                zstd_error(path, e)
            } else {
                io_error(path, e)
            }
        })?;
        if got == 0 {
            break;
        }
        if got < RECORD {
            return Err(parse_error(
                path,
                Location::Record(out.len() as u64 + 1),
                format!("truncated (got {got} of {RECORD} bytes)"),
            ));
        }
        let [_, _, _, _, b0, b1, b2, b3, b4, b5, b6, b7, ..] = record;
        let obj_id = u64::from_le_bytes([b0, b1, b2, b3, b4, b5, b6, b7]);
        out.push(Access {
            key: BlockKey::new(0, obj_id),
            class: Class::Normal,
            write: false,
        });
    }
    Ok(out)
}

/// Reads until `buf` is full or the input ends; returns the number of bytes read.
fn fill<R: Read>(reader: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match reader.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}
