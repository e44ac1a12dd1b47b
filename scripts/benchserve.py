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
    def __init__(self, binary, outdir, prefix):
        self.work = tempfile.mkdtemp(prefix=prefix)
        log = open(os.path.join(outdir, "serve.log"), "w")
        self.proc = subprocess.Popen([binary, "serve", "--db", os.path.join(self.work, "server.sqlite"), "--port", "0"],
                                     stdout=subprocess.PIPE, stderr=log, text=True)
        line = self.proc.stdout.readline()
        m = re.search(r"listening on (http://[\d.]+:(\d+))", line)
        if not m:
            self.stop()
            sys.exit(f"serve did not start: {line!r}")
        self.base, self.port = m.group(1), int(m.group(2))
        self.key = self.call("POST", "/keys", {"label": "bench"})["key"]

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
