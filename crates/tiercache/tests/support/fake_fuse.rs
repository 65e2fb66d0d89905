//! A FUSE mount with a source and an owner of the test's choosing, as the mount table shows
//! one that `fusermount3 -o fsname=SOURCE,subtype=tiercache` makes for a user: `fusermount3`
//! (set-uid root) opens `/dev/fuse` and calls `mount(2)` with type `fuse.tiercache`, the
//! user's source, `nosuid,nodev` and `user_id=`/`group_id=` set to the calling user. The test
//! (root) makes that very call itself, so it does not depend on `/dev/fuse` being open to
//! other users. No file system is served: the connection is closed at once, so an access
//! fails at once (as after its daemon died) instead of waiting.
#![allow(dead_code, clippy::unwrap_used)]

use std::ffi::CString;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// The mount; detached on drop.
pub struct FakeFuse {
    mnt: PathBuf,
}

impl FakeFuse {
    /// Mounts it on `mnt` with `source`, made by `uid` (gid the same number).
    pub fn mount(mnt: &Path, source: &str, uid: u32) -> FakeFuse {
        let dev = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/fuse")
            .unwrap();
        let data = format!(
            "fd={},rootmode=40000,user_id={uid},group_id={uid}",
            dev.as_raw_fd()
        );
        let c = |s: &str| CString::new(s).unwrap();
        let (src, target) = (c(source), c(mnt.to_str().unwrap()));
        let (fstype, data) = (c("fuse.tiercache"), c(&data));
        // SAFETY: valid NUL-terminated strings that outlive the call.
        let rc = unsafe {
            libc::mount(
                src.as_ptr(),
                target.as_ptr(),
                fstype.as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                data.as_ptr().cast(),
            )
        };
        assert_eq!(
            rc,
            0,
            "mount of a FUSE file system on {}: {} (the tests need root)",
            mnt.display(),
            std::io::Error::last_os_error()
        );
        drop(dev);
        FakeFuse {
            mnt: mnt.to_path_buf(),
        }
    }
}

impl Drop for FakeFuse {
    fn drop(&mut self) {
        let c = CString::new(self.mnt.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    }
}
