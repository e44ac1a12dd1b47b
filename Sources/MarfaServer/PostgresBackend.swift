import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import PostgresNIO
import Synchronization

/// The server on PostgreSQL: any number of `marfafs serve` processes on one database.
///
/// Event ids are per tenant, given by a counter row (`event_counters`) that a transaction updates
/// as its last statement before COMMIT: the row stays locked until the commit, so a tenant's ids
/// become visible in id order, and a stream reading `id > last` never passes an event that commits
/// later (ARCHITECTURE.md, "Event ids on PostgreSQL"). Each commit that appended events sends
/// `NOTIFY marfa_events, '<tenant>:<id>'`; every process listens on its own connection and wakes
/// its streams of that tenant; a periodic read of the counters, and a reconnect, wake them too.
final class PostgresBackend: ServerBackend {
    let pool: PostgresPool
    let log: Logger
    let spoolDirectory = NSTemporaryDirectory()
    var dialect: SQLDialect { .postgres }
    var isShared: Bool { true }
    var waitingRequests: Int { pool.size }
    static let channel = "marfa_events"
    private let followers = Mutex<[Task<Void, Never>]>([])

    init(url: String, log: Logger, migrate: Bool = true) throws {
        self.log = log
        let settings = try Self.settings(url)
        pool = PostgresPool(configuration: settings.configuration, log: log, size: settings.poolSize)
        if migrate { try Self.opening(url) { _ = try PostgresSchema.migrate(pool) } }
    }

    /// Runs the first work on a database, saying which database failed and why (a wrong user or
    /// password, a database that does not exist, nothing listening, TLS refused) instead of
    /// postgres-nio's generic text; the URL without its password.
    static func opening<T>(_ url: String, _ body: () throws -> T) throws -> T {
        do { return try body() } catch let e as PSQLError {
            throw ServerStoreError("cannot use the database \(ServerStore.redacted(url)): \(ServerFailure.describe(e))")
        }
    }

    /// The parameters a `--db` URL may carry; any other is refused (a misspelt `sslmode` must not
    /// quietly mean no TLS).
    static let parameters = ["host", "sslmode", "pool_max_conns"]

    /// `postgres://USER[:PASSWORD]@HOST[:PORT]/DB`, with `?host=/dir` for a Unix socket directory,
    /// `?sslmode=disable|prefer|require` (default: disable) and `?pool_max_conns=N` (1–1000,
    /// default 10: how many connections this process keeps for requests; one more listens for
    /// other processes' events, so a database's `max_connections` must hold every process's N + 1).
    static func settings(_ url: String) throws -> (configuration: PostgresConnection.Configuration, poolSize: Int) {
        guard let c = URLComponents(string: url), ["postgres", "postgresql"].contains(c.scheme ?? ""),
              let user = c.user, !user.isEmpty else {
            throw ServerStore.badLocation(url)
        }
        let database = c.path.hasPrefix("/") ? String(c.path.dropFirst()) : c.path
        let port = c.port ?? 5432
        let query = Dictionary((c.queryItems ?? []).map { ($0.name, $0.value ?? "") }, uniquingKeysWith: { $1 })
        if let unknown = query.keys.sorted().first(where: { !parameters.contains($0) }) {
            throw ServerStoreError("--db has an unknown parameter \(unknown) (known: \(parameters.joined(separator: ", ")))")
        }
        var poolSize = 10
        if let given = query["pool_max_conns"] {
            guard let n = Int(given), (1...1000).contains(n) else {
                throw ServerStoreError("pool_max_conns must be a number from 1 to 1000, not \(given)")
            }
            poolSize = n
        }
        var config: PostgresConnection.Configuration
        if let dir = query["host"], dir.hasPrefix("/") {
            config = .init(unixSocketPath: dir + "/.s.PGSQL.\(port)", username: user, password: c.password, database: database.isEmpty ? nil : database)
        } else {
            let tls: PostgresConnection.Configuration.TLS
            switch query["sslmode"] ?? "disable" {
            case "disable": tls = .disable
            case "prefer": tls = .prefer(try NIOSSLContext(configuration: .makeClientConfiguration()))
            case "require", "verify-full": tls = .require(try NIOSSLContext(configuration: .makeClientConfiguration()))
            case let other: throw ServerStoreError("sslmode \(other) is not one of disable, prefer, require")
            }
            config = .init(host: c.host ?? "127.0.0.1", port: port, username: user, password: c.password, database: database.isEmpty ? nil : database, tls: tls)
        }
        config.options.connectTimeout = .seconds(10)
        return (config, poolSize)
    }

    /// A read sees one snapshot, as a SQLite read does (a page and its cursor, a stream's start
    /// and its first events agree).
    func read<T>(_ body: (StoreTx) throws -> T) throws -> T {
        try Self.again(onLost: { _ in true }) { try readOnce(body) }
    }

    /// Runs `attempt` again, once, on a new connection when the connection was lost and
    /// `retry` says the attempt may be repeated (a read; a write nothing of which was answered).
    static func again<T>(onLost retry: (PostgresSession.ConnectionLost) -> Bool, _ attempt: () throws -> T) throws -> T {
        do { return try attempt() } catch let lost as PostgresSession.ConnectionLost where retry(lost) { return try attempt() }
    }

    private func readOnce<T>(_ body: (StoreTx) throws -> T) throws -> T {
        try pool.withConnection { pooled in
            let session = PostgresSession(pooled, log: log)
            pooled.send("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", logger: log)
            do {
                let out = try body(StoreTx(session: session, dialect: .postgres, writable: false))
                pooled.send("COMMIT", logger: log)
                return out
            } catch {
                pooled.send("ROLLBACK", logger: log)
                throw error
            }
        }
    }

    /// SQLSTATEs after which the whole transaction is run again: a deadlock, a serialization
    /// failure, and a unique key another process inserted first (the run again sees its row).
    static let transient: Set<String> = ["40001", "40P01", "23505"]

    /// A write whose connection was lost before its first statement was answered is run again on
    /// a new one; one lost later is not (its COMMIT may have happened): the client retries it with
    /// its Idempotency-Key.
    func write<T>(_ body: (StoreTx) throws -> T, committed: @escaping @Sendable ([ServerStore.LoggedEvent]) -> Void) throws -> T {
        try Self.again(onLost: { $0.answered == 0 }) { try writeOnce(body, committed: committed) }
    }

    private func writeOnce<T>(_ body: (StoreTx) throws -> T, committed: @escaping @Sendable ([ServerStore.LoggedEvent]) -> Void) throws -> T {
        var attempt = 0
        while true {
            attempt += 1
            do {
                return try pool.withConnection { pooled in
                    let session = PostgresSession(pooled, log: log)
                    try session.execute("BEGIN", [])
                    do {
                        let tx = StoreTx(session: session, dialect: .postgres, writable: true)
                        let out = try body(tx)
                        let events = try number(tx)
                        try session.execute("COMMIT", [])
                        if !events.isEmpty { committed(events) }
                        return out
                    } catch {
                        pooled.send("ROLLBACK", logger: log)
                        throw error
                    }
                }
            } catch let e as PSQLError where attempt < 8 && Self.transient.contains(e.serverInfo?[.sqlState] ?? "") {
                usleep(UInt32.random(in: 1_000...(5_000 * UInt32(attempt))))
                continue
            }
        }
    }

    /// Gives the transaction's events their ids: the tenant's counter goes up by their number, as
    /// the transaction's last statements, then the events are written and the wake-up is queued
    /// (PostgreSQL delivers a NOTIFY on commit).
    func number(_ tx: StoreTx) throws -> [ServerStore.LoggedEvent] {
        var out: [ServerStore.LoggedEvent] = []
        var byTenant: [String: [ServerStore.LoggedEvent]] = [:]
        var order: [String] = []
        for e in tx.events {
            if byTenant[e.tenantID] == nil { order.append(e.tenantID) }
            byTenant[e.tenantID, default: []].append(e)
        }
        for tenant in order {
            let events = byTenant[tenant]!
            let last = try tx.value(Int64.self, """
                INSERT INTO event_counters(tenant_id, last_id) VALUES (?, ?)
                ON CONFLICT (tenant_id) DO UPDATE SET last_id = event_counters.last_id + excluded.last_id
                RETURNING last_id
                """, [tenant, Int64(events.count)]) ?? 0
            var id = last - Int64(events.count)
            for var e in events {
                id += 1
                e.id = id
                try tx.execute("""
                    INSERT INTO events(tenant_id, id, name, item_type, edge_type, source_type, target_type, data, created_at)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                    """, [e.tenantID, e.id, e.name, e.itemType, e.edgeType, e.sourceType, e.targetType, e.data, e.createdAt])
                out.append(e)
            }
            try tx.execute("SELECT pg_notify(?, ?)", [Self.channel, "\(tenant):\(last)"])
        }
        return out
    }

    func lastEventID(_ tx: StoreTx, tenant: String) throws -> Int64 {
        try tx.value(Int64.self, "SELECT last_id FROM event_counters WHERE tenant_id = ?", [tenant]) ?? 0
    }

    /// A stable 64-bit number for a lock name (FNV-1a), the key of a transaction-scoped advisory lock.
    static func lockKey(_ name: String) -> Int64 {
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        for b in name.utf8 { h = (h ^ UInt64(b)) &* 0x100_0000_01b3 }
        return Int64(bitPattern: h)
    }

    func serialize(_ tx: StoreTx, on name: String) throws {
        try tx.execute("SELECT pg_advisory_xact_lock(?)", [Self.lockKey(name)])
    }

    func tryExclusive(_ tx: StoreTx, _ name: String) throws -> Bool {
        try tx.value(Bool.self, "SELECT pg_try_advisory_xact_lock(?)", [Self.lockKey(name)]) ?? false
    }

    /// Wakes `bell`'s streams when another process commits events: on each NOTIFY, after each
    /// (re)connection of the listening connection, and when a periodic read of the counters
    /// finds a tenant's log has grown (a wake-up lost with a dropped connection).
    func follow(_ bell: EventBell) {
        let listener = Task { [pool, log] in
            var attempt = 0
            while !Task.isCancelled {
                do {
                    let conn = try await PostgresConnection.connect(configuration: pool.configuration, id: 0, logger: log)
                    defer { Task { try? await conn.close() } }
                    try await conn.listen(on: Self.channel) { notifications in
                        attempt = 0
                        bell.ringAll()
                        for try await n in notifications {
                            if let colon = n.payload.lastIndex(of: ":"), let last = Int64(n.payload[n.payload.index(after: colon)...]) {
                                bell.ring(tenant: String(n.payload[..<colon]), upTo: last)
                            }
                        }
                    }
                } catch {
                    if Task.isCancelled { return }
                    log.warning("the event listener lost its connection; reconnecting", metadata: ["error": "\(String(reflecting: error))"])
                }
                attempt += 1
                try? await Task.sleep(for: .milliseconds(min(2_000, 100 * attempt)))
            }
        }
        let poller = Task { [pool, log] in
            var seen: [String: Int64] = [:]
            while !Task.isCancelled {
                try? await Task.sleep(for: .seconds(2))
                do {
                    let rows = try pool.withConnection { pooled in
                        try PostgresSession(pooled, log: log).rows("SELECT tenant_id, last_id FROM event_counters", [])
                    }
                    for r in rows {
                        let tenant: String = r["tenant_id"], last: Int64 = r["last_id"]
                        if let before = seen[tenant], before != last { bell.ring(tenant: tenant, upTo: last) }
                        seen[tenant] = last
                    }
                } catch {
                    if Task.isCancelled { return }
                    log.warning("reading the event counters failed", metadata: ["error": "\(String(reflecting: error))"])
                }
            }
        }
        followers.withLock { $0 += [listener, poller] }
    }

    func close() {
        for t in followers.withLock({ f in defer { f.removeAll() }; return f }) { t.cancel() }
        pool.close()
    }
}

/// An error of the server's storage set-up (a bad `--db`, a failed migration).
public struct ServerStoreError: Error, CustomStringConvertible {
    public let description: String
    init(_ d: String) { description = d }
}
