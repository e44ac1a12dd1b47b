import Foundation
import Logging
import MarfaModel
import MarfaStore

/// Brings the server's changes into the store (W-14..W-17): the first sync (types, items with
/// their metadata, edges, page by page), then the event stream, each event applied in one
/// transaction together with its id, so a restart resumes right after the last applied event.
/// A lost stream reconnects with backoff; 60 s of silence counts as lost; `catchup_too_old`
/// sweeps what changed since the newest item seen and reconnects live. Blobs are not fetched
/// here: their sizes are asked for (`HEAD`), their bytes on first read (FS-11). It never touches
/// the mount point: what it changed goes to `onChange`, which tells the kernel.
public actor RemoteFeed {
    let store: Store
    let status: SyncStatus
    let log: Logger
    let onChange: @Sendable (StoreChanges) -> Void
    /// Told how a first sync or a sweep goes (items, edges so far).
    let progress: @Sendable (String, Int, Int) -> Void
    var client: WireClient
    var credential: Credential
    let baseURL: String
    let loadCredential: @Sendable () throws -> Credential
    let silence: Double
    var backoff = Backoff()
    var attempt = 0
    var known: [String: Int64] = [:]

    public init(store: Store, baseURL: String, credential: Credential, status: SyncStatus, log: Logger, silence: Double = 60,
                loadCredential: @escaping @Sendable () throws -> Credential,
                progress: @escaping @Sendable (String, Int, Int) -> Void = { _, _, _ in },
                onChange: @escaping @Sendable (StoreChanges) -> Void) {
        self.store = store; self.baseURL = baseURL; self.credential = credential; self.status = status; self.log = log
        self.silence = silence; self.loadCredential = loadCredential; self.progress = progress; self.onChange = onChange
        client = WireClient(baseURL: baseURL, credential: credential)
    }

    /// After a 401: waits for a different key (re-read every 2 s), then reconnects with it.
    func waitForNewKey() async {
        status.update { $0.stream = "unauthorized" }
        while !Task.isCancelled {
            try? await Task.sleep(for: .seconds(2))
            guard let fresh = try? loadCredential(), fresh.token != credential.token else { continue }
            await client.shutdown()
            credential = fresh
            client = WireClient(baseURL: baseURL, credential: fresh)
            return
        }
    }

    /// Runs until the task is cancelled.
    public func run() async {
        status.update { $0.firstSyncDone = store.firstSyncDone; $0.lastEventID = try? store.lastEventID() }
        while !Task.isCancelled {
            do {
                try await follow()
                attempt = 0
            } catch let f as WireFailure {
                if case .unauthorized = f {
                    await waitForNewKey()
                    continue
                }
                attempt += 1
                var rng = SystemRandomNumberGenerator()
                let wait = backoff.delay(attempt: attempt, retryAfter: f.retryAfter, using: &rng)
                status.update { $0.stream = "offline" }
                status.record("disconnected", ["error": .string(f.description), "retry_in_seconds": .double((wait * 1000).rounded() / 1000)])
                log.info("event stream lost; reconnecting", metadata: ["error": "\(f)", "in_seconds": "\(wait)"])
                try? await Task.sleep(for: .milliseconds(Int64(wait * 1000)))
            } catch is CancellationError {
                break
            } catch {
                attempt += 1
                log.error("applying remote changes failed", metadata: ["error": "\(error)"])
                status.update { $0.stream = "offline"; $0.lastError = "applying remote changes: \(error)" }
                try? await Task.sleep(for: .seconds(min(30, Double(attempt))))
            }
        }
        await client.shutdown()
    }

    /// One connection: from the last applied event, or live after a sweep when there is none.
    func follow() async throws {
        let last = try store.lastEventID()
        var needSweep = last == nil
        status.update { $0.stream = "connecting" }
        for try await item in client.events(lastEventID: last, silence: silence) {
            if Task.isCancelled { return }
            if needSweep {
                // The stream is open (its first frame came): everything before it is swept now, and
                // everything after it comes as events. Both are applied by version, so an overlap is harmless.
                needSweep = false
                try await sweep(first: !store.firstSyncDone)
            }
            status.update { $0.stream = "live" }
            guard case .event(let e) = item else { continue }
            if attempt > 0 { attempt = 0 }
            if e.event == "catchup_too_old" {
                log.info("the server no longer has our place in its event log; sweeping", metadata: ["data": "\(e.data)"])
                status.record("catchup_too_old", ["data": (try? JSONParser.parse(e.data)) ?? .string(e.data)])
                try store.clearLastEventID()
                try await sweep(first: false, edgesInFull: true)
                return
            }
            try await apply(e)
        }
    }

    /// Applies one event with its id, in one transaction.
    func apply(_ e: SSEEvent) async throws {
        var change = RemoteWire.change(event: e.event, data: e.data)
        // `metadata.changed` does not carry extensions (W-15): they are read from the item.
        if case let .metadata(id, tags, tier, state, nil)? = change {
            let resp = try await client.send(WireRequest(method: "GET", path: "/items/\(WireRequest.segment(id))"))
            if resp.status == 401 { throw WireFailure.of(resp) }
            let ext = resp.status == 200 ? resp.json["metadata"]?.objectValue?["extensions"]?.objectValue : nil
            change = .metadata(itemID: id, tags: tags, tier: tier, state: state, extensions: ext)
        }
        let sizes = try await blobSizes(change.map { [$0] } ?? [])
        let c = try store.applyRemote(change.map { [$0] } ?? [], lastEventID: e.id, blobSizes: sizes)
        status.update { s in
            if let id = e.id { s.lastEventID = id }
            s.applied += c.applied
        }
        // Every event is logged, applied or skipped (an echo, or an item with changes of its own to send).
        status.record("remote.event", ["event": .string(e.event), "id": e.id.map(JSONValue.string) ?? .null, "applied": .int(Int64(c.applied)),
                                       "items": .array(c.items.sorted().map(JSONValue.string))])
        onChange(c)
    }

    /// The first sync, or the catch-up sweep after `catchup_too_old` (W-17): custom types, then
    /// items changed since the newest one seen (all of them the first time) with their metadata,
    /// then edges, page by page, each page in one transaction.
    func sweep(first: Bool, edgesInFull: Bool = false) async throws {
        let phase = first ? "first sync" : "sweep"
        status.update { $0.stream = "sweeping"; $0.transfer = (phase, 0, 0) }
        let started = Date()
        // Types.
        let typesAnswer = try await client.call(WireRequest(method: "GET", path: "/types"))
        let list = typesAnswer.value?.arrayValue ?? typesAnswer.json["data"]?.arrayValue ?? typesAnswer.json["types"]?.arrayValue ?? []
        let types = list.compactMap { v -> TypeSchema? in
            try? JSONCoding.decode(TypeSchema.self, from: JSONCoding.encode(v))
        }
        try store.registerTypes(types)
        // Items.
        var itemCount = 0, edgeCount = 0
        let since = first ? nil : try store.newestRemoteUpdatedAt()
        var cursor: String?
        repeat {
            var q = "/items?state=any&include=metadata&limit=200"
            if let since { q += "&updated_after=" + WireRequest.segment(since) }
            if let cursor { q += "&cursor=" + WireRequest.segment(cursor) }
            let page = try await client.call(WireRequest(method: "GET", path: q)).json
            let changes = (page["data"]?.arrayValue ?? []).compactMap { $0.objectValue.flatMap(RemoteWire.envelope) }
            let c = try store.applyRemote(changes, blobSizes: try await blobSizes(changes))
            onChange(c)
            itemCount += changes.count
            status.update { $0.transfer = (phase, itemCount, edgeCount); $0.applied += c.applied }
            progress(phase, itemCount, edgeCount)
            cursor = page["has_more"] == .bool(true) ? page["cursor"]?.stringValue : nil
        } while cursor != nil && !Task.isCancelled
        // Edges: all of them after a lost place in the log, so edges deleted meanwhile go too.
        var serverEdges = Set<String>()
        cursor = nil
        repeat {
            var q = "/edges?limit=200"
            if !edgesInFull, let since { q += "&updated_after=" + WireRequest.segment(since) }
            if let cursor { q += "&cursor=" + WireRequest.segment(cursor) }
            let page = try await client.call(WireRequest(method: "GET", path: q)).json
            let edges = (page["data"]?.arrayValue ?? []).compactMap { $0.objectValue.flatMap(RemoteWire.edge) }
            serverEdges.formUnion(edges.map(\.id))
            let c = try store.applyRemote(edges.map { .edge($0) })
            onChange(c)
            edgeCount += edges.count
            status.update { $0.transfer = (phase, itemCount, edgeCount) }
            progress(phase, itemCount, edgeCount)
            cursor = page["has_more"] == .bool(true) ? page["cursor"]?.stringValue : nil
        } while cursor != nil && !Task.isCancelled
        if edgesInFull && !Task.isCancelled {
            onChange(try store.removeEdgesGoneFromServer(keeping: serverEdges))
        }
        if first { try store.markFirstSyncDone() }
        let seconds = Date().timeIntervalSince(started)
        status.update { $0.transfer = nil; $0.firstSyncDone = true }
        status.record(first ? "first_sync.done" : "sweep.done", ["items": .int(Int64(itemCount)), "edges": .int(Int64(edgeCount)),
                                                                 "seconds": .double((seconds * 1000).rounded() / 1000)])
        log.info("\(phase) done", metadata: ["items": "\(itemCount)", "edges": "\(edgeCount)", "seconds": "\(String(format: "%.2f", seconds))"])
    }

    /// Sizes of the blobs `changes` name that are not cached here (`HEAD /blobs/{hash}`), so a
    /// blob item's file has its size before its bytes are fetched.
    func blobSizes(_ changes: [RemoteChange]) async throws -> [String: Int64] {
        var out: [String: Int64] = [:]
        for c in changes {
            guard case .item(let it, _, _) = c, TypeSchema.isBlobType(it.type), let h = it.properties["blob_ref"]?.stringValue,
                  BlobHash.isValid(h) else { continue }
            if let s = known[h] { out[h] = s; continue }
            if try store.hasBlob(h) { continue }
            let resp = try await client.send(WireRequest(method: "HEAD", path: "/blobs/\(WireRequest.segment(h))"))
            if resp.status == 200, let n = resp.headers["content-length"].flatMap(Int64.init) {
                out[h] = n; known[h] = n
            }
        }
        return out
    }
}
