import Foundation
import MarfaModel
import MarfaTestSupport
import Testing

/// Custom types, edges and blobs of the reference server over real HTTP (wire.md W-9, W-11..W-13).
@Suite struct ServerGraphTests {
    func item(_ s: ServerHarness, _ key: String, _ title: String, type: String = "core.note") throws -> String {
        let r = s.call("POST", "/items", key: key, body: #"{"type":"\#(type)","properties":{"title":"\#(title)","body":"b"}}"#)
        return try #require(r.item["id"]?.stringValue, "\(r.body)")
    }

    func edge(_ s: ServerHarness, _ key: String, _ from: String, _ to: String, _ type: String, extra: String = "") -> ServerHarness.Reply {
        s.call("POST", "/edges", key: key, body: #"{"source_id":"\#(from)","target_id":"\#(to)","edge_type":"\#(type)"\#(extra)}"#)
    }

    func ids(_ r: ServerHarness.Reply) -> [String] {
        guard case .array(let a)? = r.json["data"] else { return [] }
        return a.compactMap { $0.objectValue?["id"]?.stringValue }
    }

    @Test func W9_customTypesInheritFieldsAndPolicyAndBadSchemasAreRefused() throws {
        let s = try ServerHarness()
        let key = try s.bootstrap()
        let recipe = #"{"id":"recipe","label":"Recipe","parent":"core.note","fields":{"servings":{"type":"number"},"source":{"type":"string","maxLength":20}},"merge_policy":{"fields":{"servings":"keep_both_copies"}}}"#
        let created = s.call("POST", "/types", key: key, body: recipe)
        #expect(created.status == 201, "\(created.body)")
        let t = created.json["type"]?.objectValue ?? [:]
        #expect(t["fields"]?.objectValue?["body"] != nil, "a subtype inherits its parent's fields")
        #expect(t["merge_policy"]?.objectValue?["fields"]?.objectValue?["body"] == .string("keep_both_copies"), "and its merge policy")
        #expect(s.call("POST", "/types", key: key, body: recipe).status == 200, "the same definition again is acknowledged")
        #expect(s.call("POST", "/types", key: key, body: #"{"id":"recipe","fields":{}}"#).code == "type_mismatch")
        #expect(s.call("GET", "/types/recipe", key: key).json["parent"] == .string("core.note"))
        guard case .array(let all) = try JSONParser.parse(s.call("GET", "/types", key: key).body) else { Issue.record("GET /types"); return }
        #expect(all.contains { $0.objectValue?["id"] == .string("recipe") })

        for (body, why) in [
            (#"{"id":"x","fields":{"a":{"type":"string"}},"merge_policy":{"fields":{"a":"newest_wins"}}}"#, "an unknown strategy"),
            (#"{"id":"x","fields":{"a":{"type":"string"}},"merge_policy":{"default":"merge"}}"#, "an unknown default strategy"),
            (#"{"id":"x","fields":{"a":{"type":"string"}},"merge_policy":{"fields":{"b":"keep_both_copies"}}}"#, "a policy for an undeclared field"),
            (#"{"id":"x","fields":{"a":{"type":"text"}}}"#, "an unknown field type"),
            (#"{"id":"x","parent":"nope"}"#, "an unknown parent"),
            (#"{"id":"core.mine"}"#, "the reserved core namespace"),
            (#"{"id":"x","parent":"core.note","fields":{"body":{"type":"number"}}}"#, "a field retyped from the parent"),
        ] {
            let r = s.call("POST", "/types", key: key, body: body)
            #expect(r.status == 400 && r.code == "invalid_schema", "\(why): \(r.status) \(r.body)")
        }
        #expect(s.call("POST", "/types", key: key, body: #"{"id":"Bad Name"}"#).code == "validation_error")
        #expect(s.call("GET", "/types/x", key: key).code == "type_not_found", "refused schemas are not registered")

        // Items of the custom type: its fields are checked, and lists by the parent include it.
        let bad = s.call("POST", "/items", key: key, body: #"{"type":"recipe","properties":{"title":"Soup","servings":"four"}}"#)
        #expect(bad.code == "invalid_properties")
        let soup = s.call("POST", "/items", key: key, body: #"{"type":"recipe","properties":{"title":"Soup","servings":4}}"#)
        #expect(soup.status == 201, "\(soup.body)")
        let soupID = try #require(soup.item["id"]?.stringValue)
        let noteID = try item(s, key, "plain")
        #expect(Set(ids(s.call("GET", "/items?type=core.note", key: key))) == [soupID, noteID], "type= includes custom subtypes")
        #expect(ids(s.call("GET", "/items?type=recipe", key: key)) == [soupID])
        // The resolved policy reaches the W-7 conflict body.
        #expect(s.call("PATCH", "/items/\(soupID)", key: key, body: #"{"version":1,"properties":{"servings":5}}"#).status == 200)
        let conflict = s.call("PATCH", "/items/\(soupID)", key: key, body: #"{"version":1,"properties":{"servings":6}}"#)
        #expect(conflict.code == "version_conflict")
        #expect(conflict.json["merge_policy"]?.objectValue?["fields"]?.objectValue?["servings"] == .string("keep_both_copies"))
        // A member key's permission on the parent type covers the custom subtype.
        let member = try #require(s.call("POST", "/keys", key: key, body: #"{"label":"m","role":"member","type_permissions":{"core.note":"read"}}"#).json["key"]?.stringValue)
        #expect(s.call("GET", "/items/\(soupID)", key: member).status == 200)
        #expect(s.call("POST", "/types", key: member, body: #"{"id":"y"}"#).code == "forbidden", "registering types needs an admin key")
    }

    @Test func W11_edgesAreCreatedListedBothWaysPagedAndDeleted() throws {
        let s = try ServerHarness()
        let key = try s.bootstrap()
        let a = try item(s, key, "a"), b = try item(s, key, "b"), c = try item(s, key, "c")
        let ab = edge(s, key, a, b, "references", extra: #","properties":{"note":"see"},"id":"edge-ab""#)
        #expect(ab.status == 201, "\(ab.body)")
        let e = ab.json["edge"]?.objectValue ?? [:]
        #expect(e["id"] == .string("edge-ab") && e["source_id"] == .string(a) && e["target_id"] == .string(b) && e["edge_type"] == .string("references"))
        #expect(e["properties"]?.objectValue?["note"] == .string("see") && e["tenant_id"] != nil && e["created_at"] != nil && e["updated_at"] != nil)
        let again = edge(s, key, a, b, "references", extra: #","id":"edge-ab""#)
        #expect(again.status == 200 && again.json["acknowledged"] == .bool(true), "a retried create is acknowledged")
        #expect(edge(s, key, a, c, "references", extra: #","id":"edge-ab""#).code == "id_reused")
        let ac = try #require(edge(s, key, a, c, "about").json["edge"]?.objectValue?["id"]?.stringValue)
        let cb = try #require(edge(s, key, c, b, "acme.reviewed-by").json["edge"]?.objectValue?["id"]?.stringValue, "custom, dot-namespaced types")

        #expect(s.call("GET", "/edges/edge-ab", key: key).json["edge"]?.objectValue?["id"] == .string("edge-ab"))
        #expect(Set(ids(s.call("GET", "/items/\(a)/edges", key: key))) == ["edge-ab", ac], "outbound")
        #expect(ids(s.call("GET", "/items/\(a)/edges?edge_type=about", key: key)) == [ac])
        #expect(Set(ids(s.call("GET", "/items/\(b)/backrefs", key: key))) == ["edge-ab", cb], "inbound")
        #expect(ids(s.call("GET", "/items/\(b)/backrefs?edge_type=acme.reviewed-by", key: key)) == [cb])
        #expect(Set(ids(s.call("GET", "/edges?edge_type=about,references", key: key))) == ["edge-ab", ac])
        // Pages of one, in (updated_at, id) order, then updated_after.
        var seen: [String] = []
        var path = "/edges?limit=1"
        while true {
            let page = s.call("GET", path, key: key)
            seen += ids(page)
            guard page.json["has_more"] == .bool(true), let cursor = page.json["cursor"]?.stringValue else {
                #expect(page.json["cursor"] == .null)
                break
            }
            path = "/edges?limit=1&cursor=" + cursor.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
        }
        #expect(seen.count == 3 && Set(seen) == ["edge-ab", ac, cb])
        let last = try #require(s.call("GET", "/edges/\(cb)", key: key).json["edge"]?.objectValue?["updated_at"]?.stringValue)
        #expect(ids(s.call("GET", "/edges?updated_after=" + last.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!, key: key)).contains(cb))

        #expect(s.call("DELETE", "/edges/edge-ab", key: key).json["ok"] == .bool(true))
        #expect(s.call("GET", "/edges/edge-ab", key: key).code == "edge_not_found")
        #expect(s.call("DELETE", "/edges/edge-ab", key: key).code == "edge_not_found")
        #expect(Set(ids(s.call("GET", "/items/\(a)/edges", key: key))) == [ac])

        // Bad input changes nothing.
        for (body, code) in [
            (#"{"target_id":"\#(b)","edge_type":"about"}"#, "missing_required_field"),
            (#"{"source_id":"\#(a)","target_id":"\#(b)"}"#, "missing_required_field"),
            (#"{"source_id":"\#(a)","target_id":"\#(b)","edge_type":"Not_Kebab"}"#, "validation_error"),
            (#"{"source_id":"\#(a)","target_id":"\#(b)","edge_type":"about","properties":[1]}"#, "validation_error"),
            (#"{"source_id":"\#(a)","target_id":"no-such-item","edge_type":"about"}"#, "item_not_found"),
            (#"{"source_id":"a/b","target_id":"\#(b)","edge_type":"about"}"#, "invalid_id"),
            (#"{"source_id":"\#(a)","target_id":"\#(b)","edge_type":"in-thread","properties":{"position":"first"}}"#, "validation_error"),
        ] {
            #expect(s.call("POST", "/edges", key: key, body: body).code == code, "\(body)")
        }
        #expect(ids(s.call("GET", "/edges", key: key)).count == 2)
    }

    @Test func W12_cardinalityAndCyclesAreRefused() throws {
        let s = try ServerHarness()
        let key = try s.bootstrap()
        let a = try item(s, key, "a"), b = try item(s, key, "b"), c = try item(s, key, "c"), d = try item(s, key, "d")
        func code(_ r: ServerHarness.Reply) -> String { r.code ?? "\(r.status)" }
        // parent-of: a target has one parent; no cycles.
        #expect(edge(s, key, a, b, "parent-of").status == 201)
        #expect(edge(s, key, b, c, "parent-of").status == 201)
        #expect(code(edge(s, key, d, c, "parent-of")) == "edge_constraint_violation", "c already has a parent")
        #expect(code(edge(s, key, c, a, "parent-of")) == "edge_cycle", "a → b → c → a")
        #expect(code(edge(s, key, a, a, "parent-of")) == "edge_cycle")
        #expect(edge(s, key, a, d, "parent-of").status == 201, "a parent has many children")
        // in-thread: a source is in one thread.
        #expect(edge(s, key, c, a, "in-thread", extra: #","properties":{"position":1}"#).status == 201)
        #expect(code(edge(s, key, c, b, "in-thread")) == "edge_constraint_violation")
        #expect(edge(s, key, d, a, "in-thread", extra: #","properties":{"position":2}"#).status == 201, "a thread has many members")
        // supersedes: one to one.
        #expect(edge(s, key, b, a, "supersedes").status == 201)
        #expect(code(edge(s, key, b, c, "supersedes")) == "edge_constraint_violation", "b already supersedes a")
        #expect(code(edge(s, key, c, a, "supersedes")) == "edge_constraint_violation", "a is already superseded")
        // many-to-many, but one edge per (source, type, target).
        #expect(edge(s, key, a, c, "references").status == 201)
        #expect(edge(s, key, d, c, "references").status == 201)
        let dup = edge(s, key, a, c, "references")
        #expect(dup.code == "edge_constraint_violation" && dup.json["error"]?.objectValue?["details"]?.objectValue?["existing_edge_id"] != nil)
        // Edges cannot cross tenants: the other tenant's item does not exist for this key.
        let other = try #require(s.call("POST", "/tenants", key: key, body: #"{"name":"t2"}"#).json["key"]?.stringValue)
        let x = try item(s, other, "x")
        #expect(code(edge(s, key, a, x, "references")) == "item_not_found")
        #expect(code(edge(s, other, x, a, "references")) == "item_not_found")
        #expect(ids(s.call("GET", "/edges?limit=200", key: key)).count == 8, "only the accepted edges exist")
        #expect(ids(s.call("GET", "/edges", key: other)).isEmpty)
    }

    @Test func W13_blobsAreContentAddressedVerifiedAndServedByRange() throws {
        let s = try ServerHarness(options: ["--max-blob-mib", "2"])
        let key = try s.bootstrap()
        var rng = SystemRandomNumberGenerator()
        let bytes = Data((0..<(1 << 20) + 123).map { _ in UInt8.random(in: 0...255, using: &rng) })
        func sha256(_ d: Data) throws -> String {
            let f = s.root + "/hash-me"
            try d.write(to: URL(fileURLWithPath: f))
            return "sha256:" + Shell.run(["sha256sum", f]).stdout.prefix(64)
        }
        let expected = try sha256(bytes)
        let up = s.call("POST", "/blobs", key: key, data: bytes, contentType: "image/png")
        #expect(up.status == 201, "\(up.body)")
        #expect(up.json["hash"] == .string(expected) && up.json["mime_type"] == .string("image/png"))
        #expect(up.json["size"] == .int(Int64(bytes.count)) && up.json["size_bytes"] == .int(Int64(bytes.count)))
        #expect(s.call("POST", "/blobs", key: key, data: bytes, contentType: "image/png").json["hash"] == .string(expected), "same bytes, same hash")

        let head = s.call("HEAD", "/blobs/\(expected)", key: key)
        #expect(head.status == 200 && head.headers["content-length"] == String(bytes.count))
        let whole = s.call("GET", "/blobs/\(expected)", key: key)
        #expect(whole.status == 200 && whole.headers["etag"] == "\"\(expected)\"" && whole.headers["accept-ranges"] == "bytes")
        #expect(whole.headers["content-type"] == "image/png")
        #expect(Data(whole.body.utf8).count > 0)
        let fetched = s.root + "/fetched"
        #expect(Shell.run(["/usr/bin/curl", "-s", "-o", fetched, "-H", "Authorization: Bearer \(key)", s.base + "/blobs/\(expected)"]).status == 0)
        #expect(try Data(contentsOf: URL(fileURLWithPath: fetched)) == bytes, "the bytes come back whole")

        func range(_ spec: String) throws -> (Int, String?, Data) {
            let out = s.root + "/range"
            let r = Shell.run(["/usr/bin/curl", "-s", "-o", out, "-D", out + ".h", "-w", "%{http_code}", "-H", "Authorization: Bearer \(key)",
                               "-H", "Range: \(spec)", s.base + "/blobs/\(expected)"])
            let headers = (try? String(contentsOfFile: out + ".h", encoding: .utf8)) ?? ""
            let cr = headers.split(whereSeparator: \.isNewline).first { $0.lowercased().hasPrefix("content-range:") }.map { $0.split(separator: ":", maxSplits: 1)[1].trimmingCharacters(in: .whitespaces) }
            return (Int(r.stdout) ?? 0, cr, try Data(contentsOf: URL(fileURLWithPath: out)))
        }
        let n = bytes.count
        var r = try range("bytes=10-19")
        #expect(r.0 == 206 && r.1 == "bytes 10-19/\(n)" && r.2 == bytes[10..<20])
        r = try range("bytes=\(n - 5)-")
        #expect(r.0 == 206 && r.2 == bytes[(n - 5)...])
        r = try range("bytes=-7")
        #expect(r.0 == 206 && r.1 == "bytes \(n - 7)-\(n - 1)/\(n)" && r.2 == bytes[(n - 7)...])
        r = try range("bytes=\(n - 2)-\(n + 100)")
        #expect(r.0 == 206 && r.2 == bytes[(n - 2)...], "an end past the blob is clipped")
        for bad in ["bytes=\(n)-", "bytes=20-10", "bytes=-0", "bytes=x-y"] {
            r = try range(bad)
            #expect(r.0 == 416 && r.1 == "bytes */\(n)", "\(bad)")
            #expect(String(decoding: r.2, as: UTF8.self).contains("range_not_satisfiable"))
        }

        #expect(s.call("GET", "/blobs/sha256:1234", key: key).code == "validation_error", "malformed hash")
        #expect(s.call("GET", "/blobs/md5:" + String(repeating: "a", count: 32), key: key).code == "validation_error")
        let unknown = "sha256:" + String(repeating: "0", count: 64)
        #expect(s.call("GET", "/blobs/\(unknown)", key: key).code == "blob_not_found")
        #expect(s.call("HEAD", "/blobs/\(unknown)", key: key).status == 404)
        // A client that names the hash it expects gets its bytes verified; a mismatch stores nothing.
        let small = Data("verified".utf8)
        let wrong = s.call("POST", "/blobs?hash=\(unknown)", key: key, data: small, contentType: "text/plain")
        #expect(wrong.code == "validation_error")
        let smallHash = try sha256(small)
        #expect(s.call("HEAD", "/blobs/\(smallHash)", key: key).status == 404, "nothing stored")
        #expect(s.call("POST", "/blobs?hash=\(smallHash)", key: key, data: small, contentType: "text/plain").status == 201)
        #expect(s.call("POST", "/blobs", key: key, data: small, contentType: "not a mime").code == "validation_error")
        let huge = s.call("POST", "/blobs", key: key, data: Data(count: (2 << 20) + 1), contentType: "application/octet-stream")
        #expect(huge.status == 413 && huge.code == "request_too_large")
        // File items name uploaded blobs (W-13), and so do attachments.
        func file(_ ref: String, _ extra: String = "") -> ServerHarness.Reply {
            s.call("POST", "/items", key: key, body: #"{"type":"core.file.image","properties":{"filename":"a.png","mime_type":"image/png","blob_ref":"\#(ref)"\#(extra)}}"#)
        }
        #expect(file(unknown).code == "invalid_properties", "a blob never uploaded")
        #expect(file("sha256:xyz").code == "invalid_properties", "a malformed hash")
        #expect(file(expected).status == 201)
        #expect(file(expected, #","attachments":[{"blob_ref":"\#(unknown)","mime_type":"text/plain"}]"#).code == "invalid_properties")
        #expect(file(expected, #","attachments":[{"blob_ref":"\#(smallHash)"}]"#).code == "invalid_properties", "an attachment has a mime_type")
        #expect(file(expected, #","attachments":[{"blob_ref":"\#(smallHash)","mime_type":"text/plain","title":"notes"}]"#).status == 201)
        // Blobs are per tenant.
        let other = try #require(s.call("POST", "/tenants", key: key, body: #"{"name":"t2"}"#).json["key"]?.stringValue)
        #expect(s.call("GET", "/blobs/\(expected)", key: other).code == "blob_not_found")
        #expect(s.call("GET", "/blobs/\(expected)").code == "unauthorized")
    }
}
