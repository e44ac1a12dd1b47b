import Foundation
import MarfaModel
import Synchronization

/// Wakes event streams: rung after every commit that appended events, ticked by each stream's
/// heartbeat, closed on shutdown so open streams end and the server can stop. It also keeps the
/// newest events in memory (published on commit, in commit order, which is id order), so a
/// hundred live streams do not each read the log for every event.
public final class EventBell: Sendable {
    public enum Signal: Sendable { case event, tick }

    private struct State {
        var subscribers: [Int: (tenant: String, continuation: AsyncStream<Signal>.Continuation)] = [:]
        var next = 0
        var closed = false
        /// Every event with an id above `floor` is in `recent`, oldest first.
        var recent: [ServerStore.LoggedEvent] = []
        var head = 0
        var floor: Int64 = .max
    }
    private let state = Mutex(State())
    static let keep = 4096
    /// On a shared database, each tenant's newest events, read once for all its streams here.
    let shared = SharedEventLog()

    /// Events up to `id` are in the log only (the log's newest id when the server starts).
    func start(after id: Int64) {
        state.withLock { $0.floor = id; $0.recent = []; $0.head = 0 }
    }

    /// The events one transaction committed (one process, one writer: in id order), put in memory
    /// together before any stream is woken: a stream never sends part of a transaction's events
    /// (an item's creation without its tags), so a client applies them as one change.
    func publish(_ events: [ServerStore.LoggedEvent]) {
        state.withLock { s in
            for e in events {
                s.recent.append(e)
                if s.recent.count - s.head > Self.keep {
                    s.floor = s.recent[s.head].id
                    s.head += 1
                    if s.head > Self.keep { s.recent.removeFirst(s.head); s.head = 0 }
                }
            }
        }
        var rung = Set<String>()
        for e in events where rung.insert(e.tenantID).inserted { ring(tenant: e.tenantID) }
    }

    /// The tenant's events after `id` from memory, or nil if some may be older than what memory holds.
    func recent(after id: Int64, tenant: String, limit: Int) -> [ServerStore.LoggedEvent]? {
        state.withLock { s in
            guard id >= s.floor else { return nil }
            var out: [ServerStore.LoggedEvent] = []
            // Binary search for the first id above `id`.
            var lo = s.head, hi = s.recent.count
            while lo < hi { let mid = (lo + hi) / 2; if s.recent[mid].id <= id { lo = mid + 1 } else { hi = mid } }
            for e in s.recent[lo...] where e.tenantID == tenant {
                out.append(e)
                if out.count == limit { break }
            }
            return out
        }
    }

    /// A stream of signals for one subscriber of `tenant`; it ends when the bell closes.
    func subscribe(tenant: String) -> (Int, AsyncStream<Signal>) {
        let (stream, continuation) = AsyncStream<Signal>.makeStream(bufferingPolicy: .bufferingNewest(2))
        let id = state.withLock { s -> Int? in
            if s.closed { return nil }
            s.next += 1
            s.subscribers[s.next] = (tenant, continuation)
            return s.next
        }
        guard let id else { continuation.finish(); return (-1, stream) }
        return (id, stream)
    }

    func unsubscribe(_ id: Int) {
        state.withLock { $0.subscribers.removeValue(forKey: id) }?.continuation.finish()
    }

    /// Wakes the streams of `tenant`: its log has grown up to `id` (written by any process).
    func ring(tenant: String, upTo id: Int64) {
        shared.announce(tenant: tenant, upTo: id)
        ring(tenant: tenant)
    }

    /// Wakes the streams of `tenant`: its log has grown.
    func ring(tenant: String) {
        for c in state.withLock({ $0.subscribers.values.filter { $0.tenant == tenant }.map(\.continuation) }) { c.yield(.event) }
    }

    /// Wakes every stream (the log may have grown while wake-ups could not arrive).
    func ringAll() {
        shared.refreshAll()
        for c in state.withLock({ $0.subscribers.values.map(\.continuation) }) { c.yield(.event) }
    }

    func tick(_ id: Int) {
        _ = state.withLock { $0.subscribers[id] }?.continuation.yield(.tick)
    }

    /// Ends every stream, now and for good (graceful shutdown).
    func close() {
        let all = state.withLock { s -> [AsyncStream<Signal>.Continuation] in
            s.closed = true
            defer { s.subscribers.removeAll() }
            return s.subscribers.values.map(\.continuation)
        }
        for c in all { c.finish() }
    }
}

/// What one `GET /events` asks for (W-16).
public struct EventFilter: Sendable {
    /// Event names (`?event=a,b`); empty: all.
    public var events: Set<String> = []
    /// `?type=`: item events of this type and its subtypes (`core.*` also works).
    public var type: String?
    /// `?edge_type=a,b`: edge events of these types.
    public var edgeTypes: Set<String> = []
    public init() {}
}

/// Serves one subscriber: replays the log after its start, then follows it live, with `: ping`
/// while idle. Each event is sent at most once, in id order; events the key may not read, or that
/// the filter leaves out, are skipped.
struct EventStreamer: Sendable {
    let store: ServerStore
    let principal: Principal
    let filter: EventFilter
    let heartbeat: Duration

    static func frame(id: Int64?, event: String, data: String) -> String {
        (id.map { "id: \($0)\n" } ?? "") + "event: \(event)\ndata: \(data)\n\n"
    }

    func passes(_ e: ServerStore.LoggedEvent, types: ServerStore.TypeMatch?) -> Bool {
        let p = principal
        if let t = e.itemType, !p.may("read", type: t) { return false }
        if let s = e.sourceType, !p.may("read", type: s) { return false }
        if let t = e.targetType, !p.may("read", type: t) { return false }
        if !filter.events.isEmpty, !filter.events.contains(e.name) { return false }
        if filter.type != nil || !filter.edgeTypes.isEmpty {
            if let et = e.edgeType { return filter.edgeTypes.contains(et) }
            guard let types, let t = e.itemType else { return false }
            return types.matches(t)
        }
        return true
    }

    /// Writes frames through `send` until the client goes away or the server shuts down.
    func run(start: Int64, send: (String) async throws -> Void) async throws {
        let bell = store.bell
        let (sid, signals) = bell.subscribe(tenant: principal.tenantID)
        defer { bell.unsubscribe(sid) }
        let ticker = Task {
            while !Task.isCancelled {
                try? await Task.sleep(for: heartbeat)
                bell.tick(sid)
            }
        }
        defer { ticker.cancel() }
        var last = start
        var sentSinceTick = false
        var wake = signals.makeAsyncIterator()
        try await send(": ping\n\n")
        // Made once, and again only when an event names a type registered since.
        var types = try filter.type.map { try store.typeMatch(principal, $0) }
        while true {
            var batch: [ServerStore.LoggedEvent] = []
            do {
                batch = try store.events(principal, after: last)
                if let pattern = filter.type, let t = types, batch.contains(where: { $0.itemType.map(t.isStale) ?? false }) {
                    types = try store.typeMatch(principal, pattern)
                }
            } catch where ServerFailure.answer(error) != nil {
                // The database is away for a moment (restarting, busy): the stream stays open,
                // pings, and reads from `last` at its next wake-up (the listener rings every
                // stream once it is connected again), so the subscriber misses nothing.
                batch = []
            }
            if !batch.isEmpty {
                var out = ""
                for e in batch where passes(e, types: types) { out += Self.frame(id: e.id, event: e.name, data: e.data) }
                last = batch.last!.id
                if !out.isEmpty { try await send(out); sentSinceTick = true }
                if batch.count == 500 { continue }
            }
            switch await wake.next() {
            case .event?: continue
            case .tick?:
                if !sentSinceTick { try await send(": ping\n\n") }
                sentSinceTick = false
            case nil: return
            }
        }
    }
}
