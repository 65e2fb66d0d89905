//! `--partition mrc` on a mount: the daemon's partitioner sizes the pools from the curves of
//! the accesses it serves and says in `stats --json` whether each class's target can be met —
//! true while the priority files fit the memory tier, false once they loop over four times it.
#![allow(clippy::unwrap_used)]

mod support;

use support::{read_dir_files, Mount};

fn reachable(m: &Mount, class: &str) -> serde_json::Value {
    m.stats()["classes"][class]["target_reachable"].clone()
}

#[test]
fn mrc_reports_whether_the_priority_target_fits() {
    // 1 MiB of memory: 256 blocks of 4 KiB; a window of 256 block accesses.
    let m = Mount::new(&[
        "--memory",
        "1M",
        "--partition",
        "mrc",
        "--t-protected",
        "0.8",
        "--t-normal",
        "0",
        "--b-pmin",
        "0",
        "--b-nmin",
        "0",
        "--priority",
        "www",
        "--kernel-cache",
        "off",
    ]);
    let www = m.backing.join("www");
    std::fs::create_dir_all(&www).unwrap();
    for i in 0..4 {
        std::fs::write(www.join(format!("small{i}")), vec![i as u8; 64 << 10]).unwrap();
    }
    let before = m.stats();
    assert_eq!(before["memory"]["partition"], "mrc");
    assert!(before["classes"]["priority"]["target_reachable"].is_null());

    // 64 blocks of priority data, read 30 times: a curve that reaches 0.8 well within 256.
    read_dir_files(&m.mnt.join("www"), 30);
    assert_eq!(reachable(&m, "priority"), true, "{}", m.stats()["classes"]);

    // Now the priority class loops over 1,024 blocks: no size within 256 reaches 0.8.
    for i in 0..4 {
        std::fs::write(www.join(format!("big{i}")), vec![i as u8; 1 << 20]).unwrap();
    }
    for i in 0..4 {
        std::fs::remove_file(www.join(format!("small{i}"))).unwrap();
    }
    read_dir_files(&m.mnt.join("www"), 12);
    assert_eq!(reachable(&m, "priority"), false, "{}", m.stats()["classes"]);
}
