"""`marfafs serve` for the benchmarks (bench-server.py, bench-sync.py): the given build on
127.0.0.1, on a port the system picks, with a fresh database in a temporary directory, and the
first admin key."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.request


class Served:
    """db: a database to serve (a postgres:// URL another process also serves); None: a new
    SQLite file. key: that database's admin key (None: bootstrap the first one)."""
    def __init__(self, binary, outdir, prefix, db=None, key=None, log_name="serve.log"):
        self.work = tempfile.mkdtemp(prefix=prefix)
        log = open(os.path.join(outdir, log_name), "w")
        self.proc = subprocess.Popen([binary, "serve", "--db", db or os.path.join(self.work, "server.sqlite"), "--port", "0"],
                                     stdout=subprocess.PIPE, stderr=log, text=True)
        line = self.proc.stdout.readline()
        m = re.search(r"listening on (http://[\d.]+:(\d+))", line)
        if not m:
            self.stop()
            sys.exit(f"serve did not start: {line!r}")
        self.base, self.port = m.group(1), int(m.group(2))
        self.key = key or self.call("POST", "/keys", {"label": "bench"})["key"]

    def call(self, method, path, body=None, key=None):
        req = urllib.request.Request(self.base + path, method=method, data=json.dumps(body).encode() if body is not None else None)
        req.add_header("Content-Type", "application/json")
        if key:
            req.add_header("Authorization", "Bearer " + key)
        with urllib.request.urlopen(req) as r:
            return json.loads(r.read())

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.work, ignore_errors=True)


LUA = """
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
"""

MODES = [("get", "GET /items/{id}"), ("patch", "PATCH /items/{id}"), ("post", "POST /items")]


def write_lua(path, ids):
    """wrk's script: GET, PATCH or POST (env MODE) of random items among `ids`."""
    with open(path, "w") as f:
        f.write("ids = {" + ",".join(f'"{i}"' for i in ids) + "}\n" + LUA)


def _ms(v):
    n, u = float(re.match(r"[\d.]+", v).group()), re.search(r"[a-z]+", v).group()
    return n * {"us": 0.001, "ms": 1, "s": 1000}[u]


def run_wrk(lua, base, mode, key, seconds, connections, threads):
    """One wrk run: requests/s, p50 and p99 in ms, requests made, answers other than 2xx/3xx."""
    out = subprocess.run(["wrk", "-t", str(threads), "-c", str(connections), "-d", f"{seconds}s", "--latency", "-s", lua, base],
                         env={**os.environ, "MODE": mode, "KEY": key}, capture_output=True, text=True).stdout
    pct = {p: _ms(v) for p, v in re.findall(r"^\s+(50|90|99)%\s+(\S+)", out, re.M)}
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {"rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)), "p50_ms": pct.get("50"), "p99_ms": pct.get("99"),
            "requests": int(re.search(r"(\d+) requests in", out).group(1)), "non_2xx": int(errors.group(1)) if errors else 0}


def fan_out(post, port, key, subscribers, events, rate):
    """SUBSCRIBERS streams of GET /events on `port` (raw sockets, one selector) while `post(title)`
    creates EVENTS items at RATE per second; for each event and subscriber, the time from the
    POST's answer to the frame's arrival."""
    import json as _json
    import selectors
    import socket
    import time
    sel = selectors.DefaultSelector()
    subs = []
    for _ in range(subscribers):
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
                    for line in frame.split(b"\n"):
                        if line.startswith(b"data: "):
                            try:
                                title = _json.loads(line[6:])["properties"]["title"]
                            except Exception:
                                continue
                            sub["seen"].setdefault(title, now)

    pump(time.monotonic() + 1.0)  # every stream open and past its first ping
    sent = {}
    t0 = time.monotonic()
    for i in range(events):
        title = f"fan {i}"
        post(title)
        sent[title] = time.monotonic()
        pump(t0 + (i + 1) / rate)
    pump(time.monotonic() + 3.0)
    lat = sorted((sub["seen"][t] - at) * 1000 for sub in subs for t, at in sent.items() if t in sub["seen"])
    for sub in subs:
        sub["sock"].close()
    pick = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] if lat else None  # noqa: E731
    return {"subscribers": subscribers, "events": events, "rate": rate, "delivered": len(lat), "expected": events * subscribers,
            "p50_ms": pick(0.50), "p99_ms": pick(0.99), "max_ms": lat[-1] if lat else None,
            "frames_per_s": len(lat) / (max(sent.values()) - t0) if sent else 0}


def bench_arguments():
    """The two arguments every benchmark script takes: the marfafs BINARY and the OUTDIR for its
    results."""
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("outdir")
    return ap


def load_arguments(subscribers):
    """The arguments every load benchmark of the server takes: BINARY OUTDIR, wrk's seconds,
    connections and threads, and the fan-out's subscribers, events and rate."""
    ap = bench_arguments()
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--subscribers", type=int, default=subscribers)
    ap.add_argument("--events", type=int, default=200)
    ap.add_argument("--rate", type=float, default=50, help="items created per second during the fan-out")
    return ap
