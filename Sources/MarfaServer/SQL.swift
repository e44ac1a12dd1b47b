import Foundation

/// A value as the server's SQL passes it in and reads it out, whatever the engine.
public enum SQLValue: Sendable, Equatable {
    case null, int(Int64), double(Double), text(String), blob(Data)
}

/// What can be bound to a `?` of the server's SQL.
public protocol SQLBindable { var sqlValue: SQLValue { get } }
extension String: SQLBindable { public var sqlValue: SQLValue { .text(self) } }
extension Substring: SQLBindable { public var sqlValue: SQLValue { .text(String(self)) } }
extension Int64: SQLBindable { public var sqlValue: SQLValue { .int(self) } }
extension Int: SQLBindable { public var sqlValue: SQLValue { .int(Int64(self)) } }
/// Booleans are stored as 0 and 1 on both engines.
extension Bool: SQLBindable { public var sqlValue: SQLValue { .int(self ? 1 : 0) } }
extension Double: SQLBindable { public var sqlValue: SQLValue { .double(self) } }
extension Data: SQLBindable { public var sqlValue: SQLValue { .blob(self) } }
extension SQLValue: SQLBindable { public var sqlValue: SQLValue { self } }
extension Optional: SQLBindable where Wrapped: SQLBindable { public var sqlValue: SQLValue { self?.sqlValue ?? .null } }

/// What a column can be read as. The schema fixes each column's type, so a read is a conversion,
/// never a failure: a value of another kind reads as the type's empty value.
public protocol SQLDecodable { init(sql: SQLValue) }
extension String: SQLDecodable {
    public init(sql: SQLValue) {
        switch sql {
        case .text(let s): self = s
        case .int(let n): self = String(n)
        case .double(let d): self = String(d)
        case .blob(let d): self = String(decoding: d, as: UTF8.self)
        case .null: self = ""
        }
    }
}
extension Int64: SQLDecodable {
    public init(sql: SQLValue) {
        switch sql {
        case .int(let n): self = n
        case .double(let d): self = Int64(exactly: d.rounded(.towardZero)) ?? 0
        case .text(let s): self = Int64(s) ?? 0
        default: self = 0
        }
    }
}
extension Int: SQLDecodable { public init(sql: SQLValue) { self = Int(Int64(sql: sql)) } }
extension Bool: SQLDecodable { public init(sql: SQLValue) { self = Int64(sql: sql) != 0 } }
extension Double: SQLDecodable {
    public init(sql: SQLValue) {
        switch sql {
        case .double(let d): self = d
        case .int(let n): self = Double(n)
        case .text(let s): self = Double(s) ?? 0
        default: self = 0
        }
    }
}
extension Data: SQLDecodable {
    public init(sql: SQLValue) {
        switch sql {
        case .blob(let d): self = d
        case .text(let s): self = Data(s.utf8)
        default: self = Data()
        }
    }
}
extension Optional: SQLDecodable where Wrapped: SQLDecodable {
    public init(sql: SQLValue) { self = sql == .null ? nil : Wrapped(sql: sql) }
}

/// One row of a result: its columns by name (as the query names them) and by position.
public struct SQLRow: Sendable {
    public let names: [String]
    public let values: [SQLValue]

    public init(names: [String], values: [SQLValue]) { self.names = names; self.values = values }

    public func value(_ name: String) -> SQLValue {
        names.firstIndex(of: name).map { values[$0] } ?? .null
    }
    public subscript<T: SQLDecodable>(_ name: String) -> T { T(sql: value(name)) }
    public subscript<T: SQLDecodable>(_ index: Int) -> T { T(sql: index < values.count ? values[index] : .null) }
}

/// Where the two engines' SQL differs, in the statements the shared code writes.
public struct SQLDialect: Sendable {
    /// An RFC 3339 text as an instant, to compare timestamps that keep their client's offset.
    public var instant: @Sendable (String) -> String
    /// A join that must walk its left side first (SQLite plans `CROSS JOIN` in the written order).
    public var orderedJoin: String
    /// Locks the rows a write transaction reads before changing them (PostgreSQL: `FOR UPDATE`;
    /// SQLite has one writer, so nothing).
    public var forUpdate: String
    /// The larger of two values.
    public var greatest: String

    public static let sqlite = SQLDialect(instant: { "julianday(\($0))" }, orderedJoin: "CROSS JOIN", forUpdate: "", greatest: "max")
    public static let postgres = SQLDialect(instant: { "(\($0))::timestamptz" }, orderedJoin: "JOIN", forUpdate: " FOR UPDATE", greatest: "greatest")
}

/// One connection for the length of one transaction (or one read): the server's SQL, with `?`
/// placeholders, on either engine.
public protocol SQLSession: AnyObject {
    func rows(_ sql: String, _ args: [SQLValue]) throws -> [SQLRow]
    /// Runs a statement; how many rows it changed.
    @discardableResult func execute(_ sql: String, _ args: [SQLValue]) throws -> Int
}

/// A transaction of the server's store: the session it runs on, the events it appends (their ids
/// are given at commit, by the backend), and the engine's dialect.
public final class StoreTx: @unchecked Sendable {
    let session: any SQLSession
    let dialect: SQLDialect
    let writable: Bool
    /// Events appended by this transaction, in order; ids are 0 until the backend numbers them.
    var events: [ServerStore.LoggedEvent] = []

    init(session: any SQLSession, dialect: SQLDialect, writable: Bool) {
        self.session = session
        self.dialect = dialect
        self.writable = writable
    }

    /// The transaction this task is inside, so a store method called from within another's
    /// transaction (an idempotent write) joins it.
    @TaskLocal static var current: StoreTx?

    func rows(_ sql: String, _ args: [any SQLBindable] = []) throws -> [SQLRow] {
        try session.rows(sql, args.map(\.sqlValue))
    }
    func row(_ sql: String, _ args: [any SQLBindable] = []) throws -> SQLRow? {
        try rows(sql, args).first
    }
    /// The first column of the first row, or nil when there is no row or it is NULL.
    func value<T: SQLDecodable>(_ type: T.Type, _ sql: String, _ args: [any SQLBindable] = []) throws -> T? {
        guard let r = try row(sql, args), let v = r.values.first, v != .null else { return nil }
        return T(sql: v)
    }
    /// The first column of every row.
    func values<T: SQLDecodable>(_ type: T.Type, _ sql: String, _ args: [any SQLBindable] = []) throws -> [T] {
        try rows(sql, args).map { $0[0] }
    }
    @discardableResult func execute(_ sql: String, _ args: [any SQLBindable] = []) throws -> Int {
        try session.execute(sql, args.map(\.sqlValue))
    }
}

/// Where the server keeps its data: one implementation per engine (SQLite on GRDB, PostgreSQL on
/// postgres-nio). Everything above it — validation, the W-7 merge, routes, event streams — is
/// shared; a backend runs transactions, numbers the events a transaction appends, and tells the
/// streams of its process when another process has appended some.
public protocol ServerBackend: Sendable {
    var dialect: SQLDialect { get }
    /// Where uploads in progress are spooled.
    var spoolDirectory: String { get }
    /// Whether other processes write the same log (then streams read the log, not memory).
    var isShared: Bool { get }
    /// How many requests may wait on the database at once, on threads of their own
    /// (`DatabaseThreads`); 0: its calls do not wait on a network, and requests run where they are.
    var waitingRequests: Int { get }
    func read<T>(_ body: (StoreTx) throws -> T) throws -> T
    /// Runs `body` in a write transaction (again, from the start, when the engine reports a
    /// transient conflict); numbers the events it appended and commits;
    /// `committed` gets them in id order (with one writer, before the next commit).
    func write<T>(_ body: (StoreTx) throws -> T, committed: @escaping @Sendable ([ServerStore.LoggedEvent]) -> Void) throws -> T
    /// The newest event id issued to `tenant` (0: none yet).
    func lastEventID(_ tx: StoreTx, tenant: String) throws -> Int64
    /// Holds `name` (an idempotency key, the bootstrap) until the transaction ends, so one
    /// process at a time runs what follows.
    func serialize(_ tx: StoreTx, on name: String) throws
    /// Takes `name` for this transaction if no other process has it (the retention pruner).
    func tryExclusive(_ tx: StoreTx, _ name: String) throws -> Bool
    /// Starts telling `bell` of events other processes commit (PostgreSQL: LISTEN/NOTIFY).
    func follow(_ bell: EventBell)
    func close()
}
