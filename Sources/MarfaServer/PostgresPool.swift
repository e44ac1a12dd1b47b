import Foundation
import Logging
import NIOCore
import NIOPosix
import PostgresNIO
import Synchronization

/// A connection of the pool, and the one close callback it needs: a statement written to a
/// connection that has just closed is never answered (its future never completes), so a waiting
/// statement is also told of the close. One callback for the connection's life, handed to
/// whichever statement waits: a callback per statement would pile up on the close future, which
/// completes only when the connection closes (about 7 KiB a request, for ever).
final class PooledConnection: @unchecked Sendable {
    let conn: PostgresConnection
    private let lock = NSLock()
    private var closed = false
    private var onClose: (@Sendable () -> Void)?
    /// The failure of a statement sent without waiting (`send`).
    private var unseen: (any Error)?

    init(_ conn: PostgresConnection) {
        self.conn = conn
        conn.closeFuture.whenComplete { [weak self] _ in self?.didClose() }
    }

    var isClosed: Bool { conn.isClosed }

    private func didClose() {
        let waiting = lock.withLock { () -> (@Sendable () -> Void)? in
            closed = true
            defer { onClose = nil }
            return onClose
        }
        waiting?()
    }

    /// `future`'s value, or `ConnectionLost` once the connection closes, whichever comes first.
    func wait<T: Sendable>(_ future: EventLoopFuture<T>) throws -> T {
        let outcome = Mutex<Result<T, any Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        let settle: @Sendable (Result<T, any Error>) -> Void = { r in
            if outcome.withLock({ o in if o == nil { o = r; return true }; return false }) { done.signal() }
        }
        future.whenComplete(settle)
        let lost = lock.withLock { () -> Bool in
            if closed { return true }
            onClose = { settle(.failure(PostgresSession.ConnectionLost())) }
            return false
        }
        if lost { settle(.failure(PostgresSession.ConnectionLost())) }
        done.wait()
        let earlier = lock.withLock { () -> (any Error)? in onClose = nil; return unseen }
        let value = try outcome.withLock { $0! }.get()
        if let earlier { throw earlier }
        return value
    }

    /// Sends a statement no one waits for (a read's BEGIN and COMMIT, a ROLLBACK): each costs a
    /// round trip between threads when waited for, and the connection answers its statements in
    /// order, so the next statement waited for comes after it. If it fails, the connection is
    /// closed (its transaction state is unknown: it is never lent again) and the next statement
    /// waited for on it throws the failure. Never a write's BEGIN or COMMIT: a write's statements
    /// must not run if its BEGIN failed, and its COMMIT's answer is the write's outcome.
    func send(_ sql: String, logger: Logger) {
        conn.query(PostgresQuery(unsafeSQL: sql), logger: logger).whenFailure { [weak self] error in
            guard let self else { return }
            self.lock.withLock { if self.unseen == nil { self.unseen = error } }
            let _: EventLoopFuture<Void> = self.conn.close()
        }
    }
}

/// A fixed number of connections, lent one transaction at a time. A caller waits (on its own
/// thread, as SQLite's callers do) when all are lent; an event stream borrows one only for each
/// read of the log, never while it waits for events.
final class PostgresPool: @unchecked Sendable {
    let configuration: PostgresConnection.Configuration
    let log: Logger
    let size: Int
    private let cond = NSCondition()
    private var idle: [PooledConnection] = []
    private var open = 0
    private var nextID = 1
    private var closed = false

    /// A connection asked of a pool the server closed (it is shutting down).
    struct Closed: Error, CustomStringConvertible {
        var description: String { "the server is closing its database connections" }
    }

    init(configuration: PostgresConnection.Configuration, log: Logger, size: Int = 10) {
        self.configuration = configuration
        self.log = log
        self.size = size
    }

    func withConnection<T>(_ body: (PooledConnection) throws -> T) throws -> T {
        let conn = try take()
        defer { give(conn) }
        return try body(conn)
    }

    private func take() throws -> PooledConnection {
        cond.lock()
        while idle.isEmpty && open >= size && !closed { cond.wait() }
        if closed { cond.unlock(); throw Closed() }
        // A connection the database ended while it was idle (a restart, a terminated backend)
        // is dropped, never lent.
        while let c = idle.popLast() {
            if !c.isClosed { cond.unlock(); return c }
            open -= 1
        }
        open += 1
        let id = nextID
        nextID += 1
        cond.unlock()
        do {
            return PooledConnection(try PostgresConnection.connect(on: MultiThreadedEventLoopGroup.singleton.any(), configuration: configuration, id: id, logger: log).wait())
        } catch {
            cond.lock(); open -= 1; cond.signal(); cond.unlock()
            throw error
        }
    }

    private func give(_ pooled: PooledConnection) {
        cond.lock()
        if pooled.isClosed || closed {
            open -= 1
            if !pooled.isClosed { try? (pooled.conn.close() as EventLoopFuture<Void>).wait() }
        } else {
            idle.append(pooled)
        }
        cond.signal()
        cond.unlock()
    }

    deinit { close() }

    func close() {
        cond.lock()
        closed = true
        let all = idle
        idle.removeAll()
        cond.broadcast()
        cond.unlock()
        for c in all { try? (c.conn.close() as EventLoopFuture<Void>).wait() }
    }
}

/// The server's SQL on one PostgreSQL connection: `?` placeholders become `$1…`, values are bound
/// with their types (text, int8, float8, bytea), and results read back as `SQLValue`s.
final class PostgresSession: SQLSession {
    let pooled: PooledConnection
    let log: Logger
    init(_ pooled: PooledConnection, log: Logger) { self.pooled = pooled; self.log = log }

    /// `?` → `$n`, outside quoted text.
    static func numbered(_ sql: String) -> String {
        var out = "", n = 0, quoted = false
        out.reserveCapacity(sql.utf8.count + 16)
        for ch in sql {
            if ch == "'" { quoted.toggle() }
            if ch == "?" && !quoted { n += 1; out += "$\(n)" } else { out.append(ch) }
        }
        return out
    }

    static func bindings(_ args: [SQLValue]) -> PostgresBindings {
        var b = PostgresBindings(capacity: args.count)
        for v in args {
            switch v {
            case .null: b.appendNull()
            case .int(let n): b.append(n)
            case .double(let d): b.append(d)
            case .text(let s): b.append(s)
            case .blob(let d): b.append(ByteBuffer(bytes: d))
            }
        }
        return b
    }

    static func value(_ cell: PostgresCell) -> SQLValue {
        guard cell.bytes != nil else { return .null }
        switch cell.dataType {
        case .int8, .int4, .int2: return (try? cell.decode(Int64.self)).map(SQLValue.int) ?? .null
        case .bool: return (try? cell.decode(Bool.self)).map { .int($0 ? 1 : 0) } ?? .null
        case .float8, .float4: return (try? cell.decode(Double.self)).map(SQLValue.double) ?? .null
        case .bytea: return (try? cell.decode(ByteBuffer.self)).map { .blob(Data($0.readableBytesView)) } ?? .null
        default: return (try? cell.decode(String.self)).map(SQLValue.text) ?? .null
        }
    }

    /// Statements answered on this session so far (0: nothing reached the database yet).
    private(set) var answered = 0

    func query(_ sql: String, _ args: [SQLValue]) throws -> PostgresQueryResult {
        let q = args.isEmpty && !sql.contains("?") ? PostgresQuery(unsafeSQL: sql) : PostgresQuery(unsafeSQL: Self.numbered(sql), binds: Self.bindings(args))
        do {
            let result = try pooled.wait(pooled.conn.query(q, logger: log))
            answered += 1
            return result
        } catch var lost as ConnectionLost {
            lost.answered = answered
            throw lost
        } catch let e as PSQLError where ServerFailure.isUnreachable(e) {
            // The database ended the connection (a shutdown, a restart, a terminated backend).
            throw ConnectionLost(answered: answered, cause: ServerFailure.describe(e))
        }
    }

    /// The connection was closed (by the database or the network) before a statement's answer.
    struct ConnectionLost: Error, CustomStringConvertible {
        /// How many statements of the session had been answered (0: none reached the database).
        var answered = 0
        var cause = ""
        var description: String { "the connection to PostgreSQL was lost" + (cause.isEmpty ? "" : " (\(cause))") }
    }

    func rows(_ sql: String, _ args: [SQLValue]) throws -> [SQLRow] {
        let result = try query(sql, args)
        var names: [String]?
        return result.rows.map { row in
            if names == nil { names = row.map(\.columnName) }
            return SQLRow(names: names!, values: row.map(Self.value))
        }
    }

    @discardableResult func execute(_ sql: String, _ args: [SQLValue]) throws -> Int {
        try query(sql, args).metadata.rows ?? 0
    }
}
