//! The kernel's switch for FUSE over io_uring (`enable_uring` of the fuse module), for the tests
//! that mount on the rings.

use std::os::fd::AsRawFd;

use tiercache_fuse::ENABLE_URING_PARAM;

/// Every test that sets the switch holds this lock while it does, so no test sees another flip
/// it (mounts without the rings do not look at the switch).
const LOCK: &str = "/run/tiercache-tests-enable-uring.lock";

/// The switch set for the life of the guard, put back as found when it goes.
pub struct RingSwitch {
    was: String,
    _lock: std::fs::File,
}

impl RingSwitch {
    /// Sets the switch (waiting for another test that holds it). Panics, with what is missing,
    /// on a kernel without FUSE over io_uring: the tests that need it must not pass there.
    pub fn set(on: bool) -> Self {
        let lock = std::fs::File::options()
            .create(true)
            .append(true)
            .open(LOCK)
            .unwrap();
        // SAFETY: flock on a descriptor this function owns.
        assert_eq!(unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) }, 0);
        let was = std::fs::read_to_string(ENABLE_URING_PARAM).unwrap_or_else(|e| {
            panic!(
                "no FUSE over io_uring here ({ENABLE_URING_PARAM}: {e}): it needs Linux 6.14+ \
                 built with CONFIG_FUSE_IO_URING"
            )
        });
        std::fs::write(ENABLE_URING_PARAM, if on { "Y" } else { "N" }).unwrap();
        RingSwitch {
            was: was.trim().to_owned(),
            _lock: lock,
        }
    }
}

impl Drop for RingSwitch {
    fn drop(&mut self) {
        let _ = std::fs::write(ENABLE_URING_PARAM, &self.was);
    }
}
