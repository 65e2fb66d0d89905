//! Issue #17 (item 6): a caller's supplementary groups were cached per (pid, uid, gid) for 1 s, so BACKING still saw a group the caller had dropped with `setgroups`, and a new process that got a reused pid ran with the old process's groups.
//!
//! With `default_permissions` the kernel checks the mount's mode bits with the caller's *current*
//! groups before a request reaches the daemon, so a stale group shows where a group *takes*
//! rights away: a file of group TEAM with mode 0604 may be read by anyone *outside* TEAM. A
//! caller that left TEAM passes the kernel's check, and BACKING — given the stale TEAM — refused
//! it. Both tests fail on a daemon that reuses groups for the same pid number.
#![allow(clippy::unwrap_used)]

mod common;

use std::ffi::CString;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::TestMount;
use tiercache_fuse::MountOptions;

const A: u32 = 2101;
const TEAM: u32 = 3101;

/// BACKING: `team_only` (root:TEAM 0040, for TEAM) and `not_team` (root:TEAM 0604, for anyone
/// but TEAM).
fn setup(backing: &Path) {
    for (name, mode) in [("team_only", 0o040), ("not_team", 0o604)] {
        let p = backing.join(name);
        std::fs::write(&p, name).unwrap();
        std::os::unix::fs::chown(&p, Some(0), Some(TEAM)).unwrap();
        std::fs::set_permissions(&p, PermissionsExt::from_mode(mode)).unwrap();
    }
}

fn mounted() -> TestMount {
    assert_eq!(
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() },
        0,
        "this test mounts FUSE and acts as other users: run it as root"
    );
    let mut opts = MountOptions::default();
    opts.allow_other = true;
    let m = TestMount::new(opts);
    setup(&m.backing);
    m
}

/// Sets this thread's supplementary groups with the raw system call (this thread only; glibc's
/// `setgroups` would change every thread of the test process).
fn set_thread_groups(groups: &[u32]) {
    // SAFETY: `groups` is valid for `groups.len()` gid_t values; the call copies them and
    // changes only the calling thread.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_setgroups,
            groups.len() as libc::c_long,
            groups.as_ptr(),
        )
    };
    assert_eq!(rc, 0, "setgroups: {}", std::io::Error::last_os_error());
}

/// Sets this thread's fsgid and fsuid (read back). The thread keeps `CAP_SETGID`, so it can
/// still call `setgroups` afterwards; the file-system capabilities are gone.
fn set_thread_fs_ids(uid: u32, gid: u32) {
    for (call, id) in [(libc::SYS_setfsgid, gid), (libc::SYS_setfsuid, uid)] {
        // SAFETY: setfsuid/setfsgid take an integer and change only the calling thread; -1
        // changes nothing and returns the current value.
        let now = unsafe {
            libc::syscall(call, libc::c_long::from(id));
            libc::syscall(call, -1 as libc::c_long)
        };
        assert_eq!(now, libc::c_long::from(id));
    }
}

fn errno_of(r: std::io::Result<Vec<u8>>) -> Option<i32> {
    r.err().and_then(|e| e.raw_os_error())
}

/// One thread, so one pid for FUSE: reads as A in TEAM, drops TEAM with `setgroups` and at once
/// reads again. The next request must see the groups as they are now.
#[test]
fn a_dropped_group_is_gone_at_the_next_request() {
    let m = mounted();
    let mnt = m.mnt.clone();
    std::thread::spawn(move || {
        set_thread_groups(&[TEAM]);
        set_thread_fs_ids(A, A);
        assert_eq!(std::fs::read(mnt.join("team_only")).unwrap(), b"team_only");
        assert_eq!(
            errno_of(std::fs::read(mnt.join("not_team"))),
            Some(libc::EACCES),
            "TEAM may not read not_team"
        );
        set_thread_groups(&[]);
        // Right away (well within the old 1 s): outside TEAM now, so the other bits apply.
        let got = std::fs::read(mnt.join("not_team"));
        assert!(
            got.as_deref().ok() == Some(&b"not_team"[..]),
            "after leaving TEAM, not_team must be readable; BACKING was asked with the old \
             groups: {got:?}"
        );
        // And TEAM's file is refused (the kernel refuses it already, BACKING would too).
        assert_eq!(
            errno_of(std::fs::read(mnt.join("team_only"))),
            Some(libc::EACCES)
        );
    })
    .join()
    .unwrap();
}

/// `clone3` arguments (`struct clone_args`, size version 2: with `set_tid`).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// Runs `argv` as a new process whose pid is `pid` (`clone3` with `set_tid`, root only) and
/// waits for it; `Err(errno)` when the pid could not be had, else the exit status.
fn run_with_pid(pid: i32, argv: &[&str]) -> Result<i32, i32> {
    let args: Vec<CString> = argv.iter().map(|a| CString::new(*a).unwrap()).collect();
    let mut ptrs: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    let env: [*const libc::c_char; 1] = [std::ptr::null()];
    let tids = [pid];
    let cl = CloneArgs {
        exit_signal: libc::SIGCHLD as u64,
        set_tid: tids.as_ptr() as u64,
        set_tid_size: 1,
        ..CloneArgs::default()
    };
    // SAFETY: `cl` is a valid clone_args of the size passed, `tids` outlives the call. Without
    // CLONE_VM the child gets a copy of this (multi-threaded) process with one thread, and
    // only calls execve/_exit there (async-signal-safe; everything was allocated before).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &cl as *const CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    if rc == 0 {
        // SAFETY: in the child: exec the prepared argv, or exit at once.
        unsafe {
            libc::execve(ptrs[0], ptrs.as_ptr(), env.as_ptr());
            libc::_exit(127);
        }
    }
    if rc < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
    }
    assert_eq!(rc, i64::from(pid));
    let mut status = 0;
    // SAFETY: waits for our own child; `status` is a valid out pointer.
    let w = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(w, pid);
    Ok(status)
}

/// A process in TEAM reads through the mount and exits; a new process of the same user, not in
/// TEAM, gets the very same pid number at once and reads `not_team`: its own groups count.
#[test]
fn a_reused_pid_does_not_inherit_the_old_process_groups() {
    let m = mounted();
    let setpriv = ["/usr/bin/setpriv", "/bin/setpriv"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("setpriv (util-linux) is needed");
    let team_only = m.mnt.join("team_only");
    let not_team = m.mnt.join("not_team");
    let (uid, gid) = (format!("--reuid={A}"), format!("--regid={A}"));
    for attempt in 0.. {
        // setpriv execs cat: the FUSE requests come from this pid
        let first = std::process::Command::new(setpriv)
            .args([&uid, &gid, &format!("--groups={TEAM}"), "--", "cat"])
            .arg(&team_only)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let pid = i32::try_from(first.id()).unwrap();
        let out = first.wait_with_output().unwrap();
        assert!(out.status.success(), "cat team_only in TEAM");
        let second = [
            setpriv,
            &uid,
            &gid,
            "--clear-groups",
            "--",
            "cat",
            not_team.to_str().unwrap(),
        ];
        match run_with_pid(pid, &second) {
            Ok(status) => {
                assert!(
                    libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
                    "pid {pid} reused by a process outside TEAM: cat not_team failed (status \
                     {status:#x}); BACKING was asked with the previous process's groups"
                );
                return;
            }
            // another process took the number meanwhile: try with a new one
            Err(libc::EEXIST) if attempt < 20 => continue,
            Err(e) => panic!(
                "clone3 with set_tid={pid} failed: {} (needs root and Linux 5.5)",
                std::io::Error::from_raw_os_error(e)
            ),
        }
    }
}
