import Crypto
import Foundation
import Logging
import MarfaModel

/// Who is calling: the tenant and the key (W-2, W-18).
public struct Principal: Sendable {
    public var tenantID: String
    public var keyID: String
    public var label: String
    public var isAdmin: Bool
    public var isOperator: Bool
    /// Member keys: type → "read" | "write" (a type's permission covers its subtypes); nil: all.
    public var typePermissions: [String: String]?
    /// The parents of the tenant's custom types, so a permission on a type covers custom subtypes.
    var typeParents: [String: String] = [:]

    func may(_ access: String, type: String) -> Bool {
        guard let perms = typePermissions else { return true }
        var t: String? = type
        while let cur = t {
            if let p = perms[cur] { return access == "read" || p == "write" }
            t = typeParents[cur] ?? ServerStore.builtInParents[cur] ?? cur.lastIndex(of: ".").map { String(cur[..<$0]) }
        }
        return false
    }
}

/// The reference server's data: the rules of wire.md over one `ServerBackend` (SQLite, the
/// embedded default, or PostgreSQL for several processes).
public final class ServerStore: Sendable {
    let backend: any ServerBackend
    /// Rung after every commit that appended events; event streams wait on it.
    let bell = EventBell()
    /// Where an upload in progress is spooled (beside a SQLite database, on the same disk).
    var directory: String { backend.spoolDirectory }

    /// `db`: a SQLite file, or `postgres://USER@HOST:PORT/DB`. `migrate: false` opens a
    /// PostgreSQL database as it is (the schema must be current).
    public init(db: String, log: Logger = Logger(label: "marfafs.serve"), migrate: Bool = true) throws {
        try Self.checkLocation(db)
        if Self.isPostgres(db) {
            backend = try PostgresBackend(url: db, log: log, migrate: migrate)
            backend.follow(bell)
        } else {
            let sqlite = try SQLiteBackend(path: db)
            backend = sqlite
            bell.start(after: try sqlite.newestEventID())
        }
    }

    public convenience init(path: String) throws { try self.init(db: path) }

    /// How many requests may wait on the database at once (0: they need no threads of their own).
    public var waitingRequests: Int { backend.waitingRequests }

    /// Whether `--db` names a PostgreSQL database rather than a SQLite file.
    public static func isPostgres(_ db: String) -> Bool { db.hasPrefix("postgres://") || db.hasPrefix("postgresql://") }

    /// Refuses a `--db` that is a URL of another kind (`mysql://`, `sqlite://`, `http://`): never
    /// taken for the name of a SQLite file.
    public static func checkLocation(_ db: String) throws {
        if !isPostgres(db), db.range(of: "^[A-Za-z][A-Za-z0-9+.-]*://", options: .regularExpression) != nil {
            throw badLocation(db)
        }
    }

    /// The error for a `--db` that is neither a SQLite file nor a PostgreSQL URL.
    static func badLocation(_ db: String) -> ServerStoreError {
        ServerStoreError("--db must be a SQLite file or postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE, not \(redacted(db))")
    }

    /// A `--db` URL as the server may print it: without its password.
    public static func redacted(_ url: String) -> String {
        guard var c = URLComponents(string: url) else { return "(a URL that cannot be read)" }
        if c.password != nil { c.password = "xxx" }
        return c.string ?? "(a URL that cannot be read)"
    }

    /// Migrates a PostgreSQL database (`marfafs serve --migrate-only`); the ids applied.
    public static func migrateOnly(db: String, log: Logger) throws -> [String] {
        guard isPostgres(db) else {
            let store = try ServerStore(db: db, log: log)
            store.close()
            return []
        }
        let backend = try PostgresBackend(url: db, log: log, migrate: false)
        defer { backend.close() }
        return try PostgresBackend.opening(db) { try PostgresSchema.migrate(backend.pool) }
    }

    public func close() {
        bell.close()
        backend.close()
    }

    /// A read: inside the task's transaction if it has one, else on a connection of its own.
    func read<T>(_ body: (StoreTx) throws -> T) throws -> T {
        if let tx = StoreTx.current { return try body(tx) }
        return try backend.read { tx in try StoreTx.$current.withValue(tx) { try body(tx) } }
    }

    /// A write transaction, or a part of the task's: an idempotent request runs its store call
    /// and the storing of its answer in one transaction.
    func write<T>(_ body: (StoreTx) throws -> T) throws -> T {
        if let tx = StoreTx.current {
            guard tx.writable else { throw APIError(500, "internal_error", "a write inside a read") }
            return try body(tx)
        }
        let bell = self.bell, shared = backend.isShared
        return try backend.write({ tx in try StoreTx.$current.withValue(tx) { try body(tx) } }, committed: { events in
            if shared {
                var newest: [String: Int64] = [:]
                for e in events { newest[e.tenantID] = max(newest[e.tenantID] ?? 0, e.id) }
                for (tenant, id) in newest { bell.ring(tenant: tenant, upTo: id) }
            } else {
                bell.publish(events)
            }
        })
    }

    static func now() -> String { Timestamp.format(Date()) }

    // MARK: keys and tenants (W-18)

    static func randomBytes(_ n: Int) -> [UInt8] {
        var rng = SystemRandomNumberGenerator()
        return (0..<n).map { _ in UInt8.random(in: 0...255, using: &rng) }
    }

    /// `marfa_k1_` and 48 hex digits (24 random bytes).
    static func mintKey() -> String {
        "marfa_k1_" + randomBytes(24).map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
    }

    static func hash(_ key: String, salt: Data) -> Data {
        Data(SHA256.hash(data: salt + Data(key.utf8)))
    }

    /// Makes a key of `tenantID`; returns its row (as the wire shows it) and the plaintext, once.
    func insertKey(_ db: StoreTx, tenantID: String, label: String, role: String, typePermissions: [String: String]?) throws -> ([String: JSONValue], String) {
        let key = Self.mintKey()
        let salt = Data(Self.randomBytes(16))
        let id = "key_" + ItemID.make()
        let now = Self.now()
        let perms = typePermissions.map { JSONCoding.encode($0.mapValues(JSONValue.string)) }
        try db.execute("""
            INSERT INTO keys(id, tenant_id, label, role, type_permissions, lookup, salt, hash, created_at)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
            """, [id, tenantID, label, role, perms, String(key.prefix(21)), salt, Self.hash(key, salt: salt), now])
        return (try keyJSON(db, id: id)!, key)
    }

    func keyJSON(_ db: StoreTx, id: String) throws -> [String: JSONValue]? {
        guard let r = try db.row("SELECT k.*, t.operator FROM keys k JOIN tenants t ON t.id = k.tenant_id WHERE k.id = ?", [id]) else { return nil }
        var o: [String: JSONValue] = [
            "id": .string(r["id"]), "label": .string(r["label"]), "role": .string(r["role"]),
            "tenant_id": .string(r["tenant_id"]), "space_id": .string(r["tenant_id"]),
            "created_at": .string(r["created_at"]), "last_used_at": .string((r["last_used_at"] as String?) ?? r["created_at"]),
            "is_operator": .bool((r["operator"] as Bool) && (r["role"] as String) == "admin"), "is_platform": .bool(false),
            "source": .string(r["label"]), "default_tier": "library", "edge_permissions": .object([:]),
            "extension_permissions": .object([:]), "space_permissions": .array([]),
            "type_permissions": .object((r["type_permissions"] as String?).map { JSONCoding.object(from: $0) } ?? [:]),
        ]
        if let revoked: String = r["revoked_at"] { o["revoked_at"] = .string(revoked) }
        return o
    }

    func insertTenant(_ db: StoreTx, name: String, operator isOperator: Bool) throws -> [String: JSONValue] {
        let id = "tnt_" + ItemID.make()
        let now = Self.now()
        try db.execute("INSERT INTO tenants(id, name, operator, created_at) VALUES (?, ?, ?, ?)", [id, name, isOperator, now])
        return ["id": .string(id), "name": .string(name), "created_at": .string(now)]
    }

    /// W-18 bootstrap: on a server with no keys, the first tenant (the operator) and its admin key.
    public func bootstrap(label: String = "admin") throws -> ([String: JSONValue], String)? {
        try write { db in
            try backend.serialize(db, on: "bootstrap")
            if try db.value(Bool.self, "SELECT EXISTS(SELECT 1 FROM keys)") ?? false { return nil }
            let tenant = try insertTenant(db, name: "operator", operator: true)
            return try insertKey(db, tenantID: tenant["id"]!.stringValue!, label: label, role: "admin", typePermissions: nil)
        }
    }

    public func createKey(_ p: Principal, label: String, role: String, typePermissions: [String: String]?) throws -> ([String: JSONValue], String) {
        try write { db in try insertKey(db, tenantID: p.tenantID, label: label, role: role, typePermissions: typePermissions) }
    }

    public func listKeys(_ p: Principal) throws -> [[String: JSONValue]] {
        try read { db in
            try db.values(String.self, "SELECT id FROM keys WHERE tenant_id = ? AND revoked_at IS NULL ORDER BY created_at, id", [p.tenantID])
                .compactMap { try keyJSON(db, id: $0) }
        }
    }

    /// Revokes a key of the caller's tenant at once; false if there is no such key.
    public func revokeKey(_ p: Principal, id: String) throws -> Bool {
        try write { db in
            try db.execute("UPDATE keys SET revoked_at = ? WHERE id = ? AND tenant_id = ? AND revoked_at IS NULL", [Self.now(), id, p.tenantID]) > 0
        }
    }

    public func createTenant(name: String) throws -> ([String: JSONValue], String) {
        try write { db in
            let tenant = try insertTenant(db, name: name, operator: false)
            let (_, key) = try insertKey(db, tenantID: tenant["id"]!.stringValue!, label: "admin", role: "admin", typePermissions: nil)
            return (tenant, key)
        }
    }

    public func tenant(_ p: Principal) throws -> [String: JSONValue] {
        try read { db in
            let r = try db.row("SELECT * FROM tenants WHERE id = ?", [p.tenantID])!
            return ["id": .string(r["id"]), "name": .string(r["name"]), "created_at": .string(r["created_at"])]
        }
    }

    /// The principal a bearer token stands for, or nil (unknown, malformed or revoked: 401).
    /// A key's `last_used_at` is kept to the minute.
    public func authenticate(_ token: String) throws -> Principal? {
        guard let (p, lastUsed) = try lookUp(token) else { return nil }
        let now = Date()
        if Timestamp.parse(lastUsed).map({ now.timeIntervalSince1970 - $0 >= 60 }) ?? true {
            _ = try write { db in
                try db.execute("UPDATE keys SET last_used_at = ? WHERE id = ?", [Timestamp.format(now), p.keyID])
            }
        }
        return p
    }

    func lookUp(_ token: String) throws -> (Principal, String)? {
        guard token.hasPrefix("marfa_k1_"), token.count >= 21, token.count <= 200 else { return nil }
        return try read { db in
            for r in try db.rows("""
                SELECT k.*, t.operator FROM keys k JOIN tenants t ON t.id = k.tenant_id
                WHERE k.lookup = ? AND k.revoked_at IS NULL
                """, [String(token.prefix(21))]) {
                let salt: Data = r["salt"], hash: Data = r["hash"]
                guard Self.hash(token, salt: salt) == hash else { continue }
                let perms = (r["type_permissions"] as String?).map { JSONCoding.object(from: $0).compactMapValues(\.stringValue) }
                let role: String = r["role"]
                var p = Principal(tenantID: r["tenant_id"], keyID: r["id"], label: r["label"], isAdmin: role == "admin",
                                  isOperator: r["operator"] as Bool, typePermissions: role == "admin" ? nil : perms)
                if p.typePermissions != nil { p.typeParents = try customParents(db, tenantID: p.tenantID) }
                return (p, (r["last_used_at"] as String?) ?? "")
            }
            return nil
        }
    }

    // MARK: idempotency (W-5)

    /// What an idempotent request gets: the answer stored for its key, or the answer of running it now.
    public enum IdempotentAnswer: Sendable {
        case replayed(fingerprint: String, status: Int, body: String)
        case fresh(status: Int, body: [String: JSONValue])
    }

    /// W-5: runs `run` (a store call) at most once per key of the tenant, across processes. The
    /// key is held until the transaction ends, the stored answer is looked up under it, and the
    /// change and its answer commit together: the same key sent to two processes at once gives
    /// one change, and the other request replays its answer. A refused request stores nothing.
    public func idempotent(_ p: Principal, key: String, fingerprint: String,
                           _ run: () throws -> (Int, [String: JSONValue])) throws -> IdempotentAnswer {
        try write { db in
            try backend.serialize(db, on: "idempotency \(p.tenantID) \(key)")
            if let r = try db.row("SELECT fingerprint, status, body FROM idempotency WHERE tenant_id = ? AND key = ?", [p.tenantID, key]) {
                return .replayed(fingerprint: r["fingerprint"], status: r["status"], body: r["body"])
            }
            let (status, out) = try run()
            try db.execute("INSERT INTO idempotency(tenant_id, key, fingerprint, status, body, created_at) VALUES (?, ?, ?, ?, ?, ?)",
                           [p.tenantID, key, fingerprint, status, JSONCoding.encode(out), Self.now()])
            return .fresh(status: status, body: out)
        }
    }
}
