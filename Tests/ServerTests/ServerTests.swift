import Foundation
import MarfaModel
import MarfaTestSupport
import Testing

/// The reference server over real HTTP on 127.0.0.1 (wire.md), one or more tests per W-rule.
@Suite struct ServerTests {
    func note(_ s: ServerHarness, _ key: String, _ props: String = #"{"title":"T","body":"one"}"#, id: String? = nil) -> ServerHarness.Reply {
        let idPart = id.map { #""id":"\#($0)","# } ?? ""
        return s.call("POST", "/items", key: key, body: #"{\#(idPart)"type":"core.note","properties":\#(props)}"#)
    }

    @Test func W18_bootstrapThenOnlyAdminKeysManageKeysAndRevocationIsImmediate() throws {
        let s = try ServerHarness()
        let admin = try s.bootstrap()
        #expect(admin.hasPrefix("marfa_k1_"))
        #expect(s.call("POST", "/keys", body: #"{"label":"second"}"#).status == 401, "bootstrap only on a server with no keys")
        let member = s.call("POST", "/keys", key: admin, body: #"{"label":"phone","role":"member","type_permissions":{"core.note":"write"}}"#)
        #expect(member.status == 201)
        let memberKey = try #require(member.json["key"]?.stringValue)
        #expect(s.call("GET", "/keys", key: memberKey).code == "forbidden")
        let listed = s.call("GET", "/keys", key: admin)
        #expect(listed.json["keys"].map { if case .array(let a) = $0 { return a.count }; return 0 } == 2)
        #expect(!listed.body.contains(memberKey), "a key's plaintext is shown once")
        #expect(s.call("GET", "/tenants/current", key: memberKey).status == 200)
        let keyID = try #require(member.json["id"]?.stringValue)
        #expect(s.call("DELETE", "/keys/\(keyID)", key: admin).status == 200)
        let after = s.call("GET", "/tenants/current", key: memberKey)
        #expect(after.status == 401 && after.code == "unauthorized")
    }

    @Test func W18_memberKeysOnForbiddenTypesGet403() throws {
        let s = try ServerHarness()
        let admin = try s.bootstrap()
        let key = try #require(s.call("POST", "/keys", key: admin, body: #"{"label":"m","role":"member","type_permissions":{"core.note":"write","core.bookmark":"read"}}"#).json["key"]?.stringValue)
        #expect(note(s, key).status == 201)
        let bm = s.call("POST", "/items", key: key, body: #"{"type":"core.bookmark","properties":{"title":"x"}}"#)
        #expect(bm.status == 403 && bm.code == "type_not_permitted")
        let hl = s.call("POST", "/items", key: admin, body: #"{"type":"core.highlight","properties":{"text":"x"}}"#)
        let hid = try #require(hl.item["id"]?.stringValue)
        #expect(s.call("GET", "/items/\(hid)", key: key).code == "item_not_found", "unreadable is not found")
        // Lists skip what the key cannot read and still page fully: note, (highlight), note.
        #expect(note(s, key).status == 201)
        let page = s.call("GET", "/items?limit=1", key: key)
        #expect(page.json["has_more"] == .bool(true), "\(page.body)")
        let rest = s.call("GET", "/items?limit=5&cursor=" + (page.json["cursor"]?.stringValue ?? "").addingPercentEncoding(withAllowedCharacters: .alphanumerics)!, key: key)
        if case .array(let a)? = rest.json["data"] { #expect(a.count == 1 && a.first?.objectValue?["type"] == .string("core.note")) } else { Issue.record("\(rest.body)") }
    }

    @Test func W18_tenantsAreIsolatedOnEveryRoute() throws {
        let s = try ServerHarness()
        let admin = try s.bootstrap()
        let t2 = s.call("POST", "/tenants", key: admin, body: #"{"name":"second"}"#)
        #expect(t2.status == 201)
        let other = try #require(t2.json["key"]?.stringValue)
        #expect(s.call("POST", "/tenants", key: other, body: #"{"name":"third"}"#).code == "forbidden", "only the operator adds tenants")
        let mine = note(s, admin, id: "shared-id")
        let id = try #require(mine.item["id"]?.stringValue)
        #expect(s.call("GET", "/items/\(id)", key: other).status == 404)
        #expect(s.call("PATCH", "/items/\(id)", key: other, body: #"{"properties":{"body":"x"}}"#).status == 404)
        #expect(s.call("DELETE", "/items/\(id)", key: other).status == 404)
        #expect(s.call("POST", "/items/\(id)/transition", key: other, body: #"{"state":"archived"}"#).status == 404)
        #expect(s.call("POST", "/items/\(id)/restore", key: other).status == 404)
        #expect(s.call("GET", "/items/\(id)/versions", key: other).status == 404)
        #expect(s.call("PUT", "/items/\(id)/metadata", key: other, body: #"{"tags":["x"]}"#).status == 404)
        #expect(s.call("PATCH", "/items/\(id)/metadata", key: other, body: #"{"tags":["x"]}"#).status == 404)
        #expect(s.call("POST", "/items/\(id)/tags", key: other, body: #"{"tags":["x"]}"#).status == 404)
        #expect(s.call("DELETE", "/items/\(id)/tags/x", key: other).status == 404)
        #expect(s.call("GET", "/items?state=any", key: other).json["data"] == .array([]))
        #expect(s.call("GET", "/metadata/tags", key: other).json["tags"] == .array([]))
        // Edges, blobs, types and the event stream.
        let second = try #require(note(s, admin).item["id"]?.stringValue)
        let edge = try #require(s.call("POST", "/edges", key: admin, body: #"{"source_id":"\#(id)","target_id":"\#(second)","edge_type":"about"}"#).json["edge"]?.objectValue?["id"]?.stringValue)
        #expect(s.call("GET", "/edges/\(edge)", key: other).code == "edge_not_found")
        #expect(s.call("DELETE", "/edges/\(edge)", key: other).code == "edge_not_found")
        #expect(s.call("GET", "/edges", key: other).json["data"] == .array([]))
        #expect(s.call("GET", "/items/\(id)/edges", key: other).code == "item_not_found")
        #expect(s.call("GET", "/items/\(second)/backrefs", key: other).code == "item_not_found")
        #expect(s.call("POST", "/edges", key: other, body: #"{"source_id":"\#(id)","target_id":"\#(second)","edge_type":"about"}"#).code == "item_not_found")
        let blob = s.call("POST", "/blobs", key: admin, data: Data("secret".utf8), contentType: "text/plain").json["hash"]?.stringValue ?? ""
        #expect(s.call("GET", "/blobs/\(blob)", key: other).code == "blob_not_found")
        #expect(s.call("HEAD", "/blobs/\(blob)", key: other).status == 404)
        #expect(s.call("POST", "/types", key: admin, body: #"{"id":"private.kind"}"#).status == 201)
        #expect(s.call("GET", "/types/private.kind", key: other).code == "type_not_found")
        #expect(!s.call("GET", "/types", key: other).body.contains("private.kind"))
        #expect(s.call("POST", "/items", key: other, body: #"{"type":"private.kind"}"#).code == "type_not_found")
        let stream = try s.events(key: other, lastEventID: "0")
        #expect(stream.wait { !$0.isEmpty })
        #expect(s.call("PATCH", "/items/\(second)", key: admin, body: #"{"properties":{"body":"changed"}}"#).status == 200)
        #expect(note(s, other, #"{"title":"marker"}"#).status == 201)
        #expect(stream.wait { $0.contains { $0.event != nil } })
        usleep(200_000)
        #expect(stream.events.count == 1 && stream.events.first?.json["properties"]?.objectValue?["title"] == .string("marker"),
                "a stream replays and follows only its own tenant: \(stream.text)")
        let keyID = try #require(s.call("GET", "/keys", key: admin).json["keys"].flatMap { if case .array(let a) = $0 { return a.first?.objectValue?["id"]?.stringValue }; return nil })
        #expect(s.call("DELETE", "/keys/\(keyID)", key: other).status == 404, "a key of another tenant cannot be revoked")
        #expect(!s.call("GET", "/keys", key: other).body.contains(keyID), "nor listed")
        #expect(s.call("GET", "/tenants/current", key: other).json["tenant"]?.objectValue?["name"] == .string("second"))
        // The same client-minted id in another tenant is another item.
        #expect(note(s, other, id: "shared-id").status == 201)
        #expect(s.call("GET", "/items/shared-id", key: other).item["properties"]?.objectValue?["body"]?.stringValue == "one")
        #expect(s.call("GET", "/items/shared-id", key: admin).item["properties"]?.objectValue?["body"]?.stringValue == "one")
    }

    @Test func W2_W3_missingWrongAndRevokedKeysAre401InTheEnvelope() throws {
        let s = try ServerHarness()
        _ = try s.bootstrap()
        for key in [nil, "nonsense", "marfa_k1_0000000000000000000000000000000000000000000000"] {
            let r = s.call("GET", "/items", key: key)
            #expect(r.status == 401 && r.code == "unauthorized" && r.json["error"]?.objectValue?["message"]?.stringValue != nil)
        }
    }

    @Test func W3_badInputGetsTheEnvelopeAndChangesNothing() throws {
        let s = try ServerHarness()
        let key = try s.bootstrap()
        let cases: [(String, Int, String)] = [
            (#"{"type":"core.note","properties":"#, 400, "validation_error"),
            (#"[1,2]"#, 400, "validation_error"),
            (#"{"properties":{}}"#, 400, "missing_required_field"),
            (#"{"type":42}"#, 400, "validation_error"),
            (#"{"type":"core.note","properties":{"title":7}}"#, 400, "invalid_properties"),
            (#"{"type":"no.such"}"#, 404, "type_not_found"),
            (#"{"type":"core.note","id":"bad id!"}"#, 400, "invalid_id"),
            (#"{"type":"core.note","tags":["a,b"]}"#, 400, "validation_error"),
            (#"{"type":"core.note","state":"gone"}"#, 400, "validation_error"),
            (#"{"type":"core.file","properties":{"title":"x"}}"#, 400, "missing_required_field"),
        ]
        for (body, status, code) in cases {
            let r = s.call("POST", "/items", key: key, body: body)
            #expect(r.status == status && r.code == code, "\(body) → \(r.status) \(r.body)")
        }
        let huge = #"{"type":"core.note","properties":{"body":""# + String(repeating: "x", count: 17 << 20) + #""}}"#
        let r = s.call("POST", "/items", key: key, body: huge)
        #expect(r.status == 413 && r.code == "request_too_large")
        #expect(s.call("GET", "/items?state=any", key: key).json["data"] == .array([]), "nothing was created")
        #expect(s.call("GET", "/no/such/route", key: key).code == "not_found")
        #expect(s.call("GET", "/items?limit=0", key: key).code == "validation_error")
        #expect(s.call("GET", "/items/bad%20id", key: key).code == "invalid_id")
    }

    @Test func W4_everyResponseCarriesARequestID() throws {
        let s = try ServerHarness()
        let key = try s.bootstrap()
        let a = s.call("GET", "/items", key: key), b = s.call("GET", "/nowhere")
        #expect(a.headers["x-request-id"] != nil && b.headers["x-request-id"] != nil && a.headers["x-request-id"] != b.headers["x-request-id"])
        #expect(s.call("GET", "/items", key: key, headers: ["X-Request-ID": "trace-42"]).headers["x-request-id"] == "trace-42")
    }

    @Test func W4_rateLimitHeadersAnd429WithRetryAfter() throws {
        let s = try ServerHarness(options: ["--rate-limit", "4"])
        let key = try s.bootstrap()
        var remaining: [String] = []
        for _ in 0..<4 {
            let r = s.call("GET", "/items", key: key)
            #expect(r.status == 200 && r.headers["x-ratelimit-limit"] == "4" && r.headers["x-ratelimit-reset"] != nil)
            remaining.append(r.headers["x-ratelimit-remaining"] ?? "")
        }
        let over = s.call("GET", "/items", key: key)
        // The bootstrap call counts in its own (anonymous) bucket; the window may turn over once.
        if over.status == 429 {
            #expect(remaining == ["3", "2", "1", "0"])
            #expect(over.code == "rate_limited" && Int(over.headers["retry-after"] ?? "") ?? 0 >= 1)
            #expect(over.headers["x-ratelimit-remaining"] == "0")
        } else {
            #expect(over.status == 200, "a new minute began: \(remaining)")
        }
        #expect(s.call("GET", "/items", key: nil).headers["x-ratelimit-limit"] == "4", "every response carries the headers")
    }

    @Test func W5_idempotencyKeyReplaysAndRefusesReuse() throws {
        let s = try ServerHarness()
        let key = try s.bootstrap()
        let body = #"{"type":"core.note","properties":{"title":"once"}}"#
        let first = s.call("POST", "/items", key: key, body: body, headers: ["Idempotency-Key": "k-1"])
        let again = s.call("POST", "/items", key: key, body: body, headers: ["Idempotency-Key": "k-1"])
        #expect(first.status == 201 && again.status == 201)
        #expect(again.headers["idempotency-replayed"] == "true" && first.headers["idempotency-replayed"] == nil)
        #expect(again.item["id"] == first.item["id"])
        #expect(s.call("GET", "/items", key: key).json["data"].map { if case .array(let a) = $0 { return a.count }; return -1 } == 1)
        let other = s.call("POST", "/items", key: key, body: #"{"type":"core.note","properties":{"title":"other"}}"#, headers: ["Idempotency-Key": "k-1"])
        #expect(other.status == 422 && other.code == "idempotency_key_reused")
    }

    @Test func W1_createKeepsAClientMintedIdAndARepeatIsAcknowledged() throws {
        let s = try ServerHarness()
        let key = try s.bootstrap()
        let id = ItemID.make()
        let r = note(s, key, id: id)
        #expect(r.status == 201 && r.item["id"]?.stringValue == id && r.item["version"] == .int(1))
        #expect(r.item["tenant_id"] != nil && r.item["tenant_id"] == r.item["space_id"])
        let envelope = try JSONCoding.decode(ItemEnvelope.self, from: r.body)
        #expect(envelope.item.id == id && envelope.item.state == .active && envelope.metadata?.itemID == id)
        let again = note(s, key, #"{"title":"changed"}"#, id: id)
        #expect(again.status == 200 && again.json["acknowledged"] == .bool(true))
        #expect(again.item["properties"]?.objectValue?["title"]?.stringValue == "T", "nothing written")
        let clash = s.call("POST", "/items", key: key, body: #"{"id":"\#(id)","type":"core.bookmark"}"#)
        #expect(clash.status == 409 && clash.code == "id_reused")
        let minted = note(s, key).item["id"]?.stringValue ?? ""
        #expect(ItemID.isUUIDv7(minted))
    }

    @Test func W7_staleWritesMergeOrConflictWithTheThreeWayContext() throws {
        let s = try ServerHarness()
        let key = try s.bootstrap()
        let id = try #require(note(s, key, #"{"title":"T","body":"one","extra":1}"#).item["id"]?.stringValue)
        #expect(s.call("PATCH", "/items/\(id)", key: key, body: #"{"version":1,"properties":{"body":"two"}}"#).item["version"] == .int(2))
        // Stale, but touching only a field the server did not change: merged.
        let merged = s.call("PATCH", "/items/\(id)", key: key, body: #"{"version":1,"properties":{"title":"New"}}"#)
        #expect(merged.status == 200 && merged.item["version"] == .int(3))
        #expect(merged.item["properties"]?.objectValue?["body"]?.stringValue == "two")
        // Stale and overlapping: 409 with current, ancestor, conflicting fields and the policy.
        let c = s.call("PATCH", "/items/\(id)", key: key, body: #"{"version":1,"properties":{"body":"three","title":"Other"}}"#)
        #expect(c.status == 409 && c.code == "version_conflict")
        #expect(c.json["current"]?.objectValue?["version"] == .int(3))
        #expect(c.json["ancestor"]?.objectValue?["properties"]?.objectValue?["body"]?.stringValue == "one")
        #expect(c.json["conflicting_fields"] == .array(["body", "title"]))
        #expect(c.json["merge_policy"]?.objectValue?["fields"]?.objectValue?["body"] == .string("keep_both_copies"))
        #expect(c.json["merge_policy"]?.objectValue?["default"] == .string("last_writer_wins"))
        let decoded = try JSONCoding.decode(ErrorResponse.self, from: c.body)
        #expect(decoded.ancestor?.version == 1 && decoded.current?.version == 3 && decoded.mergePolicy?.fields["body"] == .keepBothCopies)
        #expect(s.call("GET", "/items/\(id)", key: key).item["version"] == .int(3), "a refused write changes nothing")
        let gone = s.call("PATCH", "/items/\(id)", key: key, body: #"{"version":9,"properties":{"body":"x"}}"#)
        #expect(gone.status == 409 && gone.code == "ancestor_unavailable" && gone.json["requested_version"] == .int(9))
        let versions = s.call("GET", "/items/\(id)/versions", key: key).json["versions"]
        var numbers: [JSONValue] = []
        if case .array(let a)? = versions { numbers = a.compactMap { $0.objectValue?["version"] } }
        #expect(numbers == [.int(1), .int(2)])
    }

    @Test func W7_aMergeKeepsTheItemsOtherPropertiesNullOnesToo() throws {
        let s = try ServerHarness()
        let key = try s.bootstrap()
        let id = try #require(note(s, key, #"{"title":"T","body":"one","description":null,"due":null}"#).item["id"]?.stringValue)
        func props() -> [String: JSONValue] { s.call("GET", "/items/\(id)", key: key).item["properties"]?.objectValue ?? [:] }
        // A PATCH of the extensions alone (what a client sends with a file's form) changes no property.
        let ext = s.call("PATCH", "/items/\(id)", key: key, body: #"{"version":1,"extensions":{"fs.stat":{"mtime_ns":1700000000000000000}}}"#)
        #expect(ext.status == 200 && ext.item["version"] == .int(1), "\(ext.body)")
        #expect(props()["description"] == .null && props().keys.contains("description") && props().keys.contains("due"))
        // A merge of another field keeps them; a null in the patch removes its own key only.
        #expect(s.call("PATCH", "/items/\(id)", key: key, body: #"{"version":1,"properties":{"body":"two","due":null}}"#).item["version"] == .int(2))
        #expect(props().keys.contains("description") && !props().keys.contains("due") && props()["body"] == .string("two"))
        // A stale merge of a field the server did not change: the same.
        #expect(s.call("PATCH", "/items/\(id)", key: key, body: #"{"version":1,"properties":{"title":"U"}}"#).item["version"] == .int(3))
        #expect(props().keys.contains("description") && props()["title"] == .string("U") && props()["body"] == .string("two"))
    }

    @Test func W8_theServerNeverResolvesAConflictItself() throws {
        let s = try ServerHarness()
        let key = try s.bootstrap()
        let id = try #require(note(s, key).item["id"]?.stringValue)
        #expect(s.call("PATCH", "/items/\(id)", key: key, body: #"{"version":1,"properties":{"body":"server"}}"#).status == 200)
        for path in ["/items/\(id)", "/items/\(id)?conflict=auto"] {
            let stale = s.call("PATCH", path, key: key, body: #"{"version":1,"properties":{"body":"client"}}"#)
            #expect(stale.status == 409 && stale.code == "version_conflict", "\(path): \(stale.body)")
        }
        let now = s.call("GET", "/items/\(id)", key: key).item
        #expect(now["version"] == .int(2) && now["properties"]?.objectValue?["body"] == .string("server"), "nothing was resolved or written")
    }

    @Test func W6_listsFilterAndPageWithACursor() throws {
        let s = try ServerHarness()
        let key = try s.bootstrap()
        for i in 0..<5 { _ = s.call("POST", "/items", key: key, body: #"{"type":"core.note","properties":{"title":"n\#(i)"},"tags":["\#(i % 2 == 0 ? "even" : "odd")","all"]}"#) }
        let png = s.call("POST", "/blobs", key: key, data: Data([0x89, 0x50, 0x4e, 0x47]), contentType: "image/png").json["hash"]?.stringValue ?? ""
        #expect(s.call("POST", "/items", key: key, body: #"{"type":"core.file.image","properties":{"title":"i","filename":"i.png","mime_type":"image/png","blob_ref":"\#(png)"}}"#).status == 201)
        var seen: [String] = []
        var cursor: String?
        repeat {
            let r = s.call("GET", "/items?limit=2" + (cursor.map { "&cursor=" + $0.addingPercentEncoding(withAllowedCharacters: .alphanumerics)! } ?? ""), key: key)
            if case .array(let a)? = r.json["data"] { seen += a.compactMap { $0.objectValue?["id"]?.stringValue } }
            cursor = r.json["cursor"]?.stringValue
            #expect(r.json["has_more"] == .bool(cursor != nil))
        } while cursor != nil
        #expect(seen.count == 6 && Set(seen).count == 6)
        func count(_ q: String) -> Int { if case .array(let a)? = s.call("GET", "/items?" + q, key: key).json["data"] { return a.count }; return -1 }
        #expect(count("type=core.file") == 1, "subtypes are included")
        #expect(count("tags=even,all") == 3)
        #expect(count("include=metadata&tags=odd") == 2)
        let first = try #require(seen.first)
        #expect(s.call("DELETE", "/items/\(first)", key: key).status == 200)
        #expect(count("state=any") == 6 && count("") == 5 && count("state=trashed") == 1)
        let meta = s.call("GET", "/items?include=metadata&limit=1", key: key).json["data"]
        if case .array(let a)? = meta { #expect(a.first?.objectValue?["metadata"]?.objectValue?["tags"] != nil) }
    }

    @Test func W2_transitionsRestoreAndTags() throws {
        let s = try ServerHarness()
        let key = try s.bootstrap()
        let id = try #require(note(s, key).item["id"]?.stringValue)
        #expect(s.call("POST", "/items/\(id)/transition", key: key, body: #"{"state":"archived"}"#).item["state"] == .string("archived"))
        #expect(s.call("POST", "/items/\(id)/restore", key: key).item["state"] == .string("active"))
        #expect(s.call("POST", "/items/\(id)/transition", key: key, body: #"{"state":"trashed"}"#).status == 200)
        let bad = s.call("POST", "/items/\(id)/transition", key: key, body: #"{"state":"archived"}"#)
        #expect(bad.status == 400 && bad.code == "invalid_transition")
        #expect(s.call("PUT", "/items/\(id)/metadata", key: key, body: #"{"tags":["b","a"]}"#).json["metadata"]?.objectValue?["tags"] == .array(["a", "b"]))
        #expect(s.call("POST", "/items/\(id)/tags", key: key, body: #"{"tags":["c"]}"#).json["metadata"]?.objectValue?["tags"] == .array(["a", "b", "c"]))
        #expect(s.call("DELETE", "/items/\(id)/tags/a", key: key).json["metadata"]?.objectValue?["tags"] == .array(["b", "c"]))
        #expect(s.call("GET", "/metadata/tags", key: key).json["tags"] == .array([.object(["tag": "b", "count": .int(1)]), .object(["tag": "c", "count": .int(1)])]))
    }

    @Test func W9_W10_builtInTypesWithTheirMergePolicies() throws {
        let s = try ServerHarness()
        let key = try s.bootstrap()
        let note = Optional(s.call("GET", "/types/core.note", key: key).json)
        #expect(note?["merge_policy"]?.objectValue?["fields"]?.objectValue?["body"] == .string("keep_both_copies"))
        #expect(s.call("GET", "/types/core.file.image", key: key).json["parent"] == .string("core.file"))
        #expect(s.call("GET", "/types/nope", key: key).code == "type_not_found")
        if case .array(let a)? = try? JSONParser.parse(s.call("GET", "/types", key: key).body) { #expect(a.count == 8) } else { Issue.record("no type list") }
    }

    @Test func serve_initWritesA0600KeyFileAndDataSurvivesARestart() throws {
        let dir = NSTemporaryDirectory() + "marfafs-init-" + UUID().uuidString.prefix(8)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let db = dir + "/server.sqlite"
        let r = Shell.run([MountHarness.binary, "serve", "--db", db, "--init"])
        #expect(r.status == 0)
        let path = r.out
        let attrs = try FileManager.default.attributesOfItem(atPath: path)
        #expect((attrs[.posixPermissions] as? NSNumber)?.intValue == 0o600)
        let key = try String(contentsOfFile: path, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(Shell.run([MountHarness.binary, "serve", "--db", db, "--init"]).status != 0, "init only once")
        let s = try ServerHarness(db: db)
        let id = try #require(note(s, key).item["id"]?.stringValue)
        #expect(s.stop() == 0, "SIGTERM shuts down gracefully")
        try s.start()
        #expect(s.call("GET", "/items/\(id)", key: key).status == 200)
    }

    /// Every implemented operation's responses validate against the response schemas of the
    /// upstream OpenAPI document (scripts/testing/openapi_check.py, with python3-jsonschema).
    @Test func openAPI_responsesValidateAgainstTheUpstreamSchemas() throws {
        let s = try ServerHarness()
        let key = try s.bootstrap()
        var records: [String] = []
        func record(_ method: String, _ template: String, _ path: String, body: String? = nil, key k: String? = key) -> ServerHarness.Reply {
            let r = s.call(method, path, key: k, body: body)
            records.append(JSONCoding.encode(["method": .string(method), "path": .string(template), "status": .int(Int64(r.status)), "body": .string(r.body)]))
            return r
        }
        let created = record("POST", "/items", "/items", body: #"{"type":"core.note","properties":{"title":"T","body":"b"},"tags":["a"],"source_id":"src-1"}"#)
        let id = try #require(created.item["id"]?.stringValue)
        _ = record("POST", "/items", "/items", body: #"{"id":"\#(id)","type":"core.note"}"#)
        _ = record("POST", "/items", "/items", body: #"{"type":"core.note","properties":{"title":1}}"#)
        _ = record("GET", "/items/{id}", "/items/\(id)")
        _ = record("GET", "/items/{id}", "/items/nope")
        _ = record("GET", "/items", "/items?include=metadata&limit=1")
        _ = record("GET", "/items", "/items")
        _ = record("GET", "/items", "/items", key: nil)
        _ = record("PATCH", "/items/{id}", "/items/\(id)", body: #"{"version":1,"properties":{"body":"c"}}"#)
        _ = record("PATCH", "/items/{id}", "/items/\(id)", body: #"{"version":1,"properties":{"body":"d"}}"#)
        _ = record("GET", "/items/{id}/versions", "/items/\(id)/versions")
        _ = record("PUT", "/items/{id}/metadata", "/items/\(id)/metadata", body: #"{"tags":["x","y"]}"#)
        _ = record("PATCH", "/items/{id}/metadata", "/items/\(id)/metadata", body: #"{"tags":["z"]}"#)
        _ = record("POST", "/items/{id}/tags", "/items/\(id)/tags", body: #"{"tags":["w"]}"#)
        _ = record("DELETE", "/items/{id}/tags/{tag}", "/items/\(id)/tags/w")
        _ = record("GET", "/metadata/tags", "/metadata/tags")
        _ = record("POST", "/items/{id}/transition", "/items/\(id)/transition", body: #"{"state":"archived"}"#)
        _ = record("POST", "/items/{id}/restore", "/items/\(id)/restore")
        _ = record("DELETE", "/items/{id}", "/items/\(id)")
        _ = record("GET", "/types", "/types")
        _ = record("GET", "/types/{id}", "/types/core.note")
        _ = record("POST", "/keys", "/keys", body: #"{"label":"m","role":"member","type_permissions":{"core.note":"read"}}"#)
        _ = record("POST", "/types", "/types", body: #"{"id":"recipe","parent":"core.note","fields":{"servings":{"type":"number"}}}"#)
        let other = try #require(record("POST", "/items", "/items", body: #"{"type":"recipe","properties":{"title":"R","servings":2}}"#).item["id"]?.stringValue)
        let edge = record("POST", "/edges", "/edges", body: #"{"source_id":"\#(id)","target_id":"\#(other)","edge_type":"references","properties":{"why":"x"}}"#)
        _ = record("POST", "/edges", "/edges", body: #"{"source_id":"\#(id)","target_id":"\#(other)","edge_type":"references"}"#)
        _ = record("GET", "/edges", "/edges?limit=1")
        _ = record("GET", "/items/{id}/edges", "/items/\(id)/edges")
        _ = record("GET", "/items/{id}/backrefs", "/items/\(other)/backrefs")
        _ = record("DELETE", "/edges/{id}", "/edges/" + (edge.json["edge"]?.objectValue?["id"]?.stringValue ?? ""))
        let blob = s.call("POST", "/blobs", key: key, data: Data("blob".utf8), contentType: "text/plain")
        records.append(JSONCoding.encode(["method": "POST", "path": "/blobs", "status": .int(Int64(blob.status)), "body": .string(blob.body)]))
        _ = record("GET", "/keys", "/keys")
        let file = s.root + "/responses.jsonl"
        try (records.joined(separator: "\n") + "\n").write(toFile: file, atomically: true, encoding: .utf8)
        // The first python3 that has jsonschema (scripts/bootstrap installs Debian's).
        let python = ["python3", "/usr/bin/python3"].first { Shell.run([$0, "-c", "import jsonschema"]).status == 0 } ?? "python3"
        let check = Shell.run([python, MountHarness.repoRoot + "/scripts/testing/openapi_check.py",
                               MountHarness.upstream + "/openapi.json", file])
        #expect(check.status == 0, "\(check.stdout)\(check.stderr)")
    }
}
