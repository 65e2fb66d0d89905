# Prints one line per operation: name and OK or the errno name. Runs in the
# current directory; the harness compares mount against plain directory.
import ctypes, errno, fcntl, os, stat

libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD = -100


def t(name, f):
    try:
        r = f()
        print(name, "OK", "" if r is None else r)
    except OSError as e:
        print(name, errno.errorcode.get(e.errno, e.errno))


def check(r):
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return r


def renameat2(a, b, flags):
    return check(libc.renameat2(AT_FDCWD, a.encode(), AT_FDCWD, b.encode(), flags))


def read_all(p):
    with open(p, "rb") as f:
        return f.read()


os.makedirs("e/d/sub")
os.makedirs("e/empty")
with open("e/f", "w") as f:
    f.write("fff")
with open("e/g", "w") as f:
    f.write("ggg")
os.symlink("g", "e/sl")

t("open_excl_existing", lambda: os.open("e/f", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
t("open_missing", lambda: os.open("e/missing", os.O_RDONLY))
t("open_creat_in_missing_dir", lambda: os.open("e/nodir/x", os.O_CREAT | os.O_WRONLY))
t("open_nofollow_symlink", lambda: os.open("e/sl", os.O_RDONLY | os.O_NOFOLLOW))
t("open_directory_on_file", lambda: os.open("e/f", os.O_RDONLY | os.O_DIRECTORY))
t("open_dir_for_write", lambda: os.open("e/d", os.O_WRONLY))
t("read_dir", lambda: os.read(os.open("e/d", os.O_RDONLY), 10))
t("stat_through_file", lambda: os.stat("e/g/x"))
t("rmdir_nonempty", lambda: os.rmdir("e/d"))
t("rmdir_file", lambda: os.rmdir("e/f"))
t("unlink_missing", lambda: os.unlink("e/missing"))
t("unlink_dir", lambda: os.unlink("e/d"))
t("mkdir_exists", lambda: os.mkdir("e/d"))
t("mkfifo_exists", lambda: os.mkfifo("e/f"))
t("symlink_exists", lambda: os.symlink("x", "e/g"))
t("link_dir", lambda: os.link("e/d", "e/dl"))
t("link_exists", lambda: os.link("e/f", "e/g"))
t("readlink_file", lambda: os.readlink("e/g"))
t("rename_noreplace_existing", lambda: renameat2("e/f", "e/g", 1))
t("rename_noreplace_new", lambda: renameat2("e/f", "e/h", 1))
t("rename_exchange", lambda: renameat2("e/h", "e/g", 2))
print("after_exchange", read_all("e/g"), read_all("e/h"))
t("rename_exchange_missing", lambda: renameat2("e/h", "e/nope", 2))
t("rename_exchange_file_dir", lambda: renameat2("e/h", "e/empty", 2))
print("after_exchange_dir", stat.filemode(os.lstat("e/h").st_mode), stat.filemode(os.lstat("e/empty").st_mode))
t("rename_exchange_back", lambda: renameat2("e/h", "e/empty", 2))
t("rename_bad_flags", lambda: renameat2("e/h", "e/g", 3))
t("rename_into_self", lambda: os.rename("e/d", "e/d/sub/x"))
t("rename_file_over_dir", lambda: os.rename("e/g", "e/d"))
t("rename_dir_over_file", lambda: os.rename("e/empty", "e/g"))
t("rename_dir_over_nonempty", lambda: os.rename("e/empty", "e/d"))
t("rename_missing", lambda: os.rename("e/nope", "e/x"))
t("truncate_dir", lambda: os.truncate("e/d", 0))
fd = os.open("e/g", os.O_RDONLY)
t("ftruncate_rdonly", lambda: os.ftruncate(fd, 0))
t("write_rdonly", lambda: os.write(fd, b"x"))
os.close(fd)
fd = os.open("e/g", os.O_WRONLY)
t("read_wronly", lambda: os.read(fd, 1))
os.close(fd)
t("getxattr_missing", lambda: os.getxattr("e/g", "user.nope"))
t("setxattr", lambda: os.setxattr("e/g", "user.a", b"1"))
t("setxattr_create_exists", lambda: os.setxattr("e/g", "user.a", b"2", os.XATTR_CREATE))
t("setxattr_replace_missing", lambda: os.setxattr("e/g", "user.b", b"1", os.XATTR_REPLACE))
t("setxattr_replace", lambda: os.setxattr("e/g", "user.a", b"22", os.XATTR_REPLACE))
t("getxattr", lambda: os.getxattr("e/g", "user.a"))
buf = ctypes.create_string_buffer(1)
t("getxattr_small_buffer", lambda: check(libc.getxattr(b"e/g", b"user.a", buf, 1)))
t("getxattr_size_query", lambda: check(libc.getxattr(b"e/g", b"user.a", None, 0)))
t("listxattr_small_buffer", lambda: check(libc.listxattr(b"e/g", buf, 1)))
t("listxattr", lambda: sorted(os.listxattr("e/g")))
t("removexattr", lambda: os.removexattr("e/g", "user.a"))
t("removexattr_missing", lambda: os.removexattr("e/g", "user.a"))
t("setxattr_user_on_symlink", lambda: os.setxattr("e/sl", "user.x", b"1", follow_symlinks=False))
t("setxattr_trusted", lambda: os.setxattr("e/g", "trusted.t", b"1"))
t("getxattr_trusted", lambda: os.getxattr("e/g", "trusted.t"))
t("setxattr_bad_namespace", lambda: os.setxattr("e/g", "bogus.x", b"1"))
t("chmod_symlink_nofollow", lambda: check(libc.fchmodat(AT_FDCWD, b"e/sl", 0o700, 0x100)))
t("lchown_symlink", lambda: os.chown("e/sl", 12, 34, follow_symlinks=False))
print("symlink_owner", os.lstat("e/sl").st_uid, os.lstat("e/sl").st_gid, os.stat("e/sl").st_uid)
t("mknod_chr", lambda: os.mknod("e/chr", 0o600 | stat.S_IFCHR, os.makedev(1, 3)))
print("chr", stat.filemode(os.lstat("e/chr").st_mode), os.major(os.lstat("e/chr").st_rdev), os.minor(os.lstat("e/chr").st_rdev))
t("mknod_sock", lambda: os.mknod("e/sock", 0o600 | stat.S_IFSOCK))
t("mknod_reg", lambda: os.mknod("e/regnod", 0o640 | stat.S_IFREG))
print("regnod", stat.filemode(os.lstat("e/regnod").st_mode))

# utimensat with UTIME_OMIT / UTIME_NOW
class Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]
UTIME_NOW = (1 << 30) - 1
UTIME_OMIT = (1 << 30) - 2
os.utime("e/g", ns=(1_000_000_123, 2_000_000_456))
ts = (Timespec * 2)(Timespec(0, UTIME_OMIT), Timespec(3_000, 789))
t("utimens_omit_atime", lambda: check(libc.utimensat(AT_FDCWD, b"e/g", ts, 0)))
st = os.stat("e/g")
print("times", st.st_atime_ns, st.st_mtime_ns)
ts = (Timespec * 2)(Timespec(5, 0), Timespec(0, UTIME_OMIT))
t("utimens_omit_mtime", lambda: check(libc.utimensat(AT_FDCWD, b"e/g", ts, 0)))
st = os.stat("e/g")
print("times", st.st_atime_ns, st.st_mtime_ns)
ts = (Timespec * 2)(Timespec(0, UTIME_NOW), Timespec(0, UTIME_NOW))
t("utimens_now", lambda: check(libc.utimensat(AT_FDCWD, b"e/g", ts, 0)))
st = os.stat("e/g")
print("now_is_recent", st.st_mtime > 1_600_000_000)
ts = (Timespec * 2)(Timespec(0, 5_000_000_000), Timespec(0, 0))
t("utimens_bad_nsec", lambda: check(libc.utimensat(AT_FDCWD, b"e/g", ts, 0)))
t("utime_symlink_nofollow", lambda: os.utime("e/sl", ns=(7_000_000_000, 8_000_000_000), follow_symlinks=False))
print("symlink_mtime", os.lstat("e/sl").st_mtime_ns)

# open flags
fd = os.open("e/o", os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o640)
os.write(fd, b"0123456789")
os.close(fd)
fd = os.open("e/o", os.O_WRONLY | os.O_APPEND)
os.write(fd, b"AB")
t("pwrite_append_fd", lambda: os.pwrite(fd, b"CD", 0))
os.close(fd)
print("append", read_all("e/o"))
fd = os.open("e/o", os.O_RDWR | os.O_TRUNC)
print("trunc_size", os.fstat(fd).st_size)
os.write(fd, b"xyz")
os.close(fd)
print("after_trunc", read_all("e/o"))
fd = os.open("e/o", os.O_RDWR)
t("fallocate", lambda: os.posix_fallocate(fd, 0, 100_000))
print("size_after_fallocate", os.fstat(fd).st_size)
print("read_past_old_eof", os.pread(fd, 4, 99_996), os.pread(fd, 4, 100_000))
t("fallocate_keep_size", lambda: check(libc.fallocate(fd, 1, ctypes.c_long(0), ctypes.c_long(200_000))))
print("size_after_keep_size", os.fstat(fd).st_size)
os.pwrite(fd, b"\x01" * 8192, 0)
t("punch_hole", lambda: check(libc.fallocate(fd, 3, ctypes.c_long(0), ctypes.c_long(4096))))
print("after_punch", os.pread(fd, 8, 4090), os.fstat(fd).st_size)
t("fallocate_bad_mode", lambda: check(libc.fallocate(fd, 2, ctypes.c_long(0), ctypes.c_long(4096))))
t("fsync", lambda: os.fsync(fd))
t("fdatasync", lambda: os.fdatasync(fd))
t("pread_past_eof", lambda: os.pread(fd, 10, 10_000_000))
t("lseek_end", lambda: os.lseek(fd, 0, os.SEEK_END))
os.close(fd)
t("open_noatime", lambda: os.close(os.open("e/o", os.O_RDONLY | os.O_NOATIME)))
t("open_creat_mode", lambda: os.close(os.open("e/m", os.O_CREAT | os.O_WRONLY, 0o4751)))
print("created_mode", oct(os.stat("e/m").st_mode))
os.umask(0o077)
t("mkdir_umask", lambda: os.mkdir("e/um", 0o777))
t("create_umask", lambda: os.close(os.open("e/umf", os.O_CREAT | os.O_WRONLY, 0o666)))
os.umask(0o022)
print("umask_modes", oct(os.stat("e/um").st_mode), oct(os.stat("e/umf").st_mode))
os.chmod("e/d", 0o2775)
os.chown("e/d", 0, 4321)
t("create_in_setgid", lambda: os.close(os.open("e/d/sg", os.O_CREAT | os.O_WRONLY, 0o644)))
t("mkdir_in_setgid", lambda: os.mkdir("e/d/sgd"))
print("setgid_inherit", os.stat("e/d/sg").st_gid, oct(os.stat("e/d/sgd").st_mode), os.stat("e/d/sgd").st_gid)

# locks are local to the mount but must behave like POSIX locks
fd = os.open("e/o", os.O_RDWR)
fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
pid = os.fork()
if pid == 0:
    fd2 = os.open("e/o", os.O_RDWR)
    try:
        fcntl.lockf(fd2, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os._exit(0)
    except OSError as e:
        os._exit(e.errno)
_, status = os.waitpid(pid, 0)
print("posix_lock_conflict", errno.errorcode.get(os.waitstatus_to_exitcode(status), "OK"))
fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
fd3 = os.open("e/o", os.O_RDWR)
t("flock_conflict", lambda: fcntl.flock(fd3, fcntl.LOCK_EX | fcntl.LOCK_NB))
os.close(fd3)
os.close(fd)

# unlinked but open file stays usable; renamed open file too
fd = os.open("e/tmpf", os.O_CREAT | os.O_RDWR, 0o600)
os.write(fd, b"still here")
os.unlink("e/tmpf")
print("unlinked_read", os.pread(fd, 100, 0), os.fstat(fd).st_nlink)
os.close(fd)
fd = os.open("e/ren", os.O_CREAT | os.O_RDWR, 0o600)
os.rename("e/ren", "e/d/sub/renamed")
os.write(fd, b"after rename")
os.close(fd)
print("renamed_read", read_all("e/d/sub/renamed"))
t("statvfs", lambda: os.statvfs(".").f_namemax)
t("listdir", lambda: sorted(os.listdir("e")))
t("scandir_types", lambda: sorted((x.name, x.is_dir(follow_symlinks=False), x.is_symlink()) for x in os.scandir("e")))
long = "n" * 256
t("name_too_long", lambda: os.open("e/" + long, os.O_CREAT | os.O_WRONLY))
t("access_x_on_file", lambda: os.access("e/g", os.X_OK))
