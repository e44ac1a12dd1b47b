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
/// the mount point: the store tells its observers (the filesystem) what the feed changed.
public actor RemoteFeed {
    let store: Store
    let status: SyncStatus
    let log: Logger
    /// Told how a first sync or a sweep goes (items, edges so far).
    let progress: @Sendable (String, Int, Int) -> Void
    let keyed: KeyedClient
    /// The client of the current connection (the one a 401 refused, if it comes to that).
    var client: WireClient
    let silence: Double
    /// Blob sizes asked for already, by hash.
    var blobSize: [String: Int64] = [:]

    public init(store: Store, client: KeyedClient, status: SyncStatus, log: Logger, silence: Double = 60,
                progress: @escaping @Sendable (String, Int, Int) -> Void = { _, _, _ in }) {
        self.store = store; self.keyed = client; self.client = client.client; self.status = status; self.log = log
        self.silence = silence; self.progress = progress
    }

    var machine: FeedMachine?
    var rng = SystemRandomNumberGenerator()
    static func now() -> Double { Date().timeIntervalSince1970 }

    /// Runs until the task is cancelled: does what the `FeedMachine` says.
    public func run() async {
        let position = (try? store.lastEventID()) ?? nil
        status.update { $0.firstSyncDone = store.firstSyncDone; $0.lastEventID = position }
        let m = FeedMachine(hasPosition: position != nil, firstSyncDone: store.firstSyncDone, silence: silence, now: Self.now())
        var actions = m.start()
        machine = m
        while !Task.isCancelled, !actions.isEmpty {
            let a = actions.removeFirst()
            switch a {
            case .connect:
                actions += await connection()
            case .retry(let at):
                status.update { $0.stream = .offline }
                actions += await waitToReconnect(until: at)
            case .waitForKey:
                status.update { $0.stream = .unauthorized }
                await keyed.waitForNewKey(refused: client)
                actions += handle(.keyChanged)
            case .forgetPosition:
                try? store.clearLastEventID()
                status.update { $0.lastEventID = nil }
            case .sweep, .disconnect:
                break  // only while a connection is open (`connection`)
            }
        }
    }

    /// Waits until `at`, or less: once the server answers the queue (a mutation sent, or the
    /// connection online) a second or more into the wait, unless the wait is for the store
    /// (`FeedMachine.Event.storeFailed`), the server is back and the stream
    /// reconnects then, so changes made elsewhere meanwhile are not left waiting out a long
    /// backoff — also when the queue's last answer came just before the stream failed.
    func waitToReconnect(until at: Double) async -> [FeedMachine.Action] {
        let started = Self.now(), sentBefore = status.snapshot.sent
        var answered: [FeedMachine.Action] = []
        let early = await wait(until: at) {
            let s = status.snapshot
            // (Not after a store failure: the machine keeps waiting, and so does this.)
            guard Self.now() - started >= 1, s.sent != sentBefore || s.connection == .online else { return false }
            answered = handle(.serverAnswered)
            return !answered.isEmpty
        }
        return early ? answered : handle(.tick, at: max(at, Self.now()))
    }

    func handle(_ e: FeedMachine.Event, at now: Double = RemoteFeed.now()) -> [FeedMachine.Action] {
        machine!.handle(e, at: now, using: &rng)
    }

    /// One connection, from open to end: returns what to do next. A ticker tells the machine the
    /// time every second, and drops the connection when the machine says it has been silent too long.
    func connection() async -> [FeedMachine.Action] {
        let resume = machine!.hasPosition
        let last = resume ? ((try? store.lastEventID()) ?? nil) : nil
        status.update { $0.stream = .connecting }
        client = keyed.client
        let events = client.eventBatches(lastEventID: last)
        let reader = Task { await self.read(events) }
        // The ticker's answer, when it drops the connection: what to do next.
        let ticker = Task { () -> [FeedMachine.Action] in
            while !Task.isCancelled {
                try? await Task.sleep(for: .seconds(1))
                let actions = self.handle(.tick)
                if actions.contains(.disconnect) {
                    self.status.record("disconnected", ["error": .string("the event stream was silent for \(Int(self.silence)) s")])
                    self.log.info("event stream silent; reconnecting", metadata: ["seconds": "\(self.silence)"])
                    reader.cancel()
                    return actions.filter { $0 != .disconnect }
                }
            }
            return []
        }
        let read = await withTaskCancellationHandler { await reader.value } onCancel: { reader.cancel(); ticker.cancel() }
        if let next = read { ticker.cancel(); return next }
        return await ticker.value
    }

    /// Reads and applies the stream; what to do next, or nil if cancelled (the ticker dropped it).
    func read(_ events: AsyncThrowingStream<[SSEItem], Error>) async -> [FeedMachine.Action]? {
        var opened = false
        do {
            for try await batch in events {
                if Task.isCancelled { break }
                _ = handle(.activity)
                if !opened {
                    opened = true
                    for a in handle(.opened) {
                        if case .sweep(let full, let allEdges) = a {
                            // The stream is open: everything before it is swept now, everything after
                            // comes as events. Both apply by version, so an overlap is harmless.
                            try await sweep(first: full, edgesInFull: allEdges)
                            _ = handle(.swept)
                        }
                    }
                    status.update { $0.stream = .live; $0.feedAnswers += 1 }
                }
                var run: [SSEEvent] = []
                for case .event(let e) in batch {
                    if e.event == "catchup_too_old" {
                        try await apply(run)
                        log.info("the server no longer has our place in its event log; sweeping", metadata: ["data": "\(e.data)"])
                        status.record("catchup_too_old", ["data": (try? JSONParser.parse(e.data)) ?? .string(e.data)])
                        return handle(.catchupTooOld)
                    }
                    run.append(e)
                }
                try await apply(run)
            }
        } catch let f as WireFailure {
            status.update { $0.stream = .offline; if case .unauthorized = f { $0.stream = .unauthorized } }
            status.record("disconnected", ["error": .string(f.description)])
            log.info("event stream lost", metadata: ["error": "\(f)"])
            if case .unauthorized = f { return handle(.failed(retryable: false, retryAfter: nil)) }
            return handle(.failed(retryable: true, retryAfter: f.retryAfter))
        } catch {
            // Applying failed (the store): try again later rather than skip the event.
            let actions = handle(.storeFailed)
            let wait = actions.compactMap { if case .retry(let at) = $0 { return at - Self.now() }; return nil }.first ?? 0
            log.error("applying remote changes failed; the stream reconnects", metadata: ["error": "\(error)", "in_seconds": "\(String(format: "%.1f", wait))"])
            status.update { $0.stream = .offline; $0.lastError = "applying remote changes: \(error)" }
            return actions
        }
        if Task.isCancelled { return nil }
        // The server closed the stream.
        status.record("disconnected", ["error": "the server closed the stream"])
        return handle(.failed(retryable: true, retryAfter: nil))
    }

    /// Applies a run of events in one transaction, with the id of the last.
    func apply(_ run: [SSEEvent]) async throws {
        guard !run.isEmpty else { return }
        var changes: [RemoteChange] = []
        for e in run {
            guard var change = RemoteWire.change(event: e.event, data: e.data) else { continue }
            // `metadata.changed` carries neither extensions nor a time (W-15), and its tags, tier and
            // state are as they were when it was made: the stream may bring it after the answer to
            // a later change of this mount's (a move, then a removal), and taken as it is it would
            // undo that change until the next event. The item is read as the server holds it now,
            // and that is applied as an item frame (by version and time, like any other).
            // `item.deleted` carries no time either: one that comes after this mount restored the
            // item (and was answered) would trash it again, so one that would change something is
            // checked the same way.
            switch change {
            case .metadata(let id, _, _, _, nil):
                switch try await current(id) {
                case .gone: continue  // the stream brings its removal
                case .item(let now): change = now
                case .unreadable: break
                }
            case .deleted(let id):
                guard let local = try store.summary(id: id), local.state != .trashed else { break }
                if case .item(let now) = try await current(id) { change = now }
            default: break
            }
            changes.append(change)
        }
        let lastID = run.last { $0.id != nil }?.id
        let c = try store.applyRemote(changes, lastEventID: lastID, blobSizes: try await blobSizes(changes))
        if lastID != nil { machine!.applied() }
        status.update { s in
            if let id = lastID { s.lastEventID = id }
            s.applied += c.applied
        }
        // Every event is logged (whether it changed anything: an echo, or an item with changes of
        // its own to send, changes nothing).
        for e in run {
            status.record("remote.event", ["name": .string(e.event), "id": e.id.map(JSONValue.string) ?? .null])
        }
        if c.applied > 0 {
            status.record("remote.applied", ["events": .int(Int64(run.count)), "applied": .int(Int64(c.applied)),
                                             "items": .array(c.items.sorted().prefix(50).map(JSONValue.string))])
        }
    }

    /// What the server holds of an item now (`GET /items/{id}`).
    enum Current {
        case item(RemoteChange)
        /// 404: the server has no such item.
        case gone
        /// Any other answer: the frame is taken as it came.
        case unreadable
    }

    func current(_ id: String) async throws -> Current {
        let resp = try await client.send(WireRequest(method: "GET", path: "/items/\(WireRequest.segment(id))"))
        if resp.status == 401 { throw WireFailure.of(resp) }
        if resp.status == 404 { return .gone }
        guard resp.status == 200, let now = RemoteWire.envelope(resp.json) else { return .unreadable }
        return .item(now)
    }

    /// The first sync, or the catch-up sweep after `catchup_too_old` (W-17): custom types, then
    /// items changed since the newest one seen (all of them the first time) with their metadata,
    /// then edges, page by page, each page in one transaction.
    func sweep(first: Bool, edgesInFull: Bool = false) async throws {
        let phase = first ? "first sync" : "sweep"
        status.update { $0.stream = .sweeping; $0.transfer = EngineState.Transfer(phase: phase) }
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
        var oldest: Double?, done = 0.0
        let startedAt = Date().timeIntervalSince1970
        let since = first ? nil : try store.newestRemoteUpdatedAt()
        let reseed = first && store.reseedRequested
        var cursor: String?
        repeat {
            var q = "/items?state=any&include=metadata&limit=200"
            if let since { q += "&updated_after=" + WireRequest.segment(since) }
            if let cursor { q += "&cursor=" + WireRequest.segment(cursor) }
            let page = try await client.call(WireRequest(method: "GET", path: q)).json
            let changes = (page["data"]?.arrayValue ?? []).compactMap { $0.objectValue.flatMap(RemoteWire.envelope) }
            let c = try store.applyRemote(changes, blobSizes: try await blobSizes(changes), reseed: reseed)
            itemCount += changes.count
            let stamps = changes.compactMap { c -> Double? in if case .item(let it, _, _) = c { return Timestamp.parse(it.updatedAt) }; return nil }
            if oldest == nil { oldest = stamps.first }
            if let o = oldest, let newest = stamps.last, startedAt > o { done = min(1, max(done, (newest - o) / (startedAt - o))) }
            status.update { [done] in $0.transfer = EngineState.Transfer(phase: phase, items: itemCount, edges: edgeCount, done: done); $0.applied += c.applied }
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
            try store.applyRemote(edges.map { .edge($0) })
            edgeCount += edges.count
            status.update { $0.transfer = EngineState.Transfer(phase: phase, items: itemCount, edges: edgeCount, done: 1) }
            progress(phase, itemCount, edgeCount)
            cursor = page["has_more"] == .bool(true) ? page["cursor"]?.stringValue : nil
        } while cursor != nil && !Task.isCancelled
        if edgesInFull && !Task.isCancelled {
            try store.removeEdgesGoneFromServer(keeping: serverEdges)
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
            if let s = blobSize[h] { out[h] = s; continue }
            if try store.hasBlob(h) { continue }
            let resp = try await client.send(WireRequest(method: "HEAD", path: "/blobs/\(WireRequest.segment(h))"))
            if resp.status == 200, let n = resp.headers["content-length"].flatMap(Int64.init) {
                out[h] = n; blobSize[h] = n
            }
        }
        return out
    }
}
