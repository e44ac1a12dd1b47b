#!/usr/bin/env python3
"""Vault benchmark (called by `scripts/bench vault` and by the full run): FS-26, FS-27.

With the release build, on the bench corpus's notes (CORPUS/corpus: 20,000 notes in folders,
each with wikilinks and relative Markdown links):
  import      `marfafs import` into a fresh store with no server, beside `cp -r` of the same
              folder to a native directory (page cache dropped before each).
  links       the first listing of `backlinks/` on a fresh mount: the vault index is built
              (every note's links resolved); the daemon's own measure from its log; how many
              links resolved and how many are listed in `.marfafs/unresolved`.
  a new link  a line with a wikilink appended to a note through `vault/`: the time until the
              target's `backlinks/…/references/` lists the note (median of 20).
  rsync       `rsync -a` of the notes into `vault/copy/` and into a native directory, then the
              same again (nothing to transfer), side by side.
  cp -r       `cp -r` of the notes into `vault/cp/` and into a native directory.
  rm -rf      `rm -rf` of that copy, in the tree (every note goes to the trash) and natively.
              After each write into the tree, the time the daemon still took to settle what it
              wrote (a read of `.marfafs/status` waits for it) is measured apart.
  git         `git init` + `git add -A` + `git commit` of the rsynced copy in `vault/copy/` (its
              `.git` is local-only, FS-32) and of the native copy.
  grep        the first `grep -r` of the vault after a fresh mount, beside a cold native `grep -r`.
  peers       the tree's rows (rsync -a, cp -r, rm -rf, git, a cold grep -r) also through two other FUSE
              filesystems over a native directory, in the same run: kbmirror (the reference FUSE
              filesystem of ../shared/bench, KBMIRROR: its binary; `scripts/bench vault` builds it)
              and bindfs. What they take is the cost of FUSE itself on this machine (a request's
              round trip), which no FUSE filesystem goes below.
Each speed row is printed with its goal (issue 26: FS-32). Prints a Markdown section and writes
vault.json beside it.

usage: bench-vault.py BINARY OUTDIR CORPUS
"""
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time

bin_, outdir, corpus_root = sys.argv[1], sys.argv[2], sys.argv[3]
corpus = os.path.join(corpus_root, "corpus")
os.makedirs(outdir, exist_ok=True)
base = os.path.join(outdir, "work")
shutil.rmtree(base, ignore_errors=True)
os.makedirs(base)
mnt = os.path.join(base, "mnt")
os.makedirs(mnt)
store = os.path.join(base, "vault.sqlite")
log = os.path.join(base, "mount.log")


def run(*cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def drop_caches():
    subprocess.run(["sync"])
    try:
        open("/proc/sys/vm/drop_caches", "w").write("3\n")
    except OSError:
        pass


def timed(*cmd, ok=(0,)):
    drop_caches()
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode not in ok:
        raise subprocess.CalledProcessError(r.returncode, cmd, r.stdout, r.stderr)
    return time.monotonic() - t0


def _timed_shell(cmd):
    t0 = time.monotonic()
    subprocess.run(cmd, shell=True, check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - t0


def settling():
    """Seconds until the mount has settled what the last command wrote (a read of `.marfafs/status`
    settles everything first): work left to run after the command returned, timed apart, so it is
    not billed to the next command."""
    t0 = time.monotonic()
    with open(os.path.join(mnt, ".marfafs", "status")) as f:
        f.read()
    return time.monotonic() - t0


def requests():
    """The mount's request counts by operation (`.marfafs/requests`): {op: (requests, µs)}."""
    out = {}
    with open(os.path.join(mnt, ".marfafs", "requests")) as f:
        for line in f:
            op, n, us = line.split()
            out[op] = (int(n), int(us))
    return out


def counted(fn):
    """fn() and the requests the mount answered meanwhile: (its value, {op: (requests, µs)})."""
    before = requests()
    v = fn()
    after = requests()
    return v, {op: (after[op][0] - before[op][0], after[op][1] - before[op][1]) for op in after
               if after[op][0] != before[op][0]}


KIT = os.environ.get("BENCH_KIT") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "bench")
# The main benchmark's write rows and ls -lR: 2,000 new notes (create.sh, in a folder of their own
# each run: names removed a moment before would come back from the trash, FS-28), 200 editor saves
# (save.py), and a warm ls -lR of the rsynced copy. (command, preparation), {S} the bench kit,
# {D} the folder, {I} the run.
SMALL = {"create2000": ("{S}/create.sh {D}/c{I} 2000", "rm -rf {D}/c{I}"),
         "save200": ("{S}/save.py {D}/s 200", "{S}/save_prep.sh {D}/s 200"),
         "ls_lR": ("ls -lR {D} > /dev/null", "ls -lR {D} > /dev/null")}


def small_row(key, d, copy, mounted=False):
    """The median of 3 runs of row `key` in folder `d` (ls -lR: of `copy`); with `mounted`, the
    marfafs mount's, with what it settled first and the requests it answered: (s, requests)."""
    cmd, prep = SMALL[key]
    d = copy if key == "ls_lR" else d
    runs = []
    for i in range(3):
        subprocess.run(prep.format(S=KIT, D=d, I=i), shell=True, check=True, stdout=subprocess.DEVNULL)
        if mounted:
            settling()
            runs.append(counted(lambda: _timed_shell(cmd.format(S=KIT, D=d, I=i))))
        else:
            runs.append((_timed_shell(cmd.format(S=KIT, D=d, I=i)), None))
    runs.sort(key=lambda x: x[0])
    return runs[1]


def round_trip():
    """Seconds a request the daemon answers at once (`lgetxattr` of `security.selinux`, which
    the kernel always sends on) adds over the same call natively: this machine's round trip."""
    def loop(path, n=20000):
        t0 = time.perf_counter()
        for _ in range(n):
            try:
                os.getxattr(path, "security.selinux", follow_symlinks=False)
            except OSError:
                pass
        return (time.perf_counter() - t0) / n
    here = os.path.join(mnt, "vault", "round-trip.md")
    with open(here, "w") as f:
        f.write("x\n")
    there = os.path.join(base, "round-trip.md")
    with open(there, "w") as f:
        f.write("x\n")
    loop(here, 2000)
    t = sorted(loop(here) - loop(there) for _ in range(3))[1]
    os.unlink(here)
    return t


notes = sum(len(fs) for _, _, fs in os.walk(corpus))
native_copy = os.path.join(base, "native-copy")
cp_s = timed("cp", "-r", corpus, native_copy)
import_s = timed(bin_, "import", corpus, "--store", store)

run(bin_, "mount", mnt, "--store", store, "--log-file", log)
try:
    t0 = time.monotonic()
    listed = len(os.listdir(os.path.join(mnt, "backlinks", "core.note")))
    first_backlinks_s = time.monotonic() - t0
    built = [l for l in open(log) if "vault index built" in l]
    links = int(re.search(r"links=(\d+)", built[-1]).group(1)) if built else 0
    index_ms = int(re.search(r" ms=(\d+)", built[-1]).group(1)) if built else 0
    read_ms = int(re.search(r"read_ms=(\d+)", built[-1]).group(1)) if built else 0
    unresolved = open(os.path.join(mnt, ".marfafs", "unresolved")).read().count("\n")
    rtt = round_trip()

    # A new link, written through the tree, until the target's backlinks show it.
    rng = random.Random(7)
    files = sorted(os.path.relpath(os.path.join(d, f), corpus) for d, _, fs in os.walk(corpus) for f in fs)
    latencies = []
    for i in range(20):
        src, dst = rng.sample(files, 2)
        target = os.path.splitext(os.path.basename(dst))[0]
        with open(os.path.join(mnt, "vault", src), "a") as f:
            f.write(f"\nA new link to [[{dst[:-3]}]] ({i}).\n")
        t0 = time.monotonic()
        src_name = os.path.basename(src)
        refs = os.path.join(mnt, "backlinks", "core.note", target + ".md", "references")
        while time.monotonic() - t0 < 10:
            try:
                if src_name in os.listdir(refs):
                    break
            except OSError:
                pass
            time.sleep(0.005)
        latencies.append(time.monotonic() - t0)
    latencies.sort()

    # rsync -a into the tree, twice, beside a native directory.
    native_rs = os.path.join(base, "native-rsync")
    rs = {}
    rs["native"] = [timed("rsync", "-a", corpus + "/", native_rs + "/"), timed("rsync", "-a", corpus + "/", native_rs + "/")]
    copy = os.path.join(mnt, "vault", "copy") + "/"
    t, reqs = counted(lambda: timed("rsync", "-a", corpus + "/", copy))
    rs["marfafs"] = [t]
    asked = {"rsync": reqs}
    rsync_settle_s = settling()
    rs["marfafs"].append(timed("rsync", "-a", corpus + "/", copy))
    diff = subprocess.run(["diff", "-r", corpus, os.path.join(mnt, "vault", "copy")], capture_output=True).returncode == 0

    # cp -r into the tree beside a native directory.
    cp_tree = {"native": timed("cp", "-r", corpus, os.path.join(base, "native-cp"))}
    cp_tree["marfafs"], asked["cp"] = counted(lambda: timed("cp", "-r", corpus, os.path.join(mnt, "vault", "cp")))
    cp_settle_s = settling()

    # rm -rf of that copy, in the tree (each file goes to the trash, FS-4) and natively.
    rm_tree = {"native": timed("rm", "-rf", os.path.join(base, "native-cp"))}
    rm_tree["marfafs"], asked["rm"] = counted(lambda: timed("rm", "-rf", os.path.join(mnt, "vault", "cp")))

    # git add -A + commit of the copy, in the tree and natively (identity from the command line).
    git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.com", "-c", "gc.auto=0"]
    gits = {}
    for name, d in (("native", native_rs), ("marfafs", os.path.join(mnt, "vault", "copy"))):
        run("git", "init", "-q", d)
        drop_caches()

        def add_commit():
            t0 = time.monotonic()
            run(*git, "-C", d, "add", "-A")
            run(*git, "-C", d, "commit", "-qm", "bench")
            return time.monotonic() - t0
        if name == "marfafs":
            gits[name], asked["git"] = counted(add_commit)
        else:
            gits[name] = add_commit()

    # The main benchmark's write rows and ls -lR, in the tree: 2,000 new notes (create.sh, in a
    # folder of their own each run: names removed a moment before would come back from the trash,
    # FS-28), 200 editor saves (save.py), and a warm ls -lR of the rsynced copy, each beside
    # native (median of 3).
    tree = os.path.join(mnt, "vault")
    small = {}
    for key in SMALL:
        for name, d in (("native", base), ("marfafs", tree)):
            small.setdefault(key, {})[name] = small_row(key, d, native_rs if name == "native" else os.path.join(tree, "copy"),
                                                        mounted=name == "marfafs")
        asked[key] = small[key]["marfafs"][1]
finally:
    subprocess.run([bin_, "unmount", mnt])



def peer_rows(name, cmd):
    """The tree's rows through a FUSE peer mirroring a directory of its own: rsync -a (twice),
    cp -r, rm -rf, git add -A + commit, a cold grep -r, and the main benchmark's rows (`SMALL`).
    None if the peer cannot be had here."""
    if not cmd:
        return None
    back, pm = os.path.join(base, f"peer-{name}"), os.path.join(base, f"peer-{name}-mnt")
    os.makedirs(back)
    os.makedirs(pm)
    proc = subprocess.Popen(cmd(back, pm), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(50):
            if os.path.ismount(pm):
                break
            time.sleep(0.1)
        if not os.path.ismount(pm):
            return None
        out = {"rsync": [timed("rsync", "-a", corpus + "/", pm + "/copy/"), timed("rsync", "-a", corpus + "/", pm + "/copy/")],
               "cp": timed("cp", "-r", corpus, pm + "/cp")}
        out["rm"] = timed("rm", "-rf", pm + "/cp")
        run("git", "init", "-q", pm + "/copy")
        drop_caches()
        t0 = time.monotonic()
        run(*git, "-C", pm + "/copy", "add", "-A")
        run(*git, "-C", pm + "/copy", "commit", "-qm", "bench")
        out["git"] = time.monotonic() - t0
        out["grep"] = timed("grep", "-rc", "zzz-no-such-word", pm + "/copy", ok=(0, 1))
        for key in SMALL:
            out[key] = small_row(key, pm, pm + "/copy")[0]
        return out
    finally:
        subprocess.run(["fusermount3", "-u", pm], capture_output=True)
        proc.wait()
        shutil.rmtree(back, ignore_errors=True)


kb = os.environ.get("KBMIRROR") if os.environ.get("NO_PEERS") != "1" else None
peers = {"kbmirror": peer_rows("kbmirror", (lambda b, m: ["env", f"KB_SOURCE={b}", kb, "-f", "-o", "default_permissions", m])
                               if kb and os.access(kb, os.X_OK) else None),
         "bindfs": peer_rows("bindfs", (lambda b, m: ["bindfs", "-f", b, m])
                             if shutil.which("bindfs") and os.environ.get("NO_PEERS") != "1" else None)}

# The first grep -r after a fresh mount, beside a cold native grep -r of the same notes.
# (grep exits 1 when nothing matches.)
grep_native = timed("grep", "-rc", "zzz-no-such-word", native_rs, ok=(0, 1))
drop_caches()
run(bin_, "mount", mnt, "--store", store, "--log-file", log)
try:
    t0 = time.monotonic()
    _, asked["grep"] = counted(lambda: subprocess.run(["grep", "-rc", "zzz-no-such-word", os.path.join(mnt, "vault", "copy")], capture_output=True))
    grep_mount = time.monotonic() - t0
finally:
    subprocess.run([bin_, "unmount", mnt])

row = {"notes": notes, "cp_s": cp_s, "import_s": import_s, "first_backlinks_s": first_backlinks_s, "links": links,
       "index_ms": index_ms, "read_ms": read_ms, "unresolved": unresolved, "targets_with_backlinks": listed,
       "new_link_p50_s": latencies[len(latencies) // 2], "new_link_max_s": latencies[-1], "rsync": rs, "rsync_same": diff,
       "cp_tree": cp_tree, "rm_tree": rm_tree, "git": gits, "grep": {"native": grep_native, "marfafs": grep_mount},
       "settling_after_s": {"rsync": rsync_settle_s, "cp": cp_settle_s}, "peers": peers,
       "round_trip_s": rtt, "requests": asked, "small": {k: {n: v[0] for n, v in r.items()} for k, r in small.items()}}
json.dump(row, open(os.path.join(outdir, "vault.json"), "w"), indent=1)

def cpu_model():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def where_base():
    """The filesystem every native directory of the run is on (its type and device)."""
    r = subprocess.run(["findmnt", "-no", "FSTYPE,SOURCE", "-T", outdir], capture_output=True, text=True)
    fs = r.stdout.split()
    return f"{fs[0]} ({fs[1]})" if len(fs) == 2 else "an unknown filesystem"


def peer(key, native, i=None, name="kbmirror"):
    """A peer's time and its ratio to native, for the table."""
    p = peers.get(name)
    if not p:
        return "-"
    t = p[key][i] if i is not None else p[key]
    return f"{t:.2f} s ({t / native:.1f}×)"


# Issue 26's goals (FS-32): the most each row may take, as a multiple of native (import: of `cp -r`).
GOALS = {"import": 2, "rsync": 3, "cp": 3, "git": 2, "grep": 2, "create2000": 1.5, "save200": 1.3, "ls_lR": 2}


def goal(key):
    """Row `key`'s goal as the tables show it ("" for a row with none)."""
    return f"≤ {GOALS[key]:g}×" if key in GOALS else ""


def floor_rows():
    """Each row's requests (`.marfafs/requests`, all but `forget`, which the kernel does not wait
    for) and the floor they set: native's time plus a round trip per request."""
    units = {"rsync": notes, "cp": notes, "rm": notes, "git": notes, "grep": notes, "ls_lR": notes,
             "create2000": 2000, "save200": 200}
    native = {"rsync": rs["native"][0], "cp": cp_tree["native"], "rm": rm_tree["native"], "git": gits["native"],
              "grep": grep_native, **{k: small[k]["native"][0] for k in small}}
    mine = {"rsync": rs["marfafs"][0], "cp": cp_tree["marfafs"], "rm": rm_tree["marfafs"], "git": gits["marfafs"],
            "grep": grep_mount, **{k: small[k]["marfafs"][0] for k in small}}
    names = {"rsync": "`rsync -a` into the tree", "cp": "`cp -r` into the tree", "rm": "`rm -rf` of that copy",
             "git": "`git add -A` + `git commit`", "grep": "first `grep -r` after a mount",
             "create2000": "2,000 new notes (create.sh)", "save200": "200 editor saves (save.py)", "ls_lR": "`ls -lR`, warm"}
    out = []
    for k in names:
        reqs = asked.get(k) or {}
        n = sum(c for op, (c, _) in reqs.items() if op not in ("total", "forget"))
        us = sum(t for op, (_, t) in reqs.items() if op not in ("total", "forget"))
        top = ", ".join(f"{op} {c / units[k]:.2f}" for op, (c, _) in sorted(reqs.items(), key=lambda x: -x[1][0])
                        if op not in ("total", "forget") and c / units[k] >= 0.05)
        fl = native[k] + n * rtt
        kbm = peers.get("kbmirror")
        theirs = (kbm[k][0] if k == "rsync" else kbm[k]) if kbm else None
        # A goal under the floor is one no FUSE filesystem asked these requests can meet here.
        shown = goal(k) + (" (under the floor)" if k in GOALS and GOALS[k] < fl / native[k] else "")
        out.append(f"| {names[k]} | {n / units[k]:.2f} ({top}) | {us / max(n, 1):.0f} µs | {native[k]:.2f} s | {fl:.2f} s ({fl / native[k]:.1f}×) "
                   f"| {mine[k]:.2f} s ({mine[k] / native[k]:.1f}×) | {shown} | "
                   + (f"{theirs:.2f} s ({theirs / native[k]:.1f}×)" if theirs is not None else "-") + " |")
    return out


md = [
    "## The vault: import, links, the tree (FS-26, FS-27)",
    "",
    f"`scripts/bench vault` on {time.strftime('%Y-%m-%d', time.gmtime())} ({os.cpu_count()} cores, {cpu_model()}; native, the store and the"
    f" peers' directories on {where_base()}): the bench corpus's {notes:,} notes"
    f" (in {len(next(os.walk(corpus))[1])} folders of folders, with wikilinks and relative links),",
    "page cache dropped before each timed command. A write into the tree returns before the daemon has settled what it wrote",
    "(parsed it, queued it); what was left is timed apart, once the command returned (\"+ settling\"), so it is not billed to the next row.",
    "",
    "| what | native | marfafs | ratio | goal | kbmirror | bindfs |",
    "|---|---|---|---|---|---|---|",
    f"| import (`cp -r` natively) | {cp_s:.2f} s | {import_s:.2f} s ({notes / import_s:,.0f} notes/s) | {import_s / cp_s:.1f}× | {goal('import')} | | |",
    f"| `rsync -a` into the tree | {rs['native'][0]:.2f} s | {rs['marfafs'][0]:.2f} s (+ {rsync_settle_s:.2f} s settling) | {rs['marfafs'][0] / rs['native'][0]:.1f}× | {goal('rsync')} | "
    f"{peer('rsync', rs['native'][0], 0)} | {peer('rsync', rs['native'][0], 0, 'bindfs')} |",
    f"| the same `rsync -a` again (nothing to send) | {rs['native'][1]:.2f} s | {rs['marfafs'][1]:.2f} s | {rs['marfafs'][1] / rs['native'][1]:.1f}× | | "
    f"{peer('rsync', rs['native'][1], 1)} | {peer('rsync', rs['native'][1], 1, 'bindfs')} |",
    f"| `cp -r` into the tree | {cp_tree['native']:.2f} s | {cp_tree['marfafs']:.2f} s (+ {cp_settle_s:.2f} s settling) | {cp_tree['marfafs'] / cp_tree['native']:.1f}× | {goal('cp')} | "
    f"{peer('cp', cp_tree['native'])} | {peer('cp', cp_tree['native'], None, 'bindfs')} |",
    f"| `rm -rf` of that copy | {rm_tree['native']:.2f} s | {rm_tree['marfafs']:.2f} s | {rm_tree['marfafs'] / rm_tree['native']:.1f}× | | "
    f"{peer('rm', rm_tree['native'])} | {peer('rm', rm_tree['native'], None, 'bindfs')} |",
    f"| `git add -A` + `git commit` of the vault | {gits['native']:.2f} s | {gits['marfafs']:.2f} s | {gits['marfafs'] / gits['native']:.1f}× | {goal('git')} | "
    f"{peer('git', gits['native'])} | {peer('git', gits['native'], None, 'bindfs')} |",
    f"| first `grep -r` after a mount (cold natively) | {grep_native:.2f} s | {grep_mount:.2f} s | {grep_mount / grep_native:.1f}× | {goal('grep')} | "
    f"{peer('grep', grep_native)} | {peer('grep', grep_native, None, 'bindfs')} |",
    "",
    "kbmirror (the reference FUSE filesystem of ../shared/bench: no state of its own, each request a system call on the"
    " directory it mirrors) and bindfs mirror native directories of their own in the same run, page cache dropped alike:"
    " what they take over native is what a FUSE request's round trip costs on this machine, under any FUSE filesystem.",
    "",
    f"Link resolution: the first listing of `backlinks/` on a fresh mount took {first_backlinks_s:.2f} s, of which the daemon spent "
    f"{index_ms} ms on {links:,} links ({read_ms} ms reading them from the store and building the tree, {index_ms - read_ms} ms resolving: "
    f"{links / max(index_ms - read_ms, 1) * 1000:,.0f} links/s); {listed:,} notes have backlinks, "
    f"{unresolved:,} links name no note (`.marfafs/unresolved`; most of the corpus's relative links point into other folders).",
    f"A link appended to a note through `vault/` shows in its target's `backlinks/` after {latencies[len(latencies) // 2] * 1000:.0f} ms "
    f"(median of 20, at most {latencies[-1] * 1000:.0f} ms; the settle window is 100 ms). `diff -r` of the corpus and the tree it was "
    f"rsynced into: {'no difference' if diff else 'DIFFERENT'}.",
    "",
    "### What the kernel asks, and the floor it sets",
    "",
    f"Each row's requests, counted by the mount (`.marfafs/requests`), per note (per file made or saved for the last"
    f" three rows), and the floor they set for any FUSE filesystem asked them: native's time plus one round trip per request."
    f" A round trip here: {rtt * 1e6:.1f} µs (a request the daemon answers at once, `lgetxattr` of `security.selinux`, against"
    f" the same call natively). The daemon's own time per request is its handlers' (the reply included). The last three rows"
    f" are the main benchmark's, run here in `vault/` (median of 3).",
    "",
    "| what | requests per note | daemon per request | native | floor | marfafs | goal | kbmirror |",
    "|---|---|---|---|---|---|---|---|",
    *floor_rows(),
    "",
    "The kernel sends some of them whatever the filesystem does: a `write(2)` first asks for `security.capability` (FUSE"
    " clears `SB_NOSEC`, so no inode is ever marked as having none), `ls -l` asks each file for `security.selinux` (FS-17:"
    " ENODATA, which the kernel does not keep), a name made in a folder makes the next path through it ask for the folder's"
    " attributes (the kernel checks permissions, `default_permissions`), and `open(O_CREAT)` of a new name looks it up"
    " first. libfuse answers `ioctl` (Python's `isatty` at each `open`) itself: not counted. kbmirror, the reference FUSE"
    " filesystem, in the same run: it keeps no extended attributes (it answers ENOSYS, after which the kernel stops asking"
    " for `security.*`), so its `ls -lR` and writes are spared a round trip per file that a filesystem keeping `user.*`"
    " attributes (FS-17) is asked. A goal marked \"under the floor\" is below its row's floor: no FUSE filesystem that is"
    " asked these requests (extended attributes kept, the kernel checking permissions) meets it on this machine, however"
    " little its own work.",
    "",
]
open(os.path.join(outdir, "vault.md"), "w").write("\n".join(md))
print("\n".join(md))
shutil.rmtree(base, ignore_errors=True)
