import Foundation
import GRDB
import MarfaLayout
import MarfaModel

/// Conflicts (W-7, FS-20, FS-21) as the store keeps them: held for the user, or settled in one
/// transaction with the resolved properties and, where a field could not be merged, a conflicted
/// copy. What is merged and what is copied is decided by `ConflictResolver` (MarfaSync/Conflicts.swift).

/// How a conflict (W-7) was settled (FS-20): the properties the item now has, and whether the
/// local text is kept in a conflicted copy.
public struct ConflictOutcome: Sendable {
    public var resolved: [String: JSONValue]
    /// The local properties, kept whole in a sibling item tagged `conflicted-copy`.
    public var copy: [String: JSONValue]?
    public init(resolved: [String: JSONValue], copy: [String: JSONValue]?) { self.resolved = resolved; self.copy = copy }
}

extension Store {
    /// A 409 (W-7) left for the user (`--conflict manual`): the mutation stays, as `conflict`, with
    /// the server's three-way context, and the item shows `user.marfa.sync=conflicted`; nothing
    /// local is dropped. The item's next save is sent over the server's `currentVersion`.
    public func markConflict(seq: Int64, itemID: String, error: String, context: String, currentVersion: Int64? = nil) throws {
        try pool.write { db in
            try db.run("UPDATE mutations SET state = 'conflict', attempts = attempts + 1, last_error = ? WHERE seq = ?", [error + "\n" + context, seq])
            try db.run("UPDATE items SET sync = 'conflicted', sync_error = ? WHERE id = ?", [error, itemID])
            if let v = currentVersion { try db.run("UPDATE items SET version = max(version, ?) WHERE id = ?", [v, itemID]) }
        }
    }

    /// Settles a 409 (FS-20) in one transaction: `decide` gets the item's local properties (with
    /// every later save) and says what the item becomes; the item's queued updates are replaced by
    /// one update over the server's `currentVersion` (a fresh idempotency key: the old one is the
    /// server's record of the refused request); a conflicted copy, if any, is made as a new item of
    /// the same type named `<stem> (conflicted copy <device> <UTC time>)`, tagged `conflicted-copy`,
    /// with a `derived-from` edge to the original, all queued for the server.
    public func resolveConflict(seq: Int64, itemID: String, currentVersion: Int64, device: String, now: Date = Date(),
                                decide: ([String: JSONValue]) -> ConflictOutcome) throws -> StoreChanges {
        try published { try settledWrite { db in
            var out = StoreChanges()
            guard let row = try db.row("SELECT rowid FROM items WHERE id = ?", [itemID]), let cur = try Self.fetchItem(db, rowid: row[0]) else {
                try db.run("DELETE FROM mutations WHERE seq = ?", [seq])
                return out
            }
            let t = type(cur.item.type)
            let outcome = decide(cur.item.properties)
            changesCome(from: .merge)
            try db.run("DELETE FROM mutations WHERE item_id = ? AND kind = 'update' AND (seq = ? OR state = 'pending')", [itemID, seq])
            var item = cur.item
            item.properties = outcome.resolved
            item.version = Int(currentVersion)
            if outcome.resolved != cur.item.properties {
                var fileName = cur.fileName
                if let f = fileName, Self.titleFromFileName(f, type: t) != outcome.resolved[t.titleField]?.stringValue { fileName = nil }
                let (stem, ext) = Names.stemAndExt(id: itemID, type: t, properties: outcome.resolved, fileName: fileName)
                let size = TypeSchema.isBlobType(t.id) ? cur.size : Int64(render(type: t, properties: outcome.resolved).utf8.count)
                try db.run("UPDATE items SET properties = ?, raw = NULL, raw_head = NULL, file_name = ?, stem = ?, ext = ?, size = ?, mtime_ns = ? WHERE rowid = ?",
                           [JSONCoding.encode(outcome.resolved), fileName, stem, ext, size, Self.ns(now), cur.rowid])
                out.content.insert(itemID)
            }
            try db.run("UPDATE items SET version = max(version, ?), sync = 'pending', sync_error = NULL WHERE rowid = ?", [currentVersion, cur.rowid])
            // Over the server's version, with the file's time as the merge left it.
            try enqueue(db, kind: .update, itemID: itemID, payload: try updatePayload(db, item), coalesce: false)
            out.items.insert(itemID)
            if let props = outcome.copy {
                let (copyID, edgeID) = try insertConflictedCopy(db, cur, properties: props, device: device, now: now)
                out.items.insert(copyID); out.edgesAdded.insert(edgeID)
            }
            return out
        } }
    }

    /// A conflicted copy of `cur` (FS-20): a new item of the same type holding `properties`, named
    /// `<stem> (conflicted copy <device> <UTC time>)`, tagged `conflicted-copy` plus the original's
    /// tags, with a `derived-from` edge to the original; created, tagged and linked in the queue.
    /// Returns the copy's id and the edge's.
    func insertConflictedCopy(_ db: Database, _ cur: StoredItem, properties: [String: JSONValue], device: String, now: Date) throws -> (String, String) {
        let t = type(cur.item.type)
        let itemID = cur.item.id
        var props = properties
        let copyID = ItemID.make()
        let stamp = Self.conflictStamp(now)
        let label = device.filter { $0 != "(" && $0 != ")" }
        props[t.titleField] = .string(Names.unescape(cur.stem) + " (conflicted copy \(label) \(stamp))")
        let (stem, ext) = Names.stemAndExt(id: copyID, type: t, properties: props, fileName: nil)
        let ts = Timestamp.format(now)
        let size = TypeSchema.isBlobType(t.id) ? cur.size : Int64(render(type: t, properties: props).utf8.count)
        try db.run("""
            INSERT INTO items(rowid, id, type, properties, raw, file_name, stem, ext, size, version, source, timestamp, created_at, updated_at,
              mtime_ns, state, tier, sync, xattrs)
            VALUES (?, ?, ?, ?, NULL, NULL, ?, ?, ?, 0, 'marfafs', ?, ?, ?, ?, ?, ?, 'pending', ?)
            """, [try rowids.next(.items, db), copyID, cur.item.type, JSONCoding.encode(props), stem, ext, size, ts, ts, ts, Self.ns(now),
                  cur.item.state.rawValue, cur.item.tier.rawValue, Xattrs.encode(cur.xattrs)])
        var tags = Set(try Self.tags(db, itemID)); tags.insert("conflicted-copy")
        for tag in tags { try db.run("INSERT INTO tags(item_id, tag) VALUES (?, ?)", [copyID, tag]) }
        let copy = Item(id: copyID, type: cur.item.type, properties: props, version: 0, timestamp: ts, createdAt: ts, updatedAt: ts,
                        state: cur.item.state, tier: cur.item.tier)
        try enqueueCreate(db, copy, tags: tags.sorted())
        let edgeID = ItemID.make()
        try db.run("INSERT INTO edges(id, source_id, target_id, edge_type, properties, created_at, updated_at) VALUES (?, ?, ?, 'derived-from', '{}', ?, ?)",
                   [edgeID, copyID, itemID, ts, ts])
        try enqueue(db, kind: .createEdge, itemID: copyID, payload: [
            "id": .string(edgeID), "source_id": .string(copyID), "target_id": .string(itemID), "edge_type": "derived-from",
        ], coalesce: false)
        return (copyID, edgeID)
    }

    /// `YYYY-MM-DD HHMMSS`, UTC (FS-20).
    static func conflictStamp(_ d: Date) -> String {
        var c = Calendar(identifier: .gregorian)
        c.timeZone = TimeZone(identifier: "UTC")!
        let p = c.dateComponents([.year, .month, .day, .hour, .minute, .second], from: d)
        return String(format: "%04d-%02d-%02d %02d%02d%02d", p.year!, p.month!, p.day!, p.hour!, p.minute!, p.second!)
    }

    /// Conflicted copies (FS-21): (copy, original) ids, oldest first. The original is the target of
    /// the copy's `derived-from` edge, so a copy made on another mount is listed too.
    public func conflictedCopies() throws -> [(copy: ItemSummary, originalID: String?)] {
        try pool.read { db in
            try Row.fetchAll(db, sql: """
                SELECT \(ItemSummary.columns.split(separator: ",").map { "items." + $0.trimmingCharacters(in: .whitespaces) }.joined(separator: ", ")),
                  (SELECT target_id FROM edges WHERE source_id = items.id AND edge_type = 'derived-from' LIMIT 1) AS original
                FROM items JOIN tags ON tags.item_id = items.id AND tags.tag = 'conflicted-copy'
                WHERE items.state != 'trashed' ORDER BY items.created_at, items.rowid
                """).map { (ItemSummary(row: $0), $0["original"]) }
        }
    }
}
