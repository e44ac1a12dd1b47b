#!/usr/bin/env python3
"""Load benchmark of `marfafs serve` (called by `scripts/bench server`).

Starts the release build on 127.0.0.1 with a fresh database, seeds it, then measures with wrk
(HTTP/1.1 keep-alive, --latency) requests/s and latency percentiles of GET /items/{id},
PATCH /items/{id} and POST /items, and the event stream's fan-out: SUBSCRIBERS streams on
GET /events while items are created at a steady rate; for every event and every subscriber the
time from the POST's answer to the frame's arrival. Prints a Markdown section and writes
server.json beside it.

usage: bench-server.py BINARY OUTDIR [--seconds 10] [--connections 32] [--subscribers 100] [--events 200]
"""
import argparse
import json
import os
import re
import selectors
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchserve import Served  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("binary")
ap.add_argument("outdir")
ap.add_argument("--seconds", type=int, default=10)
ap.add_argument("--connections", type=int, default=32)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--subscribers", type=int, default=100)
ap.add_argument("--events", type=int, default=200)
ap.add_argument("--rate", type=float, default=50, help="items created per second during the fan-out")
args = ap.parse_args()
os.makedirs(args.outdir, exist_ok=True)

srv = Served(args.binary, args.outdir, "marfafs-serve-bench.")
try:
    base, port, key, work, call = srv.base, srv.port, srv.key, srv.work, srv.call
    ids = [call("POST", "/items", {"type": "core.note", "properties": {"title": f"seed {i}", "body": "x" * 400}}, key)["item"]["id"]
           for i in range(100)]

    lua = os.path.join(work, "bench.lua")
    with open(lua, "w") as f:
        f.write("ids = {" + ",".join(f'"{i}"' for i in ids) + "}\n" + """
mode = os.getenv("MODE")
counter = 0
wrk.headers["Authorization"] = "Bearer " .. os.getenv("KEY")
wrk.headers["Content-Type"] = "application/json"
request = function()
  counter = counter + 1
  local id = ids[math.random(#ids)]
  if mode == "get" then
    return wrk.format("GET", "/items/" .. id)
  elseif mode == "patch" then
    return wrk.format("PATCH", "/items/" .. id, nil, '{"properties":{"body":"edit ' .. counter .. '"}}')
  else
    return wrk.format("POST", "/items", nil, '{"type":"core.note","properties":{"title":"load ' .. counter .. '","body":"created under load"}}')
  end
end
response = function(status, headers, body)
  if status >= 300 then wrk.thread:stop() end
end
""")

    def unit(v):
        n, u = float(re.match(r"[\d.]+", v).group()), re.search(r"[a-z]+", v).group()
        return n * {"us": 0.001, "ms": 1, "s": 1000}[u]

    rows = []
    for mode, label in [("get", "GET /items/{id}"), ("patch", "PATCH /items/{id}"), ("post", "POST /items")]:
        out = subprocess.run(["wrk", "-t", str(args.threads), "-c", str(args.connections), "-d", f"{args.seconds}s", "--latency",
                              "-s", lua, base], env={**os.environ, "MODE": mode, "KEY": key}, capture_output=True, text=True).stdout
        rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
        pct = {p: unit(v) for p, v in re.findall(r"^\s+(50|90|99)%\s+(\S+)", out, re.M)}
        errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
        rows.append({"endpoint": label, "rps": rps, "p50_ms": pct.get("50"), "p99_ms": pct.get("99"),
                     "non_2xx": int(errors.group(1)) if errors else 0})
        print(f"{label}: {rps:.0f} req/s, p50 {pct.get('50')} ms, p99 {pct.get('99')} ms", file=sys.stderr)

    # SSE fan-out: SUBSCRIBERS raw sockets, one selector; each frame's arrival is stamped.
    sel = selectors.DefaultSelector()
    subs = []
    for i in range(args.subscribers):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(f"GET /events?event=item.created HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\nAuthorization: Bearer {key}\r\n\r\n".encode())
        s.setblocking(False)
        sub = {"sock": s, "buf": b"", "seen": {}}
        sel.register(s, selectors.EVENT_READ, sub)
        subs.append(sub)

    def pump(until):
        while True:
            timeout = until - time.monotonic()
            if timeout <= 0:
                return
            for k, _ in sel.select(timeout):
                sub = k.data
                chunk = sub["sock"].recv(65536)
                now = time.monotonic()
                sub["buf"] += chunk
                while b"\n\n" in sub["buf"]:
                    frame, sub["buf"] = sub["buf"].split(b"\n\n", 1)
                    for l in frame.split(b"\n"):
                        if l.startswith(b"data: "):
                            try:
                                title = json.loads(l[6:])["properties"]["title"]
                            except Exception:
                                continue
                            sub["seen"].setdefault(title, now)

    pump(time.monotonic() + 1.0)  # every stream open and past its first ping
    sent = {}
    t0 = time.monotonic()
    for i in range(args.events):
        title = f"fan {i}"
        call("POST", "/items", {"type": "core.note", "properties": {"title": title, "body": "fan-out"}}, key)
        sent[title] = time.monotonic()
        pump(t0 + (i + 1) / args.rate)
    pump(time.monotonic() + 3.0)
    lat = sorted((sub["seen"][t] - at) * 1000 for sub in subs for t, at in sent.items() if t in sub["seen"])
    delivered = len(lat)
    expected = args.events * args.subscribers
    pick = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] if lat else None
    fan = {"subscribers": args.subscribers, "events": args.events, "rate": args.rate, "delivered": delivered, "expected": expected,
           "p50_ms": pick(0.50), "p99_ms": pick(0.99), "max_ms": lat[-1] if lat else None,
           "frames_per_s": delivered / (max(sent.values()) - t0) if sent else 0}
    print(f"fan-out: {delivered}/{expected} delivered, p50 {fan['p50_ms']:.1f} ms, p99 {fan['p99_ms']:.1f} ms", file=sys.stderr)
    for sub in subs:
        sub["sock"].close()

    with open(os.path.join(args.outdir, "server.json"), "w") as f:
        json.dump({"http": rows, "fanout": fan, "seconds": args.seconds, "connections": args.connections}, f, indent=1)
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
           f"| {args.subscribers} | {delivered} of {expected} | {fan['p50_ms']:.1f} ms | {fan['p99_ms']:.1f} ms | {fan['max_ms']:.1f} ms |", ""]
    with open(os.path.join(args.outdir, "server.md"), "w") as f:
        f.write("\n".join(md))
    print("\n".join(md))
finally:
    srv.stop()
