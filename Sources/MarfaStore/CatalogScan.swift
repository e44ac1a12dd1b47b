import Foundation
import GRDB
import GRDBSQLite
import MarfaLayout
import MarfaModel

/// The mount's first read of the whole store (its catalog): every item summary and every tag, in
/// one read transaction on a connection of its own, stepped through the C API. The connection maps
/// nothing and caches little, so reading 100,000 rows does not leave the whole file mapped into
/// the daemon (the rows of items are interleaved with the queue's) nor a large page cache behind.
extension Store {
    /// `count` first learns how many items there are (room is made once, not grown).
    public func scanCatalog(count: (Int) -> Void = { _ in }, items visit: (ItemSummary) -> Void, tags visitTag: (String, String) -> Void) throws {
        var c: OpaquePointer?
        guard sqlite3_open_v2(path, &c, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nil) == SQLITE_OK, let db = c else {
            if let c { sqlite3_close_v2(c) }
            throw StoreError.io("cannot open \(path) to read its catalog")
        }
        defer { sqlite3_close_v2(db) }
        let seen = removals
        sqlite3_busy_timeout(db, 10_000)
        sqlite3_exec(db, "PRAGMA mmap_size = 0; PRAGMA cache_size = -2048; BEGIN", nil, nil, nil)
        defer { sqlite3_exec(db, "COMMIT", nil, nil, nil) }
        func each(_ sql: String, _ row: (OpaquePointer) -> Void) throws {
            var st: OpaquePointer?
            guard sqlite3_prepare_v2(db, sql, -1, &st, nil) == SQLITE_OK, let s = st else {
                throw StoreError.io("reading the catalog: \(String(cString: sqlite3_errmsg(db)))")
            }
            defer { sqlite3_finalize(s) }
            while true {
                let rc = sqlite3_step(s)
                if rc == SQLITE_DONE { return }
                guard rc == SQLITE_ROW else { throw StoreError.io("reading the catalog: \(String(cString: sqlite3_errmsg(db)))") }
                row(s)
            }
        }
        func text(_ s: OpaquePointer, _ i: Int32) -> String? {
            guard let p = sqlite3_column_text(s, i) else { return nil }
            return String(cString: p)
        }
        // Type names and states repeat: one String each, shared by every summary.
        var interned: [String: String] = [:]
        func intern(_ s: String) -> String {
            if let k = interned[s] { return k }
            interned[s] = s
            return s
        }
        try each("SELECT count(*) FROM items") { s in count(Int(sqlite3_column_int64(s, 0))) }
        try each("SELECT \(ItemSummary.columns) FROM items") { s in
            visit(overlaid(ItemSummary(rowid: sqlite3_column_int64(s, 0), id: text(s, 1) ?? "", type: intern(text(s, 2) ?? ""),
                              stem: text(s, 3) ?? "", ext: intern(text(s, 4) ?? ""), size: sqlite3_column_int64(s, 5),
                              mtimeNs: sqlite3_column_int64(s, 6), createdAt: text(s, 7) ?? "",
                              state: ItemState(rawValue: text(s, 8) ?? "") ?? .active, blobRef: text(s, 9),
                              mode: UInt16(truncatingIfNeeded: sqlite3_column_int64(s, 10))), seen))
        }
        try each("SELECT item_id, tag FROM tags") { s in
            visitTag(text(s, 0) ?? "", intern(text(s, 1) ?? ""))
        }
    }

    /// Every text item's links as the store keeps them (`VaultLinks`), by rowid; stale ones are
    /// read from their properties first.
    public func allLinks() throws -> [(Int64, String)] {
        if try pool.read({ db in try db.exists("SELECT 1 FROM items WHERE links_stale = 1") }) {
            // On a full disk (FS-28) the links are taken as they are: those not read yet come with
            // their notes' settling, once there is room; the vault is listed meanwhile.
            do { try write { db in try freshenLinks(db, "links_stale = 1") } } catch StoreError.noSpace {}
        }
        return try pool.read { db in
            try Row.fetchAll(db, sql: "SELECT rowid, links FROM items WHERE links IS NOT NULL").map { ($0[0], $0[1]) }
        }
    }

    /// What the catalog reads of an item after it changed: its summary, its tags, and its links
    /// (`VaultLinks`; nil: none, or stale, see `linksStale`).
    public struct ItemFacts: Sendable {
        public let summary: ItemSummary
        public let tags: Set<String>
        public let links: String?
        /// The links must be read with `links(rowid:)` (which brings them up to date).
        public let linksStale: Bool
    }

    /// `ItemFacts` of many items in one read transaction (an item missing from the answer has no
    /// row). The settler's catalog update reads each batch of settled files so: a transaction per
    /// item and per fact, three per file, were most of the time it held the mount's lock.
    public func facts(rowids: [Int64]) throws -> [Int64: ItemFacts] {
        if rowids.isEmpty { return [:] }
        let seen = removals
        return try pool.read { db in
            // The rows as one JSON array bound to statements prepared once (a statement with the
            // rows in its text was parsed and planned anew for every batch the settler took).
            let list = "[" + rowids.map(String.init).joined(separator: ",") + "]"
            var summaries: [Int64: (ItemSummary, String?, Bool)] = [:]
            let rowsSQL = "SELECT \(ItemSummary.columns), links, links_stale FROM items WHERE rowid IN (SELECT value FROM json_each(?))"
            for row in try Row.fetchAll(db.cachedStatement(sql: rowsSQL), arguments: [list]) {
                let s = ItemSummary(row: row)
                summaries[s.rowid] = (s, row["links"], (row["links_stale"] as Int64?) == 1)
            }
            var tags: [String: Set<String>] = [:]
            let tagsSQL = "SELECT item_id, tag FROM tags WHERE item_id IN (SELECT id FROM items WHERE rowid IN (SELECT value FROM json_each(?)))"
            for row in try Row.fetchAll(db.cachedStatement(sql: tagsSQL), arguments: [list]) {
                tags[row[0], default: []].insert(row[1])
            }
            return summaries.mapValues { s, links, stale in
                ItemFacts(summary: overlaid(s, seen), tags: tags[s.id] ?? [], links: stale ? nil : links, linksStale: stale)
            }
        }
    }

    /// One item's `ItemFacts` (nil: it has no row), off one of the pool's readers: its row with
    /// its links, then its tags, each a statement of its own. A request that changed one item
    /// reads it back so, right after its write: on one connection (three reads on three cost
    /// three times the work of getting a connection up to date after the write), one with no
    /// memory map to drop and map again (`Store.readerMmapBytes`).
    public func facts(rowid: Int64) throws -> ItemFacts? {
        let seen = removals
        return try pool.unsafeRead { db in try Self.facts(db, rowid: rowid) }.map { overlaid($0, seen) }
    }

    /// One item's `ItemFacts` on connection `db` (a reader's, or the writer's inside the
    /// transaction that changed it).
    static func facts(_ db: Database, rowid: Int64) throws -> ItemFacts? {
        guard let row = try Row.fetchOne(db.cachedStatement(sql: "SELECT \(ItemSummary.columns), links, links_stale FROM items WHERE rowid = ?"),
                                         arguments: [rowid]) else { return nil }
        let s = ItemSummary(row: row)
        let stale = (row["links_stale"] as Int64?) == 1
        let tags = try String.fetchSet(db.cachedStatement(sql: "SELECT tag FROM tags WHERE item_id = ?"), arguments: [s.id])
        return ItemFacts(summary: s, tags: tags, links: stale ? nil : row["links"], linksStale: stale)
    }

    /// `ItemFacts` read outside the mount's lock, with the store's count of committed writes
    /// taken before the read (`facts(_:)`).
    public struct FactsRead: Sendable {
        let rowids: [Int64]
        let facts: [Int64: ItemFacts]
        let commits: Int
    }

    /// Reads `ItemFacts` of `rowids` to be taken later (`facts(_:)`): the settler reads a batch's
    /// before it takes the mount's lock, which it then holds only to update the catalog.
    public func readFacts(rowids: [Int64]) throws -> FactsRead {
        let commits = commitCount
        return FactsRead(rowids: rowids, facts: try facts(rowids: rowids), commits: commits)
    }

    /// The facts `read` holds if they are still the store's: no write has committed since they
    /// were read; else read again. Guarantee: what is returned is at least as new as every write
    /// that had committed when this is called.
    public func facts(_ read: FactsRead) throws -> [Int64: ItemFacts] {
        commitCount == read.commits ? read.facts : try facts(rowids: read.rowids)
    }

    /// One item's links (`VaultLinks`), nil when it has none.
    public func links(rowid: Int64) throws -> String? {
        let row = try readStatement { db in try Row.fetchOne(db.cachedStatement(sql: "SELECT links, links_stale FROM items WHERE rowid = ?"), arguments: [rowid]) }
        guard let row else { return nil }
        if (row["links_stale"] as Int64?) != 1 { return row["links"] }
        return try write { db in
            try freshenLinks(db, "rowid = \(rowid)")
            return try String.fetchOne(db, sql: "SELECT links FROM items WHERE rowid = ?", arguments: [rowid])
        }
    }

    /// Reads the links of the items `condition` selects from their properties (their body and
    /// front-matter values).
    func freshenLinks(_ db: Database, _ condition: String) throws {
        let rows = try Row.fetchAll(db, sql: "SELECT rowid, type, properties FROM items WHERE links_stale = 1 AND \(condition)")
        for row in rows {
            let t = type(row["type"])
            var links: [VaultLink] = []
            if case .object(let props)? = try? JSONParser.parse(row["properties"] as String) {
                links = VaultText.read(properties: props, bodyField: t.bodyField).links
            }
            try storeLinks(db, row["rowid"], links)
        }
    }
}
