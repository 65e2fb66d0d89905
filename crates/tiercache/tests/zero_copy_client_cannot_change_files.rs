//! Regression: every admitted zero-copy client mapped the whole shared region read-write, so a
//! client that opened a file read-only (or never opened it) could store into its cached bytes
//! and into every slot header; write-back then took those bytes to BACKING, and a scribbled
//! clean block was demoted into the SSD tier and served again after a restart.
//!
//! Here a client of another uid, admitted through `--zero-copy-group`, speaking the protocol
//! itself (`zero_copy_scribbler.py`), opens a root-owned 0644 file read-only, pins a block,
//! and tries every way to store into the region (a
//! writable mapping, `pwrite`, a hole punch, a truncate, a read-write reopen through `/proc`,
//! `mprotect`) and scribbles its own pin area. Then root writes part of the same block through
//! the mount, flushes, evicts the file into the SSD tier and remounts over it: BACKING, the
//! mount and another zero-copy client see only the legitimate bytes.
#![allow(clippy::unwrap_used)]

mod support;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use support::{mounted, s, tc};

fn content(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 13 + i / 4096) as u8).collect()
}

fn mount(backing: &Path, mnt: &Path, cache: &Path) {
    let cache_arg = format!("{}:16M", s(cache));
    let out = tc(&[
        "mount",
        s(backing),
        s(mnt),
        "--memory",
        "1M",
        "--flash",
        &cache_arg,
        "--zero-copy",
        "--zero-copy-group",
        "4242",
        "--allow-other",
    ]);
    assert!(
        out.status.success(),
        "mount: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn unmount(mnt: &Path) {
    let out = tc(&["unmount", s(mnt)]);
    assert!(
        out.status.success(),
        "unmount: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

struct Unmount<'a>(&'a Path);
impl Drop for Unmount<'_> {
    fn drop(&mut self) {
        if mounted(self.0) {
            let _ = tc(&["unmount", "--force", s(self.0)]);
        }
    }
}

/// Runs the scribbler as uid 65534 in group 4242 until it says `ready`; its report and the
/// child (which holds its pins until its stdin closes).
fn scribble(mnt: &Path, file: &Path) -> (Vec<String>, std::process::Child) {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/zero_copy_scribbler.py");
    let mut child = Command::new("python3")
        .arg(script)
        .args([s(mnt), s(file)])
        .uid(65534)
        .gid(4242)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("python3 is needed for this test");
    let mut lines = Vec::new();
    let out = BufReader::new(child.stdout.take().unwrap());
    for line in out.lines() {
        let line = line.unwrap();
        if line == "ready" {
            return (lines, child);
        }
        lines.push(line);
    }
    let status = child.wait().unwrap();
    panic!("the scribbler ended early ({status}): {lines:?}");
}

#[test]
fn a_client_scribbling_shared_memory_changes_no_file_and_no_reader_sees_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (backing, mnt, cache) = (
        dir.path().join("slow"),
        dir.path().join("fast"),
        dir.path().join("cache.img"),
    );
    std::fs::create_dir_all(&backing).unwrap();
    std::fs::create_dir_all(&mnt).unwrap();
    let data = content(64 << 10);
    std::fs::write(backing.join("ro"), &data).unwrap();
    std::fs::set_permissions(backing.join("ro"), std::fs::Permissions::from_mode(0o644)).unwrap();
    // Only ever read: its cached blocks are what the SSD tier keeps across the remount.
    let other = content(32 << 10);
    std::fs::write(backing.join("other"), &other).unwrap();
    std::fs::write(backing.join("bulk"), content(4 << 20)).unwrap();
    mount(&backing, &mnt, &cache);
    let _guard = Unmount(&mnt);
    assert_eq!(std::fs::read(mnt.join("ro")).unwrap(), data, "warm read");
    assert_eq!(
        std::fs::read(mnt.join("other")).unwrap(),
        other,
        "warm read"
    );

    let (report, mut child) = scribble(&mnt, &mnt.join("ro"));
    for what in [
        "region mmap-write",
        "region pwrite",
        "region punch-hole",
        "region truncate",
        "region reopen-write",
        "region mprotect-write",
    ] {
        let line = report.iter().find(|l| l.starts_with(what));
        assert!(
            line.is_some_and(|l| l.contains("refused")),
            "{what}: {line:?} (whole report: {report:?})"
        );
    }
    // Its own pin area is its to scribble, but not to shrink under the daemon.
    assert!(
        report.iter().any(|l| l == "pins all-set done"),
        "{report:?}"
    );
    assert!(
        report
            .iter()
            .any(|l| l.starts_with("pins truncate refused")),
        "{report:?}"
    );

    // A legitimate write to part of the block the scribbler pinned, then write-back.
    let mut want = data.clone();
    want[100..110].copy_from_slice(b"legitimate");
    let mut w = std::fs::OpenOptions::new()
        .write(true)
        .open(mnt.join("ro"))
        .unwrap();
    std::io::Seek::seek(&mut w, std::io::SeekFrom::Start(100)).unwrap();
    w.write_all(b"legitimate").unwrap();
    drop(w);
    let out = tc(&["flush", s(&mnt)]);
    assert!(out.status.success());
    assert_eq!(std::fs::read(backing.join("ro")).unwrap(), want, "BACKING");
    assert_eq!(std::fs::read(mnt.join("ro")).unwrap(), want, "the mount");
    let c = tiercache_client::Client::connect(&mnt).unwrap();
    let f = c.open(mnt.join("ro")).unwrap();
    assert_eq!(
        f.read_bytes(0, want.len()).unwrap().to_vec(),
        want,
        "a client"
    );
    drop(f);
    drop(c);

    // The scribbler goes; the files' clean blocks are pushed down into the SSD tier by a
    // bigger read, and `other`'s come back from it after a clean remount (`ro` was written
    // since: its blocks there are of an older version).
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
    assert_eq!(std::fs::read(mnt.join("bulk")).unwrap().len(), 4 << 20);
    unmount(&mnt);
    mount(&backing, &mnt, &cache);
    let st: serde_json::Value =
        serde_json::from_slice(&tc(&["stats", s(&mnt), "--json"]).stdout).unwrap();
    assert_eq!(st["flash"]["opened_clean"], true, "{}", st["flash"]);
    assert_eq!(
        std::fs::read(mnt.join("ro")).unwrap(),
        want,
        "after the remount"
    );
    assert_eq!(
        std::fs::read(mnt.join("other")).unwrap(),
        other,
        "after the SSD round trip"
    );
    let st: serde_json::Value =
        serde_json::from_slice(&tc(&["stats", s(&mnt), "--json"]).stdout).unwrap();
    let flash = st["tiers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["kind"] == "flash")
        .unwrap();
    assert!(
        flash["hits"].as_u64().unwrap() > 0,
        "`other` did not come back from the SSD tier: {flash}"
    );
    assert_eq!(
        std::fs::read(backing.join("ro")).unwrap(),
        want,
        "BACKING at the end"
    );
}

/// Review: a zero-copy client's commit (a `Write`) or growing sync went to BACKING as root's
/// write, so the set-user-ID bit of a file the client may write stayed set (a write through the
/// mount by that user clears it): a group-writable set-user-ID root program could be changed
/// and keep its bit.
#[test]
fn a_clients_update_clears_set_id_bits_as_a_write_through_the_mount_does() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (backing, mnt, cache) = (
        dir.path().join("slow"),
        dir.path().join("fast"),
        dir.path().join("cache.img"),
    );
    std::fs::create_dir_all(&backing).unwrap();
    std::fs::create_dir_all(&mnt).unwrap();
    for name in ["prog", "grown"] {
        std::fs::write(backing.join(name), vec![0u8; 8192]).unwrap();
        std::fs::set_permissions(backing.join(name), std::fs::Permissions::from_mode(0o4777))
            .unwrap();
    }
    mount(&backing, &mnt, &cache);
    let _guard = Unmount(&mnt);
    // As uid 65534: a commit of "PWNED" at offset 0 of `prog`, a sync growing `grown`.
    for (name, op) in [("prog", "write"), ("grown", "grow")] {
        let out = Command::new("python3")
            .arg("-c")
            .arg(CLIENT)
            .args([s(&mnt), s(&mnt.join(name)), op])
            .uid(65534)
            .gid(4242)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // (A sync puts the bytes in the SSD tier; `flush` takes them on to BACKING.)
    assert!(tc(&["flush", s(&mnt)]).status.success());
    let m = std::fs::metadata(backing.join("prog")).unwrap();
    assert_eq!(
        m.permissions().mode() & 0o7777,
        0o0777,
        "set-user-ID kept after a client's write"
    );
    assert_eq!(&std::fs::read(backing.join("prog")).unwrap()[..5], b"PWNED");
    let m = std::fs::metadata(backing.join("grown")).unwrap();
    assert_eq!(m.len(), 12288, "grown by the sync");
    assert_eq!(
        m.permissions().mode() & 0o7777,
        0o0777,
        "set-user-ID kept after a growing sync"
    );
}

/// A client speaking the protocol itself (version 2, `docs/design.md` §8): opens argv[2]
/// read-write and, for argv[3] = "write", commits "PWNED" at offset 0 then syncs; for "grow",
/// asks for a sync that grows the file to 12288 bytes.
const CLIENT: &str = r#"
import json, os, socket, struct, sys
mount, path, op = sys.argv[1], sys.argv[2], sys.argv[3]
mount = os.path.abspath(mount)
canon = os.path.join(os.path.realpath(os.path.dirname(mount)), os.path.basename(mount))
h = 0xCBF29CE484222325
for b in canon.encode():
    h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
name = "".join(c for c in os.path.basename(canon) if c.isascii() and (c.isalnum() or c == "-"))[:32]
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.connect("\0tiercache-zc-%s-%016x" % (name, h))
def call(body, fds=(), payload=None):
    data = json.dumps(body).encode()
    frame = struct.pack("<I", len(data)) + data
    if payload is not None:
        frame += struct.pack("<I", len(payload)) + payload
    if fds:
        socket.send_fds(sock, [frame], list(fds))
    else:
        sock.sendall(frame)
    head, _, _, _ = socket.recv_fds(sock, 4, 4)
    while len(head) < 4:
        head += sock.recv(4 - len(head))
    n = struct.unpack("<I", head)[0]
    body = b""
    while len(body) < n:
        body += sock.recv(n - len(body))
    return json.loads(body)
assert call({"op": "hello", "version": 2})["r"] == "welcome"
r = call({"op": "open"}, [os.open(path, os.O_RDWR)])
assert r["r"] == "opened", r
h = r["handle"]
if op == "write":
    r = call({"op": "write", "handle": h, "offset": 0, "runs": [[0, 5]]}, payload=b"PWNED")
    assert r["r"] == "written", r
    r = call({"op": "sync", "handle": h, "offset": 0, "len": 0, "extend": False})
else:
    r = call({"op": "sync", "handle": h, "offset": 0, "len": 12288, "extend": True})
assert r["r"] == "synced", r
"#;
