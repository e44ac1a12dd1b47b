import Foundation
import Logging
import MarfaModel
import MarfaStore
import MarfaSync
import MarfaTestSupport
import PropertyBased
import Testing

/// The sync engine's wire layer: the SSE parser, backoff, the mapping of queued mutations to
/// calls (pure), and the client against the real `marfafs serve` on 127.0.0.1.
@Suite struct WireTests {
    // MARK: SSE (W-14)

    @Test func W14_parserReadsFramesCommentsAndLineEndings() {
        var p = SSEParser()
        let text = ": ping\n\nid: 7\nevent: item.created\ndata: {\"a\":1}\n\r\nid: 8\r\nevent: x\r\ndata: line1\r\ndata: line2\r\nunknown: y\r\n\r\ndata\n\nevent: empty\n\nretry: 1500\n\n"
        let items = p.feed(Array(text.utf8))
        #expect(items == [
            .comment("ping"),
            .event(SSEEvent(id: "7", event: "item.created", data: #"{"a":1}"#)),
            .event(SSEEvent(id: "8", event: "x", data: "line1\nline2")),
            .event(SSEEvent(id: "8", event: "message", data: "")),
        ])
        #expect(p.retry == 1500)
        #expect(p.feed(Array("data: partial".utf8)).isEmpty, "nothing until the blank line")
        #expect(p.feed(Array("\n\n".utf8)) == [.event(SSEEvent(id: "8", data: "partial"))])
    }

    @Test func W14_parserGivesTheSameItemsHoweverTheBytesAreSplit() async {
        let text = Array(": ping\r\n\r\nid: 1\nevent: item.updated\ndata: {\"title\":\"é 😀\"}\n\nid: 2\revent: edge.deleted\rdata: {}\r\r: c\n\n".utf8)
        var whole = SSEParser()
        let expected = whole.feed(text)
        #expect(expected.count == 4)
        await propertyCheck(input: Gen<Int>.int(in: 1...text.count).array(of: 0...12)) { cuts in
            var p = SSEParser()
            var out: [SSEItem] = []
            var at = 0
            for c in cuts.sorted() where c > at { out += p.feed(text[at..<c]); at = c }
            out += p.feed(text[at...])
            #expect(out == expected)
        }
    }

    // MARK: backoff (W-4 Retry-After)

    @Test func W4_backoffGrowsWithJitterUpToItsCapAndHonoursRetryAfter() {
        var rng = SystemRandomNumberGenerator()
        let b = Backoff(base: 0.5, cap: 8)
        for attempt in 1...12 {
            let ceiling = min(8, 0.5 * pow(2, Double(attempt - 1)))
            for _ in 0..<50 {
                let d = b.delay(attempt: attempt, using: &rng)
                #expect(d >= 0 && d <= ceiling)
            }
        }
        let spread = Set((0..<50).map { _ in b.delay(attempt: 6, using: &rng) })
        #expect(spread.count > 40, "jittered, not fixed")
        #expect(b.delay(attempt: 1, retryAfter: 30, using: &rng) == 30, "never earlier than Retry-After")
        #expect(b.delay(attempt: 1_000_000, using: &rng) <= 8)
        #expect(Backoff.retryAfter("12") == 12)
        let now = Date(timeIntervalSince1970: 1_776_160_800)
        #expect(Backoff.retryAfter("Tue, 14 Apr 2026 10:00:30 GMT", now: now) == 30)
        #expect(Backoff.retryAfter("soon") == nil && Backoff.retryAfter(nil) == nil)
    }

    // MARK: mutations → calls (W-5)

    func mutation(_ kind: MutationKind, _ payload: [String: JSONValue], item: String = "it/1", key: String = "key-1") -> Mutation {
        Mutation(seq: 1, id: "m1", idempotencyKey: key == "key-1" && item != "it/1" ? UUID().uuidString : key, kind: kind, itemID: item, payload: payload, createdAt: "2026-11-21T00:00:00Z")
    }

    @Test func W5_everyMutationKindMapsToItsCallWithItsIdempotencyKey() throws {
        let create = try WireRequest.sending(mutation(.create, ["type": "core.note", "properties": .object(["title": "T"]), "tags": .array(["a"])]))
        #expect(create.method == "POST" && create.path == "/items" && create.idempotencyKey == "key-1")
        #expect(create.body == .json(["id": "it/1", "type": "core.note", "properties": .object(["title": "T"]), "tags": .array(["a"])]))
        let update = try WireRequest.sending(mutation(.update, ["properties": .object(["body": "b"]), "base_version": .int(3)]))
        #expect(update.method == "PATCH" && update.path == "/items/it%2F1", "ids are opaque and escaped")
        #expect(update.body == .json(["version": .int(3), "properties": .object(["body": "b"]), "properties_mode": "replace"]))
        let rebased = try WireRequest.sending(mutation(.update, ["properties": .object([:]), "base_version": .int(0)]), baseVersion: 5)
        if case .json(let b) = rebased.body { #expect(b["version"] == .int(5)) } else { Issue.record("body") }
        let fresh = try WireRequest.sending(mutation(.update, ["properties": .object([:]), "base_version": .int(0)]))
        if case .json(let b) = fresh.body { #expect(b["version"] == nil, "no version 0 on the wire") } else { Issue.record("body") }
        #expect(try WireRequest.sending(mutation(.transition, ["state": "archived"])).path == "/items/it%2F1/transition")
        let tags = try WireRequest.sending(mutation(.setTags, ["tags": .array(["x"])]))
        #expect(tags.method == "PUT" && tags.path == "/items/it%2F1/metadata" && tags.body == .json(["tags": .array(["x"])]))
        let edge = try WireRequest.sending(mutation(.createEdge, ["id": "e1", "source_id": "a", "target_id": "b", "edge_type": "references"]))
        #expect(edge.path == "/edges" && edge.body == .json(["id": "e1", "source_id": "a", "target_id": "b", "edge_type": "references"]))
        let del = try WireRequest.sending(mutation(.deleteEdge, ["id": "e 1"]))
        #expect(del.method == "DELETE" && del.path == "/edges/e%201")
        let blob = try WireRequest.sending(mutation(.uploadBlob, ["hash": "sha256:ab", "mime_type": "image/png"]), blob: { $0 == "sha256:ab" ? [1, 2] : nil })
        #expect(blob.path == "/blobs?hash=sha256:ab" && blob.body == .bytes([1, 2], mimeType: "image/png"))
        #expect(throws: WireRequest.MappingError.self) { try WireRequest.sending(mutation(.transition, [:])) }
        #expect(throws: WireRequest.MappingError.self) { try WireRequest.sending(mutation(.uploadBlob, ["hash": "sha256:cd"]), blob: { _ in nil }) }
    }

    // MARK: credentials (W-2)

    @Test func W2_aKeyFileOthersCanReadIsRefusedAndTheKeyIsNeverShown() throws {
        let dir = NSTemporaryDirectory() + "marfafs-key-" + UUID().uuidString.prefix(8)
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let file = dir + "/key"
        try "marfa_k1_secretsecret\n".write(toFile: file, atomically: true, encoding: .utf8)
        chmod(file, 0o644)
        #expect(throws: CredentialError.self) { try Credential.file(file) }
        chmod(file, 0o600)
        let c = try Credential.file(file)
        #expect(!String(describing: c).contains("secretsecret") && "\(c)".hasSuffix("cret"))
        #expect(throws: CredentialError.self) { try Credential(token: "  \n") }
    }

    // MARK: against the real server

    func client(_ s: ServerHarness, _ key: String) throws -> WireClient {
        WireClient(baseURL: s.base, credential: try Credential(token: key), timeout: .seconds(10))
    }

    @Test func W5_aRetriedMutationIsReplayedNotRepeated() async throws {
        let s = try ServerHarness()
        let c = try client(s, try s.bootstrap())
        defer { Task { await c.shutdown() } }
        let m = mutation(.create, ["type": "core.note", "properties": .object(["title": "once", "body": "x"])], item: "01-retried", key: "retried-key")
        let first = try await c.call(try WireRequest.sending(m))
        #expect(first.status == 201)
        let again = try await c.call(try WireRequest.sending(m))
        #expect(again.status == 201 && again.headers["idempotency-replayed"] == "true")
        let list = try await c.call(WireRequest(method: "GET", path: "/items?state=any"))
        if case .array(let a)? = list.json["data"] { #expect(a.count == 1) } else { Issue.record("\(list.json)") }
    }

    @Test func W3_failuresAreClassifiedAsTheQueueMustTreatThem() async throws {
        let s = try ServerHarness(options: ["--rate-limit", "6"])
        let key = try s.bootstrap()
        let c = try client(s, key)
        let wrong = try client(s, "marfa_k1_" + String(repeating: "0", count: 48))
        defer { Task { await c.shutdown(); await wrong.shutdown() } }
        func failure(_ client: WireClient, _ r: WireRequest) async -> WireFailure? {
            do { _ = try await client.call(r); return nil } catch let f as WireFailure { return f } catch { return nil }
        }
        if case .unauthorized(let code, _)? = await failure(wrong, WireRequest(method: "GET", path: "/items")) { #expect(code == "unauthorized") } else { Issue.record("401") }
        let created = try await c.call(try WireRequest.sending(mutation(.create, ["type": "core.note", "properties": .object(["body": "a"])], item: "n1")))
        #expect(created.status == 201)
        _ = try await c.call(try WireRequest.sending(mutation(.update, ["properties": .object(["body": "b"]), "base_version": .int(1)], item: "n1")))
        let stale = await failure(c, try WireRequest.sending(mutation(.update, ["properties": .object(["body": "c"]), "base_version": .int(1)], item: "n1")))
        if case .conflict(let r)? = stale {
            #expect(r.errorCode == "version_conflict" && r.json["conflicting_fields"] == .array(["body"]))
        } else { Issue.record("409: \(String(describing: stale))") }
        let refused = await failure(c, WireRequest(method: "POST", path: "/items", body: .json(["type": "no.such.type"])))
        if case .refused(let status, let code, _)? = refused { #expect(status == 404 && code == "type_not_found") } else { Issue.record("refused") }
        #expect(refused?.isRetryable == false)
        var limited: WireFailure?
        for _ in 0..<8 where limited == nil {
            if let f = await failure(c, WireRequest(method: "GET", path: "/items")), case .rateLimited = f { limited = f }
        }
        #expect(limited?.isRetryable == true && (limited?.retryAfter ?? 0) > 0, "429 carries Retry-After")
    }

    @Test func W14_W17_theEventStreamDeliversResumesAndReportsCatchupTooOld() async throws {
        let s = try ServerHarness(options: ["--event-retention", "1s"])
        let c = try client(s, try s.bootstrap())
        defer { Task { await c.shutdown() } }
        var events = c.events(lastEventID: nil).makeAsyncIterator()
        #expect(try await events.next() == .comment("ping"))
        _ = try await c.call(try WireRequest.sending(mutation(.create, ["type": "core.note", "properties": .object(["title": "live"])], item: "e1")))
        guard case .event(let e)? = try await events.next() else { Issue.record("no event"); return }
        #expect(e.event == "item.created" && e.id != nil)
        #expect((try? JSONParser.parse(e.data))?.objectValue?["id"] == .string("e1"))
        _ = try await c.call(try WireRequest.sending(mutation(.create, ["type": "core.note", "properties": .object(["title": "second"])], item: "e2")))
        try await Task.sleep(for: .milliseconds(1500))
        var old = c.events(lastEventID: e.id).makeAsyncIterator()
        var saw: [SSEItem] = []
        while let item = try await old.next() { saw.append(item) }
        #expect(saw.contains { if case .event(let f) = $0 { return f.event == "catchup_too_old" && f.id == nil }; return false }, "\(saw)")
    }

    /// The feed on a real server that stops answering (SIGSTOP: the connection stays open, no byte
    /// comes): after the silence limit it drops the connection, and reconnects once the server is back.
    @Test func W14_aSilentStreamIsADeadConnection() async throws {
        let s = try ServerHarness(options: ["--heartbeat", "30"])
        let key = try s.bootstrap()
        let dir = try TempDirectory("marfafs-feed")
        let store = try Store(path: dir.path + "/store.sqlite")
        let status = SyncStatus(server: s.base)
        let keyed = KeyedClient(baseURL: s.base, credential: try Credential(token: key), load: { try Credential(token: key) })
        let feed = RemoteFeed(store: store, client: keyed, status: status, log: Logger(label: "test"), silence: 3)
        let run = Task { await feed.run() }
        defer { run.cancel(); Task { await keyed.shutdown() } }
        func eventually(_ seconds: Double, _ f: () -> Bool) async -> Bool {
            let end = Date().addingTimeInterval(seconds)
            while Date() < end { if f() { return true }; try? await Task.sleep(for: .milliseconds(50)) }
            return f()
        }
        // Going live first: a busy machine (the whole suite runs at once) may take a while.
        #expect(await eventually(90) { status.snapshot.stream == .live }, "\(status.eventLines)")
        s.pause()
        let paused = Date()
        #expect(await eventually(20) { status.eventLines.contains("silent for 3 s") }, "\(status.eventLines)")
        // Well before the server's next ping (30 s): the silence limit, plus scheduling on a busy machine.
        #expect(Date().timeIntervalSince(paused) < 20)
        // The connection is dropped right after the verdict is logged.
        #expect(await eventually(10) { status.snapshot.stream != .live }, "\(status.eventLines)")
        s.resume()
        #expect(await eventually(30) { status.snapshot.stream == .live }, "it reconnects")
    }

    @Test func W14_aServerThatDiesMidStreamEndsTheStream() async throws {
        let s = try ServerHarness()
        let c = try client(s, try s.bootstrap())
        defer { Task { await c.shutdown() } }
        var events = c.events(lastEventID: nil).makeAsyncIterator()
        #expect(try await events.next() == .comment("ping"))
        s.kill9()
        let killed = Date()
        var ended = false
        do { while try await events.next() != nil {}; ended = true } catch is WireFailure { ended = true }
        // At once, not at the silence limit (60 s): the bound allows a machine busy with the
        // whole suite (mounts writing hundreds of MiB) and stays well below that limit.
        #expect(ended && Date().timeIntervalSince(killed) < 30, "the stream ends at once, not at the silence limit (60 s)")
        let calledAt = Date()
        let down = await { () async -> WireFailure? in
            do { _ = try await c.call(WireRequest(method: "GET", path: "/items")); return nil } catch let f as WireFailure { return f } catch { return nil }
        }()
        if case .network? = down {} else { Issue.record("a refused connection is a network failure: \(String(describing: down))") }
        // The connect bound is 3 s; the rest allows a busy machine (far below a request's own timeout).
        #expect(down?.isRetryable == true && Date().timeIntervalSince(calledAt) < 15, "an unreachable server fails within the connect timeout")
    }
}
