#!/usr/bin/env python3
"""Sync benchmark (called by `scripts/bench sync` and by the full run).

With the release build, a fresh `marfafs serve` on 127.0.0.1 and real mounts:
  drain      ITEMS notes imported into a store (one queued create each), then mounted with
             --server: mutations/s from the mount until `.marfafs/flush` says the queue is empty.
  first sync a fresh store mounted on that server: seconds until the first sync is done
             (`marfafs mount` waits for it), and items on the mount afterwards.
  latency    mount A and mount B: EDITS edits of one note on A, each timed until B's `cat`
             (and until inotify watchers on B's types/ and vault/ report IN_MODIFY: FS-25, FS-30)
             shows the new bytes (p50, p99, max).
  mount      a store of BIG notes (imported): `marfafs mount` wall time, daemon RSS after it.
Prints a Markdown section and writes sync.json beside it.

usage: bench-sync.py BINARY OUTDIR [--items 20000] [--edits 200] [--big 100000]
"""
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchserve import Served, bench_arguments  # noqa: E402

ap = bench_arguments()
ap.add_argument("--items", type=int, default=20000)
ap.add_argument("--edits", type=int, default=200)
ap.add_argument("--big", type=int, default=100000)
args = ap.parse_args()
os.makedirs(args.outdir, exist_ok=True)
bin_ = args.binary
mounts = []
said = {}  # what `marfafs mount` printed, per mount point


def run(*cmd, **kw):
    return subprocess.run(list(cmd), check=True, capture_output=True, text=True, **kw)


def notes(dir_, n, prefix):
    """n small notes in folders of 500, like a real vault."""
    for i in range(n):
        d = os.path.join(dir_, f"folder-{i // 500:03d}")
        if i % 500 == 0:
            os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"{prefix} {i}.md"), "w") as f:
            f.write(f"# {prefix} {i}\n\nSome text about topic {i % 97}, linking ideas {i % 13} and {i % 31}.\n")


def mount(name, store, *extra):
    mnt = os.path.join(work, name)
    os.makedirs(mnt, exist_ok=True)
    t0 = time.monotonic()
    out = run(bin_, "mount", mnt, "--store", store, *extra).stdout
    dt = time.monotonic() - t0
    mounts.append(mnt)
    pid = int(re.search(r"pid (\d+)", out).group(1))
    said[mnt] = out
    return mnt, dt, pid


def unmount(mnt):
    subprocess.run([bin_, "unmount", mnt], capture_output=True)
    mounts.remove(mnt)


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))


def status(mnt):
    with open(os.path.join(mnt, ".marfafs/status")) as f:
        return json.load(f)


srv = Served(bin_, args.outdir, "marfafs-sync-bench.")
work = srv.work
result = {}
try:
    base, key = srv.base, srv.key
    keyfile = os.path.join(work, "key")
    with open(keyfile, "w") as f:
        f.write(key + "\n")
    os.chmod(keyfile, 0o600)
    sync = ["--server", base, "--key-file", keyfile]

    # 1. drain: ITEMS queued creates sent to the server.
    vault = os.path.join(work, "vault")
    notes(vault, args.items, "note")
    store_a = os.path.join(work, "a.sqlite")
    run(bin_, "import", vault, "--store", store_a)
    t0 = time.monotonic()
    a, _, pid_a = mount("a", store_a, *sync, "--device", "bench-a")
    with open(os.path.join(a, ".marfafs/flush")) as f:
        flush = f.read().strip()
    drain_s = time.monotonic() - t0
    if not flush.startswith("ok"):
        sys.exit(f"the queue did not drain: {flush}")
    result["drain"] = {"mutations": args.items, "seconds": drain_s, "per_second": args.items / drain_s}
    print(f"drain: {args.items} creates in {drain_s:.2f} s = {args.items / drain_s:.0f}/s", file=sys.stderr)

    # 2. first sync of those items into a fresh store.
    store_b = os.path.join(work, "b.sqlite")
    b, first_s, pid_b = mount("b", store_b, *sync, "--device", "bench-b")
    st = status(b)
    if not st.get("first_sync_done"):
        sys.exit(f"first sync not done: {st}\nmarfafs mount said: {said.get(b, '')}")
    result["first_sync"] = {"items": st["items"], "seconds": first_s, "rss_kib": rss_kib(pid_b)}
    print(f"first sync: {st['items']} items in {first_s:.2f} s", file=sys.stderr)

    # 3. A → B latency: EDITS edits of one note.
    target = "types/core.note/latency.md"
    with open(os.path.join(a, target), "w") as f:
        f.write("edit -1\n")
    deadline = time.monotonic() + 30
    while not os.path.exists(os.path.join(b, target)) and time.monotonic() < deadline:
        time.sleep(0.01)
    # inotify watchers on B (FS-25, FS-30): when each edit's IN_MODIFY arrives, in types/ and in
    # the vault's tree (the note sits at its top).
    def watch(path):
        w = subprocess.Popen(["inotifywait", "-m", "-e", "modify", "--format", "%f", path],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        while "Watches established" not in w.stderr.readline():
            pass
        times = []
        threading.Thread(target=lambda: [times.append(time.monotonic()) for line in w.stdout if line.strip() == "latency.md"],
                         daemon=True).start()
        return w, times
    os.listdir(os.path.join(b, "vault"))
    watcher, modified = watch(os.path.join(b, "types/core.note"))
    vault_watcher, vault_modified = watch(os.path.join(b, "vault") + "/")
    lat, ev, vev = [], [], []
    for i in range(args.edits):
        text = f"edit {i}\n" + "body line\n" * (i % 7)
        n_before, v_before = len(modified), len(vault_modified)
        t0 = time.monotonic()
        with open(os.path.join(a, target), "w") as f:
            f.write(text)
        seen = False
        while time.monotonic() - t0 < 10:
            try:
                with open(os.path.join(b, target)) as f:
                    if f.read() == text:
                        seen = True
                        break
            except OSError:
                pass
            time.sleep(0.002)
        lat.append((time.monotonic() - t0) * 1000 if seen else 10_000)
        while len(modified) <= n_before and time.monotonic() - t0 < 10:
            time.sleep(0.002)
        ev.append((modified[n_before] - t0) * 1000 if len(modified) > n_before else 10_000)
        while len(vault_modified) <= v_before and time.monotonic() - t0 < 10:
            time.sleep(0.002)
        vev.append((vault_modified[v_before] - t0) * 1000 if len(vault_modified) > v_before else 10_000)
        time.sleep(0.05)
    watcher.kill()
    vault_watcher.kill()
    lat.sort()
    ev.sort()
    vev.sort()
    pick = lambda xs, q: xs[min(len(xs) - 1, int(q * len(xs)))]
    result["latency"] = {"edits": args.edits, "p50_ms": pick(lat, 0.5), "p99_ms": pick(lat, 0.99), "max_ms": lat[-1],
                         "missed": sum(1 for x in lat if x >= 10_000)}
    result["inotify"] = {"edits": args.edits, "p50_ms": pick(ev, 0.5), "p99_ms": pick(ev, 0.99), "max_ms": ev[-1],
                         "missed": sum(1 for x in ev if x >= 10_000)}
    result["inotify_vault"] = {"edits": args.edits, "p50_ms": pick(vev, 0.5), "p99_ms": pick(vev, 0.99), "max_ms": vev[-1],
                               "missed": sum(1 for x in vev if x >= 10_000)}
    print(f"IN_MODIFY in vault/: p50 {pick(vev, 0.5):.0f} ms, p99 {pick(vev, 0.99):.0f} ms", file=sys.stderr)
    print(f"A→B: p50 {pick(lat, 0.5):.0f} ms, p99 {pick(lat, 0.99):.0f} ms; IN_MODIFY p50 {pick(ev, 0.5):.0f} ms, p99 {pick(ev, 0.99):.0f} ms", file=sys.stderr)
    unmount(a)
    unmount(b)

    # 4. mounting a big store (local, the embedded default).
    big = os.path.join(work, "big-vault")
    notes(big, args.big, "big")
    store_big = os.path.join(work, "big.sqlite")
    run(bin_, "import", big, "--store", store_big)
    shutil.rmtree(big, ignore_errors=True)
    shutil.rmtree(vault, ignore_errors=True)
    run("sync")
    time.sleep(2)
    # Three mounts in a row (the first right after the import): the median, and the slowest.
    times, rss = [], 0
    for _ in range(3):
        c, mount_s, pid_c = mount("big", store_big)
        times.append(mount_s)
        rss = max(rss, rss_kib(pid_c))
        n = int(run("sh", "-c", f"ls '{c}/types/core.note' | wc -l").stdout)
        listed = rss_kib(pid_c)
        unmount(c)
    times.sort()
    result["mount"] = {"items": n, "seconds": times[1], "all_seconds": times, "rss_kib": rss, "rss_after_listing_kib": listed}
    print(f"mount: {n} items in {times} s, RSS {rss / 1024:.0f} MiB", file=sys.stderr)

    with open(os.path.join(args.outdir, "sync.json"), "w") as f:
        json.dump(result, f, indent=1)
    d, fs, la, mo, ino = result["drain"], result["first_sync"], result["latency"], result["mount"], result["inotify"]
    vino = result["inotify_vault"]
    ok = lambda b: "yes" if b else "no"
    md = ["## Sync (`marfafs mount --server`)", "",
          f"`scripts/bench sync` on {time.strftime('%Y-%m-%d', time.gmtime())}: the release build, `marfafs serve` on 127.0.0.1"
          " (fresh database) and real mounts on the same 2 cores.", "",
          "| measure | target | result | met |", "|---|---|---|---|",
          f"| queue drain ({d['mutations']} imported notes, mount to `.marfafs/flush` ok) | ≥ 500 mutations/s | {d['per_second']:.0f}/s ({d['seconds']:.1f} s) | {ok(d['per_second'] >= 500)} |",
          f"| first sync of {fs['items']} items into a fresh store (`marfafs mount` until done) | ≤ 20 s | {fs['seconds']:.1f} s | {ok(fs['seconds'] <= 20)} |",
          f"| write on A → `cat` on B shows it, {la['edits']} edits | p50 ≤ 250 ms, p99 ≤ 1 s | p50 {la['p50_ms']:.0f} ms, p99 {la['p99_ms']:.0f} ms (max {la['max_ms']:.0f}) | {ok(la['p50_ms'] <= 250 and la['p99_ms'] <= 1000)} |",
          f"| write on A → IN_MODIFY on B (`inotifywait`), {ino['edits']} edits | p50 ≤ 250 ms, p99 ≤ 1 s | p50 {ino['p50_ms']:.0f} ms, p99 {ino['p99_ms']:.0f} ms (max {ino['max_ms']:.0f}, {ino['missed']} missed) | {ok(ino['p50_ms'] <= 250 and ino['p99_ms'] <= 1000)} |",
          f"| write on A → IN_MODIFY in B's `vault/` (`inotifywait`), {vino['edits']} edits | p50 ≤ 250 ms, p99 ≤ 1 s | p50 {vino['p50_ms']:.0f} ms, p99 {vino['p99_ms']:.0f} ms (max {vino['max_ms']:.0f}, {vino['missed']} missed) | {ok(vino['p50_ms'] <= 250 and vino['p99_ms'] <= 1000)} |",
          f"| mounting a {mo['items']}-item store (median of 3; all: {', '.join(f'{t:.2f}' for t in mo['all_seconds'])} s) | ≤ 1 s, RSS ≤ 150 MB | {mo['seconds']:.2f} s, {mo['rss_kib'] / 1024:.0f} MiB ({mo['rss_after_listing_kib'] / 1024:.0f} MiB after `ls` of every item) | {ok(mo['seconds'] <= 1 and mo['rss_kib'] * 1024 <= 150e6)} |",
          "",
          "The edits are saves in place (`open(O_TRUNC)`, write, close), and a save in place is sent once its file"
          " has been left alone for 1.5 s (FS-29, `Store.inPlaceSaveQuietNs`): a program descheduled between its"
          " truncate and its writes must not have its empty or half-written file taken for its save. That wait is"
          " most of the latency above. The mount is not told of a `close(2)` (it has no `flush` handler, which"
          " would add a request to every close of every file). A save by rename (most editors' default) is not held.",
          ""]
    with open(os.path.join(args.outdir, "sync.md"), "w") as f:
        f.write("\n".join(md))
    print("\n".join(md))
finally:
    for mnt in list(mounts):
        subprocess.run([bin_, "unmount", mnt], capture_output=True)
    srv.stop()
