#!/usr/bin/env python3
"""Load benchmark of `marfafs serve` (called by `scripts/bench server`).

Starts the release build on 127.0.0.1 with a fresh database, seeds it, then measures with wrk
(HTTP/1.1 keep-alive, --latency) requests/s and latency percentiles of GET /items/{id},
PATCH /items/{id} and POST /items, and the event stream's fan-out: SUBSCRIBERS streams on
GET /events while items are created at a steady rate; for every event and every subscriber the
time from the POST's answer to the frame's arrival. Prints a Markdown section and writes
server.json beside it.

Then: latency of GET /items/{id} while 1,000 connections sit idle or send their headers and bodies
too slowly; the server's RSS while oversized uploads are refused; filtered list latency with
100,000 items (a fresh server).

usage: bench-server.py BINARY OUTDIR [--seconds 10] [--connections 32] [--subscribers 100] [--events 200]
                       [--slow 1000] [--list-items 100000]
"""
import json
import os
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchserve import MODES, Served, fan_out, load_arguments, run_wrk, write_lua  # noqa: E402

ap = load_arguments(subscribers=100)
ap.add_argument("--slow", type=int, default=1000, help="idle and slow connections held open")
ap.add_argument("--list-items", type=int, default=100000, help="items for the filtered-list latency")
args = ap.parse_args()


def timed_gets(base_port, key, path, n):
    """Median and p99 in ms of n sequential keep-alive GETs."""
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", base_port)
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        c.request("GET", path, headers={"Authorization": "Bearer " + key})
        r = c.getresponse(); r.read()
        ts.append((time.perf_counter() - t) * 1000)
        assert r.status == 200, r.status
    c.close()
    ts.sort()
    return ts[len(ts) // 2], ts[min(len(ts) - 1, int(len(ts) * 0.99))]


def rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0
os.makedirs(args.outdir, exist_ok=True)

srv = Served(args.binary, args.outdir, "marfafs-serve-bench.")
try:
    base, port, key, work, call = srv.base, srv.port, srv.key, srv.work, srv.call
    ids = [call("POST", "/items", {"type": "core.note", "properties": {"title": f"seed {i}", "body": "x" * 400}}, key)["item"]["id"]
           for i in range(100)]

    lua = os.path.join(work, "bench.lua")
    write_lua(lua, ids)
    rows = []
    for mode, label in MODES:
        r = run_wrk(lua, base, mode, key, args.seconds, args.connections, args.threads)
        rows.append({"endpoint": label, "rps": r["rps"], "p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"], "non_2xx": r["non_2xx"]})
        print(f"{label}: {r['rps']:.0f} req/s, p50 {r['p50_ms']} ms, p99 {r['p99_ms']} ms", file=sys.stderr)

    # SSE fan-out: the time from each POST's answer to each subscriber's frame.
    fan = fan_out(lambda title: call("POST", "/items", {"type": "core.note", "properties": {"title": title, "body": "fan-out"}}, key),
                  port, key, args.subscribers, args.events, args.rate)
    delivered, expected = fan["delivered"], fan["expected"]
    print(f"fan-out: {delivered}/{expected} delivered, p50 {fan['p50_ms']:.1f} ms, p99 {fan['p99_ms']:.1f} ms", file=sys.stderr)

    # Idle and slow clients: half connect and say nothing, half send part of their headers, then
    # a body that stops; normal requests are timed before and while they are held.
    path = "/items/" + ids[0]
    before = timed_gets(port, key, path, 500)
    held = []
    for i in range(args.slow):
        c = socket.create_connection(("127.0.0.1", port))
        if i % 3 == 1:
            c.sendall(b"GET /items HTTP/1.1\r\nHost: x\r\n")
        elif i % 3 == 2:
            c.sendall(f"POST /items HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\nContent-Length: 1000\r\n\r\n{{".encode())
        held.append(c)
    during = timed_gets(port, key, path, 500)
    for c in held:
        c.close()
    slow = {"connections": args.slow, "before_p50_ms": before[0], "before_p99_ms": before[1], "during_p50_ms": during[0], "during_p99_ms": during[1]}
    print(f"{args.slow} slow connections: p50 {before[0]:.2f} → {during[0]:.2f} ms, p99 {before[1]:.2f} → {during[1]:.2f} ms", file=sys.stderr)

    # Oversized uploads: 4 at once, each declaring and sending 300 MiB at the 256 MiB limit, the
    # server's RSS sampled.
    import threading
    rss0 = rss_kib(srv.proc.pid)
    peak = [rss0]
    answers = []

    def upload():
        c = socket.create_connection(("127.0.0.1", port))
        c.sendall(f"POST /blobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\nContent-Type: application/octet-stream\r\n"
                  f"Content-Length: {300 << 20}\r\n\r\n".encode())
        chunk = os.urandom(1 << 20)
        c.settimeout(10)
        try:
            for _ in range(300):
                c.sendall(chunk)
        except OSError:
            pass
        c.settimeout(10)
        try:
            answers.append(c.recv(100).split(b"\r\n")[0].decode())
        except OSError as e:
            answers.append(str(e))
        c.close()
    threads = [threading.Thread(target=upload) for _ in range(4)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        peak[0] = max(peak[0], rss_kib(srv.proc.pid))
        time.sleep(0.05)
    oversized = {"uploads": 4, "mib_each": 300, "limit_mib": 256, "rss_before_mib": rss0 / 1024, "rss_peak_mib": peak[0] / 1024, "answers": answers}
    print(f"oversized uploads: RSS {rss0 / 1024:.0f} → peak {peak[0] / 1024:.0f} MiB; answers {answers}", file=sys.stderr)

    with open(os.path.join(args.outdir, "server.json"), "w") as f:
        json.dump({"http": rows, "fanout": fan, "seconds": args.seconds, "connections": args.connections,
                   "slow": slow, "oversized": oversized}, f, indent=1)
    md = ["## Reference server (`marfafs serve`)", "",
          f"`scripts/bench server` on {time.strftime('%Y-%m-%d', time.gmtime())}: the release build on 127.0.0.1 with a fresh database"
          f" (100 seeded notes), wrk {args.threads} threads × {args.connections} keep-alive connections for {args.seconds} s per endpoint,"
          " on the same cores as the server (so the load generator competes with it). PATCH bodies carry no `version`"
          " (every request is a new version); POST creates a note per request.", "",
          "| endpoint | requests/s | p50 | p99 | non-2xx |", "|---|---|---|---|---|"]
    for r in rows:
        md.append(f"| {r['endpoint']} | {r['rps']:.0f} | {r['p50_ms']:.2f} ms | {r['p99_ms']:.2f} ms | {r['non_2xx']} |")
    md += ["", f"Event fan-out: {args.subscribers} subscribers on `GET /events`, {args.events} items created at {args.rate:.0f}/s;"
           " latency from the POST's answer to the frame's arrival at each subscriber.", "",
           "| subscribers | frames delivered | p50 | p99 | max |", "|---|---|---|---|---|",
           f"| {args.subscribers} | {delivered} of {expected} | {fan['p50_ms']:.1f} ms | {fan['p99_ms']:.1f} ms | {fan['max_ms']:.1f} ms |", "",
           f"Slow clients: {args.slow} connections held open (a third idle, a third sending half their headers, a third a body that stops),"
           " and 500 sequential `GET /items/{id}` before and while they are held (they are closed after `--idle-timeout`, 60 s):", "",
           "| | p50 | p99 |", "|---|---|---|",
           f"| before | {slow['before_p50_ms']:.2f} ms | {slow['before_p99_ms']:.2f} ms |",
           f"| with {args.slow} slow connections | {slow['during_p50_ms']:.2f} ms | {slow['during_p99_ms']:.2f} ms |", "",
           f"Oversized uploads: 4 at once, each declaring and sending 300 MiB at the 256 MiB limit: server RSS {oversized['rss_before_mib']:.0f} MiB"
           f" before, {oversized['rss_peak_mib']:.0f} MiB at most meanwhile; answers: {', '.join(sorted(set(answers)))}.", ""]
    with open(os.path.join(args.outdir, "server.md"), "w") as f:
        f.write("\n".join(md))
    print("\n".join(md))
finally:
    srv.stop()

# Filtered lists with many items, on a fresh server: an unfiltered page against pages filtered by
# a type (2% of the items), a tag (1%, and a rare one of 20 items), a tier (1%) and a source.
srv = Served(args.binary, args.outdir, "marfafs-serve-bench-lists.")
try:
    import http.client
    port, key = srv.port, srv.key
    phone = srv.call("POST", "/keys", {"label": "phone"}, key)["key"]
    c = http.client.HTTPConnection("127.0.0.1", port)
    t0 = time.time()
    for i in range(args.list_items):
        bookmark = i % 50 == 0
        body = {"type": "core.bookmark" if bookmark else "core.note",
                "properties": {"title": f"n{i}", "url": f"https://example.com/{i}"} if bookmark else {"title": f"n{i}", "body": "x"},
                "tier": "feed" if i % 100 == 7 else "library"}
        if i % 100 == 3:
            body["tags"] = ["common"]
        if i % 5000 == 11:
            body["tags"] = ["rare"]
        c.request("POST", "/items", body=json.dumps(body),
                  headers={"Authorization": "Bearer " + (phone if i % 100 == 5 else key), "Content-Type": "application/json"})
        r = c.getresponse(); r.read()
        assert r.status == 201, r.status
    seeded = time.time() - t0
    print(f"seeded {args.list_items} items in {seeded:.0f} s", file=sys.stderr)
    queries = [("unfiltered", "/items?limit=50"), ("type=core.bookmark (2%)", "/items?limit=50&type=core.bookmark"),
               ("tags=common (1%)", "/items?limit=50&tags=common"), ("tags=rare (20 items)", "/items?limit=50&tags=rare"),
               ("tier=feed (1%)", "/items?limit=50&tier=feed"), ("source=phone (1%)", "/items?limit=50&source=phone")]
    lists = []
    for label, q in queries:
        p50, p99 = timed_gets(port, key, q, 200)
        lists.append({"query": label, "p50_ms": p50, "p99_ms": p99})
        print(f"{label}: p50 {p50:.2f} ms, p99 {p99:.2f} ms", file=sys.stderr)
    base50 = lists[0]["p50_ms"]
    md = ["", f"Filtered lists: {args.list_items:,} items (seeded in {seeded:.0f} s), 200 sequential first pages of 50 per query:", "",
          "| query | p50 | p99 | p50 / unfiltered |", "|---|---|---|---|"]
    for l in lists:
        md.append(f"| {l['query']} | {l['p50_ms']:.2f} ms | {l['p99_ms']:.2f} ms | {l['p50_ms'] / base50:.1f}× |")
    md.append("")
    with open(os.path.join(args.outdir, "server.md"), "a") as f:
        f.write("\n".join(md))
    with open(os.path.join(args.outdir, "lists.json"), "w") as f:
        json.dump(lists, f, indent=1)
    print("\n".join(md))
finally:
    srv.stop()
