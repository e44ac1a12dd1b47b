import Foundation
import MarfaModel

/// The event log (W-14..W-17): every change appends to it in the change's own transaction;
/// `EventStream` serves it to subscribers; `EventLogKeeper` prunes it past its retention.
extension ServerStore {
    public struct LoggedEvent: Sendable {
        public var id: Int64
        var tenantID: String
        public var name: String
        public var data: String
        var createdAt = ""
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
        return try read { db in
            let issued = try backend.lastEventID(db, tenant: p.tenantID)
            guard let lastEventID else { return .after(issued) }
            let horizon = try db.value(Int64.self, "SELECT pruned_through FROM event_horizon WHERE tenant_id = ?", [p.tenantID]) ?? 0
            let minRetained = try db.value(Int64.self, "SELECT min(id) FROM events WHERE tenant_id = ?", [p.tenantID]) ?? (max(horizon, issued) + 1)
            guard let n = Int64(lastEventID), n >= 0, n <= issued, n >= horizon else {
                return .tooOld(minRetained: minRetained, requested: lastEventID)
            }
            return .after(n)
        }
    }

    /// Up to `limit` events of the tenant after `id`, oldest first: from memory when it holds
    /// them (this process's commits on SQLite; on PostgreSQL the tenant's newest events, read
    /// once for all its streams here), else from the log.
    public func events(_ p: Principal, after id: Int64, limit: Int = 500) throws -> [LoggedEvent] {
        if let recent = bell.recent(after: id, tenant: p.tenantID, limit: limit) { return recent }
        if backend.isShared, let held = try bell.shared.events(tenant: p.tenantID, after: id, limit: limit, read: { try readLog(p, after: $0, limit: $1) }) {
            return held
        }
        return try readLog(p, after: id, limit: limit)
    }

    func readLog(_ p: Principal, after id: Int64, limit: Int) throws -> [LoggedEvent] {
        try read { db in
            try db.rows("""
                SELECT id, name, data, item_type, edge_type, source_type, target_type FROM events
                WHERE tenant_id = ? AND id > ? ORDER BY id LIMIT ?
                """, [p.tenantID, id, limit]).map {
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
        return try read { db in
            TypeMatch(matching: Set(try typeAndSubtypes(db, tenantID: p.tenantID, pattern)),
                      known: Set(try types(db, tenantID: p.tenantID).map(\.id)))
        }
    }

    /// Drops events older than `retention`, remembering per tenant the newest id dropped.
    public func pruneEvents(retention: Duration) throws {
        let seconds = Double(retention.components.seconds) + Double(retention.components.attoseconds) / 1e18
        let cutoff = Timestamp.format(Date(timeIntervalSinceNow: -seconds))
        // Most calls (one per new stream) find nothing to drop: a read, not a write transaction.
        let due = try read { db in try db.value(Bool.self, "SELECT EXISTS(SELECT 1 FROM events WHERE created_at < ?)", [cutoff]) ?? false }
        guard due else { return }
        try write { db in
            // One process prunes at a time; the others find it done.
            guard try backend.tryExclusive(db, "prune events") else { return }
            try db.execute("""
                INSERT INTO event_horizon(tenant_id, pruned_through)
                SELECT tenant_id, max(id) FROM events WHERE created_at < ? GROUP BY tenant_id
                ON CONFLICT(tenant_id) DO UPDATE SET pruned_through = \(db.dialect.greatest)(event_horizon.pruned_through, excluded.pruned_through)
                """, [cutoff])
            try db.execute("DELETE FROM events WHERE created_at < ?", [cutoff])
        }
    }

    /// Appends to the event log in the caller's transaction (the backend numbers the events at
    /// commit); subscribers hear of it once committed.
    /// The types of the item (or of an edge's two ends) are kept so a stream can filter and leave
    /// out what a key may not read.
    func appendEvent(_ db: StoreTx, _ p: Principal, name: String, itemType: String? = nil, edgeType: String? = nil,
                     sourceType: String? = nil, targetType: String? = nil, data: [String: JSONValue]) throws {
        db.events.append(LoggedEvent(id: 0, tenantID: p.tenantID, name: name, data: JSONCoding.encode(data), createdAt: Self.now(), itemType: itemType,
                                     edgeType: edgeType, sourceType: sourceType, targetType: targetType))
    }
}
