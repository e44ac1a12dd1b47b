import Foundation
import GRDB
import MarfaModel
import Synchronization

/// Wakes event streams: rung after every commit that appended events, ticked by each stream's
/// heartbeat, closed on shutdown so open streams end and the server can stop. It also keeps the
/// newest events in memory (published on commit, in commit order, which is id order), so a
/// hundred live streams do not each read the log for every event.
public final class EventBell: Sendable {
    public enum Signal: Sendable { case event, tick }

    private struct State {
        var subscribers: [Int: AsyncStream<Signal>.Continuation] = [:]
        var next = 0
        var closed = false
        /// Every event with an id above `floor` is in `recent`, oldest first.
        var recent: [ServerStore.LoggedEvent] = []
        var head = 0
        var floor: Int64 = .max
    }
    private let state = Mutex(State())
    static let keep = 4096

    /// Events up to `id` are in the log only (the log's newest id when the server starts).
    func start(after id: Int64) {
        state.withLock { $0.floor = id; $0.recent = []; $0.head = 0 }
    }

    /// A committed event; wakes every stream.
    func publish(_ e: ServerStore.LoggedEvent) {
        state.withLock { s in
            s.recent.append(e)
            if s.recent.count - s.head > Self.keep {
                s.floor = s.recent[s.head].id
                s.head += 1
                if s.head > Self.keep { s.recent.removeFirst(s.head); s.head = 0 }
            }
        }
        ring()
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

    /// A stream of signals for one subscriber; it ends when the bell closes.
    func subscribe() -> (Int, AsyncStream<Signal>) {
        let (stream, continuation) = AsyncStream<Signal>.makeStream(bufferingPolicy: .bufferingNewest(2))
        let id = state.withLock { s -> Int? in
            if s.closed { return nil }
            s.next += 1
            s.subscribers[s.next] = continuation
            return s.next
        }
        guard let id else { continuation.finish(); return (-1, stream) }
        return (id, stream)
    }

    func unsubscribe(_ id: Int) {
        state.withLock { $0.subscribers.removeValue(forKey: id) }?.finish()
    }

    func ring() {
        for c in state.withLock({ Array($0.subscribers.values) }) { c.yield(.event) }
    }

    func tick(_ id: Int) {
        _ = state.withLock { $0.subscribers[id] }?.yield(.tick)
    }

    /// Ends every stream, now and for good (graceful shutdown).
    func close() {
        let all = state.withLock { s -> [AsyncStream<Signal>.Continuation] in
            s.closed = true
            defer { s.subscribers.removeAll() }
            return Array(s.subscribers.values)
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

/// The event log as the stream reads it (W-14..W-17).
extension ServerStore {
    public struct LoggedEvent: Sendable {
        public var id: Int64
        var tenantID: String
        public var name: String
        public var data: String
        var itemType: String?
        var edgeType: String?
        var sourceType: String?
        var targetType: String?
    }

    /// Where a stream starts: after `lastEventID`, or (without one) after the newest event.
    /// `.tooOld` when events after that id have been pruned, or when the id is not one this log
    /// issued (W-17: the client must sweep).
    public enum StreamStart: Sendable { case after(Int64), tooOld(minRetained: Int64, requested: String) }

    public func streamStart(_ p: Principal, lastEventID: String?, retention: Duration) throws -> StreamStart {
        try pruneEvents(retention: retention)
        return try pool.read { db in
            let issued = try Int64.fetchOne(db.cachedStatement(sql: "SELECT seq FROM sqlite_sequence WHERE name = 'events'")) ?? 0
            guard let lastEventID else { return .after(issued) }
            let horizon = try Int64.fetchOne(db.cachedStatement(sql: "SELECT pruned_through FROM event_horizon WHERE tenant_id = ?"), arguments: [p.tenantID]) ?? 0
            let minRetained = try Int64.fetchOne(db.cachedStatement(sql: "SELECT min(id) FROM events WHERE tenant_id = ?"), arguments: [p.tenantID]) ?? (max(horizon, issued) + 1)
            guard let n = Int64(lastEventID), n >= 0, n <= issued, n >= horizon else {
                return .tooOld(minRetained: minRetained, requested: lastEventID)
            }
            return .after(n)
        }
    }

    /// Up to `limit` events of the tenant after `id`, oldest first: from memory when it holds
    /// them, else from the log.
    public func events(_ p: Principal, after id: Int64, limit: Int = 500) throws -> [LoggedEvent] {
        if let recent = bell.recent(after: id, tenant: p.tenantID, limit: limit) { return recent }
        return try pool.read { db in
            try Row.fetchAll(db.cachedStatement(sql: """
                SELECT id, name, data, item_type, edge_type, source_type, target_type FROM events
                WHERE tenant_id = ? AND id > ? ORDER BY id LIMIT ?
                """), arguments: [p.tenantID, id, limit]).map {
                LoggedEvent(id: $0["id"], tenantID: p.tenantID, name: $0["name"], data: $0["data"], itemType: $0["item_type"], edgeType: $0["edge_type"],
                            sourceType: $0["source_type"], targetType: $0["target_type"])
            }
        }
    }

    /// What a `?type=` filter matches: the type and its subtypes, or a `prefix.*` pattern.
    public struct TypeMatch: Sendable {
        var matching: Set<String> = []
        /// Every type the tenant had when this was made: an event of another type means a subtype
        /// registered since, and the match must be made again.
        var known: Set<String> = []
        var prefix: String?
        func matches(_ type: String) -> Bool { prefix.map { type.hasPrefix($0) } ?? matching.contains(type) }
        func isStale(for type: String) -> Bool { prefix == nil && !known.contains(type) }
    }

    public func typeMatch(_ p: Principal, _ pattern: String) throws -> TypeMatch {
        if pattern.hasSuffix(".*") { return TypeMatch(prefix: String(pattern.dropLast(1))) }
        return try pool.read { db in
            TypeMatch(matching: Set(try typeAndSubtypes(db, tenantID: p.tenantID, pattern)),
                      known: Set(try types(db, tenantID: p.tenantID).map(\.id)))
        }
    }

    /// Drops events older than `retention`, remembering per tenant the newest id dropped.
    public func pruneEvents(retention: Duration) throws {
        let seconds = Double(retention.components.seconds) + Double(retention.components.attoseconds) / 1e18
        let cutoff = Timestamp.format(Date(timeIntervalSinceNow: -seconds))
        // Most calls (one per new stream) find nothing to drop: a read, not a write transaction.
        let due = try pool.read { db in try Bool.fetchOne(db.cachedStatement(sql: "SELECT EXISTS(SELECT 1 FROM events WHERE created_at < ?)"), arguments: [cutoff]) ?? false }
        guard due else { return }
        try pool.write { db in
            try db.cachedStatement(sql: """
                INSERT INTO event_horizon(tenant_id, pruned_through)
                SELECT tenant_id, max(id) FROM events WHERE created_at < ? GROUP BY tenant_id
                ON CONFLICT(tenant_id) DO UPDATE SET pruned_through = max(pruned_through, excluded.pruned_through)
                """).execute(arguments: [cutoff])
            try db.cachedStatement(sql: "DELETE FROM events WHERE created_at < ?").execute(arguments: [cutoff])
        }
    }
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
        let (sid, signals) = bell.subscribe()
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
            let batch = try store.events(principal, after: last)
            if !batch.isEmpty {
                if let pattern = filter.type, let t = types, batch.contains(where: { $0.itemType.map(t.isStale) ?? false }) {
                    types = try store.typeMatch(principal, pattern)
                }
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
