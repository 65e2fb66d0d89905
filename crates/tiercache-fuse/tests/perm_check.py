# Runs as an unprivileged user (uid/gid 65534; with supplementary group 1000
# when argv[1] == "group") and prints the outcome of each operation.
import errno, os, stat, sys

groups = [1000] if sys.argv[1] == "group" else []
os.setgroups(groups)
os.setgid(65534)
os.setuid(65534)
os.umask(0o022)


def t(name, f):
    try:
        r = f()
        print(name, "OK", "" if r is None else r)
    except OSError as e:
        print(name, errno.errorcode.get(e.errno, e.errno))


def creat(p, mode=0o644):
    os.close(os.open(p, os.O_CREAT | os.O_WRONLY | os.O_EXCL, mode))


def owner(p):
    st = os.lstat(p)
    return "%s %d:%d %o" % (p, st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode))


def read(p):
    with open(p) as f:
        return f.read().strip()


def append(p):
    with open(p, "a") as f:
        f.write("x")


t("read_secret", lambda: read("secret"))
t("read_public", lambda: read("public"))
t("write_public", lambda: append("public"))
t("read_grp", lambda: read("grp"))
t("write_worldw", lambda: append("worldw"))
t("access_secret_r", lambda: os.access("secret", os.R_OK))
t("access_public_r", lambda: os.access("public", os.R_OK))
t("create_in_ro", lambda: creat("ro/new"))
t("mkdir_in_ro", lambda: os.mkdir("ro/d"))
t("unlink_in_ro", lambda: os.unlink("ro/../public"))
t("create_in_open", lambda: creat("open/new"))
t("owner_new", lambda: owner("open/new"))
t("mkdir_in_open", lambda: os.mkdir("open/dir"))
t("owner_dir", lambda: owner("open/dir"))
t("symlink_in_open", lambda: os.symlink("new", "open/sl"))
t("owner_sl", lambda: owner("open/sl"))
t("mkfifo_in_open", lambda: os.mkfifo("open/fifo", 0o666))
t("owner_fifo", lambda: owner("open/fifo"))
t("create_setgid_bit", lambda: creat("open/sgbit", 0o2755))
t("owner_sgbit", lambda: owner("open/sgbit"))
t("chmod_public", lambda: os.chmod("public", 0o777))
t("chown_own_to_root", lambda: os.chown("open/new", 0, -1))
t("chgrp_own_to_1000", lambda: os.chown("open/new", -1, 1000))
t("owner_after_chgrp", lambda: owner("open/new"))
t("chmod_own", lambda: os.chmod("open/new", 0o600))
t("unlink_sticky_victim", lambda: os.unlink("sticky/victim"))
t("rename_sticky_victim", lambda: os.rename("sticky/victim", "sticky/v2"))
t("create_in_sticky", lambda: creat("sticky/mine"))
t("unlink_own_in_sticky", lambda: os.unlink("sticky/mine"))
t("utime_now_worldw", lambda: os.utime("worldw"))
t("utime_explicit_worldw", lambda: os.utime("worldw", (1, 1)))
t("utime_now_public", lambda: os.utime("public"))
t("truncate_worldw", lambda: os.truncate("worldw", 1))
t("truncate_public", lambda: os.truncate("public", 1))
t("stat_priv_inner", lambda: os.stat("priv/inner").st_size)
t("listdir_priv", lambda: os.listdir("priv"))
t("listdir_xonly", lambda: os.listdir("xonly"))
t("read_xonly_hidden", lambda: read("xonly/hidden"))
t("setxattr_user_public", lambda: os.setxattr("public", "user.x", b"1"))
t("setxattr_user_worldw", lambda: os.setxattr("worldw", "user.x", b"1"))
t("getxattr_user_worldw", lambda: os.getxattr("worldw", "user.x"))
t("setxattr_trusted_worldw", lambda: os.setxattr("worldw", "trusted.x", b"1"))
t("open_noatime_public", lambda: os.close(os.open("public", os.O_RDONLY | os.O_NOATIME)))
t("create_in_sg", lambda: creat("sg/f"))
t("owner_sg_f", lambda: owner("sg/f"))
t("mkdir_in_sg", lambda: os.mkdir("sg/d"))
t("owner_sg_d", lambda: owner("sg/d"))
t("rename_into_ro", lambda: os.rename("open/new", "ro/new"))
t("link_public", lambda: os.link("public", "open/pl"))
t("rmdir_ro", lambda: os.rmdir("ro"))


def acl(p):
    try:
        return os.getxattr(p, "system.posix_acl_access").hex()
    except OSError as e:
        return "no-acl " + errno.errorcode.get(e.errno, str(e.errno))


def setfacl(spec, p):
    # fork/exec: the interpreter's library may not be readable by this user (no subprocess)
    pid = os.fork()
    if pid == 0:
        null = os.open("/dev/null", os.O_WRONLY)
        os.dup2(null, 2)
        try:
            os.execvp("setfacl", ["setfacl", "-m", spec, p])
        finally:
            os._exit(127)
    _, status = os.waitpid(pid, 0)
    return "rc=%d" % os.waitstatus_to_exitcode(status)


t("read_acl_deny", lambda: read("acl_deny"))
t("read_acl_allow", lambda: read("acl_allow"))
t("create_in_acl_dir", lambda: creat("acl_dir/new", 0o666))
t("owner_acl_new", lambda: owner("acl_dir/new"))
t("acl_inherited", lambda: acl("acl_dir/new"))
t("setfacl_own", lambda: setfacl("u:1000:r", "open/new"))
t("acl_after_setfacl", lambda: acl("open/new"))
t("owner_after_setfacl", lambda: owner("open/new"))
t("setfacl_not_own", lambda: setfacl("u:65534:rw", "public"))
t("read_acl_allow_after", lambda: read("acl_allow"))
