import Foundation
import MarfaModel

/// Edges (wire.md W-11, W-12): typed links between two items of one tenant, with the core types'
/// cardinality rules and no `parent-of` cycles.
extension ServerStore {
    /// W-12 cardinality of the core edge types; anything else is many-to-many.
    enum Cardinality { case manyToMany, oneParent, oneThread, oneToOne }

    static func cardinality(_ edgeType: String) -> Cardinality {
        switch edgeType {
        case "parent-of": return .oneParent
        case "in-thread": return .oneThread
        case "supersedes": return .oneToOne
        default: return .manyToMany
        }
    }

    /// Kebab-case words, optionally dot-namespaced (`acme.reviewed-by`).
    static func isEdgeType(_ s: String) -> Bool {
        guard !s.isEmpty, s.utf8.count <= 128 else { return false }
        return s.split(separator: ".", omittingEmptySubsequences: false).allSatisfy { part in
            part.split(separator: "-", omittingEmptySubsequences: false).allSatisfy { word in
                !word.isEmpty && word.utf8.allSatisfy { (97...122).contains($0) || (48...57).contains($0) }
            }
        }
    }

    static func edgeJSON(_ r: SQLRow) -> [String: JSONValue] {
        ["id": .string(r["id"]), "source_id": .string(r["source_id"]), "target_id": .string(r["target_id"]),
         "edge_type": .string(r["edge_type"]), "properties": .object(JSONCoding.object(from: r["properties"])),
         "created_at": .string(r["created_at"]), "updated_at": .string(r["updated_at"]),
         "tenant_id": .string(r["tenant_id"]), "space_id": .string(r["tenant_id"])]
    }

    static func constraint(_ message: String, _ details: [String: JSONValue] = [:]) -> APIError {
        APIError(400, "edge_constraint_violation", message, details: details.isEmpty ? nil : details)
    }

    func edgeRow(_ db: StoreTx, _ p: Principal, _ id: String) throws -> SQLRow? {
        try db.row("SELECT * FROM edges WHERE tenant_id = ? AND id = ?", [p.tenantID, id])
    }

    /// The edge, if `p` can read both of its ends; else 404 `edge_not_found`.
    func readableEdge(_ db: StoreTx, _ p: Principal, _ id: String) throws -> (edge: SQLRow, sourceType: String, targetType: String) {
        guard Self.isValidID(id), let e = try edgeRow(db, p, id),
              let s = try row(db, p, e["source_id"]), let t = try row(db, p, e["target_id"]),
              p.may("read", type: s["type"]), p.may("read", type: t["type"]) else {
            throw APIError(404, "edge_not_found", "no edge \(id)")
        }
        return (e, s["type"], t["type"])
    }

    /// `POST /edges` → (status, body). A client-minted `id` sent again for the same edge is
    /// acknowledged (200); the same id for another edge is `409 id_reused`.
    public func createEdge(_ p: Principal, _ body: [String: JSONValue]) throws -> (Int, [String: JSONValue]) {
        func idField(_ name: String) throws -> String {
            guard let v = body[name], v != .null else { throw APIError.missing(name) }
            guard let s = v.stringValue, Self.isValidID(s) else { throw APIError(400, "invalid_id", "\(name) is not an item id") }
            return s
        }
        let sourceID = try idField("source_id"), targetID = try idField("target_id")
        guard let typeValue = body["edge_type"], typeValue != .null else { throw APIError.missing("edge_type") }
        guard let edgeType = typeValue.stringValue, Self.isEdgeType(edgeType) else {
            throw APIError.validation("edge_type is kebab-case, optionally dot-namespaced (e.g. references, acme.reviewed-by)", field: "edge_type")
        }
        var props: [String: JSONValue] = [:]
        if let v = body["properties"], v != .null {
            guard case .object(let o) = v else { throw APIError.validation("properties must be an object", field: "properties") }
            props = o
        }
        if edgeType == "in-thread", let pos = props["position"], pos != .null {
            switch pos { case .int, .double: break
            default: throw APIError.validation("an in-thread edge's position is a number", field: "properties.position") }
        }
        var id = ItemID.make()
        if let v = body["id"], v != .null {
            guard let s = v.stringValue, Self.isValidID(s) else { throw APIError(400, "invalid_id", "id must be 1-128 letters, digits, '-' or '_'") }
            id = s
        }
        return try write { db in
            let source = try writable(db, p, sourceID)
            // Both ends locked: the cardinality and cycle checks below see every edge committed
            // before this one and none that commits while it runs.
            let target = try readable(db, p, targetID, lock: true)
            if let existing = try edgeRow(db, p, id) {
                guard (existing["source_id"] as String) == sourceID, (existing["target_id"] as String) == targetID,
                      (existing["edge_type"] as String) == edgeType else {
                    throw APIError(409, "id_reused", "id \(id) names another edge")
                }
                return (200, ["edge": .object(Self.edgeJSON(existing)), "acknowledged": .bool(true)])
            }
            try checkCardinality(db, p, source: sourceID, target: targetID, edgeType: edgeType)
            let now = Self.now()
            try db.execute("""
                INSERT INTO edges(tenant_id, id, source_id, target_id, edge_type, properties, created_at, updated_at)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                """, [p.tenantID, id, sourceID, targetID, edgeType, JSONCoding.encode(props), now, now])
            let edge = Self.edgeJSON(try edgeRow(db, p, id)!)
            try appendEvent(db, p, name: "edge.created", edgeType: edgeType, sourceType: source["type"], targetType: target["type"], data: edge)
            return (201, ["edge": .object(edge)])
        }
    }

    /// W-12: one edge per (source, type, target); the core types' cardinality; no `parent-of` cycle.
    func checkCardinality(_ db: StoreTx, _ p: Principal, source: String, target: String, edgeType: String) throws {
        func existing(_ where: String, _ id: String) throws -> String? {
            try db.value(String.self, "SELECT id FROM edges WHERE tenant_id = ? AND edge_type = ? AND \(`where`) = ? LIMIT 1", [p.tenantID, edgeType, id])
        }
        if let dup = try db.value(String.self, "SELECT id FROM edges WHERE tenant_id = ? AND source_id = ? AND edge_type = ? AND target_id = ?", [p.tenantID, source, edgeType, target]) {
            throw Self.constraint("\(source) already has a \(edgeType) edge to \(target)", ["existing_edge_id": .string(dup)])
        }
        switch Self.cardinality(edgeType) {
        case .manyToMany:
            break
        case .oneParent:
            if source == target { throw APIError(400, "edge_cycle", "an item cannot be its own parent") }
            if let other = try existing("target_id", target) {
                throw Self.constraint("\(target) already has a parent", ["existing_edge_id": .string(other)])
            }
            // The new edge closes a cycle if the target is already an ancestor of the source.
            var cur = source
            var seen: Set<String> = [cur]
            while let parent = try db.value(String.self, "SELECT source_id FROM edges WHERE tenant_id = ? AND edge_type = 'parent-of' AND target_id = ?", [p.tenantID, cur]) {
                if parent == target { throw APIError(400, "edge_cycle", "\(target) is an ancestor of \(source): parent-of would make a cycle") }
                guard seen.insert(parent).inserted else { break }
                cur = parent
            }
        case .oneThread:
            if let other = try existing("source_id", source) {
                throw Self.constraint("\(source) is already in a thread", ["existing_edge_id": .string(other)])
            }
        case .oneToOne:
            if source == target { throw Self.constraint("an item cannot supersede itself") }
            if let other = try existing("source_id", source) {
                throw Self.constraint("\(source) already supersedes an item", ["existing_edge_id": .string(other)])
            }
            if let other = try existing("target_id", target) {
                throw Self.constraint("\(target) is already superseded", ["existing_edge_id": .string(other)])
            }
        }
    }

    public func getEdge(_ p: Principal, _ id: String) throws -> [String: JSONValue] {
        try read { db in ["edge": .object(Self.edgeJSON(try readableEdge(db, p, id).edge))] }
    }

    /// `DELETE /edges/{id}`: needs write access to the source's type.
    public func deleteEdge(_ p: Principal, _ id: String) throws -> [String: JSONValue] {
        try write { db in
            let (e, sourceType, targetType) = try readableEdge(db, p, id)
            guard p.may("write", type: sourceType) else { throw APIError(403, "type_not_permitted", "this key may not change items of type \(sourceType)") }
            try db.execute("DELETE FROM edges WHERE tenant_id = ? AND id = ?", [p.tenantID, id])
            try appendEvent(db, p, name: "edge.deleted", edgeType: e["edge_type"], sourceType: sourceType, targetType: targetType, data: [
                "id": .string(id), "edge_type": .string(e["edge_type"]), "source_id": .string(e["source_id"]), "target_id": .string(e["target_id"]),
            ])
            return ["ok": .bool(true)]
        }
    }

    public struct EdgeQuery: Sendable {
        public var edgeTypes: [String] = []
        public var updatedAfter: String?
        /// Outbound (`source`) or inbound (`target`) edges of one item.
        public var item: (id: String, end: String)?
        public var limit = 50
        public var cursor: String?
        public init() {}
    }

    /// `GET /edges`, `GET /items/{id}/edges`, `GET /items/{id}/backrefs` (W-6 pages by `(updated_at, id)`).
    public func listEdges(_ p: Principal, _ q: EdgeQuery) throws -> [String: JSONValue] {
        let after = try Self.cursorPair(q.cursor)
        return try read { db in
            if let (id, _) = q.item { _ = try readable(db, p, id) }
            var sql = "SELECT e.* FROM edges e"
            var args: [any SQLBindable] = []
            var conditions = ["e.tenant_id = ?"]
            args.append(p.tenantID)
            if let readable = try readableTypes(db, p) {
                // Edges whose two ends the key can read.
                let list = readable.isEmpty ? "NULL" : readable.map { _ in "?" }.joined(separator: ",")
                sql += " JOIN items s ON s.tenant_id = e.tenant_id AND s.id = e.source_id JOIN items t ON t.tenant_id = e.tenant_id AND t.id = e.target_id"
                conditions += ["s.type IN (\(list))", "t.type IN (\(list))"]
                args += readable + readable
            }
            if let (id, end) = q.item { conditions.append("e.\(end)_id = ?"); args.append(id) }
            if !q.edgeTypes.isEmpty {
                conditions.append("e.edge_type IN (" + q.edgeTypes.map { _ in "?" }.joined(separator: ",") + ")")
                args += q.edgeTypes
            }
            if let u = q.updatedAfter { conditions.append("e.updated_at >= ?"); args.append(u) }
            if let (u, id) = after { conditions.append("(e.updated_at, e.id) > (?, ?)"); args += [u, id] }
            sql += " WHERE " + conditions.joined(separator: " AND ") + " ORDER BY e.updated_at, e.id LIMIT ?"
            args.append(q.limit + 1)
            let (rows, cursor) = Self.page(try db.rows(sql, (args)), limit: q.limit)
            return ["data": .array(rows.map { .object(Self.edgeJSON($0)) }), "cursor": cursor, "has_more": .bool(cursor != .null)]
        }
    }
}
