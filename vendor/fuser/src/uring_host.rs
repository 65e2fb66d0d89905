//! What the ring transport needs to know of the machine: the CPUs the kernel makes queues for,
//! pinning a thread to one, and the FUSE connection's control file.

use std::io;

use log::debug;

/// The number of request queues the kernel makes: one per possible CPU.
pub(crate) fn possible_cpus() -> usize {
    let from_sysfs = std::fs::read_to_string("/sys/devices/system/cpu/possible")
        .ok()
        .and_then(|s| count_cpu_list(s.trim()));
    from_sysfs.unwrap_or_else(|| {
        // SAFETY: sysconf has no preconditions.
        let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
        usize::try_from(n).unwrap_or(1).max(1)
    })
}

/// Counts the CPUs of a kernel CPU list such as `0-3,8-11` or `0`.
fn count_cpu_list(s: &str) -> Option<usize> {
    let mut n = 0usize;
    for part in s.split(',') {
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (a.parse::<usize>().ok()?, b.parse::<usize>().ok()?),
            None => {
                let a = part.parse::<usize>().ok()?;
                (a, a)
            }
        };
        n += hi.checked_sub(lo)? + 1;
    }
    (n > 0).then_some(n)
}

/// The `abort` file of the FUSE connection mounted on `mountpoint`, from the mount's device
/// number in `/proc/self/mountinfo` (the connection is named by it in the fuse control file
/// system). Read from the mount table, not by `stat`: that would be a request to this very
/// connection, which may be the one that is stuck.
pub(crate) fn abort_file(mountpoint: &std::path::Path) -> Option<std::path::PathBuf> {
    // Made absolute without resolving it: looking at the mount's root before INIT is answered
    // would wait on this very connection. The mount table names it as it was mounted.
    let want = std::env::current_dir().ok()?.join(mountpoint);
    let table = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mut dev = None;
    for line in table.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        if f.len() > 4 && unescape(f[4]) == want.as_os_str().as_encoded_bytes() {
            dev = Some(f[2]); // the last mount on that path wins
        }
    }
    let (major, minor) = dev?.split_once(':')?;
    let (major, minor): (u64, u64) = (major.parse().ok()?, minor.parse().ok()?);
    // The kernel's dev_t: major << 20 | minor.
    let id = (major << 20) | minor;
    Some(format!("/sys/fs/fuse/connections/{id}/abort").into())
}

/// A mountinfo path field with its octal escapes (`\040` for a space) undone.
fn unescape(field: &str) -> Vec<u8> {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let oct = b
            .get(i + 1..i + 4)
            .filter(|d| b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match oct {
            Some(d) => {
                out.push(
                    d.iter()
                        .fold(0u8, |a, c| a.wrapping_mul(8).wrapping_add(c - b'0')),
                );
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    out
}

pub(crate) fn pin_to_cpu(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is empty; CPU_SET and sched_setaffinity act on this thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if cpu >= 8 * size_of::<libc::cpu_set_t>() {
            return;
        }
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) != 0 {
            // An offline CPU, or one outside this process's cpuset: the queue still works,
            // its thread just runs wherever the scheduler puts it.
            debug!(
                "ring queue {cpu}: not pinned: {}",
                io::Error::last_os_error()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_count_ranges_and_singles() {
        assert_eq!(count_cpu_list("0-1"), Some(2));
        assert_eq!(count_cpu_list("0"), Some(1));
        assert_eq!(count_cpu_list("0-3,8-11"), Some(8));
        assert_eq!(count_cpu_list("3-1"), None);
        assert_eq!(count_cpu_list("x"), None);
    }

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape("/mnt/a\\040b"), b"/mnt/a b");
        assert_eq!(unescape("/plain"), b"/plain");
        assert_eq!(unescape("/trailing\\04"), b"/trailing\\04");
    }
}
