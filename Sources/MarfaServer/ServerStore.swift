import Crypto
import Foundation
import GRDB
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

/// The reference server's data, on GRDB.
public final class ServerStore: Sendable {
    let pool: DatabasePool
    /// Rung after every commit that appended events; event streams wait on it.
    let bell = EventBell()
    /// The database's directory (uploads in progress are kept there, on the same disk).
    let directory: String

    public init(path: String) throws {
        let dir = (path as NSString).deletingLastPathComponent
        directory = dir.isEmpty ? "." : dir
        if !dir.isEmpty { try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true) }
        var config = Configuration()
        config.busyMode = .timeout(10)
        config.prepareDatabase { db in try db.cachedStatement(sql: "PRAGMA synchronous = NORMAL").execute() }
        pool = try DatabasePool(path: path, configuration: config)
        try ServerSchema.migrator().migrate(pool)
        bell.start(after: try pool.read { db in try Int64.fetchOne(db.cachedStatement(sql: "SELECT seq FROM sqlite_sequence WHERE name = 'events'")) ?? 0 })
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
    func insertKey(_ db: Database, tenantID: String, label: String, role: String, typePermissions: [String: String]?) throws -> ([String: JSONValue], String) {
        let key = Self.mintKey()
        let salt = Data(Self.randomBytes(16))
        let id = "key_" + ItemID.make()
        let now = Self.now()
        let perms = typePermissions.map { JSONCoding.encode($0.mapValues(JSONValue.string)) }
        try db.cachedStatement(sql: """
            INSERT INTO keys(id, tenant_id, label, role, type_permissions, lookup, salt, hash, created_at)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
            """).execute(arguments: [id, tenantID, label, role, perms, String(key.prefix(21)), salt, Self.hash(key, salt: salt), now])
        return (try keyJSON(db, id: id)!, key)
    }

    func keyJSON(_ db: Database, id: String) throws -> [String: JSONValue]? {
        guard let r = try Row.fetchOne(db.cachedStatement(sql: "SELECT k.*, t.operator FROM keys k JOIN tenants t ON t.id = k.tenant_id WHERE k.id = ?"), arguments: [id]) else { return nil }
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

    func insertTenant(_ db: Database, name: String, operator isOperator: Bool) throws -> [String: JSONValue] {
        let id = "tnt_" + ItemID.make()
        let now = Self.now()
        try db.cachedStatement(sql: "INSERT INTO tenants(id, name, operator, created_at) VALUES (?, ?, ?, ?)").execute(arguments: [id, name, isOperator, now])
        return ["id": .string(id), "name": .string(name), "created_at": .string(now)]
    }

    /// W-18 bootstrap: on a server with no keys, the first tenant (the operator) and its admin key.
    public func bootstrap(label: String = "admin") throws -> ([String: JSONValue], String)? {
        try pool.write { db in
            if try Bool.fetchOne(db.cachedStatement(sql: "SELECT EXISTS(SELECT 1 FROM keys)")) ?? false { return nil }
            let tenant = try insertTenant(db, name: "operator", operator: true)
            return try insertKey(db, tenantID: tenant["id"]!.stringValue!, label: label, role: "admin", typePermissions: nil)
        }
    }

    public func createKey(_ p: Principal, label: String, role: String, typePermissions: [String: String]?) throws -> ([String: JSONValue], String) {
        try pool.write { db in try insertKey(db, tenantID: p.tenantID, label: label, role: role, typePermissions: typePermissions) }
    }

    public func listKeys(_ p: Principal) throws -> [[String: JSONValue]] {
        try pool.read { db in
            try String.fetchAll(db.cachedStatement(sql: "SELECT id FROM keys WHERE tenant_id = ? AND revoked_at IS NULL ORDER BY created_at, id"), arguments: [p.tenantID])
                .compactMap { try keyJSON(db, id: $0) }
        }
    }

    /// Revokes a key of the caller's tenant at once; false if there is no such key.
    public func revokeKey(_ p: Principal, id: String) throws -> Bool {
        try pool.write { db in
            try db.cachedStatement(sql: "UPDATE keys SET revoked_at = ? WHERE id = ? AND tenant_id = ? AND revoked_at IS NULL").execute(arguments: [Self.now(), id, p.tenantID])
            return db.changesCount > 0
        }
    }

    public func createTenant(name: String) throws -> ([String: JSONValue], String) {
        try pool.write { db in
            let tenant = try insertTenant(db, name: name, operator: false)
            let (_, key) = try insertKey(db, tenantID: tenant["id"]!.stringValue!, label: "admin", role: "admin", typePermissions: nil)
            return (tenant, key)
        }
    }

    public func tenant(_ p: Principal) throws -> [String: JSONValue] {
        try pool.read { db in
            let r = try Row.fetchOne(db.cachedStatement(sql: "SELECT * FROM tenants WHERE id = ?"), arguments: [p.tenantID])!
            return ["id": .string(r["id"]), "name": .string(r["name"]), "created_at": .string(r["created_at"])]
        }
    }

    /// The principal a bearer token stands for, or nil (unknown, malformed or revoked: 401).
    /// A key's `last_used_at` is kept to the minute.
    public func authenticate(_ token: String) throws -> Principal? {
        guard let (p, lastUsed) = try lookUp(token) else { return nil }
        let now = Date()
        if Timestamp.parse(lastUsed).map({ now.timeIntervalSince1970 - $0 >= 60 }) ?? true {
            try pool.write { db in
                try db.cachedStatement(sql: "UPDATE keys SET last_used_at = ? WHERE id = ?").execute(arguments: [Timestamp.format(now), p.keyID])
            }
        }
        return p
    }

    func lookUp(_ token: String) throws -> (Principal, String)? {
        guard token.hasPrefix("marfa_k1_"), token.count >= 21, token.count <= 200 else { return nil }
        return try pool.read { db in
            for r in try Row.fetchAll(db.cachedStatement(sql: """
                SELECT k.*, t.operator FROM keys k JOIN tenants t ON t.id = k.tenant_id
                WHERE k.lookup = ? AND k.revoked_at IS NULL
                """), arguments: [String(token.prefix(21))]) {
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

    public func storedResponse(_ p: Principal, key: String) throws -> (fingerprint: String, status: Int, body: String)? {
        try pool.read { db in
            try Row.fetchOne(db.cachedStatement(sql: "SELECT fingerprint, status, body FROM idempotency WHERE tenant_id = ? AND key = ?"), arguments: [p.tenantID, key]).map { ($0["fingerprint"], $0["status"], $0["body"]) }
        }
    }

    public func storeResponse(_ p: Principal, key: String, fingerprint: String, status: Int, body: String) throws {
        try pool.write { db in
            try db.cachedStatement(sql: "INSERT OR IGNORE INTO idempotency(tenant_id, key, fingerprint, status, body, created_at) VALUES (?, ?, ?, ?, ?, ?)").execute(arguments: [p.tenantID, key, fingerprint, status, body, Self.now()])
        }
    }
}
