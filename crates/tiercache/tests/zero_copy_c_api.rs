//! The zero-copy client from C and Python: `examples/read.c` of tiercache-capi, compiled
//! against the generated `tiercache.h` and linked with `libtiercache_capi.so`, reads a file of
//! a `--zero-copy` mount and updates it (a private copy, committed on release); `examples/read.py`
//! (ctypes) reads it too.
#![allow(clippy::unwrap_used)]

mod support;

use std::path::PathBuf;
use std::process::Command;
use support::{s, Mount};

fn capi_dir() -> PathBuf {
    // The library is built beside this test's executable (a dev-dependency).
    let deps = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    let so = deps.join("libtiercache_capi.so");
    assert!(
        so.exists(),
        "{} missing: build the tiercache-capi crate",
        so.display()
    );
    deps
}

fn example(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tiercache-capi/examples")
        .join(name)
}

#[test]
fn a_c_program_reads_and_updates_and_python_reads() {
    let lib = capi_dir();
    let header = PathBuf::from(tiercache_capi::HEADER);
    assert!(header.exists(), "{} was not generated", header.display());
    let work = tempfile::tempdir().unwrap();
    let exe = work.path().join("read");
    let cc = Command::new("cc")
        .arg("-Wall")
        .arg("-Werror")
        .arg("-I")
        .arg(header.parent().unwrap())
        .arg(example("read.c"))
        .arg("-o")
        .arg(&exe)
        .arg("-L")
        .arg(&lib)
        .arg("-ltiercache_capi")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .output()
        .expect("a C compiler (cc) is needed for this test");
    assert!(
        cc.status.success(),
        "{}",
        String::from_utf8_lossy(&cc.stderr)
    );

    let m = Mount::new(&["--zero-copy"]);
    let data: Vec<u8> = (0..70_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(m.mnt.join("f"), &data).unwrap();
    let out = Command::new(&exe)
        .args([s(&m.mnt), s(&m.mnt.join("f"))])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, data, "C read other bytes");

    let out = Command::new(&exe)
        .args([s(&m.mnt), s(&m.mnt.join("f")), "update"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut want = data.clone();
    want[..6].copy_from_slice(b"from C");
    assert_eq!(out.stdout, want, "C did not read its own update");
    assert_eq!(std::fs::read(m.mnt.join("f")).unwrap(), want, "the mount");
    assert_eq!(
        std::fs::read(m.backing.join("f")).unwrap(),
        want,
        "BACKING after tc_sync"
    );

    let py = Command::new("python3")
        .arg(example("read.py"))
        .arg(lib.join("libtiercache_capi.so"))
        .args([s(&m.mnt), s(&m.mnt.join("f"))])
        .output()
        .expect("python3 is needed for this test");
    assert!(
        py.status.success(),
        "{}",
        String::from_utf8_lossy(&py.stderr)
    );
    assert_eq!(py.stdout, want, "Python read other bytes");

    // A failure comes back as NULL, errno and a message.
    let out = Command::new(&exe)
        .args([s(&m.backing), s(&m.backing.join("f"))])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no zero-copy service"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
