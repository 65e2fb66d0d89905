//! Bug: EBADF under concurrent open/close with forced forgets — a release set the tier's handle count to 0 with another handle still open, and a forget overtaken by a new open of the same inode dropped the state that open was using, so its reads and writes failed with EBADF.
#![allow(clippy::unwrap_used)]

mod common;

use common::{make_file, open, small_config};
use std::fs::File;
use std::io;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;
use tiercache_manager::{BackingIo, Class, FileId, MemCache, RealBacking};

#[test]
fn a_release_leaves_the_other_open_handles_of_the_file_working() {
    let dir = tempfile::tempdir().unwrap();
    let p = make_file(dir.path(), "f", &[b'a'; 4096]);
    let cache = MemCache::with_real_device(small_config(64)).unwrap();
    let id = open(&cache, &p, Class::NORMAL);
    cache.read(id, 0, 4096).unwrap(); // cached
    let again = open(&cache, &p, Class::NORMAL);
    assert_eq!(id, again);
    cache.release(id); // the first handle closes; the second is still open
    assert_eq!(cache.read(id, 0, 4).unwrap(), b"aaaa");
    cache.write(id, 0, b"bb").unwrap();
    cache.fsync(id, false).unwrap();
    cache.release(id);
    assert_eq!(&std::fs::read(&p).unwrap()[..4], b"bbaa");
}

/// BACKING writes wait until the test lets them go (once `hold` is set).
#[derive(Debug, Default)]
struct Gate {
    state: Mutex<(bool, bool)>, // (hold, a writer is waiting)
    cv: Condvar,
}

#[derive(Debug)]
struct GatedWrites(Arc<Gate>);

impl BackingIo for GatedWrites {
    fn read_at(&self, file: FileId, fd: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        RealBacking.read_at(file, fd, buf, offset)
    }
    fn write_at(&self, file: FileId, fd: &File, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut st = self.0.state.lock().unwrap();
        if st.0 {
            st.1 = true;
            self.0.cv.notify_all();
            while st.0 {
                st = self.0.cv.wait(st).unwrap();
            }
        }
        drop(st);
        RealBacking.write_at(file, fd, buf, offset)
    }
    fn sync(&self, file: FileId, fd: &File, datasync: bool) -> io::Result<()> {
        RealBacking.sync(file, fd, datasync)
    }
    fn set_len(&self, file: FileId, fd: &File, len: u64) -> io::Result<()> {
        RealBacking.set_len(file, fd, len)
    }
}

#[test]
fn a_forget_overtaken_by_a_new_open_leaves_the_open_handle_its_state() {
    let dir = tempfile::tempdir().unwrap();
    let p = make_file(dir.path(), "f", &[b'a'; 4096]);
    let gate = Arc::new(Gate::default());
    let cache = Arc::new(
        MemCache::new(small_config(64), Arc::new(GatedWrites(Arc::clone(&gate)))).unwrap(),
    );
    let id = open(&cache, &p, Class::NORMAL);
    cache.write(id, 0, b"bb").unwrap();
    cache.release(id); // closed and dirty
    gate.state.lock().unwrap().0 = true;
    // The kernel forgot the node: the forget writes the dirty block back (held at the gate).
    let forget = {
        let cache = Arc::clone(&cache);
        std::thread::spawn(move || cache.forget(id))
    };
    {
        let mut st = gate.state.lock().unwrap();
        while !st.1 {
            st = gate.cv.wait_timeout(st, Duration::from_secs(10)).unwrap().0;
            assert!(
                st.1 || !forget.is_finished(),
                "the forget wrote nothing back"
            );
        }
    }
    // Meanwhile the kernel looked the inode up again and opened it.
    assert_eq!(open(&cache, &p, Class::NORMAL), id);
    gate.state.lock().unwrap().0 = false;
    gate.cv.notify_all();
    forget.join().unwrap();
    // The new handle works, with the file's current bytes.
    assert_eq!(cache.read(id, 0, 4).unwrap(), b"bbaa");
    cache.write(id, 2, b"cc").unwrap();
    cache.fsync(id, false).unwrap();
    cache.release(id);
    assert_eq!(&std::fs::read(&p).unwrap()[..4], b"bbcc");
    cache.check_invariants().unwrap();
}
