//! libCacheSim oracleGeneral reader: fixed 24-byte little-endian records, plain or zstd
//! (see [`super`] for the exact format).

use std::io::{self, ErrorKind, Read};
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
        read_records(decoder, path, true, 0, opts)
    } else {
        let len = file.metadata().map_err(|e| io_error(path, e))?.len();
        let records = usize::try_from(len / RECORD as u64).unwrap_or(usize::MAX);
        read_records(file, path, false, records, opts)
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
    // Whole records at a time, a batch per read: decoding is a loop over fixed offsets.
    let mut batch = vec![0u8; RECORD * (BUF_SIZE / 8)];
    while !full(&out, opts.limit) {
        let got = fill(&mut reader, &mut batch).map_err(|e| {
            if zst {
                zstd_error(path, e)
            } else {
                io_error(path, e)
            }
        })?;
        let records = batch[..got].chunks_exact(RECORD);
        let tail = records.remainder().len();
        let room = opts.limit.map_or(usize::MAX, |l| l - out.len());
        out.extend(records.take(room).map(|r| {
            let mut id = [0u8; 8];
            id.copy_from_slice(&r[4..12]);
            let obj_id = u64::from_le_bytes(id);
            Access {
                key: BlockKey::new(0, obj_id),
                class: Class::NORMAL,
                write: false,
            }
        }));
        if tail > 0 && !full(&out, opts.limit) {
            return Err(parse_error(
                path,
                Location::Record(out.len() as u64 + 1),
                format!("truncated (got {tail} of {RECORD} bytes)"),
            ));
        }
        if got < batch.len() {
            break;
        }
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
