import Foundation
import GRDB

/// The embedded default: one SQLite file, one process, one writer at a time (WAL, so reads go on
/// beside it). Event ids come from the events table's AUTOINCREMENT: with one writer, ids are
/// given in commit order.
final class SQLiteBackend: ServerBackend {
    let pool: DatabasePool
    let spoolDirectory: String
    var dialect: SQLDialect { .sqlite }
    var isShared: Bool { false }
    var waitingRequests: Int { 0 }

    init(path: String) throws {
        let dir = (path as NSString).deletingLastPathComponent
        spoolDirectory = dir.isEmpty ? "." : dir
        if !dir.isEmpty { try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true) }
        var config = Configuration()
        config.busyMode = .timeout(10)
        config.prepareDatabase { db in try db.cachedStatement(sql: "PRAGMA synchronous = NORMAL").execute() }
        pool = try DatabasePool(path: path, configuration: config)
        try ServerSchema.migrator().migrate(pool)
    }

    /// The newest id of the whole log (the memory of recent events starts after it).
    func newestEventID() throws -> Int64 {
        try pool.read { db in try Int64.fetchOne(db.cachedStatement(sql: "SELECT seq FROM sqlite_sequence WHERE name = 'events'")) ?? 0 }
    }

    func read<T>(_ body: (StoreTx) throws -> T) throws -> T {
        try pool.read { db in try body(StoreTx(session: GRDBSession(db), dialect: .sqlite, writable: false)) }
    }

    func write<T>(_ body: (StoreTx) throws -> T, committed: @escaping @Sendable ([ServerStore.LoggedEvent]) -> Void) throws -> T {
        try pool.write { db in
            let tx = StoreTx(session: GRDBSession(db), dialect: .sqlite, writable: true)
            let out = try body(tx)
            var numbered: [ServerStore.LoggedEvent] = []
            for var e in tx.events {
                try db.cachedStatement(sql: """
                    INSERT INTO events(tenant_id, name, item_type, edge_type, source_type, target_type, data, created_at)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                    """).execute(arguments: [e.tenantID, e.name, e.itemType, e.edgeType, e.sourceType, e.targetType, e.data, e.createdAt])
                e.id = db.lastInsertedRowID
                numbered.append(e)
            }
            // Still the only writer: the next commit's events follow these.
            if !numbered.isEmpty { let events = numbered; db.afterNextTransaction { _ in committed(events) } }
            return out
        }
    }

    func lastEventID(_ tx: StoreTx, tenant: String) throws -> Int64 {
        try tx.value(Int64.self, "SELECT seq FROM sqlite_sequence WHERE name = 'events'") ?? 0
    }

    func serialize(_ tx: StoreTx, on name: String) throws {}
    func tryExclusive(_ tx: StoreTx, _ name: String) throws -> Bool { true }
    func follow(_ bell: EventBell) {}
    func close() {}
}

/// The server's SQL on one GRDB connection (statements cached per connection).
final class GRDBSession: SQLSession {
    let db: Database
    init(_ db: Database) { self.db = db }

    static func arguments(_ args: [SQLValue]) -> StatementArguments {
        StatementArguments(args.map { v -> (any DatabaseValueConvertible)? in
            switch v {
            case .null: return nil
            case .int(let n): return n
            case .double(let d): return d
            case .text(let s): return s
            case .blob(let d): return d
            }
        })
    }

    func rows(_ sql: String, _ args: [SQLValue]) throws -> [SQLRow] {
        let statement = try db.cachedStatement(sql: sql)
        let names = statement.columnNames
        return try Row.fetchAll(statement, arguments: Self.arguments(args)).map { r in
            SQLRow(names: names, values: r.databaseValues.map { dv in
                switch dv.storage {
                case .null: .null
                case .int64(let n): .int(n)
                case .double(let d): .double(d)
                case .string(let s): .text(s)
                case .blob(let d): .blob(d)
                }
            })
        }
    }

    func execute(_ sql: String, _ args: [SQLValue]) throws -> Int {
        try db.cachedStatement(sql: sql).execute(arguments: Self.arguments(args))
        return db.changesCount
    }
}
