#!/usr/bin/env python3
"""A proxy on loopback in front of a real `marfafs serve`, for tests: it forwards every request
(the event stream too, as it comes), except that what the control file says is done to changes.

    fault_proxy.py UPSTREAM_PORT CONTROL_FILE PORT_FILE

It listens on a free port and writes it to PORT_FILE. CONTROL_FILE holds one word, read at each
request: `pass` (forward), `503` or `400` (answer that status to every POST, PATCH, PUT and
DELETE without forwarding it; reads and the stream still go through), `hang` (hold such
requests until the word changes, then forward them), `throttle=N` (read request bodies at
N bytes a second, as a slow uplink does, then forward them), or `hold-stream` (changes go through,
but what the event stream brings is held, in order, until the word changes: a stream that lags
behind the answers, as over a slow or busy network).
"""
import http.client, http.server, json, socketserver, sys, time

upstream_port, control, port_file = int(sys.argv[1]), sys.argv[2], sys.argv[3]
HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-authorization", "proxy-authenticate"}


def mode():
    try:
        return open(control).read().strip() or "pass"
    except OSError:
        return "pass"


class Proxy(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def handle_any(self):
        length = int(self.headers.get("Content-Length") or 0)
        m = mode()
        if m.startswith("throttle=") and length:
            rate, parts, got = int(m.split("=", 1)[1]), [], 0
            while got < length:
                piece = self.rfile.read(min(65536, length - got))
                if not piece:
                    break
                parts.append(piece)
                got += len(piece)
                time.sleep(len(piece) / rate)
            body = b"".join(parts)
        else:
            body = self.rfile.read(length) if length else None
        if self.command in ("POST", "PATCH", "PUT", "DELETE"):
            while mode() == "hang":
                time.sleep(0.05)
            m = mode()
            if m in ("503", "400"):
                code = int(m)
                err = {"503": ("unavailable", "the proxy refuses it (503)"), "400": ("validation_error", "the proxy refuses it (400)")}[m]
                data = json.dumps({"error": {"code": err[0], "message": err[1]}}).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if code == 503:
                    self.send_header("Retry-After", "0")
                self.end_headers()
                self.wfile.write(data)
                return
        conn = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=3600)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
        conn.request(self.command, self.path, body=body, headers=headers)
        resp = conn.getresponse()
        self.send_response(resp.status)
        streaming = resp.getheader("Content-Length") is None
        for k, v in resp.getheaders():
            if k.lower() not in HOP and k.lower() != "content-length":
                self.send_header(k, v)
        if streaming:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", resp.getheader("Content-Length"))
        self.end_headers()
        try:
            while True:
                chunk = resp.read1(65536) if streaming else resp.read(65536)
                if not chunk:
                    break
                while streaming and mode() == "hold-stream":
                    time.sleep(0.05)
                if streaming:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                else:
                    self.wfile.write(chunk)
                self.wfile.flush()
            if streaming:
                self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            conn.close()

    do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = do_HEAD = handle_any


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


srv = Server(("127.0.0.1", 0), Proxy)
with open(port_file + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
import os
os.rename(port_file + ".tmp", port_file)
srv.serve_forever()
