import Foundation
import MarfaModel

/// Items (wire.md §2): versions with a snapshot each, W-7 conflicts, states, tags.
extension ServerStore {
    static let states: Set<String> = ["active", "archived", "trashed"]
    static let tiers: Set<String> = ["library", "feed"]
    static let transitions: [String: Set<String>] = ["active": ["archived", "trashed"], "archived": ["active", "trashed"], "trashed": ["active"]]

    static func isValidID(_ s: String) -> Bool {
        !s.isEmpty && s.utf8.count <= 128 && s.utf8.allSatisfy { ($0 >= 48 && $0 <= 57) || ($0 >= 65 && $0 <= 90) || ($0 >= 97 && $0 <= 122) || $0 == 45 || $0 == 95 }
    }

    static func checkTags(_ v: JSONValue?) throws -> [String] {
        guard let v else { return [] }
        guard case .array(let a) = v else { throw APIError.validation("tags must be an array of strings", field: "tags") }
        var out = Set<String>()
        for t in a {
            guard let s = t.stringValue, TagRule.isValid(s) else { throw APIError.validation(TagRule.description, field: "tags") }
            out.insert(s)
        }
        return out.sorted()
    }

    static func checkProperties(_ props: [String: JSONValue], type t: TypeSchema, complete: Bool) throws {
        for (name, spec) in t.fields {
            guard let v = props[name], v != .null else {
                if complete && spec.required == true { throw APIError.missing("properties.\(name)") }
                continue
            }
            let ok: Bool
            switch (spec.type, v) {
            case ("string", .string), ("boolean", .bool), ("number", .int), ("number", .double), ("array", .array), ("object", .object): ok = true
            default: ok = false
            }
            if !ok { throw APIError(400, "invalid_properties", "properties.\(name) must be of type \(spec.type)", details: ["field": .string(name)]) }
            if let max = spec.maxLength, case .string(let s) = v, s.count > max {
                throw APIError(400, "invalid_properties", "properties.\(name) is longer than \(max)", details: ["field": .string(name)])
            }
        }
    }

    static func itemJSON(_ r: SQLRow) -> [String: JSONValue] {
        var o: [String: JSONValue] = [
            "id": .string(r["id"]), "type": .string(r["type"]), "properties": .object(JSONCoding.object(from: r["properties"])),
            "version": .int(r["version"]), "schema_version": .int(r["schema_version"]), "source": .string(r["source"]),
            "timestamp": .string(r["timestamp"]), "created_at": .string(r["created_at"]), "updated_at": .string(r["updated_at"]),
            "tenant_id": .string(r["tenant_id"]), "space_id": .string(r["tenant_id"]),
            "state": .string(r["state"]), "tier": .string(r["tier"]),
        ]
        if let sid: String = r["source_id"] { o["source_id"] = .string(sid) }
        return o
    }

    /// The item's row; `lock`: held until the transaction ends (PostgreSQL's `FOR UPDATE`), so
    /// concurrent changes of one item, from any process, run one after the other on its latest state.
    func row(_ db: StoreTx, _ p: Principal, _ id: String, lock: Bool = false) throws -> SQLRow? {
        try db.row("SELECT * FROM items WHERE tenant_id = ? AND id = ?" + (lock ? db.dialect.forUpdate : ""), [p.tenantID, id])
    }

    /// The item, readable by `p`, or 404 (an item of a type the key may not read does not exist for it).
    func readable(_ db: StoreTx, _ p: Principal, _ id: String, lock: Bool = false) throws -> SQLRow {
        guard Self.isValidID(id) else { throw APIError(400, "invalid_id", "not an item id: \(id)") }
        guard let r = try row(db, p, id, lock: lock), p.may("read", type: r["type"]) else { throw APIError.itemNotFound(id) }
        return r
    }

    /// The item, changeable by `p` (403 otherwise), locked for the rest of the transaction.
    func writable(_ db: StoreTx, _ p: Principal, _ id: String) throws -> SQLRow {
        let r = try readable(db, p, id, lock: true)
        guard p.may("write", type: r["type"]) else { throw APIError(403, "type_not_permitted", "this key may not change items of type \(r["type"] as String)") }
        return r
    }

    func tags(_ db: StoreTx, _ p: Principal, _ id: String) throws -> [String] {
        try db.values(String.self, "SELECT tag FROM tags WHERE tenant_id = ? AND item_id = ? ORDER BY tag", [p.tenantID, id])
    }

    func envelope(_ db: StoreTx, _ p: Principal, _ r: SQLRow) throws -> [String: JSONValue] {
        let id: String = r["id"]
        return ["item": .object(Self.itemJSON(r)),
                "metadata": .object(["item_id": .string(id), "tags": .array(try tags(db, p, id).map(JSONValue.string)),
                                     "extensions": .object(JSONCoding.object(from: r["extensions"]))])]
    }

    /// `metadata.changed`'s data (W-15, exactly): the item's tags, tier and state as they are now.
    /// Extensions are not in it; a client reads them from the item (`GET /items/{id}`).
    func metadataEvent(_ db: StoreTx, _ p: Principal, _ r: SQLRow) throws -> [String: JSONValue] {
        ["item_id": .string(r["id"]), "tags": .array(try tags(db, p, r["id"]).map(JSONValue.string)), "tier": .string(r["tier"]),
         "state": .string(r["state"])]
    }

    // MARK: create, read, list

    /// `POST /items`: (status, body).
    public func createItem(_ p: Principal, _ body: [String: JSONValue]) throws -> (Int, [String: JSONValue]) {
        guard let typeValue = body["type"] else { throw APIError.missing("type") }
        guard let typeID = typeValue.stringValue else { throw APIError.validation("type must be a string", field: "type") }
        guard p.may("write", type: typeID) else { throw APIError(403, "type_not_permitted", "this key may not create items of type \(typeID)") }
        var props: [String: JSONValue] = [:]
        if let v = body["properties"] {
            guard case .object(let o) = v else { throw APIError.validation("properties must be an object", field: "properties") }
            props = o
        }
        let state = try Self.enumField(body, "state", Self.states) ?? "active"
        let tier = try Self.enumField(body, "tier", Self.tiers) ?? "library"
        let tags = try Self.checkTags(body["tags"])
        let id: String
        if let v = body["id"] {
            guard let s = v.stringValue, Self.isValidID(s) else { throw APIError(400, "invalid_id", "id must be 1-128 letters, digits, '-' or '_'") }
            id = s
        } else { id = ItemID.make() }
        let timestamp = try Self.timestampField(body, "timestamp")
        var sourceID: String?
        if let v = body["source_id"], v != .null {
            guard let s = v.stringValue else { throw APIError.validation("source_id must be a string", field: "source_id") }
            sourceID = s
        }
        return try write { db in
            let t = try type(db, tenantID: p.tenantID, typeID)
            try Self.checkProperties(props, type: t, complete: true)
            try checkBlobRefs(db, p, props, type: typeID)
            if let existing = try row(db, p, id) {
                guard (existing["type"] as String) == typeID else { throw APIError(409, "id_reused", "id \(id) names an item of another type") }
                var out = try envelope(db, p, existing)
                out["acknowledged"] = .bool(true)
                return (200, out)
            }
            let now = Self.now()
            try db.execute("""
                INSERT INTO items(tenant_id, id, type, properties, version, schema_version, source, source_id, timestamp, created_at, updated_at, state, tier)
                VALUES (?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?, ?)
                """, [p.tenantID, id, typeID, JSONCoding.encode(props), t.version, p.label, sourceID, timestamp ?? now, now, now, state, tier])
            try db.execute("INSERT INTO item_versions(tenant_id, item_id, version, properties, created_at) VALUES (?, ?, 1, ?, ?)", [p.tenantID, id, JSONCoding.encode(props), now])
            for tag in tags { try db.execute("INSERT INTO tags(tenant_id, item_id, tag) VALUES (?, ?, ?)", [p.tenantID, id, tag]) }
            let r = try row(db, p, id)!
            try appendEvent(db, p, name: "item.created", itemType: typeID, data: Self.itemJSON(r))
            if !tags.isEmpty { try appendEvent(db, p, name: "metadata.changed", itemType: typeID, data: try metadataEvent(db, p, r)) }
            return (201, try envelope(db, p, r))
        }
    }

    public func getItem(_ p: Principal, _ id: String) throws -> [String: JSONValue] {
        try read { db in try envelope(db, p, try readable(db, p, id)) }
    }

    public struct ListQuery: Sendable {
        public var type: String?
        public var state: String?
        public var tier: String?
        public var tags: [String] = []
        /// The key (by its label) that created the items.
        public var source: String?
        /// Bounds on the items' own `timestamp` (their effective time): since inclusive, until exclusive.
        public var since: String?
        public var until: String?
        public var updatedAfter: String?
        public var includeMetadata = false
        public var limit = 50
        public var cursor: String?
        public init() {}
    }

    /// `GET /items` (W-6): ordered by `(updated_at, id)`; the cursor is the last row's pair.
    public func listItems(_ p: Principal, _ q: ListQuery) throws -> [String: JSONValue] {
        let after = try Self.cursorPair(q.cursor)
        return try read { db in
            var sql = "SELECT items.* FROM items WHERE items.tenant_id = ?"
            var args: [any SQLBindable] = [p.tenantID]
            // Filtered by tags: the list walks the smallest tag's rows in list order (its index
            // carries each item's `updated_at`), so a page costs about its own items whatever the
            // tag's size; the other tags are membership tests.
            var tags = q.tags
            var order = "updated_at, id"
            func size(_ tag: String) throws -> Int {
                try db.value(Int.self, "SELECT count(*) FROM tags WHERE tenant_id = ? AND tag = ?", [p.tenantID, tag]) ?? 0
            }
            if let first = tags.count == 1 ? tags.first : try tags.map({ ($0, try size($0)) }).min(by: { $0.1 < $1.1 })?.0 {
                sql = "SELECT items.* FROM tags drive \(db.dialect.orderedJoin) items ON items.tenant_id = drive.tenant_id AND items.id = drive.item_id WHERE drive.tenant_id = ? AND drive.tag = ?"
                args = [p.tenantID, first]
                tags.removeAll { $0 == first }
                order = "drive.updated_at, drive.item_id"
            }
            func typeIn(_ ids: [String]) {
                sql += ids.isEmpty ? " AND 1 = 0" : " AND type IN (" + ids.map { _ in "?" }.joined(separator: ",") + ")"
                args += ids
            }
            // A member key reads the types it has a permission on, and their subtypes.
            if let readable = try readableTypes(db, p) { typeIn(readable) }
            if let t = q.type { typeIn(try typeAndSubtypes(db, tenantID: p.tenantID, t)) }
            switch q.state {
            case nil: sql += " AND state != 'trashed'"
            case "any"?: break
            case let s?: sql += " AND state = ?"; args.append(s)
            }
            if let t = q.tier { sql += " AND tier = ?"; args.append(t) }
            // Other tags: membership in each tag's items, from its index.
            for tag in tags { sql += " AND id IN (SELECT item_id FROM tags WHERE tenant_id = ? AND tag = ?)"; args += [p.tenantID, tag] }
            if let s = q.source { sql += " AND source = ?"; args.append(s) }
            // Compared as instants: a timestamp keeps the offset its client gave.
            if let s = q.since { sql += " AND \(db.dialect.instant("items.timestamp")) >= \(db.dialect.instant("?"))"; args.append(s) }
            if let u = q.until { sql += " AND \(db.dialect.instant("items.timestamp")) < \(db.dialect.instant("?"))"; args.append(u) }
            if let u = q.updatedAfter { sql += " AND (\(order)) >= (?, '')"; args.append(u) }
            if let (u, id) = after { sql += " AND (\(order)) > (?, ?)"; args += [u, id] }
            sql += " ORDER BY \(order) LIMIT ?"; args.append(q.limit + 1)
            let (rows, cursor) = Self.page(try db.rows(sql, (args)), limit: q.limit)
            let data: [JSONValue] = try rows.map { q.includeMetadata ? .object(try envelope(db, p, $0)) : .object(Self.itemJSON($0)) }
            return ["data": .array(data), "cursor": cursor, "has_more": .bool(cursor != .null)]
        }
    }

    /// W-6: the first `limit` rows (fetched `limit + 1`) and the cursor after the last, or null.
    static func page(_ fetched: [SQLRow], limit: Int) -> ([SQLRow], JSONValue) {
        guard fetched.count > limit else { return (fetched, .null) }
        let rows = Array(fetched.prefix(limit))
        return (rows, .string(Data(((rows.last!["updated_at"] as String) + "\n" + (rows.last!["id"] as String)).utf8).base64EncodedString()))
    }

    static func cursorPair(_ cursor: String?) throws -> (String, String)? {
        guard let c = cursor else { return nil }
        guard let d = Data(base64Encoded: c), let s = String(data: d, encoding: .utf8), let bar = s.firstIndex(of: "\n") else {
            throw APIError.validation("cursor is not one this server gave", field: "cursor")
        }
        return (String(s[..<bar]), String(s[s.index(after: bar)...]))
    }

    // MARK: update (W-7)

    /// `PATCH /items/{id}`.
    public func patchItem(_ p: Principal, _ id: String, _ body: [String: JSONValue]) throws -> [String: JSONValue] {
        var base: Int64?
        if let v = body["version"], v != .null {
            guard case .int(let n) = v, n >= 1 else { throw APIError.validation("version must be a positive integer", field: "version") }
            base = n
        }
        var patch: [String: JSONValue] = [:]
        if let v = body["properties"] {
            guard case .object(let o) = v else { throw APIError.validation("properties must be an object", field: "properties") }
            patch = o
        }
        let replace: Bool
        switch body["properties_mode"] {
        case nil, .string("merge")?: replace = false
        case .string("replace")?: replace = true
        default: throw APIError.validation("properties_mode is merge or replace", field: "properties_mode")
        }
        let tier = try Self.enumField(body, "tier", Self.tiers)
        var extPatch: [String: JSONValue]?
        if let v = body["extensions"], v != .null {
            guard case .object(let o) = v else { throw APIError.validation("extensions must be an object of namespaces", field: "extensions") }
            extPatch = o
        }
        return try write { db in
            let r = try writable(db, p, id)
            let t = try type(db, tenantID: p.tenantID, r["type"])
            let current = JSONCoding.object(from: r["properties"])
            let version: Int64 = r["version"]
            var next = replace ? patch : Self.merged(current, patch)
            if let base, base != version {
                next = try mergeStalePatch(db, p, id, base: base, current: current, version: version, patch: patch, replace: replace, type: t)
            }
            try Self.checkProperties(next, type: t, complete: true)
            if next["blob_ref"] != current["blob_ref"] || next["attachments"] != current["attachments"] {
                try checkBlobRefs(db, p, next, type: r["type"])
            }
            let now = Self.now()
            // Extensions (metadata): each namespace given replaces the stored one; null removes it.
            let oldExt = JSONCoding.object(from: r["extensions"])
            var newExt = oldExt
            for (k, v) in extPatch ?? [:] { if v == .null { newExt.removeValue(forKey: k) } else { newExt[k] = v } }
            if newExt != oldExt {
                try db.execute("UPDATE items SET extensions = ?, updated_at = ? WHERE tenant_id = ? AND id = ?", [JSONCoding.encode(newExt), now, p.tenantID, id])
                try appendEvent(db, p, name: "metadata.changed", itemType: r["type"], data: try metadataEvent(db, p, try row(db, p, id)!))
            }
            let changed = next != current || (tier != nil && tier != r["tier"])
            if changed {
                try db.execute("UPDATE items SET properties = ?, version = version + 1, tier = COALESCE(?, tier), updated_at = ? WHERE tenant_id = ? AND id = ?", [JSONCoding.encode(next), tier, now, p.tenantID, id])
                try db.execute("INSERT INTO item_versions(tenant_id, item_id, version, properties, created_at) VALUES (?, ?, ?, ?, ?)", [p.tenantID, id, version + 1, JSONCoding.encode(next), now])
                let updated = try row(db, p, id)!
                try appendEvent(db, p, name: "item.updated", itemType: r["type"], data: Self.itemJSON(updated))
                return try envelope(db, p, updated)
            }
            return try envelope(db, p, try row(db, p, id)!)
        }
    }

    /// A PATCH made from version `base`, older than the item's `version` (W-7): the fields the
    /// request changed are applied over the current state, so the server's own changes stay,
    /// unless both changed a field (`409 version_conflict`, with the ancestor and the type's merge
    /// policy) or `base` is not known (`409 ancestor_unavailable`).
    func mergeStalePatch(_ db: StoreTx, _ p: Principal, _ id: String, base: Int64, current: [String: JSONValue], version: Int64,
                         patch: [String: JSONValue], replace: Bool, type t: TypeSchema) throws -> [String: JSONValue] {
        let ancestorText = base < version ? try db.value(String.self, "SELECT properties FROM item_versions WHERE tenant_id = ? AND item_id = ? AND version = ?", [p.tenantID, id, base]) : nil
        // A version the item never had (newer than its own: a server restored from an older
        // backup) has no ancestor either: `ancestor_unavailable`, with the current state, so
        // the client resolves two-way as for a pruned version.
        guard let ancestorText else {
            throw APIError(409, "ancestor_unavailable", "version \(base) of \(id) is not known",
                           extra: ["current": .object(["version": .int(version), "properties": .object(current)]), "requested_version": .int(base)])
        }
        let ancestor = JSONCoding.object(from: ancestorText)
        let serverChanged = Set(Set(ancestor.keys).union(current.keys).filter { ancestor[$0] != current[$0] })
        let requestKeys = replace ? Set(ancestor.keys).union(patch.keys) : Set(patch.keys)
        let requestChanged = requestKeys.filter { patch[$0] != ancestor[$0] }
        let conflicting = serverChanged.intersection(requestChanged).sorted()
        if !conflicting.isEmpty {
            throw APIError(409, "version_conflict", "\(id) changed on the server since version \(base)", extra: [
                "current": .object(["version": .int(version), "properties": .object(current)]),
                "ancestor": .object(["version": .int(base), "properties": .object(ancestor)]),
                "conflicting_fields": .array(conflicting.map(JSONValue.string)),
                "merge_policy": .object(["default": .string(t.mergePolicy.default.rawValue),
                                         "fields": .object(t.mergePolicy.fields.mapValues { .string($0.rawValue) })]),
            ])
        }
        // A stale edit of fields the server did not change: only the fields it changed are
        // applied over the current state, so the server's own changes stay.
        let changes = patch.filter { requestChanged.contains($0.key) }
        var next = replace ? current.merging(changes) { _, new in new } : Self.merged(current, changes)
        if replace { for k in requestChanged where patch[k] == nil { next.removeValue(forKey: k) } }
        return next
    }

    /// A shallow merge of `patch` into `current` (W-7): each key the patch names takes its value,
    /// a null removes it; every other property stays as it is, a null one too (an item created
    /// with `description: null` keeps it through a PATCH of its extensions or of another field).
    static func merged(_ current: [String: JSONValue], _ patch: [String: JSONValue]) -> [String: JSONValue] {
        var next = current
        for (k, v) in patch {
            if v == .null { next.removeValue(forKey: k) } else { next[k] = v }
        }
        return next
    }

    // MARK: states

    /// Moves an item to `state` (`POST …/transition`, `…/restore`, `DELETE`).
    public func setState(_ p: Principal, _ id: String, to state: String, restore: Bool = false) throws -> [String: JSONValue] {
        try write { db in
            let r = try writable(db, p, id)
            let from: String = r["state"]
            if restore {
                guard from != "active" else { throw APIError(400, "invalid_transition", "\(id) is already active") }
            } else if from != state {
                guard Self.transitions[from]?.contains(state) == true else {
                    throw APIError(400, "invalid_transition", "\(from) → \(state) is not a transition")
                }
            }
            if from != state {
                try db.execute("UPDATE items SET state = ?, updated_at = ? WHERE tenant_id = ? AND id = ?", [state, Self.now(), p.tenantID, id])
            }
            let updated = try row(db, p, id)!
            if from != state {
                let name = state == "trashed" ? "item.deleted" : restore ? "item.restored" : "item.state_changed"
                let data: [String: JSONValue] = name == "item.deleted" ? ["id": .string(id), "type": .string(r["type"])] : Self.itemJSON(updated)
                try appendEvent(db, p, name: name, itemType: r["type"], data: data)
            }
            return try envelope(db, p, updated)
        }
    }

    /// `GET /items/{id}/versions`: the snapshots before the current one, oldest first.
    public func versions(_ p: Principal, _ id: String) throws -> [String: JSONValue] {
        try read { db in
            let r = try readable(db, p, id)
            let rows = try db.rows("SELECT version, properties, created_at FROM item_versions WHERE tenant_id = ? AND item_id = ? AND version < ? ORDER BY version", [p.tenantID, id, r["version"] as Int64])
            return ["versions": .array(rows.map {
                .object(["id": .string("\(id)@\($0["version"] as Int64)"), "item_id": .string(id), "version": .int($0["version"]),
                         "properties": .object(JSONCoding.object(from: $0["properties"])), "created_at": .string($0["created_at"])])
            })]
        }
    }

    // MARK: tags

    public enum TagChange: Sendable { case replace([String]), add([String]), remove(String) }

    public func changeTags(_ p: Principal, _ id: String, _ change: TagChange) throws -> [String: JSONValue] {
        try write { db in
            let r = try writable(db, p, id)
            let old = Set(try tags(db, p, id))
            var new = old
            switch change {
            case .replace(let t): new = Set(t)
            case .add(let t): new.formUnion(t)
            case .remove(let t): new.remove(t)
            }
            if new != old {
                try db.execute("DELETE FROM tags WHERE tenant_id = ? AND item_id = ?", [p.tenantID, id])
                for tag in new.sorted() { try db.execute("INSERT INTO tags(tenant_id, item_id, tag) VALUES (?, ?, ?)", [p.tenantID, id, tag]) }
                try db.execute("UPDATE items SET updated_at = ? WHERE tenant_id = ? AND id = ?", [Self.now(), p.tenantID, id])
                try appendEvent(db, p, name: "metadata.changed", itemType: r["type"], data: try metadataEvent(db, p, try row(db, p, id)!))
            }
            return try envelope(db, p, try row(db, p, id)!)
        }
    }

    public func tagCounts(_ p: Principal) throws -> [String: JSONValue] {
        try read { db in
            let rows = try db.rows("SELECT tag, count(*) AS n FROM tags WHERE tenant_id = ? GROUP BY tag ORDER BY tag", [p.tenantID])
            return ["tags": .array(rows.map { .object(["tag": .string($0["tag"]), "count": .int($0["n"])]) })]
        }
    }

    // MARK: helpers

    static func enumField(_ body: [String: JSONValue], _ name: String, _ allowed: Set<String>) throws -> String? {
        guard let v = body[name], v != .null else { return nil }
        guard let s = v.stringValue, allowed.contains(s) else {
            throw APIError.validation("\(name) is one of \(allowed.sorted().joined(separator: ", "))", field: name)
        }
        return s
    }

    static func timestampField(_ body: [String: JSONValue], _ name: String) throws -> String? {
        guard let v = body[name], v != .null else { return nil }
        guard let s = v.stringValue, Timestamp.parse(s) != nil else { throw APIError.validation("\(name) must be an RFC 3339 timestamp", field: name) }
        return s
    }
}
