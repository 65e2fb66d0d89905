//! The live `/proc/<tid>/status` of FUSE callers, where their supplementary groups are read.
//!
//! FUSE passes a request's fsuid, fsgid and pid, not its groups. The pid is the calling
//! *thread's* id (the kernel fills it with `task_pid(current)` in the connection's pid
//! namespace), and credentials, groups included, belong to each thread: so the groups are read
//! from `/proc/<tid>/status`. One descriptor per recent caller thread is kept open and read
//! with `pread` at offset 0 for every request that needs the groups:
//! - procfs builds the file from the thread's credentials *at each read from offset 0*, so a
//!   group dropped with `setgroups` is gone at the caller's next request (no time to live);
//! - a procfs descriptor stays bound to the thread it was opened for (its `struct pid`, not its
//!   number): once that thread is gone every read fails with `ESRCH`, also when a new process or
//!   thread got the same number. The entry is then dropped and the number opened anew, so one
//!   caller's groups are never used for another.
//!
//! The descriptors count against the daemon's open-files limit, so they are bounded (least
//! recently used first out); a caller whose descriptor was let go costs one `open` more. An
//! open that runs out of descriptors lets half of them go and tries once more.
//!
//! What this cannot see: a request whose thread was gone and its number reused *before* the
//! first read (its status is the new thread's; the fsuid/fsgid check in `creds` then usually
//! leaves the groups out), and callers in another pid namespace (pid 0: no groups).

use std::cell::RefCell;
use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Largest status file read (a thread in 65,536 groups has a ~450 KiB one).
const MAX_STATUS: usize = 1 << 20;

#[derive(Debug)]
struct Entry {
    fd: Arc<File>,
    last_use: u64,
}

#[derive(Debug, Default)]
struct Inner {
    map: HashMap<u32, Entry>,
    tick: u64,
}

/// Open status files of caller threads, by thread id (bounded LRU).
#[derive(Debug)]
pub(crate) struct StatusFiles {
    inner: Mutex<Inner>,
    capacity: usize,
}

thread_local! {
    /// The serving thread's buffer for status files (grown as needed, kept).
    static BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl StatusFiles {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            capacity: capacity.max(1),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` on the status of thread `tid` as of now, `None` when there is no such thread
    /// (gone, or not in the daemon's pid namespace).
    pub(crate) fn with_status<T>(
        &self,
        tid: u32,
        f: impl FnOnce(Option<&str>) -> T,
    ) -> io::Result<T> {
        BUF.with(|b| {
            let mut buf = b.borrow_mut();
            let found = self.read(tid, &mut buf)?;
            Ok(f(found.then(|| String::from_utf8_lossy(&buf)).as_deref()))
        })
    }

    /// Reads the status of `tid` into `buf`; `false` when the thread is gone.
    fn read(&self, tid: u32, buf: &mut Vec<u8>) -> io::Result<bool> {
        if let Some(fd) = self.get(tid) {
            match read_whole(&fd, buf) {
                Ok(()) => return Ok(true),
                Err(e) => {
                    // ESRCH: the thread it was opened for is gone (its number may name
                    // another one now, opened below); anything else: opened anew as well.
                    self.remove(tid, &fd);
                    if e.raw_os_error() != Some(libc::ESRCH) {
                        log::debug!("/proc/{tid}/status: {e}; reopening");
                    }
                }
            }
        }
        let fd = match self.open(tid) {
            Ok(fd) => Arc::new(fd),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ESRCH)) => {
                return Ok(false)
            }
            Err(e) => return Err(e),
        };
        match read_whole(&fd, buf) {
            Ok(()) => {
                self.insert(tid, fd);
                Ok(true)
            }
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn get(&self, tid: u32) -> Option<Arc<File>> {
        let mut inner = self.lock();
        inner.tick += 1;
        let tick = inner.tick;
        inner.map.get_mut(&tid).map(|e| {
            e.last_use = tick;
            Arc::clone(&e.fd)
        })
    }

    /// Drops the entry of `tid` if it still holds `fd` (another thread may have replaced it).
    fn remove(&self, tid: u32, fd: &Arc<File>) {
        let mut inner = self.lock();
        if inner.map.get(&tid).is_some_and(|e| Arc::ptr_eq(&e.fd, fd)) {
            inner.map.remove(&tid);
        }
    }

    fn insert(&self, tid: u32, fd: Arc<File>) {
        let gone = {
            let mut inner = self.lock();
            inner.tick += 1;
            let last_use = inner.tick;
            let mut gone = Vec::new();
            if inner.map.len() >= self.capacity && !inner.map.contains_key(&tid) {
                gone = Self::evict(&mut inner, 1);
            }
            if let Some(old) = inner.map.insert(tid, Entry { fd, last_use }) {
                gone.push(old.fd);
            }
            gone
        };
        drop(gone); // closed outside the lock
    }

    /// Takes the `n` least recently used entries out (closed by the caller, outside the lock).
    fn evict(inner: &mut Inner, n: usize) -> Vec<Arc<File>> {
        let mut by_age: Vec<(u64, u32)> = inner.map.iter().map(|(&t, e)| (e.last_use, t)).collect();
        by_age.sort_unstable();
        by_age
            .into_iter()
            .take(n)
            .filter_map(|(_, t)| inner.map.remove(&t).map(|e| e.fd))
            .collect()
    }

    /// Opens `/proc/<tid>/status`; out of descriptors, lets half of the cached ones go and
    /// tries once more.
    fn open(&self, tid: u32) -> io::Result<File> {
        let path = format!("/proc/{tid}/status");
        match File::open(&path) {
            Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                let shed = {
                    let mut inner = self.lock();
                    let n = inner.map.len().div_ceil(2);
                    Self::evict(&mut inner, n)
                };
                drop(shed);
                File::open(&path)
            }
            r => r,
        }
    }
}

/// Reads the whole of a procfs file into `buf` with one `pread` at offset 0 (each such read
/// regenerates it: two reads could see two different states), growing `buf` until it fits.
fn read_whole(fd: &File, buf: &mut Vec<u8>) -> io::Result<()> {
    let mut len = buf.capacity().max(4096);
    loop {
        buf.resize(len, 0);
        let n = loop {
            match fd.read_at(buf, 0) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                r => break r?,
            }
        };
        if n < len {
            buf.truncate(n);
            return Ok(());
        }
        if len >= MAX_STATUS {
            return Err(io::Error::from_raw_os_error(libc::EFBIG));
        }
        len *= 2;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn tid() -> u32 {
        // SAFETY: gettid has no preconditions.
        u32::try_from(unsafe { libc::gettid() }).unwrap()
    }

    #[test]
    fn a_cached_descriptor_reads_the_live_status() {
        let s = StatusFiles::new(4);
        let me = tid();
        let name = |st: Option<&str>| {
            st.and_then(|t| t.lines().find_map(|l| l.strip_prefix("Pid:")))
                .map(|v| v.trim().to_owned())
        };
        assert_eq!(s.with_status(me, name).unwrap(), Some(me.to_string()));
        assert_eq!(s.lock().map.len(), 1);
        // read again through the same descriptor
        assert_eq!(s.with_status(me, name).unwrap(), Some(me.to_string()));
        assert_eq!(s.lock().map.len(), 1);
    }

    #[test]
    fn a_gone_thread_reads_as_none_and_its_entry_goes() {
        let s = StatusFiles::new(4);
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            tx.send(tid()).unwrap();
            done_rx.recv().unwrap();
        });
        let other = rx.recv().unwrap();
        assert!(s.with_status(other, |st| st.is_some()).unwrap());
        done_tx.send(()).unwrap();
        t.join().unwrap();
        // the descriptor is bound to the exited thread: ESRCH, and no reopen finds it. `join`
        // returns when the thread signals its exit, a moment before the kernel has released
        // it (its status stays readable that long), so allow that moment.
        let gone = (0..200).any(|_| {
            let present = s.with_status(other, |st| st.is_some()).unwrap();
            if present {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            !present
        });
        assert!(gone, "the exited thread's status still reads after 1 s");
        assert!(s.lock().map.is_empty());
    }

    #[test]
    fn the_least_recently_used_descriptor_goes_first() {
        let s = StatusFiles::new(2);
        let me = tid();
        // SAFETY: getpid has no preconditions.
        let pid = u32::try_from(unsafe { libc::getpid() }).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            tx.send(tid()).unwrap();
            done_rx.recv().unwrap();
        });
        let other = rx.recv().unwrap();
        for t in [me, pid, me, other] {
            assert!(s.with_status(t, |st| st.is_some()).unwrap());
        }
        let keys: std::collections::BTreeSet<u32> = s.lock().map.keys().copied().collect();
        // `pid` (the process's main thread, not this test thread) was the least recently used
        assert_eq!(keys, [me, other].into());
        done_tx.send(()).unwrap();
        t.join().unwrap();
    }
}
