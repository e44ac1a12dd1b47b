import Foundation
import MarfaModel
import MarfaTestSupport
import Testing

/// The reference server against what third-party clients built from the upstream OpenAPI document
/// send: encoded path parameters, cut-off and oversized bodies, multipart uploads, upstream's list
/// parameters, numbers a double cannot hold, slow and idle connections, and the decisions of
/// ARCHITECTURE.md ("The server and upstream's document").
@Suite struct ServerConformanceTests {
    func note(_ s: ServerHarness, _ key: String, _ extra: String = "") -> String {
        s.call("POST", "/items", key: key, body: #"{"type":"core.note","properties":{"title":"T","body":"b"}\#(extra)}"#).item["id"]?.stringValue ?? ""
    }

    func tags(_ s: ServerHarness, _ key: String, _ id: String) -> [String] {
        let r = s.call("GET", "/items/\(id)", key: key)
        return (r.json["metadata"]?.objectValue?["tags"]?.arrayValue ?? []).compactMap(\.stringValue).sorted()
    }

    /// Raw HTTP over a socket (what curl will not send): the reply's first line, "" if the server
    /// closed the connection without one, "TIMEOUT" if it did neither within `wait` seconds.
    func raw(_ s: ServerHarness, _ request: String, halfClose: Bool, wait: Double = 10) -> String {
        let port = s.base.split(separator: ":").last.map(String.init) ?? "0"
        let script = """
        import socket, sys, time
        s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
        s.sendall(sys.stdin.buffer.read())
        if sys.argv[2] == "1": s.shutdown(socket.SHUT_WR)
        s.settimeout(float(sys.argv[3])); out = b""
        try:
            while b"\\r\\n" not in out:
                b = s.recv(4096)
                if not b: break
                out += b
        except socket.timeout: out = b"TIMEOUT"
        print(out.split(b"\\r\\n")[0].decode())
        """
        let file = s.root + "/raw-\(UUID().uuidString.prefix(6))"
        try? script.write(toFile: file + ".py", atomically: true, encoding: .utf8)
        try? request.replacingOccurrences(of: "\n", with: "\r\n").write(toFile: file + ".req", atomically: true, encoding: .utf8)
        let r = Shell.run(["/bin/sh", "-c", "/usr/bin/python3 \(file).py \(port) \(halfClose ? 1 : 0) \(wait) < \(file).req"])
        return r.out
    }

    @Test func W1_pathParametersArePercentDecoded() throws {
        let s = try ServerHarness()
        let key = try s.bootstrap()
        let id = note(s, key)
        #expect(s.call("POST", "/items/\(id)/tags", key: key, body: #"{"tags":["café","a b","folder:x/y","keep"]}"#).status == 200)
        for encoded in ["caf%C3%A9", "a%20b", "folder%3Ax%2Fy"] {
            #expect(s.call("DELETE", "/items/\(id)/tags/\(encoded)", key: key).status == 200)
        }
        #expect(tags(s, key, id) == ["keep"], "each encoded tag was removed")
        #expect(s.call("DELETE", "/items/\(id)/tags/caf%C3", key: key).status == 400, "a cut UTF-8 sequence is refused")
        #expect(s.call("GET", "/types/core%2Enote", key: key).status == 200)
        let blob = s.call("POST", "/blobs", key: key, data: Data("hello".utf8), contentType: "text/plain")
        let hash = try #require(blob.json["hash"]?.stringValue)
        #expect(s.call("GET", "/blobs/" + hash.replacingOccurrences(of: ":", with: "%3A"), key: key).body == "hello")
        #expect(s.call("GET", "/items/" + id.replacingOccurrences(of: "-", with: "%2D"), key: key).status == 200)
    }

    @Test func W3_aCutOffBodyIs400AndAnOversizedOneIsRefusedUnread() throws {
        let s = try ServerHarness(options: ["--max-blob-mib", "1"])
        let key = try s.bootstrap()
        let head = "Host: x\nAuthorization: Bearer \(key)\nContent-Type: application/json\n"
        let declared = raw(s, "POST /items HTTP/1.1\n\(head)Content-Length: 100\n\n{\"type\":", halfClose: true)
        #expect(declared.hasPrefix("HTTP/1.1 400"), "\(declared)")
        let chunked = raw(s, "POST /items HTTP/1.1\n\(head)Transfer-Encoding: chunked\n\n64\n{\"type\":", halfClose: true)
        #expect(chunked.hasPrefix("HTTP/1.1 400"), "\(chunked)")
        // 1 TB declared, nothing sent: refused at once, not read.
        let big = raw(s, "POST /blobs HTTP/1.1\nHost: x\nAuthorization: Bearer \(key)\nContent-Type: image/png\nContent-Length: 1000000000000\n\n", halfClose: false)
        // (No byte of the body is ever sent: an answer at all means it was not waited for.)
        #expect(big.hasPrefix("HTTP/1.1 413"), "\(big)")
        // Chunked, so its size shows only as it comes: refused once past the limit (the server
        // keeps it in a temporary file meanwhile, not in memory).
        let chunked3MiB = s.call("POST", "/blobs", key: key, data: Data(repeating: 7, count: 3 << 20), contentType: "application/octet-stream",
                                 headers: ["Transfer-Encoding": "chunked"])
        #expect(chunked3MiB.status == 413 && chunked3MiB.code == "request_too_large", "\(chunked3MiB.status)")
        let fits = s.call("POST", "/blobs", key: key, data: Data(repeating: 7, count: 1 << 19), contentType: "application/octet-stream",
                          headers: ["Transfer-Encoding": "chunked"])
        #expect(fits.status == 201 && fits.json["size"] == .int(1 << 19), "\(fits.body)")
        let left = (try? FileManager.default.contentsOfDirectory(atPath: s.root))?.filter { $0.hasPrefix(".upload-") } ?? []
        #expect(left.isEmpty, "no upload's temporary file is left: \(left)")
        #expect(!((try? String(contentsOfFile: s.root + "/serve.log", encoding: .utf8)) ?? "").contains("internal_error"))
    }

    @Test func W13_aMultipartUploadStoresItsFilePart() throws {
        let s = try ServerHarness()
        let key = try s.bootstrap()
        let png: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 13, 10, 26, 10] + (0..<300).map { UInt8($0 % 256) }
        var body = Data("--XyZ\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\nnot the file\r\n".utf8)
        body += Data("--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.png\"\r\nContent-Type: image/png\r\n\r\n".utf8)
        body += Data(png) + Data("\r\n--XyZ--\r\n".utf8)
        let r = s.call("POST", "/blobs", key: key, data: body, contentType: "multipart/form-data; boundary=XyZ")
        #expect(r.status == 201, "\(r.body)")
        let hash = try #require(r.json["hash"]?.stringValue)
        let digest = Shell.run(["/bin/sh", "-c", "printf '%s' \"$1\" | xxd -r -p | sha256sum | cut -d' ' -f1", "-", png.map { String(format: "%02x", $0) }.joined()]).out
        #expect(hash == "sha256:" + digest, "the blob is the file part, not the form")
        let got = s.call("HEAD", "/blobs/\(hash)", key: key)
        #expect(got.headers["content-type"] == "image/png" && got.headers["content-length"] == String(png.count))
        let bad = s.call("POST", "/blobs", key: key, data: Data("--XyZ\r\nno end".utf8), contentType: "multipart/form-data; boundary=XyZ")
        #expect(bad.status == 400)
        #expect(s.call("POST", "/blobs", key: key, data: body, contentType: "multipart/form-data").status == 400, "no boundary")
        // curl's own form encoder, with a 3 MiB file and a text field beside it.
        let file = s.root + "/photo.jpg"
        #expect(Shell.run(["/bin/sh", "-c", "head -c 3145728 /dev/urandom > \(file)"]).status == 0)
        let curl = Shell.run(["/usr/bin/curl", "-s", "-H", "Authorization: Bearer \(key)", "-F", "caption=holiday",
                              "-F", "file=@\(file);type=image/jpeg", s.base + "/blobs"])
        let sent = (try? JSONParser.parse(curl.stdout))?.objectValue ?? [:]
        #expect(sent["hash"]?.stringValue == "sha256:" + Shell.run(["/bin/sh", "-c", "sha256sum \(file) | cut -d' ' -f1"]).out, "\(curl.stdout)")
        #expect(sent["size"] == .int(3 << 20) && sent["mime_type"] == .string("image/jpeg"), "\(curl.stdout)")
    }

    @Test func W6_upstreamListParametersAreAppliedOrRefused() throws {
        let s = try ServerHarness()
        let admin = try s.bootstrap()
        let phone = try #require(s.call("POST", "/keys", key: admin, body: #"{"label":"phone"}"#).json["key"]?.stringValue)
        let early = note(s, admin, #","timestamp":"2026-01-01T10:00:00+02:00""#)
        let late = note(s, phone, #","timestamp":"2026-03-01T00:00:00Z""#)
        func ids(_ query: String) -> [String] {
            (s.call("GET", "/items?" + query, key: admin).json["data"]?.arrayValue ?? []).compactMap { $0.objectValue?["id"]?.stringValue }
        }
        #expect(ids("source=phone") == [late])
        #expect(ids("since=2026-01-01T08:00:00Z") == [early, late], "since is inclusive, compared as instants")
        #expect(ids("since=2026-01-01T08:00:01Z") == [late])
        #expect(ids("until=2026-03-01T00:00:00Z") == [early], "until is exclusive")
        #expect(ids("tier=all") == [early, late])
        #expect(ids("sort=updated_at&direction=asc") == [early, late])
        for refused in ["sort=created_at", "direction=desc", "filter=type%3Dnote", "include=edges", "since=yesterday"] {
            let r = s.call("GET", "/items?" + refused, key: admin)
            #expect(r.status == 400 && r.code == "validation_error", "\(refused): \(r.status)")
        }
        let withMeta = s.call("GET", "/items?include=metadata,extensions", key: admin)
        #expect(withMeta.json["data"]?.arrayValue?.first?.objectValue?["metadata"] != nil, "\(withMeta.body)")
        #expect(ids("cursor=") == [early, late], "an empty cursor is the first page")
    }

    /// W-6 with a tag filter: the tag's rows keep their items' list order through edits and tag
    /// changes, and the cursor pages through them.
    @Test func W6_aTagFilteredListKeepsListOrderAndPages() throws {
        let s = try ServerHarness()
        let key = try s.bootstrap()
        let a = note(s, key, #","tags":["t"]"#), b = note(s, key, #","tags":["t","u"]"#), c = note(s, key)
        #expect(s.call("POST", "/items/\(c)/tags", key: key, body: #"{"tags":["t"]}"#).status == 200)
        #expect(s.call("PATCH", "/items/\(a)", key: key, body: #"{"properties":{"body":"edited"}}"#).status == 200)
        func page(_ q: String) -> (ids: [String], cursor: String?) {
            let r = s.call("GET", "/items?" + q, key: key)
            return ((r.json["data"]?.arrayValue ?? []).compactMap { $0.objectValue?["id"]?.stringValue }, r.json["cursor"]?.stringValue)
        }
        let all = page("tags=t")
        let order = (s.call("GET", "/items", key: key).json["data"]?.arrayValue ?? []).compactMap { $0.objectValue?["id"]?.stringValue }
        #expect(all.ids == order.filter { [a, b, c].contains($0) } && all.ids.last == a, "\(all.ids) vs \(order)")
        let first = page("tags=t&limit=2")
        let cursor = try #require(first.cursor)
        let rest = page("tags=t&limit=2&cursor=" + cursor.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)
        #expect(first.ids + rest.ids == all.ids && rest.cursor == nil)
        #expect(page("tags=t,u").ids == [b])
        #expect(page("tags=u,t").ids == [b])
    }

    @Test func W1_numbersADoubleCannotHoldAreRefusedNotChanged() throws {
        let s = try ServerHarness()
        let key = try s.bootstrap()
        for n in ["1e309", "-1e400", "123456789012345678901234567890", String(repeating: "9", count: 5000)] {
            let r = s.call("POST", "/items", key: key, body: #"{"type":"core.note","properties":{"title":"n","n":\#(n)}}"#)
            #expect(r.status == 400 && r.code == "validation_error", "\(n.prefix(20)): \(r.status)")
        }
        let a = note(s, key), b = note(s, key)
        let edge = s.call("POST", "/edges", key: key, body: #"{"source_id":"\#(a)","target_id":"\#(b)","edge_type":"references","properties":{"position":1e309}}"#)
        #expect(edge.status == 400)
        let kept = s.call("POST", "/items", key: key, body: #"{"type":"core.note","properties":{"title":"n","n":9223372036854775807,"x":1.5e300}}"#)
        #expect(kept.item["properties"]?.objectValue?["n"] == .int(Int64.max) && kept.item["properties"]?.objectValue?["x"] == .double(1.5e300))
    }

    @Test func W4_idleAndSlowConnectionsAreClosedAndNeverStopOthers() throws {
        // Started with the open-file limit a login shell gives (1,024).
        let s = try ServerHarness(options: ["--idle-timeout", "3"], openFiles: 1024)
        let key = try s.bootstrap()
        let port = s.base.split(separator: ":").last.map(String.init) ?? "0"
        // The server raised it to the hard limit at start: idle clients cannot use up its files.
        let limits = (try? String(contentsOfFile: "/proc/\(s.pid)/limits", encoding: .utf8)) ?? ""
        let files = limits.split(separator: "\n").first { $0.hasPrefix("Max open files") }?.split(separator: " ", omittingEmptySubsequences: true) ?? []
        #expect(files.count >= 5 && files[3] == files[4] && files[3] != "1024", "\(files)")
        // 1,100 connections that send half their headers and wait: more than 1,024.
        let holders = """
        import resource, socket, sys, time
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        socks = []
        for i in range(1100):
            c = socket.create_connection(("127.0.0.1", int(sys.argv[1]))); c.sendall(b"GET /items HTTP/1.1\\r\\nHost: x\\r\\n"); socks.append(c)
        print("held", flush=True)
        sys.stdin.readline()
        open_ = set(socks); deadline = time.time() + 60
        while open_ and time.time() < deadline:
            for c in list(open_):
                c.setblocking(False)
                try:
                    if c.recv(100) == b"": open_.discard(c)
                except BlockingIOError: pass
                except OSError: open_.discard(c)
            time.sleep(0.2)
        print("closed", len(socks) - len(open_), flush=True)
        """
        try holders.write(toFile: s.root + "/hold.py", atomically: true, encoding: .utf8)
        let out = s.root + "/hold.out", go = s.root + "/hold.in"
        _ = mkfifo(go, 0o600)
        guard let pid = Shell.spawn(["/bin/sh", "-c", "exec /usr/bin/python3 \(s.root)/hold.py \(port) < \(go)"], stdout: out) else { Issue.record("python"); return }
        defer { Shell.killAndReap(pid) }
        let fifo = open(go, O_WRONLY)
        defer { close(fifo) }
        #expect(MountHarness.eventually(timeout: 30) { ((try? String(contentsOfFile: out, encoding: .utf8)) ?? "").contains("held") })
        // While all of them are held (the holder waits on its pipe), a normal request is answered.
        #expect(s.call("GET", "/items", key: key).status == 200, "a normal request is answered while 1,100 slow clients wait")
        _ = write(fifo, "go\n", 3)
        #expect(MountHarness.eventually(timeout: 70) { ((try? String(contentsOfFile: out, encoding: .utf8)) ?? "").contains("closed 1100") },
                "\((try? String(contentsOfFile: out, encoding: .utf8)) ?? "")")
        // A body that stops coming is closed too.
        let stalled = raw(s, "POST /items HTTP/1.1\nHost: x\nAuthorization: Bearer \(key)\nContent-Length: 50\n\nabc", halfClose: false, wait: 10)
        #expect(stalled == "", "closed by the server, not left to the client's 10 s: \(stalled)")
    }

    @Test func W2_W6_W7_decisionsOnWhatUpstreamLeavesOpen() throws {
        let s = try ServerHarness()
        let key = try s.bootstrap()
        // The scheme is case-insensitive (RFC 9110 §11.1).
        #expect(s.call("GET", "/items", headers: ["Authorization": "bearer \(key)"]).status == 200)
        // A real path with another method: 405 and Allow.
        let put = s.call("PUT", "/items", key: key, body: "{}")
        #expect(put.status == 405 && put.code == "method_not_allowed" && put.headers["allow"]?.contains("GET") == true, "\(put.status) \(put.headers)")
        #expect(s.call("PUT", "/nowhere", key: key, body: "{}").status == 404)
        // Edge lists take up to 500.
        #expect(s.call("GET", "/edges?limit=500", key: key).status == 200)
        #expect(s.call("GET", "/edges?limit=501", key: key).status == 400)
        // A base version newer than the item's has no ancestor: 409 ancestor_unavailable with the
        // current state (W-7 as for a pruned version).
        let id = note(s, key)
        let newer = s.call("PATCH", "/items/\(id)", key: key, body: #"{"version":7,"properties":{"body":"x"}}"#)
        #expect(newer.status == 409 && newer.code == "ancestor_unavailable" && newer.json["current"]?.objectValue?["version"] == .int(1), "\(newer.body)")
        for bad in ["0", "1.0", "\"1\""] {
            #expect(s.call("PATCH", "/items/\(id)", key: key, body: #"{"version":\#(bad),"properties":{"body":"x"}}"#).status == 400, "version \(bad)")
        }
        // Roles are admin and member.
        #expect(s.call("POST", "/keys", key: key, body: #"{"label":"x","role":"space_admin"}"#).status == 400)
        // A range end past 2^63 is the blob's end.
        let hash = try #require(s.call("POST", "/blobs", key: key, data: Data("0123456789".utf8), contentType: "text/plain").json["hash"]?.stringValue)
        let r = s.call("GET", "/blobs/\(hash)", key: key, headers: ["Range": "bytes=4-99999999999999999999"])
        #expect(r.status == 206 && r.body == "456789" && r.headers["content-range"] == "bytes 4-9/10", "\(r.status) \(r.body)")
    }

    /// Generated requests (schemathesis from PyPI: examples, boundary values, random inputs and
    /// stateful sequences over every implemented operation) never get a 5xx, and every answer
    /// validates against the upstream document with the amendments of openapi_amend.py.
    @Test func openAPI_generatedRequestsConformToTheUpstreamDocument() throws {
        let python = MountHarness.repoRoot + "/.build/pytools/bin/python"
        guard FileManager.default.isExecutableFile(atPath: python) else {
            Issue.record("schemathesis is not installed: run scripts/bootstrap"); return
        }
        let s = try ServerHarness()
        let key = try s.bootstrap()
        let r = Shell.run([python, MountHarness.repoRoot + "/scripts/testing/openapi_fuzz.py", MountHarness.upstream + "/openapi.json",
                           s.base, key, s.root + "/fuzz"])
        #expect(r.status == 0, "\(r.stdout.suffix(6000))\(r.stderr.suffix(2000))")
        #expect(r.stdout.contains(" passed"), "\(r.stdout.suffix(3000))")
        #expect(!((try? String(contentsOfFile: s.root + "/serve.log", encoding: .utf8)) ?? "").contains("internal_error"))
    }
}
