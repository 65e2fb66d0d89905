//! File handles of BACKING files (`name_to_handle_at` / `open_by_handle_at`): a persistent tier
//! keeps a file's handle with its dirty blocks, so that after a crash they are written to the
//! right file whatever it is called now (a rename does not change the handle; a deleted file's
//! handle no longer opens, and its blocks have nowhere to go).

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use tiercache_tier::{FileHandle, MAX_HANDLE_BYTES};

/// `struct file_handle` with room for the longest handle; `u32` words for its alignment.
#[repr(C)]
struct HandleBuf {
    handle_bytes: u32,
    handle_type: i32,
    f_handle: [u8; MAX_HANDLE_BYTES],
}

/// The handle of the open file `f`.
pub fn file_handle(f: &File) -> io::Result<FileHandle> {
    file_handle_and_mount(f).map(|(h, _)| h)
}

/// The handle of the open file `f`, and the id of the mount it is on (`open_by_handle_at`
/// resolves a handle only on the file system of the descriptor it is given).
pub fn file_handle_and_mount(f: &File) -> io::Result<(FileHandle, i32)> {
    let mut buf = HandleBuf {
        handle_bytes: MAX_HANDLE_BYTES as u32,
        handle_type: 0,
        f_handle: [0; MAX_HANDLE_BYTES],
    };
    let mut mount_id: libc::c_int = 0;
    // SAFETY: `buf` is a `struct file_handle` whose `handle_bytes` says how much room follows
    // the header; the kernel writes at most that much into it and `mount_id`, both of which
    // outlive the call; with AT_EMPTY_PATH and "" it describes the open descriptor of `f`.
    let rc = unsafe {
        libc::name_to_handle_at(
            f.as_raw_fd(),
            c"".as_ptr(),
            std::ptr::addr_of_mut!(buf).cast::<libc::file_handle>(),
            &mut mount_id,
            libc::AT_EMPTY_PATH,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let n = (buf.handle_bytes as usize).min(MAX_HANDLE_BYTES);
    Ok((
        FileHandle {
            kind: buf.handle_type,
            bytes: buf.f_handle[..n].to_vec(),
        },
        mount_id,
    ))
}

/// Opens the file `h` names on the file system of `mount` (any open file or directory there),
/// with `flags` (`O_RDWR`, ...). Needs CAP_DAC_READ_SEARCH. A deleted file gives `ESTALE`.
pub fn open_by_handle(mount: &File, h: &FileHandle, flags: i32) -> io::Result<File> {
    if h.bytes.is_empty() || h.bytes.len() > MAX_HANDLE_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("file handle of {} bytes", h.bytes.len()),
        ));
    }
    let mut buf = HandleBuf {
        handle_bytes: h.bytes.len() as u32,
        handle_type: h.kind,
        f_handle: [0; MAX_HANDLE_BYTES],
    };
    buf.f_handle[..h.bytes.len()].copy_from_slice(&h.bytes);
    // SAFETY: `buf` is a valid `struct file_handle` of `handle_bytes` bytes that outlives the
    // call; the kernel only reads it.
    let fd = unsafe {
        libc::open_by_handle_at(
            mount.as_raw_fd(),
            std::ptr::addr_of_mut!(buf).cast::<libc::file_handle>(),
            flags | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by nobody else.
    Ok(unsafe { File::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn a_handle_reopens_the_file_after_a_rename_and_not_after_an_unlink() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("a");
        std::fs::write(&p, b"hello").expect("write");
        let f = File::open(&p).expect("open");
        let h = match file_handle(&f) {
            Ok(h) => h,
            Err(e) => panic!("name_to_handle_at on the test directory failed: {e}"),
        };
        let root = File::open(dir.path()).expect("dir");
        std::fs::rename(&p, dir.path().join("b")).expect("rename");
        let g = open_by_handle(&root, &h, libc::O_RDONLY).expect("open by handle (needs root)");
        assert_eq!(
            g.metadata().expect("stat").ino(),
            f.metadata().expect("stat").ino()
        );
        drop((f, g));
        std::fs::remove_file(dir.path().join("b")).expect("unlink");
        let e = open_by_handle(&root, &h, libc::O_RDONLY).expect_err("deleted");
        assert_eq!(e.raw_os_error(), Some(libc::ESTALE), "{e}");
    }
}
