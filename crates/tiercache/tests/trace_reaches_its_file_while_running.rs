//! Bug: the `--trace-out` writer flushed only at shutdown, so `kill -9` of the daemon lost the tail of the trace (all of it, for a short run).
#![allow(clippy::unwrap_used)]

mod support;

use support::{s, Mount};

use std::time::{Duration, Instant};

#[test]
fn the_trace_reaches_its_file_while_the_daemon_runs() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.csv");
    let m = Mount::new(&["--memory", "8M", "--trace-out", s(&trace)]);
    std::fs::write(m.backing.join("f"), vec![1u8; 64 << 10]).unwrap();
    assert_eq!(std::fs::read(m.mnt.join("f")).unwrap().len(), 64 << 10);
    // No unmount, no signal: the records must show up within about a second of going idle.
    let t = Instant::now();
    loop {
        let text = std::fs::read_to_string(&trace).unwrap_or_default();
        if text.lines().count() > 1 {
            assert!(text.starts_with("time,file,obj_id,op,class"), "{text}");
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "trace still empty: {text:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // kill -9 keeps what is there.
    let pid = m.pid();
    // SAFETY: killing the daemon this test started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    std::thread::sleep(Duration::from_millis(300));
    let text = std::fs::read_to_string(&trace).unwrap();
    assert!(text.lines().any(|l| l.ends_with(",r,normal")), "{text}");
}
