//! Bug: every FORGET of a file the memory tier knew was handed to an I/O worker (a thread
//! switch each, a fifth of an `rm -rf`'s time), though letting go of a closed file with nothing
//! left to write back needs no I/O.
//!
//! The I/O workers' counts (done, running, queued) show the hand-overs: removing files whose
//! data is on BACKING must leave them at zero, the kernel's forgets must still reach the daemon
//! (its known inodes go back down) and the files must be gone from BACKING.
#![allow(clippy::unwrap_used)]

mod support;

use support::{pin, s, tc, Mount};

const FILES: usize = 200;

fn known(m: &Mount) -> u64 {
    m.stats()["inodes"]["known"].as_u64().unwrap()
}

#[test]
fn removing_written_back_files_forgets_them_on_the_request_thread() {
    let m = Mount::new(&[]);
    let dir = m.mnt.join("d");
    std::fs::create_dir(&dir).unwrap();
    // Pinned until the removal, so that a drop_caches of another test makes no FORGET here
    // before it (of a dirty file: a hand-over before the count starts, and fewer known).
    let mut pins = Vec::new();
    for i in 0..FILES {
        let p = dir.join(format!("f{i}"));
        std::fs::write(&p, format!("file {i}\n")).unwrap();
        pins.push(pin(&p));
    }
    let out = tc(&["flush", s(&m.mnt)]);
    assert!(out.status.success(), "{out:?}");
    // Every file is known to the tier (cached, clean) and to the inode table.
    let (before, known_before) = (m.io_handed_over(), known(&m));
    assert!(known_before > FILES as u64, "{}", m.stats()["inodes"]);
    drop(pins);
    std::fs::remove_dir_all(&dir).unwrap();
    // The kernel sends FORGET once an unlinked inode's last reference goes: wait for them.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while known(&m) > known_before - FILES as u64 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(
        known(&m) <= known_before - FILES as u64,
        "the forgets did not arrive: {}",
        m.stats()["inodes"]
    );
    let handed_over = m.io_handed_over() - before;
    assert_eq!(
        handed_over, 0,
        "{handed_over} forgets of {FILES} removed files went to I/O workers"
    );
    assert!(!m.backing.join("d").exists());
}
