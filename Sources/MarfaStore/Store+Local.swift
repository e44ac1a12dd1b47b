import Foundation
import GRDB
import MarfaModel

/// A store no server has seen (the embedded default, FS-28): its queue keeps one small row per
/// change, without the item's payload, since no server will read it. When the store first meets a
/// server (`bind`), the queue is written anew from the items as they are then: what a first sync
/// needs (every item's create, its blob's upload, its attributes, every edge).
extension Store {
    var isLocalOnly: Bool { localOnly.withLock { $0 } }

    /// The payload a queued mutation keeps: none for item changes of a local-only store (edge
    /// mutations keep theirs: a removed edge finds its queued create by id).
    func queuedPayload(_ kind: MutationKind, _ payload: [String: JSONValue]) -> String {
        if isLocalOnly, kind != .createEdge, kind != .deleteEdge { return "{}" }
        return JSONCoding.encode(payload)
    }

    /// Whether the store has ever been bound to a server (or has items a server sent). `meta`
    /// says so (`server`, or `local_only` once a store was found to have none); only a store from
    /// before that record is looked through (a scan of its items and queue), once.
    func isBound(_ db: Database) throws -> Bool {
        if let bound = try Self.recordedBinding(db) { return bound }
        if try db.exists("SELECT 1 FROM items WHERE version > 0 LIMIT 1") { return true }
        return try db.exists("SELECT 1 FROM mutations WHERE state != 'pending' LIMIT 1")
    }

    /// What `meta` says: bound to a server (true), local-only (false), or nothing yet (nil).
    static func recordedBinding(_ db: Database) throws -> Bool? {
        if try db.exists("SELECT 1 FROM meta WHERE key = 'server'") { return true }
        if try db.exists("SELECT 1 FROM meta WHERE key = 'local_only'") { return false }
        return nil
    }

    /// A mount or import with no server: a store no server has seen keeps its queue without
    /// payloads from now on, and drops the payloads it kept (once, when it is first found to be
    /// local-only). Returns whether the store is local-only.
    @discardableResult
    public func useLocalOnly() throws -> Bool {
        var stripped = false
        let local = try write { db -> Bool in
            guard try !isBound(db) else { return false }
            if try !db.exists("SELECT 1 FROM meta WHERE key = 'local_only'") {
                try db.run("UPDATE mutations SET payload = '{}' WHERE payload != '{}' AND kind NOT IN ('create_edge', 'delete_edge')")
                try db.run("INSERT INTO meta(key, value) VALUES ('local_only', '1')")
                stripped = true
            }
            return true
        }
        localOnly.withLock { $0 = local }
        if stripped { try shrink() }
        return local
    }

    /// A mount with a server: the store is bound to it. A store that was local-only has its queue
    /// written anew from its items, in the order they were made. Returns how many mutations that queued.
    @discardableResult
    public func bind(server: String) throws -> Int {
        let wasLocal = try pool.read { db in try !isBound(db) }
        localOnly.withLock { $0 = false }
        // Bound to this server already: nothing is written (a mount on a full disk starts).
        if try boundServer()?.server == server { return 0 }
        return try write { db -> Int in
            try db.run("INSERT OR REPLACE INTO meta(key, value) VALUES ('server', ?)", [server])
            try db.run("DELETE FROM meta WHERE key = 'local_only'")
            guard wasLocal else { return 0 }
            // Each item's form goes with its create below: nothing is left to send of it.
            try Self.setMeta(db, Self.fileFormSentKey, "1")
            try db.run("DELETE FROM mutations")
            let rows = try Int64.fetchAll(db, sql: "SELECT rowid FROM items WHERE version = 0 AND state != 'trashed' AND sync != 'invalid' ORDER BY rowid")
            for r in rows {
                guard let cur = try Self.fetchItem(db, rowid: r) else { continue }
                if TypeSchema.isBlobType(cur.item.type), let h = cur.item.properties["blob_ref"]?.stringValue {
                    try enqueue(db, kind: .uploadBlob, itemID: cur.item.id, payload: [
                        "hash": .string(h), "size": .int(cur.size), "mime_type": cur.item.properties["mime_type"] ?? .null,
                    ], coalesce: false)
                }
                try enqueueCreate(db, cur.item, tags: try Self.tags(db, cur.item.id), row: cur)
                let ext = Self.localExtensions(cur)
                if !ext.isEmpty {
                    // With the file's form (`enqueueCreate`), in one update.
                    try enqueue(db, kind: .update, itemID: cur.item.id, payload: ["extensions": .object(ext), "base_version": .int(0)], coalesce: true)
                }
            }
            for e in try Row.fetchAll(db, sql: "SELECT * FROM edges ORDER BY rowid").map(EdgeRecord.init(row:)) {
                try enqueue(db, kind: .createEdge, itemID: e.edge.sourceID, payload: [
                    "id": .string(e.edge.id), "source_id": .string(e.edge.sourceID), "target_id": .string(e.edge.targetID),
                    "edge_type": .string(e.edge.edgeType),
                ], coalesce: false)
            }
            return try Int.fetchOne(db, sql: "SELECT count(*) FROM mutations") ?? 0
        }
    }
}
