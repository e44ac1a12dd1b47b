#!/usr/bin/env python3
"""The reference server on its two backends, side by side in one run (called by `scripts/bench
backends` and the full run):

  1. one process on SQLite (the default),
  2. one process on PostgreSQL,
  3. two processes on one PostgreSQL database behind nginx (deploy/nginx-marfafs.conf).

For each: wrk on GET, PATCH and POST /items (requests/s, p50, p99) and the CPU time per request
of everything serving it (marfafs serve, PostgreSQL, nginx), so that what more cores would give
can be estimated; then the event fan-out across processes: subscribers on one process, items
created through the other (for the single-process set-ups, the same process). PostgreSQL runs
in a private cluster started here (as the postgres user, on a free port), with
synchronous_commit=off, which is what SQLite's synchronous=NORMAL in WAL mode gives: a crash
keeps the database consistent, a power cut may lose the last commits.

usage: bench-backends.py BINARY OUTDIR [--seconds 10] [--connections 32] [--subscribers 50] [--events 200]
"""
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchserve import MODES, Served, fan_out, load_arguments, run_wrk, write_lua  # noqa: E402

ap = load_arguments(subscribers=50)
args = ap.parse_args()
os.makedirs(args.outdir, exist_ok=True)
repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TICK = os.sysconf("SC_CLK_TCK")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def cpu_seconds(names):
    """User + system CPU of every process whose command is one of `names`."""
    total = 0
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            text = open(stat).read()
        except OSError:
            continue
        comm = text[text.index("(") + 1:text.rindex(")")]
        if comm in names:
            fields = text[text.rindex(")") + 2:].split()
            total += int(fields[11]) + int(fields[12])
    return total / TICK


class Cluster:
    def __init__(self):
        self.bin = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]))[-1]
        self.dir = tempfile.mkdtemp(prefix="marfafs-bench-pg.")
        shutil.chown(self.dir, "postgres", "postgres")
        self.port = free_port()
        self.pg([f"{self.bin}/initdb", "-D", self.dir + "/data", "-U", "marfa", "-A", "trust", "-E", "UTF8"])
        opts = (f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c synchronous_commit=off"
                " -c max_connections=200 -c shared_buffers=256MB")
        self.pg([f"{self.bin}/pg_ctl", "-D", self.dir + "/data", "-o", opts, "-l", self.dir + "/log", "-w", "start"])

    def pg(self, argv):
        subprocess.run(["runuser", "-u", "postgres", "--"] + argv, check=True, cwd="/tmp", stdout=subprocess.DEVNULL)

    def database(self, name):
        subprocess.run([f"{self.bin}/psql", "-X", "-q", "-h", "127.0.0.1", "-p", str(self.port), "-U", "marfa", "-d", "postgres",
                        "-c", f"CREATE DATABASE {name}"], check=True)
        return f"postgres://marfa@127.0.0.1:{self.port}/{name}"

    def stop(self):
        subprocess.run(["runuser", "-u", "postgres", "--", f"{self.bin}/pg_ctl", "-D", self.dir + "/data", "-m", "fast", "-w", "stop"],
                       cwd="/tmp", stdout=subprocess.DEVNULL)
        shutil.rmtree(self.dir, ignore_errors=True)


class Nginx:
    """nginx with the repository's sample config, in front of `ports`."""
    def __init__(self, ports):
        self.dir = tempfile.mkdtemp(prefix="marfafs-bench-nginx.")
        self.port = free_port()
        conf = open(os.path.join(repo, "deploy/nginx-marfafs.conf")).read()
        conf = conf.replace("127.0.0.1:8601", f"127.0.0.1:{ports[0]}").replace("127.0.0.1:8602", f"127.0.0.1:{ports[1]}")
        conf = conf.replace("listen 8600;", f"listen 127.0.0.1:{self.port};")
        open(self.dir + "/marfafs.conf", "w").write(conf)
        d = self.dir
        open(d + "/nginx.conf", "w").write(
            f"daemon off; user root; worker_processes 2; pid {d}/nginx.pid; error_log {d}/error.log;\n"
            "events { worker_connections 4096; }\n"
            f"http {{ access_log off; client_body_temp_path {d}/body; proxy_temp_path {d}/proxy; fastcgi_temp_path {d}/f;"
            f" uwsgi_temp_path {d}/u; scgi_temp_path {d}/s; include {d}/marfafs.conf; }}\n")
        self.proc = subprocess.Popen(["/usr/sbin/nginx", "-p", d, "-c", d + "/nginx.conf"])
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", self.port)).close()
                break
            except OSError:
                time.sleep(0.05)
        self.base = f"http://127.0.0.1:{self.port}"

    def stop(self):
        self.proc.send_signal(signal.SIGQUIT)
        self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


def measure(label, front_base, servers, subscriber_port, processes):
    """wrk through `front_base`, CPU of `processes`, fan-out to subscribers on `subscriber_port`
    with items created through `servers[0]`."""
    key, call = servers[0].key, servers[0].call
    ids = [call("POST", "/items", {"type": "core.note", "properties": {"title": f"seed {i}", "body": "x" * 400}}, key)["item"]["id"]
           for i in range(100)]
    lua = os.path.join(servers[0].work, "bench.lua")
    write_lua(lua, ids)
    rows = []
    for mode, endpoint in MODES:
        before = cpu_seconds(processes)
        r = run_wrk(lua, front_base, mode, key, args.seconds, args.connections, args.threads)
        r["cpu_ms_per_request"] = (cpu_seconds(processes) - before) * 1000 / max(1, r["requests"])
        r["endpoint"] = endpoint
        rows.append(r)
        print(f"{label} {endpoint}: {r['rps']:.0f} req/s, p50 {r['p50_ms']} ms, p99 {r['p99_ms']} ms,"
              f" {r['cpu_ms_per_request']:.2f} ms CPU/request, non-2xx {r['non_2xx']}", file=sys.stderr)
    fan = fan_out(lambda title: call("POST", "/items", {"type": "core.note", "properties": {"title": title, "body": "fan-out"}}, key),
                  subscriber_port, key, args.subscribers, args.events, args.rate)
    print(f"{label} fan-out: {fan['delivered']}/{fan['expected']}, p50 {fan['p50_ms']:.1f} ms, p99 {fan['p99_ms']:.1f} ms", file=sys.stderr)
    return {"setup": label, "http": rows, "fanout": fan}


results = []
serving = {"marfafs"}
# 1. SQLite, one process.
s = Served(args.binary, args.outdir, "marfafs-bench-sqlite.")
try:
    results.append(measure("SQLite, 1 process", s.base, [s], s.port, serving))
finally:
    s.stop()
cluster = Cluster()
try:
    # 2. PostgreSQL, one process.
    s = Served(args.binary, args.outdir, "marfafs-bench-pg1.", db=cluster.database("bench1"))
    try:
        results.append(measure("PostgreSQL, 1 process", s.base, [s], s.port, serving | {"postgres"}))
    finally:
        s.stop()
    # 3. PostgreSQL, two processes behind nginx; subscribers on process 2, writes through process 1.
    url = cluster.database("bench2")
    s1 = Served(args.binary, args.outdir, "marfafs-bench-pg2a.", db=url)
    s2 = Served(args.binary, args.outdir, "marfafs-bench-pg2b.", db=url, key=s1.key, log_name="serve2.log")
    proxy = Nginx([s1.port, s2.port])
    try:
        results.append(measure("PostgreSQL, 2 processes behind nginx", proxy.base, [s1, s2], s2.port, serving | {"postgres", "nginx"}))
    finally:
        proxy.stop()
        s2.stop()
        s1.stop()
finally:
    cluster.stop()

with open(os.path.join(args.outdir, "backends.json"), "w") as f:
    json.dump(results, f, indent=1)
md = ["## Server backends (SQLite, PostgreSQL, two processes behind nginx)", "",
      f"`scripts/bench backends` on {time.strftime('%Y-%m-%d', time.gmtime())}, in one run: the release build on SQLite (one process),"
      " on PostgreSQL (one process), and two processes on one PostgreSQL database behind nginx (`deploy/nginx-marfafs.conf`);"
      f" wrk {args.threads} threads × {args.connections} connections for {args.seconds} s per endpoint, 100 seeded notes."
      " PostgreSQL runs on the same machine with `synchronous_commit=off` (SQLite runs with `synchronous=NORMAL`)."
      " CPU per request is the user + system time of marfafs, PostgreSQL and nginx over the run, divided by the requests made.", "",
      "| set-up | endpoint | requests/s | p50 | p99 | CPU per request | non-2xx |", "|---|---|---|---|---|---|---|"]
for r in results:
    for h in r["http"]:
        md.append(f"| {r['setup']} | {h['endpoint']} | {h['rps']:.0f} | {h['p50_ms']:.2f} ms | {h['p99_ms']:.2f} ms"
                  f" | {h['cpu_ms_per_request']:.2f} ms | {h['non_2xx']} |")
md += ["", f"Event fan-out: {args.subscribers} subscribers, {args.events} items created at {args.rate:.0f}/s; with two processes the"
       " subscribers are on process 2 and the items are created through process 1 (the event crosses processes through"
       " PostgreSQL's NOTIFY).", "",
       "| set-up | frames delivered | p50 | p99 | max |", "|---|---|---|---|---|"]
for r in results:
    f = r["fanout"]
    md.append(f"| {r['setup']} | {f['delivered']} of {f['expected']} | {f['p50_ms']:.1f} ms | {f['p99_ms']:.1f} ms | {f['max_ms']:.1f} ms |")
cores = os.cpu_count()
md += ["", f"This machine has {cores} cores, shared by wrk, nginx, PostgreSQL and every server process, so a second process"
       " cannot show scaling here; the CPU per request says what a request costs in all, so requests/s on a larger machine"
       " is about (cores available to the service) / (CPU per request) until PostgreSQL's own limits.", ""]
with open(os.path.join(args.outdir, "backends.md"), "w") as f:
    f.write("\n".join(md))
print("\n".join(md))
