#!/usr/bin/env python3
"""Reads a file on a tiercache --zero-copy mount through the C API with ctypes.
Usage: read.py /path/to/libtiercache_capi.so MOUNTPOINT FILE"""
import ctypes
import sys

lib = ctypes.CDLL(sys.argv[1], use_errno=True)
lib.tc_connect.restype = ctypes.c_void_p
lib.tc_open.restype = ctypes.c_void_p
lib.tc_open.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
lib.tc_size.restype = ctypes.c_uint64
lib.tc_size.argtypes = [ctypes.c_void_p]
lib.tc_block_size.restype = ctypes.c_size_t
lib.tc_block_size.argtypes = [ctypes.c_void_p]
lib.tc_read_blocks.restype = ctypes.c_int64
lib.tc_read_blocks.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64,
                               ctypes.POINTER(ctypes.c_void_p)]
lib.tc_block_data.restype = ctypes.POINTER(ctypes.c_ubyte)
lib.tc_block_data.argtypes = [ctypes.c_void_p]
lib.tc_block_release.argtypes = [ctypes.c_void_p]
lib.tc_close.argtypes = [ctypes.c_void_p]
lib.tc_disconnect.argtypes = [ctypes.c_void_p]
lib.tc_last_error.restype = ctypes.c_char_p

client = lib.tc_connect(sys.argv[2].encode())
if not client:
    sys.exit("tc_connect: " + lib.tc_last_error().decode())
f = lib.tc_open(client, sys.argv[3].encode(), 0)
if not f:
    sys.exit("tc_open: " + lib.tc_last_error().decode())
size, bs = lib.tc_size(f), lib.tc_block_size(client)
out = bytearray()
for first in range(0, (size + bs - 1) // bs):
    handle = (ctypes.c_void_p * 1)()
    if lib.tc_read_blocks(f, first, 1, handle) != 1:
        sys.exit("tc_read_blocks: " + lib.tc_last_error().decode())
    # A view of the block in the cache's memory, no copy until bytes() below.
    view = ctypes.string_at(lib.tc_block_data(handle[0]), min(bs, size - first * bs))
    out += view
    lib.tc_block_release(handle[0])
lib.tc_close(f)
lib.tc_disconnect(client)
sys.stdout.buffer.write(bytes(out))
