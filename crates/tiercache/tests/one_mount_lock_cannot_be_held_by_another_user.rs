//! Bug (issue 17 review): the one-mount lock was the abstract Unix socket `@tiercache-mount-lock`, which any local user could bind and keep: every later `tiercache mount`, root's included, waited for it forever.
#![allow(clippy::unwrap_used)]

mod support;

use std::io::{BufRead, BufReader};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::{mounted, s, tc};

/// As uid 65534: binds the old lock's name (retrying while a starting daemon of an older
/// tiercache holds it), says so and holds it until its stdin closes.
const SQUAT: &str = r#"
import os, socket, sys, time
os.setgroups([]); os.setgid(65534); os.setuid(65534)
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
for _ in range(500):
    try:
        s.bind("\0tiercache-mount-lock")
        break
    except OSError:
        time.sleep(0.02)
else:
    sys.exit("cannot bind the name")
print("bound", flush=True)
sys.stdin.read()
"#;

/// Prints why uid 65534 cannot open the file named (or `opened`).
const OPEN_AS_NOBODY: &str = r#"
import os, sys
os.setgroups([]); os.setgid(65534); os.setuid(65534)
try:
    os.open(sys.argv[1], os.O_RDONLY)
    print("opened")
except OSError as e:
    print(os.strerror(e.errno))
"#;

/// Kills the squatter when dropped.
struct Squatter(Child);

impl Drop for Squatter {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_mount_is_not_blocked_by_another_user_holding_a_lock_name() {
    let lock_file = Path::new("/run/tiercache/mount.lock");
    let mut squatter = Squatter(
        Command::new("python3")
            .args(["-c", SQUAT])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    BufReader::new(squatter.0.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "bound\n", "the squatter");

    let dir = tempfile::tempdir().unwrap();
    let (backing, mnt) = (dir.path().join("b"), dir.path().join("m"));
    std::fs::create_dir_all(&backing).unwrap();
    std::fs::create_dir_all(&mnt).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tiercache"))
        .args(["mount", s(&backing), s(&mnt), "--memory", "16M"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A mount takes well under a second; one still waiting after 60 s waits for the squatter,
    // which is then sent away (so the mount goes on and is cleaned up before failing).
    let start = Instant::now();
    let mut squat = Some(squatter);
    let mut blocked = false;
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if squat.is_some() && start.elapsed() > Duration::from_secs(60) {
            blocked = true;
            squat = None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    drop(squat);
    let err = child
        .stderr
        .take()
        .map(|mut e| {
            let mut s = String::new();
            let _ = std::io::Read::read_to_string(&mut e, &mut s);
            s
        })
        .unwrap_or_default();
    let up = mounted(&mnt);
    if up {
        let _ = tc(&["unmount", "--force", s(&mnt)]);
    }
    assert!(
        !blocked,
        "the mount waited 60 s for a lock another user held"
    );
    assert!(status.success() && up, "the mount failed: {err}");
    // Now that it surely exists, uid 65534 cannot open the lock file either.
    let out = Command::new("python3")
        .args(["-c", OPEN_AS_NOBODY, lock_file.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "Permission denied",
        "uid 65534 opening {}: {}",
        lock_file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    // The lock root's daemons take: root's own, closed to everyone else.
    let f = std::fs::symlink_metadata(lock_file).unwrap();
    let d = std::fs::symlink_metadata(lock_file.parent().unwrap()).unwrap();
    assert!(f.file_type().is_file());
    assert_eq!((f.uid(), f.mode() & 0o777), (0, 0o600));
    assert_eq!((d.uid(), d.mode() & 0o777), (0, 0o700));
}
