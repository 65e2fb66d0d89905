//! Whether an inode opened by file handle lies beneath the BACKING directory.
//!
//! Recovery opens the files of a persistent tier's dirty blocks by the handles kept in the
//! tier's records. With CAP_DAC_READ_SEARCH `open_by_handle_at` decodes a handle to *any* inode
//! of the file system of the descriptor it is given (fs/fhandle.c: the "old permission model"
//! accepts every dentry; the mount's subtree is checked only for handles the caller marks
//! connectable, and the caller chooses the handle's bytes). A record forged by whoever can
//! write the cache file could so name a file outside BACKING. The check here is on the opened
//! inode, never on a path taken from the record: an inode counts as beneath BACKING when some
//! directory entry beneath the BACKING directory, reached without following a symlink or
//! crossing into another mount, names the same (device, inode). A hard link beneath BACKING
//! counts: that inode can be written through the mount anyway.
//!
//! Two ways to find such an entry:
//! - [`Backing::by_path`]: the path the kernel shows for the opened descriptor
//!   (`/proc/self/fd/N`), made relative to BACKING's own and resolved again from BACKING's
//!   descriptor with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
//!   RESOLVE_NO_XDEV)`; the path is only a hint — what counts is that the entry it resolves to
//!   is the same inode. A non-directory decoded from a handle whose dentry is not in the dcache
//!   (after a reboot, nothing is) is *disconnected*: its path says nothing, and this fails.
//! - [`Backing::walk`]: one walk of BACKING's tree for all the inodes still unplaced, by
//!   directory descriptors opened the same confined way (no symlinks, no other mounts, each
//!   directory once), stopping as soon as all are found.

use std::collections::HashSet;
use std::ffi::{CStr, CString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;

/// An inode: device and inode number, as `fstat` gives them now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Ident {
    pub dev: u64,
    pub ino: u64,
}

impl Ident {
    pub(crate) fn of(f: &File) -> io::Result<Self> {
        let m = f.metadata()?;
        Ok(Self {
            dev: m.dev(),
            ino: m.ino(),
        })
    }
}

/// The BACKING directory, open, and the path the kernel shows for it.
#[derive(Debug)]
pub(crate) struct Backing {
    dir: File,
    /// `/proc/self/fd` of `dir`: the prefix a connected path beneath it starts with.
    shown: Option<Vec<u8>>,
}

/// Resolution confined to BACKING's tree: no `..` above it, no symlinks (magic ones
/// included), no mount crossings.
const CONFINED: u64 = libc::RESOLVE_BENEATH
    | libc::RESOLVE_NO_SYMLINKS
    | libc::RESOLVE_NO_MAGICLINKS
    | libc::RESOLVE_NO_XDEV;

impl Backing {
    /// `dir` must be the open BACKING directory.
    pub(crate) fn new(dir: File) -> Self {
        let shown = shown_path(&dir).ok();
        Self { dir, shown }
    }

    pub(crate) fn dir(&self) -> &File {
        &self.dir
    }

    /// Whether the path the kernel shows for `f` (inode `id`) leads, from BACKING and
    /// confined to its tree, to that same inode. `false` says nothing either way.
    pub(crate) fn by_path(&self, f: &File, id: Ident) -> bool {
        let (Some(base), Ok(shown)) = (self.shown.as_deref(), shown_path(f)) else {
            return false;
        };
        let Some(rel) = relative_to(base, &shown) else {
            return false;
        };
        let Ok(rel) = CString::new(rel) else {
            return false;
        };
        open_confined(&self.dir, &rel, libc::O_PATH)
            .and_then(|g| Ident::of(&g))
            .is_ok_and(|g| g == id)
    }

    /// One walk of BACKING's tree for the regular files `want`; returns those found (a
    /// directory entry beneath BACKING names them). Stops as soon as all are found. A
    /// directory that cannot be opened or read (another mount, removed meanwhile) is skipped.
    pub(crate) fn walk(&self, want: &HashSet<Ident>) -> HashSet<Ident> {
        let mut found = HashSet::new();
        let inos: HashSet<u64> = want.iter().map(|i| i.ino).collect();
        let mut seen_dirs = HashSet::new();
        // Paths relative to BACKING, each resolved again from BACKING's descriptor, so that a
        // directory renamed or replaced by a symlink meanwhile cannot lead outside.
        let mut todo: Vec<Vec<u8>> = vec![b".".to_vec()];
        while let Some(rel) = todo.pop() {
            if found.len() == want.len() {
                break;
            }
            let Ok(c) = CString::new(rel.clone()) else {
                continue;
            };
            let Ok(dir) = open_confined(&self.dir, &c, libc::O_RDONLY | libc::O_DIRECTORY) else {
                continue;
            };
            // Each directory once (a corrupt tree with a loop cannot keep the walk going).
            if !Ident::of(&dir).is_ok_and(|d| seen_dirs.insert(d)) {
                continue;
            }
            let entries = match read_dir(&dir) {
                Ok(e) => e,
                Err(e) => {
                    log::warn!("recovery: reading BACKING/{}: {e}", rel.escape_ascii());
                    continue;
                }
            };
            for (ino, dtype, name) in entries {
                if name == b"." || name == b".." {
                    continue;
                }
                let is_dir = match dtype {
                    libc::DT_DIR => true,
                    libc::DT_REG if inos.contains(&ino) => {
                        note_if_wanted(&dir, &name, want, &mut found);
                        false
                    }
                    // The file system does not say: stat to know.
                    libc::DT_UNKNOWN => note_if_wanted(&dir, &name, want, &mut found),
                    _ => false,
                };
                if is_dir {
                    todo.push(join(&rel, &name));
                }
            }
        }
        found
    }
}

/// `rel/name`, or `name` when `rel` is BACKING itself (`.`).
fn join(rel: &[u8], name: &[u8]) -> Vec<u8> {
    if rel == b"." {
        return name.to_vec();
    }
    let mut p = Vec::with_capacity(rel.len() + 1 + name.len());
    p.extend_from_slice(rel);
    p.push(b'/');
    p.extend_from_slice(name);
    p
}

/// Stats `name` in `dir` (not following a symlink); notes it when it is a regular file in
/// `want`. Returns whether it is a directory.
fn note_if_wanted(
    dir: &File,
    name: &[u8],
    want: &HashSet<Ident>,
    found: &mut HashSet<Ident>,
) -> bool {
    let Ok(c) = CString::new(name) else {
        return false;
    };
    let Ok(st) = fstat_at(dir, &c) else {
        return false;
    };
    let id = Ident {
        dev: st.st_dev,
        ino: st.st_ino,
    };
    match st.st_mode & libc::S_IFMT {
        libc::S_IFREG if want.contains(&id) => {
            found.insert(id);
            false
        }
        libc::S_IFDIR => true,
        _ => false,
    }
}

/// The path the kernel shows for an open descriptor (`readlink /proc/self/fd/N`).
fn shown_path(f: &File) -> io::Result<Vec<u8>> {
    let link = format!("/proc/self/fd/{}", f.as_raw_fd());
    std::fs::read_link(link).map(|p| p.into_os_string().as_bytes().to_vec())
}

/// `shown` relative to `base` when it lies beneath it (at a `/` boundary); `None` otherwise,
/// and for `base` itself.
fn relative_to<'a>(base: &[u8], shown: &'a [u8]) -> Option<&'a [u8]> {
    let rest = shown.strip_prefix(base)?;
    let rest = if base.ends_with(b"/") {
        rest
    } else {
        rest.strip_prefix(b"/")?
    };
    (!rest.is_empty()).then_some(rest)
}

/// `openat2(dir, rel, flags)` confined to `dir`'s tree ([`CONFINED`]), close-on-exec and not
/// following a final symlink.
fn open_confined(dir: &File, rel: &CStr, flags: i32) -> io::Result<File> {
    // SAFETY: an all-zero `open_how` is a valid value of this plain C struct (mode 0).
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (flags | libc::O_CLOEXEC | libc::O_NOFOLLOW) as u64;
    how.resolve = CONFINED;
    // SAFETY: `rel` is NUL-terminated and `how` a valid `struct open_how` whose size is
    // passed; both outlive the call, which only reads them; `dir` keeps its descriptor open.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            rel.as_ptr(),
            std::ptr::addr_of!(how),
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = i32::try_from(fd).map_err(|_| io::Error::other("openat2: descriptor out of range"))?;
    // SAFETY: `fd` was just opened and is owned by nobody else.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`.
fn fstat_at(dir: &File, name: &CStr) -> io::Result<libc::stat> {
    // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `name` is NUL-terminated; the kernel writes only into `st`, which outlives the
    // call; `dir` keeps its descriptor open.
    let rc = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

/// The entries of an open directory: (inode number, `d_type`, name), `.` and `..` included.
fn read_dir(dir: &File) -> io::Result<Vec<(u64, u8, Vec<u8>)>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        // SAFETY: `buf` is writable for `buf.len()` bytes and outlives the call; `dir` keeps
        // its descriptor open.
        let n = unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                dir.as_raw_fd(),
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        let n = usize::try_from(n).map_err(|_| io::Error::last_os_error())?;
        if n == 0 {
            return Ok(out);
        }
        parse_dirents(&buf[..n.min(buf.len())], &mut out);
    }
}

/// Parses `struct linux_dirent64` records (d_ino u64, d_off i64, d_reclen u16, d_type u8,
/// d_name); stops at the first malformed one.
fn parse_dirents(mut buf: &[u8], out: &mut Vec<(u64, u8, Vec<u8>)>) {
    const HDR: usize = 19;
    while buf.len() >= HDR {
        let mut ino = [0u8; 8];
        ino.copy_from_slice(&buf[0..8]);
        let reclen = usize::from(u16::from_ne_bytes([buf[16], buf[17]]));
        if reclen < HDR || reclen > buf.len() {
            return;
        }
        let name = &buf[HDR..reclen];
        let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
        out.push((u64::from_ne_bytes(ino), buf[18], name[..end].to_vec()));
        buf = &buf[reclen..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn ident(p: &Path) -> Ident {
        let m = std::fs::symlink_metadata(p).expect("stat");
        Ident {
            dev: m.dev(),
            ino: m.ino(),
        }
    }

    fn file(p: &Path) -> Ident {
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, b"x").expect("write");
        ident(p)
    }

    /// Unmounts (lazily) when dropped.
    struct BindMount(std::path::PathBuf);

    impl BindMount {
        fn new(from: &Path, on: &Path) -> Self {
            let c = |p: &Path| CString::new(p.as_os_str().as_bytes()).expect("path");
            let (f, o) = (c(from), c(on));
            // SAFETY: valid NUL-terminated paths; no data argument.
            let rc = unsafe {
                libc::mount(
                    f.as_ptr(),
                    o.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND,
                    std::ptr::null(),
                )
            };
            assert_eq!(
                rc,
                0,
                "bind mount (the tests run as root): {}",
                io::Error::last_os_error()
            );
            Self(on.to_path_buf())
        }
    }

    impl Drop for BindMount {
        fn drop(&mut self) {
            let c = CString::new(self.0.as_os_str().as_bytes()).expect("path");
            // SAFETY: a valid NUL-terminated path.
            unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        }
    }

    #[test]
    fn relative_paths_start_below_the_base_at_a_slash() {
        assert_eq!(relative_to(b"/a/b", b"/a/b/c/d"), Some(&b"c/d"[..]));
        assert_eq!(relative_to(b"/a/b", b"/a/bc/d"), None);
        assert_eq!(relative_to(b"/a/b", b"/a/b"), None);
        assert_eq!(relative_to(b"/a/b", b"/"), None);
        assert_eq!(relative_to(b"/", b"/x/y"), Some(&b"x/y"[..]));
        assert_eq!(relative_to(b"/", b"/"), None);
    }

    #[test]
    fn an_open_file_is_placed_by_its_path_only_beneath_backing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let b = dir.path().join("b");
        let inside = file(&b.join("x/y/f"));
        let outside = file(&dir.path().join("bb/f"));
        let backing = Backing::new(File::open(&b).expect("open"));
        let f = File::open(b.join("x/y/f")).expect("open");
        assert!(backing.by_path(&f, inside));
        // The path must lead to the same inode, not merely to some file.
        assert!(!backing.by_path(&f, outside));
        let g = File::open(dir.path().join("bb/f")).expect("open");
        assert!(!backing.by_path(&g, outside));
    }

    #[test]
    fn the_walk_finds_files_beneath_backing_and_hard_links_to_them() {
        let dir = tempfile::tempdir().expect("tempdir");
        let b = dir.path().join("b");
        let deep = file(&b.join("1/2/3/4/f"));
        let top = file(&b.join("g"));
        let linked = file(&dir.path().join("out/h"));
        std::fs::hard_link(dir.path().join("out/h"), b.join("1/h")).expect("link");
        let alone = file(&dir.path().join("out/i"));
        let backing = Backing::new(File::open(&b).expect("open"));
        let want: HashSet<Ident> = [deep, top, linked, alone].into_iter().collect();
        let found = backing.walk(&want);
        let expect: HashSet<Ident> = [deep, top, linked].into_iter().collect();
        assert_eq!(found, expect);
    }

    #[test]
    fn the_walk_follows_no_symlink_and_enters_no_other_mount() {
        let dir = tempfile::tempdir().expect("tempdir");
        let b = dir.path().join("b");
        let out = dir.path().join("out");
        let secret = file(&out.join("secret"));
        let inside = file(&b.join("f"));
        std::os::unix::fs::symlink(&out, b.join("link")).expect("symlink");
        std::fs::create_dir_all(b.join("mnt")).expect("mkdir");
        let _bind = BindMount::new(&out, &b.join("mnt"));
        assert_eq!(
            ident(&b.join("mnt/secret")),
            secret,
            "the bind mount shows it"
        );
        let backing = Backing::new(File::open(&b).expect("open"));
        let want: HashSet<Ident> = [secret, inside].into_iter().collect();
        let found = backing.walk(&want);
        assert_eq!(found, [inside].into_iter().collect());
        let f = File::open(b.join("mnt/secret")).expect("open");
        assert!(!backing.by_path(&f, secret), "through the bind mount");
    }
}
