//! Bug: `truncate(2)` by path returned EBADF for a file that was closed, clean and still had cached blocks (the memory tier had let go of its backing descriptor and ignored the writable one the FUSE layer passes).
#![allow(clippy::unwrap_used)]

mod support;

use support::Mount;

use std::ffi::CString;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

fn truncate_by_path(p: &Path, len: i64) -> std::io::Result<()> {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    if unsafe { libc::truncate(c.as_ptr(), len) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[test]
fn truncate_by_path_of_a_closed_cached_file_succeeds() {
    let m = Mount::new(&["--memory", "8M"]);
    let content: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(m.backing.join("f"), &content).unwrap();
    let path = m.mnt.join("f");
    let mut got = Vec::new();
    std::fs::File::open(&path)
        .unwrap()
        .read_to_end(&mut got)
        .unwrap(); // cached, then closed
    assert_eq!(got, content);
    // RELEASE is asynchronous, and the flusher runs every second: let both pass.
    std::thread::sleep(Duration::from_millis(1500));
    truncate_by_path(&path, 10).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 10);
    assert_eq!(std::fs::read(&path).unwrap(), content[..10]);
    assert_eq!(std::fs::read(m.backing.join("f")).unwrap(), content[..10]);
    // Growing it again shows zeros, not the cached old bytes.
    truncate_by_path(&path, 5000).unwrap();
    let mut want = content[..10].to_vec();
    want.resize(5000, 0);
    assert_eq!(std::fs::read(&path).unwrap(), want);
}
