import Foundation
import MarfaLayout
import MarfaModel
import MarfaStore

extension FileSystem {
    static let readOnlyAttrs: Set<String> = ["id", "type", "version", "created_at", "updated_at", "source", "sync", "blob"]

    /// `getxattr` (§5). `security.*` and `system.*` answer ENODATA at once (FS-17).
    public func getxattr(_ ino: UInt64, name: String) throws -> [UInt8] {
        guard name.hasPrefix("user.") else { throw FSError(.noData, name) }
        let r: Int64 = try locked {
            guard case .item(let r) = try node(ino) else { throw FSError(.noData, name) }
            // The sync state, version and properties are those of the settled file; a staged file
            // has no row yet.
            if name.hasPrefix("user.marfa.") || stagedKey(.item(r)) != nil { try settleNow() }
            return r
        }
        guard let s = try wrap({ try store.item(rowid: r) }) else { throw FSError(.notFound, "item \(r)") }
        if let key = name.dropPrefix("user.marfa.") {
            let value: String?
            switch key {
            case "id": value = s.item.id
            case "type": value = s.item.type
            case "version": value = String(s.item.version)
            case "created_at": value = s.item.createdAt
            case "updated_at": value = s.item.updatedAt
            case "source": value = s.item.source
            case "sync": value = s.sync.rawValue
            case "blob": value = TypeSchema.isBlobType(s.item.type) ? s.item.properties["blob_ref"]?.stringValue : nil
            case "tags": value = try wrap { try store.tags(itemID: s.item.id) }.joined(separator: ",")
            case "favorite": value = try wrap { try store.tags(itemID: s.item.id) }.contains("favorite") ? "1" : "0"
            case "tier": value = s.item.tier.rawValue
            case "state": value = s.item.state.rawValue
            default:
                if let prop = key.dropPrefix("prop."), let v = s.item.properties[prop] { value = JSONCoding.encode(v) } else { value = nil }
            }
            guard let value else { throw FSError(.noData, name) }
            return Array(value.utf8)
        }
        guard let v = s.xattrs[name] else { throw FSError(.noData, name) }
        return v
    }

    public func listxattr(_ ino: UInt64) throws -> [String] {
        let r: Int64? = try locked { if case .item(let r) = try node(ino) { try settleNow(); return r }; return nil }
        guard let r, let s = try wrap({ try store.item(rowid: r) }) else { return [] }
        var names = ["id", "type", "version", "created_at", "updated_at", "source", "sync", "tags", "favorite", "tier", "state"]
        if TypeSchema.isBlobType(s.item.type) { names.append("blob") }
        let body = store.type(s.item.type).bodyField
        names += s.item.properties.keys.filter { $0 != body }.sorted().map { "prop." + $0 }
        return names.map { "user.marfa." + $0 } + s.xattrs.keys.sorted()
    }

    /// `setxattr` (§5): tags, favorite, tier, state and properties; other `user.*` names are kept (FS-17).
    /// Invalid values give EINVAL and change nothing.
    public func setxattr(_ ino: UInt64, name: String, value: [UInt8], create: Bool = false, replace: Bool = false) throws {
        guard name.hasPrefix("user.") else { throw FSError(.notSupported, "only user.* attributes are kept") }
        let inv: [Invalidation] = try locked {
            try settleNow()
            guard case .item(let r) = try node(ino) else { throw FSError(.notPermitted, "attributes belong to item files") }
            guard let text = String(validating: value, as: UTF8.self) else {
                if name.hasPrefix("user.marfa.") { throw FSError(.invalid, "\(name) takes UTF-8 text") }
                try wrap { try store.setXattr(rowid: r, name: name, value: value) }
                return []
            }
            let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
            guard let key = name.dropPrefix("user.marfa.") else {
                if create || replace {
                    let exists = (try? getxattrUnlocked(r, name)) != nil
                    if create && exists { throw FSError(.exists, name) }
                    if replace && !exists { throw FSError(.noData, name) }
                }
                try wrap { try store.setXattr(rowid: r, name: name, value: value) }
                return []
            }
            if Self.readOnlyAttrs.contains(key) { throw FSError(.notPermitted, "\(name) is read-only") }
            guard let s = catalog.items[r] else { throw FSError(.notFound, "item") }
            switch key {
            case "tags":
                let tags = trimmed.isEmpty ? [] : trimmed.split(separator: ",", omittingEmptySubsequences: false).map {
                    $0.trimmingCharacters(in: .whitespaces)
                }
                for t in tags { try Self.checkTag(t) }
                try wrap { try store.setTags(rowid: r, Set(tags)) }
            case "favorite":
                guard trimmed == "1" || trimmed == "0" else { throw FSError(.invalid, "user.marfa.favorite takes 1 or 0") }
                var tags = catalog.tagsOf[r] ?? []
                if trimmed == "1" { tags.insert("favorite") } else { tags.remove("favorite") }
                try wrap { try store.setTags(rowid: r, tags) }
            case "tier":
                guard let t = Tier(rawValue: trimmed) else { throw FSError(.invalid, "tier must be library or feed") }
                _ = try wrap { try store.setTier(rowid: r, t) }
            case "state":
                guard let st = ItemState(rawValue: trimmed) else { throw FSError(.invalid, "state must be active, archived or trashed") }
                _ = try wrap { try store.setState(rowid: r, st) }
            default:
                guard let prop = key.dropPrefix("prop."), !prop.isEmpty else { throw FSError(.notPermitted, "\(name) is not a marfa attribute") }
                // JSON, or else plain text taken as a string (`setfattr -v done`); text that looks like
                // JSON but is not (`{oops`) is refused.
                let v: JSONValue
                if let j = try? JSONCoding.value(from: text) { v = j }
                else if let f = trimmed.first, !"{[\"".contains(f) { v = .string(text) }
                else { throw FSError(.invalid, "\(name) takes a JSON value") }
                if TypeSchema.isBlobType(s.type) && prop == "blob_ref" { throw FSError(.notPermitted, "blob_ref follows the file's bytes") }
                _ = try wrap { try store.setProperty(rowid: r, name: prop, value: v) }
                return try refreshItem(r, contentChanged: true)
            }
            return try refreshItem(r)
        }
        notify(inv)
    }

    func getxattrUnlocked(_ r: Int64, _ name: String) throws -> [UInt8] {
        guard let s = try store.item(rowid: r), let v = s.xattrs[name] else { throw FSError(.noData, name) }
        return v
    }

    public func removexattr(_ ino: UInt64, name: String) throws {
        guard name.hasPrefix("user.") else { throw FSError(.noData, name) }
        let inv: [Invalidation] = try locked {
            try settleNow()
            guard case .item(let r) = try node(ino) else { throw FSError(.noData, name) }
            if let key = name.dropPrefix("user.marfa.") {
                guard let prop = key.dropPrefix("prop.") else { throw FSError(.notPermitted, "\(name) cannot be removed") }
                _ = try wrap { try store.setProperty(rowid: r, name: prop, value: nil) }
                return try refreshItem(r, contentChanged: true)
            }
            do { try store.setXattr(rowid: r, name: name, value: nil) } catch StoreError.notFound { throw FSError(.noData, name) }
            return []
        }
        notify(inv)
    }
}

extension String {
    func dropPrefix(_ p: String) -> String? { hasPrefix(p) ? String(dropFirst(p.count)) : nil }
}
