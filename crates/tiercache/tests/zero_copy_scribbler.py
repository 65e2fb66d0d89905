#!/usr/bin/env python3
"""A misbehaving zero-copy client, for the tests only.

Speaks the zero-copy protocol itself (as any program may), opens FILE read-only and pins its
first block, then tries every way it can think of to store into the shared memory the daemon
gave it: the region (slot headers, hint table, block bytes) and its own pin area. Prints one
line per attempt, `<what> refused <errno name>` or `<what> done`, then `ready`, and waits for
stdin to close before it exits (holding its pins meanwhile).

Usage: zero_copy_scribbler.py MOUNTPOINT FILE
"""
import ctypes
import errno
import json
import mmap
import os
import socket
import struct
import sys

libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]


def socket_name(mount):
    """`tiercache-zc-NAME-HASH` (tiercache_client::wire::socket_name)."""
    mount = os.path.abspath(mount)
    canon = os.path.join(os.path.realpath(os.path.dirname(mount)), os.path.basename(mount))
    h = 0xCBF29CE484222325
    for b in canon.encode():
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    name = "".join(c for c in os.path.basename(canon) if c.isascii() and (c.isalnum() or c == "-"))
    return "tiercache-zc-%s-%016x" % (name[:32], h)


def frame(body):
    data = json.dumps(body).encode()
    return struct.pack("<I", len(data)) + data


def recv_exact(sock, n):
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            sys.exit("the daemon closed the connection")
        out += chunk
    return out


def call(sock, body, fds=()):
    if fds:
        socket.send_fds(sock, [frame(body)], list(fds))
    else:
        sock.sendall(frame(body))
    head, got, _, _ = socket.recv_fds(sock, 4, 4)
    head += recv_exact(sock, 4 - len(head))
    resp = json.loads(recv_exact(sock, struct.unpack("<I", head)[0]))
    return resp, got


def connect(mount):
    for version in (2, 1):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect("\0" + socket_name(mount))
        resp, fds = call(sock, {"op": "hello", "version": version})
        if resp.get("r") == "welcome":
            return sock
        sock.close()
    sys.exit("not welcomed: %r" % resp)


sock = connect(sys.argv[1])
own = os.open(sys.argv[2], os.O_RDONLY)
resp, _ = call(sock, {"op": "open"}, [own])
if resp.get("r") != "opened":
    sys.exit("open: %r" % resp)
resp, _ = call(sock, {"op": "pin", "handle": resp["handle"], "first": 0, "count": 1})
if resp.get("r") != "pinned" or resp["slots"][0] is None:
    sys.exit("pin: %r" % resp)


def memfds(name):
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if ("memfd:" + name) in os.readlink("/proc/self/fd/" + fd):
                out.append(int(fd))
        except OSError:
            pass
    return out


def attempt(what, fn):
    try:
        fn()
        print(what, "done", flush=True)
    except OSError as e:
        print(what, "refused", errno.errorcode.get(e.errno, str(e.errno)), flush=True)


def check(rc):
    if rc != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def scribble_map(fd, size, start, fill):
    m = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    m[start:size] = fill * (size - start)
    m.close()


def mprotect_scribble(fd, size, start, fill):
    p = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if p in (None, ctypes.c_void_p(-1).value):
        check(-1)
    check(libc.mprotect(p, size, mmap.PROT_READ | mmap.PROT_WRITE))
    ctypes.memset(p + start, fill[0], size - start)


regions = memfds("tiercache-arena")
if len(regions) != 1:
    sys.exit("expected one region descriptor, found %d" % len(regions))
fd = regions[0]
size = os.fstat(fd).st_size
X = b"X"
# Everything past the superblock: slot headers, hint table, block bytes.
attempt("region mmap-write", lambda: scribble_map(fd, size, 4096, X))
attempt("region pwrite", lambda: os.pwrite(fd, X * 65536, 4096))
attempt("region punch-hole", lambda: check(libc.fallocate(fd, 3, 4096, size - 4096)))
attempt("region truncate", lambda: os.ftruncate(fd, 4096))


def reopen_and_map():
    fd2 = os.open("/proc/self/fd/%d" % fd, os.O_RDWR)
    try:
        scribble_map(fd2, size, 4096, X)
    finally:
        os.close(fd2)


attempt("region reopen-write", reopen_and_map)
attempt("region mprotect-write", lambda: mprotect_scribble(fd, size, 4096, X))

for pfd in memfds("tiercache-pins"):
    psize = os.fstat(pfd).st_size
    # Every pin bit set (every slot "pinned"), then garbage everywhere, header included.
    attempt("pins all-set", lambda: scribble_map(pfd, psize, 64, b"\xff"))
    attempt("pins garbage", lambda: scribble_map(pfd, psize, 0, b"\xa5"))
    attempt("pins truncate", lambda: os.ftruncate(pfd, 0))
print("ready", flush=True)
sys.stdin.read()
