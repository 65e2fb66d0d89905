//! Bug: every close of a file open for writing was handed to an I/O worker (two thread switches on the request path of each file a `tar x` writes), though letting go of a cached file needs no I/O unless the descriptors closed files hold are near their bound.
//!
//! The I/O workers' counts (done, running, queued) show the hand-overs: creating, writing and
//! closing small files that fit in memory must leave them at zero, and the data must still
//! reach BACKING.
#![allow(clippy::unwrap_used)]

mod support;

use std::io::Write;
use support::{pin, s, tc, Mount};

const FILES: usize = 200;

#[test]
fn closing_small_written_files_runs_on_the_request_thread() {
    let m = Mount::new(&[]);
    let dir = m.mnt.join("d");
    std::fs::create_dir(&dir).unwrap();
    let before = m.io_handed_over();
    // Pinned, so that a drop_caches of another test makes no FORGET of a dirty file here (a
    // hand-over this test is not about).
    let mut pins = Vec::new();
    for i in 0..FILES {
        let p = dir.join(format!("f{i}"));
        let mut f = std::fs::File::create(&p).unwrap();
        pins.push(pin(&p));
        f.write_all(format!("file {i}\n").as_bytes()).unwrap();
        drop(f); // close: FLUSH, then RELEASE
    }
    // The kernel sends RELEASE after close() returned: wait for the last ones.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let handed_over = m.io_handed_over() - before;
    assert_eq!(
        handed_over, 0,
        "{handed_over} requests of {FILES} create + write + close went to I/O workers"
    );
    let out = tc(&["flush", s(&m.mnt)]);
    assert!(out.status.success(), "{out:?}");
    for i in [0, FILES / 2, FILES - 1] {
        let on_backing = std::fs::read_to_string(m.backing.join(format!("d/f{i}"))).unwrap();
        assert_eq!(on_backing, format!("file {i}\n"));
    }
}
