#![allow(clippy::unwrap_used)]
//! Trace reader tests: small hand-written files (good and malformed) for every format, plus the
//! libCacheSim cloudPhysicsIO samples in the repository's `testdata/traces/` (zstd-compressed).

use std::fs;
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use tempfile::TempDir;
use tiercache_core::{Access, BlockKey, BlockSize, Class};
use tiercache_sim::trace::{read_trace, Location, TraceError, TraceFormat, TraceOptions};

const SAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/traces/");
const SAMPLE_REQUESTS: usize = 113_872;

fn write(dir: &TempDir, name: &str, bytes: impl AsRef<[u8]>) -> PathBuf {
    let path = dir.path().join(name);
    fs::write(&path, bytes).unwrap();
    path
}

fn read(path: &Path, format: TraceFormat) -> Result<Vec<Access>, TraceError> {
    read_trace(path, format, &TraceOptions::default())
}

/// The error's `Display`, checked to be a single line starting with the path.
fn err_text(path: &Path, format: TraceFormat) -> String {
    let err = read(path, format).expect_err("expected an error");
    let text = err.to_string();
    assert!(!text.contains('\n'), "multi-line error: {text}");
    assert!(text.starts_with(&path.display().to_string()), "{text}");
    assert_eq!(err.path(), path);
    text
}

fn limited(limit: usize) -> TraceOptions {
    TraceOptions {
        limit: Some(limit),
        ..TraceOptions::default()
    }
}

fn access(file: u64, block: u64, class: Class, write: bool) -> Access {
    Access {
        key: BlockKey::new(file, block),
        class,
        write,
    }
}

fn rd(file: u64, block: u64) -> Access {
    access(file, block, Class::NORMAL, false)
}

fn wr(file: u64, block: u64) -> Access {
    access(file, block, Class::NORMAL, true)
}

fn oracle_record(time: u32, id: u64, size: u32, next: i64) -> Vec<u8> {
    let mut r = Vec::with_capacity(24);
    r.extend_from_slice(&time.to_le_bytes());
    r.extend_from_slice(&id.to_le_bytes());
    r.extend_from_slice(&size.to_le_bytes());
    r.extend_from_slice(&next.to_le_bytes());
    r
}

#[test]
fn format_names_and_missing_file() {
    for f in TraceFormat::ALL {
        assert_eq!(f.to_string().parse::<TraceFormat>().unwrap(), f);
    }
    assert_eq!("oracle-general".parse(), Ok(TraceFormat::OracleGeneral));
    let err = "vscsi".parse::<TraceFormat>().unwrap_err().to_string();
    assert!(
        err.contains("vscsi") && err.contains("csv|msr|oracle-general"),
        "{err}"
    );
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("nope.csv");
    let err = read(&path, TraceFormat::Csv).unwrap_err();
    assert!(matches!(err, TraceError::Io { .. }), "{err:?}");
    assert!(err.to_string().contains("nope.csv"), "{err}");
}

#[test]
fn csv_columns_by_name() {
    let dir = TempDir::new().unwrap();
    let path = write(
        &dir,
        "t.csv",
        "time, OP ,size,class,file,lbn,extra\n\
         1,2a,512,priority,3,10,x\n\
         2,28,512,normal,0,11,y\r\n\
         3,W,0,Normal,1,12,\n\
         4,get,9,PRIORITY,2,13,z\n\
         5,,9,normal,2,14,z\n\
         6,Set,9,normal,2,15,z\n\
         7,8A,9,normal,2,16,z\n\n\n",
    );
    let got = read(&path, TraceFormat::Csv).unwrap();
    assert_eq!(
        got,
        vec![
            access(3, 10, Class::PRIORITY, true),
            rd(0, 11),
            wr(1, 12),
            access(2, 13, Class::PRIORITY, false),
            rd(2, 14),
            wr(2, 15),
            wr(2, 16),
        ]
    );
}

#[test]
fn csv_id_column_preference_and_defaults() {
    let dir = TempDir::new().unwrap();
    // `obj_id` wins over `lbn` wherever it sits; no op/class/file columns → normal reads of file 0.
    let path = write(&dir, "t.csv", "lbn,obj_id\n1,100\n2,200\n");
    assert_eq!(
        read(&path, TraceFormat::Csv).unwrap(),
        vec![rd(0, 100), rd(0, 200)]
    );
    let path = write(&dir, "k.csv", "key\n7\n");
    assert_eq!(read(&path, TraceFormat::Csv).unwrap(), vec![rd(0, 7)]);
    let path = write(&dir, "h.csv", "obj-id,op\n");
    assert_eq!(read(&path, TraceFormat::Csv).unwrap(), vec![]);
}

#[test]
fn csv_errors() {
    let dir = TempDir::new().unwrap();
    let header = "version,time,op,size,lbn\n";
    let cases: &[(&str, &str, &[&str])] = &[
        (
            "bad.csv",
            "1,5,2a,512,42\n1,5,28,512,12x\n",
            &[":3: column 5 (lbn): invalid digit \"12x\""],
        ),
        (
            "missing.csv",
            "1,5,2a,512\n",
            &[":2: expected 5 columns (as in the header), found 4"],
        ),
        (
            "extra.csv",
            "1,5,2a,512,1,2\n",
            &[":2: expected 5 columns", "found 6"],
        ),
        (
            "empty_id.csv",
            "1,5,2a,512,\n",
            &[":2: column 5 (lbn): empty value"],
        ),
        (
            "time.csv",
            "1,-5,2a,512,1\n",
            &[":2: column 2 (time): invalid digit \"-5\""],
        ),
        (
            "huge.csv",
            "1,5,2a,512,99999999999999999999\n",
            &[":2: column 5 (lbn): number too large"],
        ),
        (
            "blank.csv",
            "1,5,2a,512,1\n\n1,5,2a,512,2\n",
            &[":3: empty line (only allowed at the end of the file)"],
        ),
    ];
    for (name, body, pieces) in cases {
        let path = write(&dir, name, format!("{header}{body}"));
        let text = err_text(&path, TraceFormat::Csv);
        assert!(text.contains(name), "{text}");
        for piece in *pieces {
            assert!(text.contains(piece), "{name}: `{text}` lacks `{piece}`");
        }
    }
    let path = write(&dir, "class.csv", "id,class\n1,gold\n");
    let text = err_text(&path, TraceFormat::Csv);
    assert!(
        text.ends_with("class.csv:2: column 2 (class): expected priority or normal, got \"gold\""),
        "{text}"
    );
}

#[test]
fn csv_header_errors() {
    let dir = TempDir::new().unwrap();
    let path = write(&dir, "empty.csv", "");
    let text = err_text(&path, TraceFormat::Csv);
    assert!(text.contains("empty.csv:1: no header line"), "{text}");

    // Headerless libCacheSim CSV: the first row is taken as a header and has no id column.
    let path = write(&dir, "nohdr.csv", "1,5633898,2a,512,42932745\n");
    let text = err_text(&path, TraceFormat::Csv);
    assert!(
        text.contains("nohdr.csv:1: header has no object-id column"),
        "{text}"
    );
    assert!(text.contains("obj_id, id, lbn, key, obj-id"), "{text}");
}

#[test]
fn limit_stops_early() {
    let dir = TempDir::new().unwrap();
    let path = write(&dir, "t.csv", "id\n1\n2\n3\nnot-a-number\n");
    let got = read_trace(&path, TraceFormat::Csv, &limited(2)).unwrap();
    assert_eq!(got, vec![rd(0, 1), rd(0, 2)]);

    let path = write(&dir, "t.msr", "1,h,0,Read,0,16384,1\n");
    let got = read_trace(&path, TraceFormat::Msr, &limited(3)).unwrap();
    assert_eq!(got, vec![rd(0, 0), rd(0, 1), rd(0, 2)]);

    let bin: Vec<u8> = (0..5).flat_map(|i| oracle_record(0, i, 1, -1)).collect();
    let path = write(&dir, "t.bin", bin);
    assert_eq!(
        read_trace(&path, TraceFormat::OracleGeneral, &limited(4))
            .unwrap()
            .len(),
        4
    );
}

#[test]
fn msr_splits_requests_into_blocks() {
    let dir = TempDir::new().unwrap();
    let path = write(
        &dir,
        "t.msr",
        "128166372003061629,web,1,Read,4096,8192,100\n\
         128166372003061630,web,0,write,4095,2,100\n\
         128166372003061631,web,1,WRITE,0,0,5\r\n\
         128166372003061632,src,1,Read,8191,1,5\n\n",
    );
    let got = read(&path, TraceFormat::Msr).unwrap();
    assert_eq!(
        got,
        vec![rd(0, 1), rd(0, 2), wr(1, 0), wr(1, 1), wr(0, 0), rd(2, 1)]
    );
    let opts = TraceOptions {
        block_size: BlockSize::new(512).unwrap(),
        limit: None,
    };
    let got = read_trace(&path, TraceFormat::Msr, &opts).unwrap();
    assert_eq!(got.len(), 16 + 2 + 1 + 1);
    assert_eq!(got[0], rd(0, 8));
    assert_eq!(got[15], rd(0, 23));

    let path = write(&dir, "empty.msr", "");
    assert_eq!(read(&path, TraceFormat::Msr).unwrap(), vec![]);
}

#[test]
fn msr_errors() {
    let dir = TempDir::new().unwrap();
    let good = "1,h,0,Read,0,4096,1\n";
    let cases: &[(&str, &str)] = &[
        (
            "1,h,0,Trim,0,4096,1\n",
            ":2: column 4 (Type): expected Read or Write, got \"Trim\"",
        ),
        (
            "1,h,0,Read,4k,4096,1\n",
            ":2: column 5 (Offset): invalid digit \"4k\"",
        ),
        (
            "1,h,x,Read,0,4096,1\n",
            ":2: column 3 (DiskNumber): invalid digit \"x\"",
        ),
        ("1,h,0,Read,0,4096\n", ":2: expected 7 columns"),
        (
            "1,,0,Read,0,4096,1\n",
            ":2: column 2 (Hostname): empty value",
        ),
        (
            "1,h,0,Read,0,4096,\n",
            ":2: column 7 (ResponseTime): empty value",
        ),
        (
            "1,h,0,Read,18446744073709551615,2,1\n",
            ":2: column 6 (Size): offset 18446744073709551615 + size 2 overflows",
        ),
        (
            "1,h,0,Read,0,1099511627776,1\n",
            ":2: column 6 (Size): request spans 268435456 blocks",
        ),
    ];
    for (i, (line, piece)) in cases.iter().enumerate() {
        let name = format!("bad{i}.msr");
        let path = write(&dir, &name, format!("{good}{line}"));
        let text = err_text(&path, TraceFormat::Msr);
        assert!(
            text.contains(&format!("{name}{piece}")),
            "`{text}` lacks `{piece}`"
        );
    }
}

#[test]
fn oracle_plain_and_errors() {
    let dir = TempDir::new().unwrap();
    let mut bin: Vec<u8> = [7u64, u64::MAX, 7]
        .iter()
        .flat_map(|&id| oracle_record(1, id, 4096, -1))
        .collect();
    let path = write(&dir, "t.bin", &bin);
    assert_eq!(
        read(&path, TraceFormat::OracleGeneral).unwrap(),
        vec![rd(0, 7), rd(0, u64::MAX), rd(0, 7)]
    );

    bin.extend_from_slice(&oracle_record(1, 9, 1, -1)[..7]);
    let path = write(&dir, "trunc.bin", &bin);
    let text = err_text(&path, TraceFormat::OracleGeneral);
    assert!(
        text.ends_with("trunc.bin: record 4: truncated (got 7 of 24 bytes)"),
        "{text}"
    );
    let err = read(&path, TraceFormat::OracleGeneral).unwrap_err();
    assert!(matches!(
        err,
        TraceError::Parse {
            location: Location::Record(4),
            ..
        }
    ));

    let path = write(&dir, "empty.bin", b"");
    assert_eq!(read(&path, TraceFormat::OracleGeneral).unwrap(), vec![]);
}

#[test]
fn oracle_zstd_and_corrupt_zstd() {
    let dir = TempDir::new().unwrap();
    let bin: Vec<u8> = (0..1000u64)
        .flat_map(|i| oracle_record(0, i * 3, 1, -1))
        .collect();
    let plain = write(&dir, "t.bin", &bin);
    let packed = zstd::encode_all(&bin[..], 3).unwrap();
    let zst = write(&dir, "t.bin.zst", &packed);
    let want = read(&plain, TraceFormat::OracleGeneral).unwrap();
    assert_eq!(want.len(), 1000);
    assert_eq!(read(&zst, TraceFormat::OracleGeneral).unwrap(), want);

    let garbage = write(
        &dir,
        "garbage.bin.zst",
        b"this is not zstd at all, not even close",
    );
    let text = err_text(&garbage, TraceFormat::OracleGeneral);
    assert!(
        text.contains("garbage.bin.zst: corrupt zstd stream"),
        "{text}"
    );

    let cut = write(&dir, "cut.bin.zst", &packed[..packed.len() / 2]);
    let text = err_text(&cut, TraceFormat::OracleGeneral);
    assert!(text.contains("cut.bin.zst: corrupt zstd stream"), "{text}");

    // A valid zstd stream holding a partial record is a parse error, not a zstd error.
    let odd = write(
        &dir,
        "odd.bin.zst",
        zstd::encode_all(&bin[..30], 3).unwrap(),
    );
    let text = err_text(&odd, TraceFormat::OracleGeneral);
    assert!(
        text.ends_with("odd.bin.zst: record 2: truncated (got 6 of 24 bytes)"),
        "{text}"
    );
}

/// The bytes of sample `name` (stored as `name.zst` in `testdata/traces/`).
fn sample(name: &str) -> Vec<u8> {
    let path = PathBuf::from(SAMPLES).join(format!("{name}.zst"));
    let packed = fs::read(&path)
        .unwrap_or_else(|e| panic!("testdata/traces/{name}.zst: {e} (part of the repository)"));
    zstd::decode_all(&packed[..]).unwrap()
}

#[test]
fn cloudphysics_samples_agree() {
    let ids: Vec<u64> = String::from_utf8(sample("cloudPhysicsIO.txt"))
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(ids.len(), SAMPLE_REQUESTS);

    let dir = TempDir::new().unwrap();
    let csv_path = write(&dir, "cloudPhysicsIO.csv", sample("cloudPhysicsIO.csv"));
    let csv = read(&csv_path, TraceFormat::Csv).unwrap();
    assert_eq!(csv.len(), SAMPLE_REQUESTS);
    assert_eq!(csv.iter().filter(|a| a.write).count(), 66_898);
    let raw = sample("cloudPhysicsIO.oracleGeneral.bin");
    let bin_path = write(&dir, "cloudPhysicsIO.oracleGeneral.bin", &raw);
    let bin = read(&bin_path, TraceFormat::OracleGeneral).unwrap();
    assert_eq!(bin.len(), SAMPLE_REQUESTS);
    for trace in [&csv, &bin] {
        assert!(trace
            .iter()
            .all(|a| a.key.file.0 == 0 && a.class == Class::NORMAL));
        let got: Vec<u64> = trace.iter().map(|a| a.key.block.0).collect();
        assert!(got == ids, "id sequence differs from cloudPhysicsIO.txt");
    }

    // The stored `.zst` itself reads the same as the plain file.
    let zst = PathBuf::from(SAMPLES).join("cloudPhysicsIO.oracleGeneral.bin.zst");
    assert!(read(&zst, TraceFormat::OracleGeneral).unwrap() == bin);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// No reader panics on arbitrary bytes (or on arbitrary comma/digit-heavy text).
    #[test]
    fn readers_never_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..300),
        text in "[0-9a-zA-Z,\\r\\n -]{0,300}",
    ) {
        let dir = TempDir::new().unwrap();
        for (name, body) in [("a.bin", bytes.as_slice()), ("b", text.as_bytes())] {
            for ext in ["", ".zst"] {
                let path = write(&dir, &format!("{name}{ext}"), body);
                for format in TraceFormat::ALL {
                    if let Err(e) = read(&path, format) {
                        prop_assert!(!e.to_string().contains('\n'));
                    }
                }
            }
        }
        let header = format!("id,op,class\n{text}");
        let path = write(&dir, "c.csv", header);
        let _ = read(&path, TraceFormat::Csv);
    }
}
