import Foundation
import GRDB
import MarfaLayout
import MarfaModel
import Synchronization

/// Earlier versions of items (FS-33). The current version is the item itself; each time an
/// item's bytes change, the bytes it had are kept in `versions`, with when they were made and by
/// whom. Every path that changes an item counts: a temporary trigger on the writing connection
/// notes each item row as it was before the transaction changed it, and `keepVersions` compares
/// them with the rows after, at the end of the same transaction.
///
/// Retention: per item the newest `historyKeepPerItem` versions (`historyKeepPerFile` of a file,
/// whose versions are whole blobs), of which those replaced more than `historyKeepDays` days ago
/// go except the newest `historyKeepAlways`; all versions together at most `historyCapBytes`
/// (the oldest go first). A purged item's versions go with it (a trigger), and their blobs.
public struct VersionRecord: Sendable, Hashable {
    public var seq: Int64
    public var itemID: String
    /// When this version was made (its file's modification time then), and when a newer one
    /// replaced it.
    public var madeNs: Int64
    public var replacedNs: Int64
    /// `local: <device>`, `remote`, `merge`.
    public var madeBy: String?
    public var size: Int64
    public init(seq: Int64, itemID: String, madeNs: Int64, replacedNs: Int64, madeBy: String?, size: Int64) {
        self.seq = seq; self.itemID = itemID; self.madeNs = madeNs; self.replacedNs = replacedNs; self.madeBy = madeBy; self.size = size
    }
}

public enum VersionOrigin: Sendable {
    case local, remote, merge
}

extension Store {
    public static let historyKeepPerItem = 50
    public static let historyKeepPerFile = 5
    /// A file's bytes younger than this when replaced are not kept (a file still being written).
    public static let historyFileSettleNs: Int64 = 5_000_000_000
    public static let historyKeepDays = 90
    public static let historyKeepAlways = 5
    public static let historyCapBytes: Int64 = 256 << 20

    /// Who makes the changes of the current transaction (set by the remote paths, read and reset
    /// by `keepVersions`).
    func madeBy(_ db: Database) -> String {
        switch versionOrigin.withLock({ $0 }) {
        case .local: return "local: " + device.withLock { $0 }
        case .remote: return "remote"
        case .merge: return "merge"
        }
    }

    /// The changes of this transaction come from `o` (until it ends).
    func changesCome(from o: VersionOrigin) { versionOrigin.withLock { $0 = o } }

    /// The writing connection's trigger: the first state of each item row a transaction changes.
    static func prepareHistory(_ db: Database) throws {
        try db.execute(sql: """
            CREATE TEMP TABLE IF NOT EXISTS replaced(rowid INTEGER PRIMARY KEY, id TEXT, type TEXT, raw BLOB, raw_head BLOB,
              size INTEGER, properties TEXT, blob_ref TEXT, mtime_ns INTEGER, made_by TEXT);
            CREATE TEMP TABLE IF NOT EXISTS made(rowid INTEGER PRIMARY KEY);
            CREATE TEMP TRIGGER IF NOT EXISTS items_replaced AFTER UPDATE OF raw, raw_head, properties, blob_ref, size ON main.items
            BEGIN INSERT OR IGNORE INTO replaced VALUES (OLD.rowid, OLD.id, OLD.type, OLD.raw, OLD.raw_head, OLD.size, OLD.properties,
              OLD.blob_ref, OLD.mtime_ns, OLD.made_by); END;
            CREATE TEMP TRIGGER IF NOT EXISTS items_made AFTER INSERT ON main.items
            BEGIN INSERT OR IGNORE INTO made VALUES (NEW.rowid); END;
            """)
    }

    /// At the end of a writing transaction: the bytes each changed item had, kept as a version
    /// when they differ from what it has now; who made the new bytes, noted on the item.
    func keepVersions(_ db: Database) throws {
        let origin = madeBy(db)
        versionOrigin.withLock { $0 = .local }
        if try db.exists("SELECT 1 FROM temp.made") {
            try db.run("UPDATE items SET made_by = ? WHERE rowid IN (SELECT rowid FROM temp.made)", [origin])
            try db.run("DELETE FROM temp.made")
        }
        let olds = try db.rows("SELECT * FROM temp.replaced")
        if olds.isEmpty { return }
        try db.run("DELETE FROM temp.replaced")
        let now = Self.ns(Date())
        for old in olds {
            guard let new = try db.row("SELECT rowid, id, type, raw, raw_head, size, properties, blob_ref FROM items WHERE rowid = ?", [old["rowid"]]) else { continue }
            let itemID: String = new["id"]
            if TypeSchema.isBlobType(new["type"]) {
                guard let ref: String = old["blob_ref"], ref != (new["blob_ref"] as String?), (old["size"] as Int64? ?? 0) > 0 else { continue }
                // A file's bytes that lasted less than a few seconds were a file still being
                // written (a large copy settles on the way), not a version anyone kept.
                if now - (old["mtime_ns"] as Int64? ?? 0) < Self.historyFileSettleNs { continue }
                try db.run("INSERT INTO versions(item_id, made_ns, replaced_ns, made_by, blob_ref, size) VALUES (?, ?, ?, ?, ?, ?)",
                           [itemID, old["mtime_ns"], now, old["made_by"], ref, old["size"]])
            } else {
                let before = textBytes(old), after = textBytes(new)
                // An empty file is no version worth keeping (a save truncates before it writes).
                if before == after || before.isEmpty { continue }
                try db.run("INSERT INTO versions(item_id, made_ns, replaced_ns, made_by, bytes, size) VALUES (?, ?, ?, ?, ?, ?)",
                           [itemID, old["mtime_ns"], now, old["made_by"], Data(before), before.count])
            }
            try db.run("UPDATE items SET made_by = ? WHERE rowid = ?", [origin, new["rowid"]])
            try pruneVersions(db, itemID: itemID, keep: TypeSchema.isBlobType(new["type"]) ? Self.historyKeepPerFile : Self.historyKeepPerItem)
        }
    }

    /// A text item's bytes from its row: what was written, else the rendering of its properties.
    func textBytes(_ row: Row) -> [UInt8] {
        if let d: Data = row["raw"] { return [UInt8](d.prefix(row["size"] as Int)) }
        if let joined = RawText.join(head: row["raw_head"], propertiesJSON: row["properties"]) { return joined }
        return Array(render(type: type(row["type"]), properties: JSONCoding.object(from: row["properties"])).utf8)
    }

    /// Retention (see the type's comment); blobs no version names any more may be dropped.
    func pruneVersions(_ db: Database, itemID: String, keep: Int) throws {
        let cutoff = Self.ns(Date()) - Int64(Self.historyKeepDays) * 86_400 * 1_000_000_000
        let gone = try db.rows("""
            SELECT seq, blob_ref FROM versions WHERE item_id = ?1 AND seq NOT IN
              (SELECT seq FROM versions WHERE item_id = ?1 ORDER BY seq DESC LIMIT ?2)
            UNION SELECT seq, blob_ref FROM versions WHERE item_id = ?1 AND replaced_ns < ?3 AND seq NOT IN
              (SELECT seq FROM versions WHERE item_id = ?1 ORDER BY seq DESC LIMIT ?4)
            """, [itemID, keep, cutoff, min(keep, Self.historyKeepAlways)])
        try dropVersions(db, gone)
        // The cap over every item's versions, checked now and then (it reads every row's size).
        let check = historyChecks.withLock { n -> Bool in n += 1; return n % 32 == 1 }
        guard check else { return }
        var total = try Int64.fetchOne(db, sql: "SELECT total(size) FROM versions") ?? 0
        guard total > Self.historyCapBytes else { return }
        var over: [Row] = []
        for row in try Row.fetchAll(db, sql: "SELECT seq, blob_ref, size FROM versions ORDER BY replaced_ns, seq") {
            if total <= Self.historyCapBytes { break }
            over.append(row)
            total -= row["size"] as Int64
        }
        try dropVersions(db, over)
    }

    func dropVersions(_ db: Database, _ rows: [Row]) throws {
        for row in rows {
            try db.run("DELETE FROM versions WHERE seq = ?", [row["seq"]])
            if let ref: String = row["blob_ref"] { try dropBlobIfUnused(db, ref) }
        }
    }

    /// An item's earlier versions, newest first.
    public func versions(itemID: String) throws -> [VersionRecord] {
        try pool.read { db in
            try Row.fetchAll(db.cachedStatement(sql: "SELECT seq, item_id, made_ns, replaced_ns, made_by, size FROM versions WHERE item_id = ? ORDER BY seq DESC"),
                             arguments: [itemID]).map {
                VersionRecord(seq: $0["seq"], itemID: $0["item_id"], madeNs: $0["made_ns"], replacedNs: $0["replaced_ns"], madeBy: $0["made_by"], size: $0["size"])
            }
        }
    }

    /// Who made an item's current bytes.
    public func madeBy(itemID: String) throws -> String? {
        try pool.read { db in try String.fetchOne(db, sql: "SELECT made_by FROM items WHERE id = ?", arguments: [itemID]) }
    }

    /// A version's bytes.
    public func versionBytes(seq: Int64) throws -> [UInt8] {
        let row = try pool.read { db in try db.row("SELECT bytes, blob_ref, size FROM versions WHERE seq = ?", [seq]) }
        guard let row else { throw StoreError.notFound("version \(seq)") }
        if let d: Data = row["bytes"] { return [UInt8](d) }
        guard let ref: String = row["blob_ref"] else { return [] }
        return blobs.read(hash: ref, offset: 0, count: row["size"] as Int) ?? []
    }
}
