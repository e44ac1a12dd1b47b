#!/usr/bin/env python3
"""A CONTRACT FAKE of a MyLifeDB server, for tests: written from ../shared/spec/mylifedb.md (the
API as observed on real servers), because the real server cannot be built on CI machines. It is
not MyLifeDB; it answers what the recorded shapes say, over a real folder on disk.

    mylifedb_contract.py DATA_DIR PORT_FILE [--routes current|legacy] [--password PW]
                         [--password-unset 1] [--heartbeat SECONDS] [--port N]

It listens on loopback (port N, else a free one) and writes the port to PORT_FILE.

--routes current (a7d8d30e): /api/data/*, /raw, /sqlar; the old routes answer 404.
--routes legacy (86031bde): the /api/library/* routes and /api/notifications/stream as well as
  /api/data/*; as observed there, a PUT /raw makes no library-changed event.
--routes legacy-only: the same without /api/data/* (404), as a server from before those routes.
--password PW: password auth is on and PW is the password: every route but the login answers 401
  (coded error and a Basic challenge) without HTTP Basic (any user, PW) or a session cookie from
  POST /api/system/auth/login. --password-unset 1: as a fresh server in password mode, the first
  login sets the password, and HTTP Basic is refused until then.

For tests only, under /_contract/ (not part of MyLifeDB): POST /_contract/drop-streams closes every
event stream; POST /_contract/quiet?on=1 holds back events (as a stream that misses them) until
quiet?on=0; GET /_contract/requests counts requests by "METHOD /route"; POST /_contract/forbid?path=F
makes a tree listing of folder F answer 403 (as a folder the server may not read); POST
/_contract/busy?count=N makes the next N tree listings answer 503 (a server too busy for them).
POST /_contract/hold?path=F makes tree listings of folder F wait until POST /_contract/release?path=F
(a listing read while other changes land); GET /_contract/held says how many are waiting.
"""
import email.utils, hashlib, json, mimetypes, os, secrets, socket, socketserver, sys, threading, time, urllib.parse
import http.server

args = sys.argv[1:]
data_dir, port_file = os.path.abspath(args[0]), args[1]
opts = {"--routes": "current", "--password": None, "--heartbeat": "30", "--port": "0", "--password-unset": "0"}
i = 2
while i < len(args):
    opts[args[i]] = args[i + 1]
    i += 2
ROUTES, PASSWORD, HEARTBEAT = opts["--routes"], opts["--password"], float(opts["--heartbeat"])
password_set = [opts["--password-unset"] != "1"]
os.makedirs(data_dir, exist_ok=True)

lock = threading.Lock()
streams = []            # (handler, queue list, condition)
sessions = set()
quiet = {"on": False, "held": []}
counts = {}
created = {}            # path -> createdAt ms (the server keeps its own record)
pinned = set()
tmp_counter = [0]
forbidden = set()
busy = {"count": 0}
holds = {}              # folder -> threading.Event its listings wait on
waiting = [0]           # listings waiting now


def now_ms():
    return int(time.time() * 1000)


def emit(path, op):
    """A library-changed event to every stream (held back while quiet)."""
    ev = {"type": "library-changed", "timestamp": now_ms(), "path": path, "data": {"operation": op}}
    with lock:
        if quiet["on"]:
            quiet["held"].append(ev)
            return
        for s in streams:
            with s["cond"]:
                s["queue"].append(ev)
                s["cond"].notify()


def safe(rel):
    """A data-relative path, or None when it leaves the data directory."""
    rel = rel.strip("/")
    parts = [p for p in rel.split("/") if p not in ("",)]
    if any(p in (".", "..") for p in parts):
        return None
    return "/".join(parts)


def absolute(rel):
    return os.path.join(data_dir, rel) if rel else data_dir


def mtime_ms(p):
    return int(os.stat(p).st_mtime_ns // 1_000_000)


def created_ms(rel, p):
    with lock:
        if rel not in created:
            created[rel] = mtime_ms(p)
        return created[rel]


def entry(rel, name, depth):
    p = absolute(rel)
    if os.path.isdir(p):
        e = {"path": name, "type": "folder", "modifiedAt": mtime_ms(p)}
        if depth > 1:
            e["children"] = listing(rel, depth - 1)
        return e
    return {"path": name, "type": "file", "size": os.path.getsize(p), "modifiedAt": mtime_ms(p), "createdAt": created_ms(rel, p)}


def listing(rel, depth):
    p = absolute(rel)
    out = []
    for name in sorted(os.listdir(p)):
        if name.startswith(".tmp-"):
            continue
        child = f"{rel}/{name}" if rel else name
        out.append(entry(child, name, depth))
    return out


def sha256(p):
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def mime(name):
    if name.endswith(".md"):
        return "text/markdown"
    return mimetypes.guess_type(name)[0] or "application/octet-stream"


def info(rel):
    p = absolute(rel)
    name = rel.rsplit("/", 1)[-1]
    if os.path.isdir(p):
        return {"createdAt": created_ms(rel, p), "isFolder": True, "isPinned": False, "modifiedAt": mtime_ms(p), "name": name, "path": rel}
    m = mime(name)
    # Documents and images get a preview image in the archive: `previews/<hash>.jpg`.
    digest = sha256(p)
    sqlar_name = f"previews/{digest[:16]}.jpg" if name.rsplit(".", 1)[-1].lower() in ("pdf", "png", "jpg", "jpeg", "epub") else None
    preview = None
    if m.startswith("text/"):
        with open(p, "rb") as f:
            preview = f.read(512).decode("utf-8", "replace")
    return {"createdAt": created_ms(rel, p), "hash": digest, "isFolder": False, "isPinned": rel in pinned,
            "lastScannedAt": now_ms(), "mimeType": m, "modifiedAt": mtime_ms(p), "name": name, "path": rel,
            "previewSqlar": sqlar_name, "previewStatus": "ready" if preview is not None or sqlar_name else "pending",
            "size": os.path.getsize(p),
            "textPreview": preview}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        # Headers and body go out in separate writes: without this, Nagle's algorithm and the
        # client's delayed ACK hold each answer's body back 40 ms.
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, *a):
        pass

    # --- answers ---
    def send_json(self, status, obj, headers=()):
        body = json.dumps(obj, separators=(",", ":")).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def coded(self, status, code, message):
        self.send_json(status, {"error": {"code": code, "message": message}})

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def json_body(self):
        try:
            return json.loads(self.body() or b"{}")
        except ValueError:
            return None

    def authorized(self, route):
        if PASSWORD is None or route == "/api/system/auth/login":
            return True
        auth = self.headers.get("Authorization", "")
        if auth.lower().startswith("basic ") and password_set[0]:
            import base64
            try:
                user_pw = base64.b64decode(auth[6:]).decode()
            except Exception:
                user_pw = ""
            if user_pw.split(":", 1)[-1] == PASSWORD:
                return True
        cookies = self.headers.get("Cookie", "")
        for c in cookies.split(";"):
            k, _, v = c.strip().partition("=")
            if k == "session" and v in sessions:
                return True
        self.send_json(401, {"error": {"code": "AUTH_INVALID_SESSION", "message": "Unauthorized"}},
                       headers=[("WWW-Authenticate", 'Basic realm="MyLifeDB"')])
        return False

    def dispatch(self):
        url = urllib.parse.urlsplit(self.path)
        route = urllib.parse.unquote(url.path)
        q = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
        key = self.command + " " + ("/".join(route.split("/")[:4]))
        with lock:
            counts[key] = counts.get(key, 0) + 1
        if route.startswith("/_contract/"):
            return self.contract(route, q)
        if not self.authorized(route):
            return
        m = self.command
        legacy = ROUTES in ("legacy", "legacy-only")
        if ROUTES == "legacy-only" and route.startswith("/api/data/"):
            return self.send_json(404, {"error": "not found"})
        if m == "POST" and route == "/api/system/auth/login":
            return self.login()
        if route.startswith("/raw/"):
            rel = safe(route[len("/raw/"):]) if ".." not in url.path.split("/") else None
            if rel is None or rel == "":
                return self.send_json(400, {"error": "Invalid path"})
            if m in ("GET", "HEAD"):
                return self.raw_get(rel)
            if m == "PUT":
                return self.raw_put(rel, emit_write=not legacy)
        if route.startswith("/sqlar/") and m == "GET":
            return self.sqlar(route[len("/sqlar/"):])
        if m == "GET" and route == "/api/data/root" or legacy and route == "/api/library/root":
            return self.send_json(200, {"root": data_dir})
        if m == "GET" and route == "/api/data/directories":
            return self.send_json(200, sorted(n for n in os.listdir(data_dir) if os.path.isdir(absolute(n))))
        if m == "GET" and (route == "/api/system/stats" or legacy and route == "/api/stats"):
            return self.stats()
        if m == "GET" and (route == "/api/data/tree" or legacy and route == "/api/library/tree"):
            return self.tree(q)
        if m == "GET" and (route == "/api/data/events" or legacy and route == "/api/notifications/stream"):
            return self.events()
        if route.startswith("/api/data/files/"):
            rel = safe(route[len("/api/data/files/"):])
            if rel is None:
                return self.send_json(400, {"error": "Invalid path"})
            if m == "GET":
                return self.file_info(rel)
            if m == "PATCH":
                b = self.json_body() or {}
                if "parent" in b:
                    return self.move(rel, b.get("parent") or "")
                if "name" in b:
                    return self.rename(rel, b.get("name") or "")
                return self.coded(400, "LIBRARY_INVALID_REQUEST", "Nothing to change")
            if m == "DELETE":
                return self.delete(rel)
        if m == "POST" and route == "/api/data/folders":
            b = self.json_body() or {}
            return self.mkdir(b.get("parent") or "", b.get("name") or "")
        if legacy:
            if m == "GET" and route == "/api/library/file-info":
                return self.file_info(safe(q.get("path", "")) or "")
            if m == "POST" and route == "/api/library/folder":
                b = self.json_body() or {}
                return self.mkdir(b.get("path") or "", b.get("name") or "")
            if m == "POST" and route == "/api/library/move":
                b = self.json_body() or {}
                return self.move(safe(b.get("path") or "") or "", b.get("targetPath") or "")
            if m == "POST" and route == "/api/library/rename":
                b = self.json_body() or {}
                rel = safe(b.get("path") or "") or ""
                if not os.path.exists(absolute(rel)) or not rel:
                    return self.coded(500, "LIBRARY_RENAME_FAILED", "Failed to rename file")
                return self.rename(rel, b.get("newName") or "")
            if m == "DELETE" and route == "/api/library/file":
                return self.delete(safe(q.get("path", "")) or "")
        self.send_json(404, {"error": "not found"})

    do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = lambda self: self.dispatch()

    # --- the contract's own controls ---
    def contract(self, route, q):
        self.body()
        if route == "/_contract/drop-streams":
            with lock:
                for s in streams:
                    with s["cond"]:
                        s["drop"] = True
                        s["cond"].notify()
            return self.send_json(200, {"dropped": len(streams)})
        if route == "/_contract/quiet":
            with lock:
                quiet["on"] = q.get("on") == "1"
                held, quiet["held"] = (quiet["held"], []) if not quiet["on"] else ([], quiet["held"])
            return self.send_json(200, {"quiet": quiet["on"], "dropped_events": len(held)})
        if route == "/_contract/requests":
            with lock:
                return self.send_json(200, dict(counts))
        if route == "/_contract/busy":
            with lock:
                busy["count"] = int(q.get("count") or 1)
            return self.send_json(200, {"busy": busy["count"]})
        if route == "/_contract/forbid":
            forbidden.add(safe(q.get("path", "")))
            return self.send_json(200, {"forbidden": sorted(forbidden)})
        if route == "/_contract/hold":
            with lock:
                holds[safe(q.get("path", ""))] = threading.Event()
            return self.send_json(200, {"success": True})
        if route == "/_contract/release":
            with lock:
                ev = holds.pop(safe(q.get("path", "")), None)
            if ev:
                ev.set()
            return self.send_json(200, {"success": True})
        if route == "/_contract/held":
            with lock:
                return self.send_json(200, {"waiting": waiting[0]})
        if route == "/_contract/pin":
            pinned.add(safe(q.get("path", "")))
            return self.send_json(200, {"success": True})
        self.send_json(404, {"error": "not found"})

    # --- routes ---
    def login(self):
        b = self.json_body() or {}
        if PASSWORD is not None and not password_set[0] and b.get("password"):
            password_set[0] = True   # the first login sets the password
        if PASSWORD is not None and b.get("password") != PASSWORD:
            return self.coded(401, "AUTH_INVALID_PASSWORD", "Invalid password")
        sid = secrets.token_hex(16)
        with lock:
            sessions.add(sid)
        self.send_json(200, {"sessionId": sid, "success": True},
                       headers=[("Set-Cookie", f"session={sid}; Path=/; Max-Age=2592000; HttpOnly")])

    def stats(self):
        n = size = 0
        for root, dirs, files in os.walk(data_dir):
            for f in files:
                n += 1
                size += os.path.getsize(os.path.join(root, f))
        self.send_json(200, {"library": {"fileCount": n, "totalSize": size}})

    def tree(self, q):
        rel = safe(q.get("path", ""))
        if rel is None:
            return self.send_json(400, {"error": "Invalid path"})
        p = absolute(rel)
        if rel in forbidden:
            return self.coded(403, "LIBRARY_FORBIDDEN", "Permission denied")
        with lock:
            hold = holds.get(rel)
            waiting[0] += 1 if hold else 0
        if hold:
            hold.wait(30)
            with lock:
                waiting[0] -= 1
        with lock:
            refuse = busy["count"] > 0
            busy["count"] -= 1 if refuse else 0
        if refuse:
            return self.coded(503, "SERVICE_UNAVAILABLE", "Busy")
        if not os.path.isdir(p):
            return self.coded(404, "LIBRARY_NOT_FOUND", "Folder not found")
        depth = int(q.get("depth") or 1)
        out = {"basePath": data_dir, "children": listing(rel, depth), "path": rel}
        if depth > 1:
            out["truncated"] = False
        self.send_json(200, out)

    def file_info(self, rel):
        if not rel or not os.path.exists(absolute(rel)):
            return self.send_json(404, {"error": "File not found"})
        self.send_json(200, info(rel))

    def raw_get(self, rel):
        p = absolute(rel)
        if not os.path.isfile(p):
            return self.coded(404, "LIBRARY_NOT_FOUND", "File not found")
        st = os.stat(p)
        size = st.st_size
        start, end, status = 0, size - 1, 200
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes="):
            a, _, b = rng[6:].partition("-")
            try:
                if a == "":
                    start, end = max(0, size - int(b)), size - 1
                else:
                    start, end = int(a), (int(b) if b else size - 1)
                end = min(end, size - 1)
                if start > end or start >= size:
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{size}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                status = 206
            except ValueError:
                pass
        self.send_response(status)
        self.send_header("Content-Type", mime(rel))
        self.send_header("Content-Length", str(end - start + 1))
        self.send_header("Etag", f'"{size}-{st.st_mtime_ns}-{st.st_ino:x}"')
        self.send_header("Last-Modified", email.utils.formatdate(st.st_mtime, usegmt=True))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Cache-Control", "no-cache")
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.end_headers()
        if self.command == "HEAD":
            return
        with open(p, "rb") as f:
            f.seek(start)
            left = end - start + 1
            while left > 0:
                chunk = f.read(min(1 << 20, left))
                if not chunk:
                    break
                try:
                    self.wfile.write(chunk)
                except (BrokenPipeError, ConnectionResetError):
                    return
                left -= len(chunk)

    def sqlar(self, name):
        """A preview image: made here from the file whose hash it names (a JPEG header and the hash)."""
        for root, dirs, files in os.walk(data_dir):
            for f in files:
                rel = os.path.relpath(os.path.join(root, f), data_dir)
                if f.rsplit(".", 1)[-1].lower() in ("pdf", "png", "jpg", "jpeg", "epub") and f"previews/{sha256(os.path.join(root, f))[:16]}.jpg" == name:
                    body = b"\xff\xd8\xff\xe0JFIF preview of " + rel.encode() + b"\xff\xd9"
                    self.send_response(200)
                    self.send_header("Content-Type", "image/jpeg")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
        self.send_json(404, {"error": "File not found in archive"})

    def raw_put(self, rel, emit_write):
        p = absolute(rel)
        if os.path.isdir(p):
            return self.coded(409, "LIBRARY_FILE_CONFLICT", "A folder has this name")
        parent = os.path.dirname(p)
        made_parent = not os.path.isdir(parent)
        os.makedirs(parent, exist_ok=True)
        with lock:
            tmp_counter[0] += 1
            tmp = os.path.join(parent, f".tmp-{tmp_counter[0]}")
        n = int(self.headers.get("Content-Length") or 0)
        existed = os.path.exists(p)
        with open(tmp, "wb") as f:
            left = n
            while left > 0:
                chunk = self.rfile.read(min(1 << 20, left))
                if not chunk:
                    break
                f.write(chunk)
                left -= len(chunk)
        if left > 0:
            os.unlink(tmp)
            return self.coded(400, "LIBRARY_INVALID_REQUEST", "Body cut short")
        os.replace(tmp, p)
        if made_parent and emit_write:
            emit(os.path.dirname(rel), "create")
        if emit_write:
            emit(os.path.relpath(tmp, data_dir), "delete")
            emit(rel, "write")
        self.send_json(200, {"success": True})

    def mkdir(self, parent, name):
        parent = safe(parent)
        if parent is None or not name or "/" in name or name in (".", ".."):
            return self.coded(400, "LIBRARY_INVALID_REQUEST", "Invalid folder name")
        rel = f"{parent}/{name}" if parent else name
        p = absolute(rel)
        if os.path.exists(p):
            return self.coded(409, "LIBRARY_FOLDER_CONFLICT", "A folder with this name already exists")
        if not os.path.isdir(absolute(parent)):
            return self.coded(404, "LIBRARY_NOT_FOUND", "Parent folder not found")
        os.mkdir(p)
        emit(rel, "create")
        self.send_json(200, {"path": rel})

    def move(self, rel, parent):
        parent = safe(parent)
        if not rel or parent is None:
            return self.send_json(400, {"error": "Invalid path"})
        src = absolute(rel)
        if not os.path.exists(src):
            return self.coded(404, "LIBRARY_NOT_FOUND", "File not found")
        if not os.path.isdir(absolute(parent)):
            return self.coded(404, "LIBRARY_NOT_FOUND", "Target folder not found")
        self.relocate(rel, f"{parent}/{os.path.basename(rel)}" if parent else os.path.basename(rel), "move")

    def relocate(self, rel, new, op):
        """A file or folder moved or renamed to `new`, unless that name is taken."""
        if os.path.exists(absolute(new)):
            return self.coded(409, "LIBRARY_FILE_CONFLICT", "A file with this name already exists")
        os.rename(absolute(rel), absolute(new))
        with lock:
            if rel in created:
                created[new] = created.pop(rel)
        emit(new, op)
        self.send_json(200, {"newPath": new})

    def rename(self, rel, name):
        if not rel or not name or "/" in name or name in (".", ".."):
            return self.coded(400, "LIBRARY_INVALID_REQUEST", "Invalid name")
        src = absolute(rel)
        if not os.path.exists(src):
            return self.coded(404, "LIBRARY_NOT_FOUND", "File not found")
        parent = os.path.dirname(rel)
        self.relocate(rel, f"{parent}/{name}" if parent else name, "rename")

    def delete(self, rel):
        p = absolute(rel)
        if not rel or not os.path.exists(p):
            return self.coded(404, "LIBRARY_NOT_FOUND", "File not found")
        if os.path.isdir(p):
            import shutil
            shutil.rmtree(p)
        else:
            os.unlink(p)
        emit(rel, "delete")
        emit(rel, "delete")     # observed: some deletes are reported twice
        self.send_json(200, {"success": True})

    def events(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "keep-alive")
        self.end_headers()
        me = {"queue": [{"type": "connected", "timestamp": now_ms()}], "cond": threading.Condition(), "drop": False}
        with lock:
            streams.append(me)
        self.close_connection = True
        try:
            last = time.monotonic()
            while True:
                with me["cond"]:
                    if not me["queue"] and not me["drop"]:
                        me["cond"].wait(timeout=min(1.0, HEARTBEAT))
                    batch, me["queue"] = me["queue"], []
                    drop = me["drop"]
                if drop:
                    return
                for ev in batch:
                    self.wfile.write(b"data: " + json.dumps(ev, separators=(",", ":")).encode() + b"\n\n")
                if time.monotonic() - last >= HEARTBEAT:
                    self.wfile.write(b": heartbeat\n\n")
                    last = time.monotonic()
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass
        finally:
            with lock:
                streams.remove(me)


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


srv = Server(("127.0.0.1", int(opts["--port"])), Handler)
with open(port_file + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
os.replace(port_file + ".tmp", port_file)
srv.serve_forever()
