import Foundation
import MarfaModel

/// Types (wire.md W-9, W-10): the built-in types and the custom types a tenant registers.
/// A custom type is stored resolved: its parent's fields and merge policy, then its own.
extension ServerStore {
    static let fieldTypes: Set<String> = ["string", "number", "boolean", "array", "object"]
    static let builtInParents: [String: String] = Dictionary(uniqueKeysWithValues: TypeSchema.builtIns.compactMap { t in t.parent.map { (t.id, $0) } })

    /// The types `tenantID` can use: the built-in ones, then its own by id.
    func types(_ db: StoreTx, tenantID: String) throws -> [TypeSchema] {
        let custom = try db.values(String.self, "SELECT definition FROM types WHERE tenant_id = ? ORDER BY id", [tenantID])
        return try TypeSchema.builtIns + custom.map { try JSONCoding.decode(TypeSchema.self, from: $0) }
    }

    /// The type schema for `id` as `tenantID` sees it, or 404 `type_not_found`.
    func type(_ db: StoreTx, tenantID: String, _ id: String) throws -> TypeSchema {
        if let t = TypeSchema.builtIns.first(where: { $0.id == id }) { return t }
        guard let text = try db.value(String.self, "SELECT definition FROM types WHERE tenant_id = ? AND id = ?", [tenantID, id]) else {
            throw APIError(404, "type_not_found", "no type \(id)")
        }
        return try JSONCoding.decode(TypeSchema.self, from: text)
    }

    /// `id` and every type that has it as an ancestor (W-9: lists and filters by a type include its subtypes).
    func typeAndSubtypes(_ db: StoreTx, tenantID: String, _ id: String) throws -> [String] {
        let all = try types(db, tenantID: tenantID)
        let parents = Dictionary(uniqueKeysWithValues: all.compactMap { t in t.parent.map { (t.id, $0) } })
        return all.map(\.id).filter { t in
            var cur: String? = t
            while let c = cur { if c == id { return true }; cur = parents[c] }
            return false
        }.sorted()
    }

    /// The types a member key may read (its permissions, with subtypes); nil for a key that reads all.
    func readableTypes(_ db: StoreTx, _ p: Principal) throws -> [String]? {
        guard p.typePermissions != nil else { return nil }
        return try types(db, tenantID: p.tenantID).map(\.id).filter { p.may("read", type: $0) }
    }

    /// The parents of the tenant's custom types (for permission checks on subtypes).
    func customParents(_ db: StoreTx, tenantID: String) throws -> [String: String] {
        var out: [String: String] = [:]
        for r in try db.rows("SELECT id, parent FROM types WHERE tenant_id = ? AND parent IS NOT NULL", [tenantID]) {
            out[r["id"]] = r["parent"]
        }
        return out
    }

    public func listTypes(_ p: Principal) throws -> [TypeSchema] {
        try read { db in try types(db, tenantID: p.tenantID) }
    }

    public func getType(_ p: Principal, _ id: String) throws -> TypeSchema {
        try read { db in try type(db, tenantID: p.tenantID, id) }
    }

    static func invalidSchema(_ message: String, field: String? = nil) -> APIError {
        APIError(400, "invalid_schema", message, details: field.map { ["field": .string($0)] })
    }

    static func isTypeID(_ s: String) -> Bool {
        guard !s.isEmpty, s.utf8.count <= 128 else { return false }
        return s.split(separator: ".", omittingEmptySubsequences: false).allSatisfy { part in
            guard let first = part.utf8.first, (97...122).contains(first) else { return false }
            return part.utf8.allSatisfy { (97...122).contains($0) || (48...57).contains($0) || $0 == 45 || $0 == 95 }
        }
    }

    /// `POST /types` (W-9): registers a custom type. The same definition again is acknowledged (200);
    /// another definition under a registered id is `409 type_mismatch`.
    public func registerType(_ p: Principal, _ body: [String: JSONValue]) throws -> (Int, [String: JSONValue]) {
        guard p.isAdmin else { throw APIError(403, "forbidden", "registering types needs an admin key") }
        guard let idValue = body["id"] else { throw APIError.missing("id") }
        guard let id = idValue.stringValue, Self.isTypeID(id) else {
            throw APIError.validation("a type id is dot-separated lowercase words (letters, digits, '-', '_'), at most 128 bytes", field: "id")
        }
        guard !id.hasPrefix("core."), id != "core" else { throw Self.invalidSchema("the core. namespace is reserved for built-in types", field: "id") }
        let fields = try Self.fieldSpecs(body["fields"])
        var label = id
        if let v = body["label"], v != .null {
            guard let s = v.stringValue, !s.isEmpty else { throw Self.invalidSchema("label is a non-empty string", field: "label") }
            label = s
        }
        var parentID: String?
        if let v = body["parent"], v != .null {
            guard let s = v.stringValue else { throw Self.invalidSchema("parent is a type id", field: "parent") }
            parentID = s
        }
        let policyBody = body["merge_policy"] ?? .null
        let hintsBody = body["display_hints"] ?? .null
        return try write { db in
            var schema = TypeSchema(id: id, label: label, parent: parentID, fields: [:])
            if let parentID {
                guard parentID != id else { throw Self.invalidSchema("a type cannot be its own parent", field: "parent") }
                let parent: TypeSchema
                do { parent = try type(db, tenantID: p.tenantID, parentID) } catch let e as APIError where e.code == "type_not_found" {
                    throw Self.invalidSchema("parent \(parentID) is not a registered type", field: "parent")
                }
                schema.fields = parent.fields
                schema.mergePolicy = parent.mergePolicy
                schema.displayHints = parent.displayHints
            }
            for (name, f) in fields {
                if let inherited = schema.fields[name], inherited.type != f.type {
                    throw Self.invalidSchema("fields.\(name) is a \(inherited.type) in the parent type", field: "fields.\(name)")
                }
                schema.fields[name] = f
            }
            try Self.setMergePolicy(policyBody, of: &schema)
            try Self.setDisplayHints(hintsBody, of: &schema)
            let definition = JSONCoding.encode(schema)
            let out: [String: JSONValue] = ["type": .object(JSONCoding.object(from: definition))]
            if TypeSchema.builtIns.contains(where: { $0.id == id }) { throw APIError(409, "type_mismatch", "\(id) is a built-in type") }
            if let existing = try db.value(String.self, "SELECT definition FROM types WHERE tenant_id = ? AND id = ?", [p.tenantID, id]) {
                guard (try? JSONCoding.decode(TypeSchema.self, from: existing)) == schema else {
                    throw APIError(409, "type_mismatch", "type \(id) is registered with another definition")
                }
                return (200, out)
            }
            try db.execute("INSERT INTO types(tenant_id, id, parent, definition, created_at) VALUES (?, ?, ?, ?, ?)", [p.tenantID, id, parentID, definition, Self.now()])
            return (201, out)
        }
    }

    /// A type's `fields` (W-9): names to `{type, required?, maxLength?}`.
    static func fieldSpecs(_ value: JSONValue?) throws -> [String: FieldSpec] {
        var fields: [String: FieldSpec] = [:]
        guard let v = value, v != .null else { return fields }
        guard case .object(let o) = v else { throw Self.invalidSchema("fields maps names to {type, required?, maxLength?}", field: "fields") }
        for (name, specValue) in o {
            guard !name.isEmpty, case .object(let spec) = specValue, let type = spec["type"]?.stringValue, Self.fieldTypes.contains(type) else {
                throw Self.invalidSchema("fields.\(name).type is one of \(Self.fieldTypes.sorted().joined(separator: ", "))", field: "fields.\(name)")
            }
            var f = FieldSpec(type: type)
            switch spec["required"] {
            case nil, .null?: break
            case .bool(let b)?: f.required = b
            default: throw Self.invalidSchema("fields.\(name).required is a boolean", field: "fields.\(name)")
            }
            switch spec["maxLength"] {
            case nil, .null?: break
            case .int(let n)? where n >= 0 && type == "string": f.maxLength = Int(n)
            default: throw Self.invalidSchema("fields.\(name).maxLength is a non-negative integer on a string field", field: "fields.\(name)")
            }
            fields[name] = f
        }
        return fields
    }

    /// A type's `merge_policy` (W-9): `{default?, fields?}`, naming only declared fields.
    static func setMergePolicy(_ policyBody: JSONValue, of schema: inout TypeSchema) throws {
        if case .object(let o) = policyBody {
            if let d = o["default"], d != .null {
                guard let s = d.stringValue, let strategy = MergeStrategy(rawValue: s) else {
                    throw Self.invalidSchema("merge_policy.default is last_writer_wins or keep_both_copies", field: "merge_policy.default")
                }
                schema.mergePolicy.default = strategy
            }
            if let f = o["fields"], f != .null {
                guard case .object(let perField) = f else { throw Self.invalidSchema("merge_policy.fields maps fields to strategies", field: "merge_policy.fields") }
                for (name, v) in perField {
                    guard schema.fields[name] != nil else {
                        throw Self.invalidSchema("merge_policy names \(name), which the type does not declare", field: "merge_policy.fields.\(name)")
                    }
                    guard let s = v.stringValue, let strategy = MergeStrategy(rawValue: s) else {
                        throw Self.invalidSchema("merge_policy.fields.\(name) is last_writer_wins or keep_both_copies", field: "merge_policy.fields.\(name)")
                    }
                    schema.mergePolicy.fields[name] = strategy
                }
            }
        } else if policyBody != .null {
            throw Self.invalidSchema("merge_policy is an object {default?, fields?}", field: "merge_policy")
        }
    }

    /// A type's `display_hints` (W-9): `{title_field?, body_field?}`, naming declared fields.
    static func setDisplayHints(_ hintsBody: JSONValue, of schema: inout TypeSchema) throws {
        if case .object(let o) = hintsBody {
            for (key, path) in [("title_field", \DisplayHints.titleField), ("body_field", \DisplayHints.bodyField)] {
                guard let v = o[key], v != .null else { continue }
                guard let s = v.stringValue, schema.fields[s] != nil else {
                    throw Self.invalidSchema("display_hints.\(key) names a declared field", field: "display_hints.\(key)")
                }
                schema.displayHints[keyPath: path] = s
            }
        } else if hintsBody != .null {
            throw Self.invalidSchema("display_hints is an object {title_field?, body_field?}", field: "display_hints")
        }
    }
}
