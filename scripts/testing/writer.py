#!/usr/bin/env python3
"""Crash-test writer: writes notes into DIR in a loop (rewrites and new files). Before opening a
file it appends "open NAME" to LOG, after closing it "done NAME SHA256" (both fsynced), so a
checker knows which files were closed. Runs until killed or until the mount fails.
Usage: writer.py DIR LOG SEED"""
import hashlib, os, random, sys

d, log, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
rng = random.Random(seed)
with open(log, "a") as lf:
    i = 0
    while True:
        name = f"crash-{rng.randrange(0, 30)}.md" if rng.random() < 0.7 else f"new-{seed}-{i}.md"
        data = rng.randbytes(rng.randrange(1, 20000)).hex().encode()[: rng.randrange(1, 20000)]
        if rng.random() < 0.3:
            data = b"---\nround: %d\n---\n" % seed + data
        lf.write(f"open {name}\n")
        lf.flush()
        os.fsync(lf.fileno())
        try:
            fd = os.open(os.path.join(d, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            off = 0
            while off < len(data):
                off += os.write(fd, data[off:off + 4096])
            if rng.random() < 0.2:
                os.fsync(fd)
            os.close(fd)
        except OSError:
            sys.exit(0)
        lf.write(f"done {name} {hashlib.sha256(data).hexdigest()}\n")
        lf.flush()
        os.fsync(lf.fileno())
        i += 1
