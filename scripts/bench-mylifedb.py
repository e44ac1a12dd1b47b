#!/usr/bin/env python3
"""MyLifeDB remote benchmark (called by `scripts/bench mylifedb` and by the full run).

With the release build, the contract fake of a MyLifeDB server (scripts/testing/mylifedb_contract.py,
a Python process over a real folder: the real server cannot be built here) on 127.0.0.1 and real
mounts:
  first sync  a library of FILES files (notes and small files in nested folders) mounted into a
              fresh store (`marfafs mount` waits for the first sync), beside the least any client
              must do: a plain HTTP client that lists the same tree and downloads every file
              (urllib, 8 threads), and `cp -r` of the server's folder (native).
  server → mount  EDITS writes on the server by a second client (PUT /raw), each timed until
              `cat` on the mount shows the new bytes, and until inotifywait on the mount's vault
              reports IN_MODIFY (p50, p99, max).
  mount → server  EDITS writes through the mount, each timed until the server's folder holds them.
Prints a Markdown section and writes mylifedb.json beside it.

  large       the first sync again with LARGE files (scale).

usage: bench-mylifedb.py BINARY OUTDIR [--files 2000] [--edits 100] [--large 20000]
"""
import argparse
import concurrent.futures
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request

ap = argparse.ArgumentParser()
ap.add_argument("binary")
ap.add_argument("outdir")
ap.add_argument("--files", type=int, default=2000)
ap.add_argument("--edits", type=int, default=100)
ap.add_argument("--large", type=int, default=20000)
args = ap.parse_args()
os.makedirs(args.outdir, exist_ok=True)
repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
work = tempfile.mkdtemp(prefix="marfafs-mylifedb-bench.")
data = os.path.join(work, "data")
mounts, procs = [], []


def run(*cmd):
    return subprocess.run(list(cmd), check=True, capture_output=True, text=True)


def library(n, data=data):
    """n files: three in four notes, the rest small binary files, in folders two deep."""
    rng = random.Random(34)
    for i in range(n):
        if i % 4 == 3:
            d = os.path.join(data, "media", f"m{i % 10}")
            name, body = f"file {i}.bin", os.urandom(rng.randrange(1, 20000))
        else:
            d = os.path.join(data, "notes", f"topic-{i % 40:02d}", f"year-{2020 + i % 5}")
            name = f"note {i}.md"
            body = (f"# Note {i}\n\nAbout topic {i % 97}, see [[note {(i + 1) % n}]] #t{i % 13}\n" + "text " * rng.randrange(300)).encode()
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, name), "wb") as f:
            f.write(body)


def start_server(data=data, name="port"):
    port_file = os.path.join(work, name)
    p = subprocess.Popen(["python3", os.path.join(repo, "scripts/testing/mylifedb_contract.py"), data, port_file],
                         stderr=open(os.path.join(work, "server.log"), "w"))
    procs.append(p)
    for _ in range(100):
        if os.path.exists(port_file):
            return f"http://127.0.0.1:{open(port_file).read()}"
        time.sleep(0.1)
    sys.exit("the contract server did not start")


def plain_client(base, dest):
    """Lists the tree folder by folder and downloads every file, 8 at a time."""
    def get(path):
        with urllib.request.urlopen(base + path) as r:
            return r.read()
    files, queue = [], [""]
    while queue:
        folder = queue.pop()
        listing = json.loads(get("/api/data/tree?path=" + urllib.parse.quote(folder) + "&depth=1"))
        for c in listing["children"]:
            p = f"{folder}/{c['path']}" if folder else c["path"]
            (queue if c["type"] == "folder" else files).append(p)

    def fetch(p):
        body = get("/raw/" + urllib.parse.quote(p))
        out = os.path.join(dest, p)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out, "wb") as f:
            f.write(body)
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        list(ex.map(fetch, files))
    return len(files)


def first_sync(base, name):
    """The plain client's download of the library, then a mount of it into a fresh store (until
    `marfafs mount` returns, the first sync done): (files, plain client s, mount s, mount point)."""
    t0 = time.monotonic()
    n = plain_client(base, os.path.join(work, name + "-plain"))
    plain_s = time.monotonic() - t0
    mnt = os.path.join(work, name + "-mnt")
    os.makedirs(mnt)
    t0 = time.monotonic()
    run(args.binary, "mount", mnt, "--store", os.path.join(work, name + ".sqlite"), "--server", "mylifedb+" + base)
    mounts.append(mnt)
    return n, plain_s, time.monotonic() - t0, mnt


def put(base, path, text):
    req = urllib.request.Request(base + "/raw/" + urllib.parse.quote(path), data=text.encode(), method="PUT")
    urllib.request.urlopen(req).read()


def pick(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


result = {}
try:
    library(args.files)
    base = start_server()
    # native: a copy of the folder; the least a client must do: list and download everything.
    run("sync")
    t0 = time.monotonic()
    run("cp", "-r", data, os.path.join(work, "native-copy"))
    native_s = time.monotonic() - t0
    n, plain_s, first_s, mnt = first_sync(base, "small")
    with open(os.path.join(mnt, ".marfafs/status")) as f:
        st = json.load(f)
    same = subprocess.run(["diff", "-rq", data, os.path.join(mnt, "vault/")], capture_output=True).returncode == 0
    result["first_sync"] = {"files": n, "seconds": first_s, "plain_client_seconds": plain_s, "native_copy_seconds": native_s,
                            "items": st.get("items"), "identical": same}
    print(f"first sync: {n} files in {first_s:.2f} s (plain client {plain_s:.2f} s, cp -r {native_s:.3f} s)", file=sys.stderr)

    # server → mount, with inotify on the vault.
    target = "notes/latency.md"
    put(base, target, "edit -1\n")
    path = os.path.join(mnt, "vault", target)
    deadline = time.monotonic() + 30
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.01)
    w = subprocess.Popen(["inotifywait", "-m", "-e", "modify", "--format", "%f", os.path.dirname(path)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while "Watches established" not in w.stderr.readline():
        pass
    modified = []
    threading.Thread(target=lambda: [modified.append(time.monotonic()) for line in w.stdout if line.strip() == "latency.md"], daemon=True).start()
    lat, ev = [], []
    for i in range(args.edits):
        text = f"edit {i}\n" + "line\n" * (i % 5)
        before = len(modified)
        t0 = time.monotonic()
        put(base, target, text)
        seen = False
        while time.monotonic() - t0 < 10:
            try:
                with open(path) as f:
                    if f.read() == text:
                        seen = True
                        break
            except OSError:
                pass
            time.sleep(0.002)
        lat.append((time.monotonic() - t0) * 1000 if seen else 10_000)
        while len(modified) <= before and time.monotonic() - t0 < 10:
            time.sleep(0.002)
        ev.append((modified[before] - t0) * 1000 if len(modified) > before else 10_000)
        time.sleep(0.05)
    w.kill()
    result["server_to_mount"] = {"edits": args.edits, "p50_ms": pick(lat, 0.5), "p99_ms": pick(lat, 0.99), "max_ms": max(lat),
                                 "inotify_p50_ms": pick(ev, 0.5), "inotify_p99_ms": pick(ev, 0.99),
                                 "missed": sum(1 for x in ev if x >= 10_000)}

    # mount → server.
    up = []
    for i in range(args.edits):
        text = f"from the mount {i}\n"
        t0 = time.monotonic()
        with open(os.path.join(mnt, "vault/notes/up.md"), "w") as f:
            f.write(text)
        server_copy = os.path.join(data, "notes/up.md")
        while time.monotonic() - t0 < 10:
            try:
                with open(server_copy) as f:
                    if f.read() == text:
                        break
            except OSError:
                pass
            time.sleep(0.002)
        up.append((time.monotonic() - t0) * 1000)
        time.sleep(0.05)
    result["mount_to_server"] = {"edits": args.edits, "p50_ms": pick(up, 0.5), "p99_ms": pick(up, 0.99), "max_ms": max(up)}

    # The first sync at scale.
    big_data = os.path.join(work, "big-data")
    library(args.large, big_data)
    _, big_plain_s, big_s, _ = first_sync(start_server(big_data, "big-port"), "big")
    result["first_sync_large"] = {"files": args.large, "seconds": big_s, "plain_client_seconds": big_plain_s}
    print(f"first sync: {args.large} files in {big_s:.2f} s (plain client {big_plain_s:.2f} s)", file=sys.stderr)

    with open(os.path.join(args.outdir, "mylifedb.json"), "w") as f:
        json.dump(result, f, indent=1)
    fs, sm, ms, fl = result["first_sync"], result["server_to_mount"], result["mount_to_server"], result["first_sync_large"]
    md = ["## A MyLifeDB server (FS-34)", "",
          f"`scripts/bench mylifedb` on {time.strftime('%Y-%m-%d', time.gmtime())}: the release build and the contract fake of a MyLifeDB"
          " server (`scripts/testing/mylifedb_contract.py`, one Python process over a real folder) on 127.0.0.1, on the same 2 cores.",
          "The plain client lists the tree and downloads every file (Python urllib, 8 threads): the least any client of the server must do.", "",
          "| measure | native `cp -r` | plain client | marfafs |", "|---|---|---|---|",
          f"| first sync of {fs['files']} files (notes and small files, nested folders; `marfafs mount` until done; tree identical: {'yes' if fs['identical'] else 'NO'}) "
          f"| {fs['native_copy_seconds']:.2f} s | {fs['plain_client_seconds']:.2f} s | {fs['seconds']:.2f} s ({fs['seconds'] / fs['plain_client_seconds']:.1f}× the plain client) |",
          f"| first sync of {fl['files']} files (the same kind) | | {fl['plain_client_seconds']:.2f} s | {fl['seconds']:.2f} s ({fl['seconds'] / fl['plain_client_seconds']:.1f}× the plain client) |",
          "", "| latency | p50 | p99 | max |", "|---|---|---|---|",
          f"| write on the server (PUT /raw) → `cat` on the mount shows it, {sm['edits']} writes | {sm['p50_ms']:.0f} ms | {sm['p99_ms']:.0f} ms | {sm['max_ms']:.0f} ms |",
          f"| … → IN_MODIFY in the mount's `vault/` (`inotifywait`; {sm['missed']} missed) | {sm['inotify_p50_ms']:.0f} ms | {sm['inotify_p99_ms']:.0f} ms | |",
          f"| write on the mount → the server's folder holds it, {ms['edits']} writes | {ms['p50_ms']:.0f} ms | {ms['p99_ms']:.0f} ms | {ms['max_ms']:.0f} ms |",
          ""]
    with open(os.path.join(args.outdir, "mylifedb.md"), "w") as f:
        f.write("\n".join(md))
    print("\n".join(md))
finally:
    for m in mounts:
        subprocess.run([args.binary, "unmount", m], capture_output=True)
    for p in procs:
        p.kill()
    shutil.rmtree(work, ignore_errors=True)
