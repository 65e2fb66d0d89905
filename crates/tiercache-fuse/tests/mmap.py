# Shared and private mmap through a mount (run in the mount's directory):
# stores through a shared mapping reach read(2) and the file, write(2) reaches
# the mapping, private mappings never write back. Prints "ok".
import mmap, os
size = 3 * 4096 + 100
with open("m", "wb") as f:
    f.write(b"\0" * size)
fd = os.open("m", os.O_RDWR)
mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
mm[100:105] = b"hello"
mm[size - 5:size] = b"world"
mm.flush()
r = os.open("m", os.O_RDONLY)
data = os.pread(r, size, 0)
assert data[100:105] == b"hello", data[100:105]
assert data[size - 5:] == b"world", data[size - 5:]
os.pwrite(fd, b"XYZ", 4096 + 7)
assert mm[4096 + 7:4096 + 10] == b"XYZ", mm[4096 + 7:4096 + 10]
mm[8192:8195] = b"abc"
mm.close()
os.close(fd)
assert os.pread(r, 3, 8192) == b"abc"
os.close(r)
# private mappings never write back
fd = os.open("m", os.O_RDWR)
pm = mmap.mmap(fd, size, mmap.MAP_PRIVATE, mmap.PROT_READ | mmap.PROT_WRITE)
pm[0:4] = b"priv"
pm.close()
assert os.pread(fd, 4, 0) == b"\0\0\0\0"
os.close(fd)
print("ok")
