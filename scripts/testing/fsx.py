#!/usr/bin/env python3
"""fsx-style check: seeded random writes, truncates and reads on two files in lockstep (one on the
mount, one on a local filesystem); any difference is a failure. Usage: fsx.py MOUNTED LOCAL SEED OPS"""
import os, random, sys

mounted, local, seed, ops = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rng = random.Random(seed)
MAX = 128 * 1024
fds = [os.open(p, os.O_RDWR | os.O_CREAT, 0o644) for p in (mounted, local)]
for fd in fds:
    os.ftruncate(fd, 0)
size = 0
for i in range(ops):
    r = rng.random()
    if r < 0.45:
        off = rng.randrange(0, MAX)
        data = rng.randbytes(rng.randrange(1, 16 * 1024))
        data = data[: max(1, MAX - off)]
        for fd in fds:
            if os.pwrite(fd, data, off) != len(data):
                sys.exit(f"op {i}: short write")
        size = max(size, off + len(data))
    elif r < 0.60:
        n = rng.randrange(0, MAX)
        for fd in fds:
            os.ftruncate(fd, n)
        size = n
    elif r < 0.65:
        for fd in fds:
            os.fsync(fd)
    else:
        off = rng.randrange(0, MAX)
        n = rng.randrange(1, 32 * 1024)
        a, b = (os.pread(fd, n, off) for fd in fds)
        if a != b:
            sys.exit(f"op {i}: read of {n} at {off} differs (mount {len(a)} bytes, local {len(b)})")
    if i % 1000 == 999:
        sizes = [os.fstat(fd).st_size for fd in fds]
        if sizes[0] != sizes[1] or sizes[0] != size:
            sys.exit(f"op {i}: sizes differ: mount {sizes[0]}, local {sizes[1]}, expected {size}")
for fd in fds:
    os.close(fd)
a, b = (open(p, "rb").read() for p in (mounted, local))
if a != b:
    sys.exit(f"final contents differ ({len(a)} vs {len(b)} bytes)")
print(f"{ops} operations, 0 mismatches")
