import Foundation
import MarfaLayout
import MarfaModel
import MarfaStore

extension FileSystem {
    static let readOnlyAttrs: Set<String> = ["id", "type", "version", "created_at", "updated_at", "source", "sync", "blob"]
    /// Read-only attributes that change on their own (a save, a sync): a write of another value is
    /// taken silently and changes nothing, so a copy made earlier can be put back (FS-28).
    static let volatileAttrs: Set<String> = ["version", "updated_at", "sync"]

    /// `getxattr` (§5). `security.*` and `system.*` answer ENODATA at once (FS-17).
    public func getxattr(_ ino: UInt64, name: String) throws -> [UInt8] {
        if LocalFiles.owns(ino) { return try local.getxattr(ino, name) }
        guard name.hasPrefix("user.") else { throw FSError(.noData, name) }
        // A version in `history/`, or a scratch file (its attributes in memory: FS-14).
        let special: [UInt8]?? = try locked {
            switch try node(ino) {
            case .historyVersion(let r, let seq): return .some(try historyXattr(r, seq, name))
            case .scratch(let sid): return .some(scratchXattr(sid, name))
            default: return nil
            }
        }
        if let special {
            guard let v = special else { throw FSError(.noData, name) }
            return v
        }
        let r: Int64 = try locked {
            guard case .item(let r) = try node(ino) else { throw FSError(.noData, name) }
            // The sync state, version and properties are those of the settled file; a staged file
            // has no row yet. Only this file settles: its attributes are its own row's and tags
            // (each read of `cp -a` or `tar --xattrs` settled every file written before it).
            if name.hasPrefix("user.marfa.") || stagedKey(.item(r)) != nil { try settleOnly([.item(r)]) }
            return r
        }
        guard let s = try wrap({ try store.item(rowid: r) }) else { throw FSError(.notFound, "item \(r)") }
        if let key = name.dropPrefix("user.marfa.") {
            guard let value = try marfaAttribute(s, key) else { throw FSError(.noData, name) }
            return Array(value.utf8)
        }
        // What a remote of files says of the file (FS-34: `user.mylifedb.*`), read-only.
        if name.hasPrefix(Self.remoteAttributePrefix) {
            guard let v = store.remoteAttributes(itemID: s.item.id)[name] else { throw FSError(.noData, name) }
            return v
        }
        guard let v = s.xattrs[name] else { throw FSError(.noData, name) }
        return v
    }

    /// The namespace of the attributes a MyLifeDB server gives (FS-34): the server's, not the user's.
    static let remoteAttributePrefix = "user.mylifedb."

    public func listxattr(_ ino: UInt64) throws -> [String] {
        if LocalFiles.owns(ino) { return try local.listxattr(ino) }
        // An item's names are read from its row; a version's and a scratch file's are known here.
        let (r, known): (Int64?, [String]) = try locked {
            switch try node(ino) {
            case .item(let r): try settleOnly([.item(r)]); return (r, [])
            case .historyVersion: return (nil, ["user.marfa.made_by"])
            case .scratch(let sid): return (nil, scratchXattrNames(sid))
            default: return (nil, [])
            }
        }
        guard let r, let s = try wrap({ try store.item(rowid: r) }) else { return known }
        var names = ["id", "type", "version", "created_at", "updated_at", "source", "sync", "tags", "favorite", "tier", "state"]
        if TypeSchema.isBlobType(s.item.type) { names.append("blob") }
        let body = store.type(s.item.type).bodyField
        names += s.item.properties.keys.filter { $0 != body }.sorted().map { "prop." + $0 }
        return names.map { "user.marfa." + $0 } + s.xattrs.keys.sorted() + store.remoteAttributes(itemID: s.item.id).keys.sorted()
    }

    /// `setxattr` (§5): tags, favorite, tier, state and properties; other `user.*` names are kept (FS-17).
    /// Invalid values give EINVAL and change nothing.
    public func setxattr(_ ino: UInt64, name: String, value: [UInt8], create: Bool = false, replace: Bool = false) throws {
        if LocalFiles.owns(ino) { return try local.setxattr(ino, name, value, flags: (create ? 1 : 0) | (replace ? 2 : 0)) }
        guard name.hasPrefix("user.") else { throw FSError(.notSupported, "only user.* attributes are kept") }
        if name.hasPrefix(Self.remoteAttributePrefix) { throw FSError(.notPermitted, "user.mylifedb.* attributes are the server's") }
        let inv: [Invalidation] = try locked {
            let n = try node(ino)
            // A scratch file (FS-14: `rsync`'s temporary name can be one) keeps them in memory,
            // and the item it becomes takes them.
            if case .scratch(let sid) = n { try setScratchXattr(sid, name, value, create: create, replace: replace); return [] }
            guard case .item(let r) = n else { throw FSError(.notPermitted, "attributes belong to item files") }
            return try setItemXattr(r, name, value, create: create, replace: replace)
        }
        notify(inv)
    }

    /// `setxattr` of item `r`; returns what the kernel must forget. Call with the lock held.
    func setItemXattr(_ r: Int64, _ name: String, _ value: [UInt8], create: Bool, replace: Bool) throws -> [Invalidation] {
        // A file being copied over an item (`tar -x` writes attributes between its create and
        // its bytes): an attribute the item already has is taken without settling the file
        // half written.
        if catalog.createdHere.contains(r), name.hasPrefix("user.marfa."), (try? getxattrUnlocked(r, name, marfa: true)) == value {
            // Its own id, written back by a tool restoring the file (`tar -x` over it).
            if name == "user.marfa.id" { catalog.copies[r] = Date() }
            return []
        }
        // A copy's tags and properties that arrive before its bytes (`tar -x` writes the
        // attributes between the file's create and its bytes): the text still to come carries
        // them. Written into the empty file now, they would be a front matter the bytes that
        // follow overwrite in part.
        if isCopyWithAttributes(r), catalog.items[r]?.size == 0, let key = name.dropPrefix("user.marfa."),
           key == "tags" || key.hasPrefix("prop.") { return [] }
        // The item's own progress: a copy carries the value it had when it was made; taken, and
        // nothing changes.
        if let key = name.dropPrefix("user.marfa."), Self.volatileAttrs.contains(key) { return [] }
        // The mutation it queues follows this file's create or update; other files written
        // before it settle in their own time.
        try settleOnly([.item(r)])
        guard let key = name.dropPrefix("user.marfa.") else {
            try setOwnXattr(r, name, value, create: create, replace: replace)
            return []
        }
        guard let text = String(validating: value, as: UTF8.self) else { throw FSError(.invalid, "\(name) takes UTF-8 text") }
        let copying = isCopying(r)
        if Self.readOnlyAttrs.contains(key) {
            // Its current value (a copy of the file's own attributes) is accepted and changes
            // nothing; another value is refused, except on a copy in progress (FS-28).
            if (try? getxattrUnlocked(r, name, marfa: true)) == value { return [] }
            if copying && key == "id" { catalog.copies[r] = Date() }
            // The original's id names an item of this mount, or one of another store (a
            // backup restored with `rsync -aX` or `tar -x`): taken, and the copy keeps its own.
            // Text that is no item id is refused.
            if copying && (key != "id" || catalog.byID[text] != nil || ItemID.isUUIDv7(text)) { return [] }
            throw FSError(.notPermitted, "\(name) is read-only")
        }
        return try setMarfaAttribute(r, key, text, value, copying: copying)
    }

    /// An attribute of the user's own (FS-17), kept as it is; `create`/`replace` as setxattr(2).
    /// Call with the lock held.
    func setOwnXattr(_ r: Int64, _ name: String, _ value: [UInt8], create: Bool, replace: Bool) throws {
        if create || replace {
            let exists = (try? getxattrUnlocked(r, name)) != nil
            if create && exists { throw FSError(.exists, name) }
            if replace && !exists { throw FSError(.noData, name) }
        }
        try wrap { try store.setXattr(rowid: r, name: name, value: value) }
    }

    /// A writable `user.marfa.<key>`: tags, favorite, tier, state, or `prop.<name>`. Returns what
    /// the kernel must forget. Call with the lock held, files settled.
    func setMarfaAttribute(_ r: Int64, _ key: String, _ text: String, _ value: [UInt8], copying: Bool) throws -> [Invalidation] {
        let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
        switch key {
        case "tags":
            var tags = Set(trimmed.isEmpty ? [] : trimmed.split(separator: ",", omittingEmptySubsequences: false).map {
                $0.trimmingCharacters(in: .whitespaces)
            })
            for t in tags { try Self.checkTag(t) }
            let own = catalog.tagsOf[r] ?? []
            if copying && isCopyWithAttributes(r) {
                // A copy in progress (`cp -a`, `rsync -aX`, `tar --xattrs` writing the original's
                // attributes, its id first, onto the file they made) stays where it is being made:
                // the value's `folder:` tag is the original's folder, and the tags the file has from
                // its place (its folder, the `tags/` directory it was made in) stay. The rest are
                // added.
                tags = tags.filter { !$0.hasPrefix(VaultText.folderPrefix) }.union(own)
            } else if !tags.contains(where: { $0.hasPrefix(VaultText.folderPrefix) }) {
                // The folder an item was imported from is a tag of its own kind: a value that
                // names no `folder:` tag keeps the item's.
                tags.formUnion(own.filter { $0.hasPrefix(VaultText.folderPrefix) })
            }
            if tags == own { return [] }
            try wrap { try store.setTags(rowid: r, tags) }
        // A value the item has already changes nothing, and writes nothing (`cp -a` and `rsync -aX`
        // write every attribute of the original to the copy).
        case "favorite":
            guard trimmed == "1" || trimmed == "0" else { throw FSError(.invalid, "user.marfa.favorite takes 1 or 0") }
            if (catalog.tagsOf[r] ?? []).contains("favorite") == (trimmed == "1") { return [] }
            try wrap { try store.changeTags(rowid: r, adding: trimmed == "1" ? ["favorite"] : [], removing: trimmed == "1" ? [] : ["favorite"]) }
        case "tier":
            guard let t = Tier(rawValue: trimmed) else { throw FSError(.invalid, "tier must be library or feed") }
            if try wrap({ try store.item(rowid: r) })?.item.tier == t { return [] }
            _ = try wrap { try store.setTier(rowid: r, t) }
        case "state":
            guard let st = ItemState(rawValue: trimmed) else { throw FSError(.invalid, "state must be active, archived or trashed") }
            if try wrap({ try store.item(rowid: r) })?.item.state == st { return [] }
            _ = try wrap { try store.setState(rowid: r, st) }
        default:
            guard let prop = key.dropPrefix("prop."), !prop.isEmpty else { throw FSError(.notPermitted, "user.marfa.\(key) is not a marfa attribute") }
            return try setPropertyAttribute(r, prop, text, value, copying: copying)
        }
        return try refreshItemAfterTags(r)
    }

    /// `user.marfa.prop.<name>`: JSON, or else plain text taken as a string (`setfattr -v done`);
    /// text that looks like JSON but is not (`{oops`) is refused. Call with the lock held.
    func setPropertyAttribute(_ r: Int64, _ prop: String, _ text: String, _ value: [UInt8], copying: Bool) throws -> [Invalidation] {
        guard let s = catalog.items[r] else { throw FSError(.notFound, "item") }
        let name = "user.marfa.prop." + prop
        let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
        let v: JSONValue
        if let j = try? JSONCoding.value(from: text) { v = j }
        else if let f = trimmed.first, !"{[\"".contains(f) { v = .string(text) }
        else { throw FSError(.invalid, "\(name) takes a JSON value") }
        // A copy's title comes from its own name (an rsync temporary file's too).
        if copying && prop == store.type(s.type).titleField { return [] }
        if TypeSchema.isBlobType(s.type) && prop == "blob_ref" {
            if (try? getxattrUnlocked(r, name, marfa: true)) == value || copying { return [] }
            throw FSError(.notPermitted, "blob_ref follows the file's bytes")
        }
        if try wrap({ try store.item(rowid: r) })?.item.properties[prop] == v { return [] }
        guard try wrap({ try store.setProperty(rowid: r, name: prop, value: v) }) != nil else { return [] }
        return try refreshItem(r, .content)
    }


    /// Whether item `r` is being written by a tool that copies a file with its attributes: given
    /// an item's id a moment ago (`Catalog.copies`). The tools write a file's attributes right
    /// after its create; a tag written by hand later is the user's.
    func isCopyWithAttributes(_ r: Int64) -> Bool {
        catalog.copies[r].map { Date().timeIntervalSince($0) < Self.copyWindow } ?? false
    }

    /// Seconds after its id was written that a file's attributes are still a copy's.
    static let copyWindow: Double = 10

    /// Whether item `r` is a copy in progress: a file made through this mount that no server has
    /// seen yet (`cp -a`, `rsync -X` and `tar --xattrs` write the original's attributes onto it).
    /// Its read-only attributes take another item's values silently. Call with the lock held.
    func isCopying(_ r: Int64) -> Bool {
        guard catalog.createdHere.contains(r) else { return false }
        return (try? store.item(rowid: r))??.item.version == 0
    }

    /// Whether item `r` is rsync's temporary file (`.name.XXXXXX`, made through this mount): its
    /// bytes become another file's at rsync's rename, so removing a property from it (one the
    /// source file has no attribute for) changes nothing.
    func isRsyncTemporary(_ r: Int64) -> Bool {
        guard isCopying(r), let name = catalog.name(of: r), name.hasPrefix("."),
              let dot = name.lastIndex(of: "."), dot > name.startIndex else { return false }
        let tail = name[name.index(after: dot)...]
        return tail.count == 6 && tail.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber) }
    }

    /// An attribute's value as `getxattr` gives it; call with the lock held, files settled.
    func getxattrUnlocked(_ r: Int64, _ name: String, marfa: Bool = false) throws -> [UInt8] {
        guard let s = try store.item(rowid: r) else { throw FSError(.noData, name) }
        if marfa, let key = name.dropPrefix("user.marfa.") {
            guard let v = try marfaAttribute(s, key) else { throw FSError(.noData, name) }
            return Array(v.utf8)
        }
        // What a remote of files says of the file (FS-34: `user.mylifedb.*`), read-only.
        if name.hasPrefix(Self.remoteAttributePrefix) {
            guard let v = store.remoteAttributes(itemID: s.item.id)[name] else { throw FSError(.noData, name) }
            return v
        }
        guard let v = s.xattrs[name] else { throw FSError(.noData, name) }
        return v
    }

    /// The value of `user.marfa.<key>` for a stored item (§5); nil when it has none.
    func marfaAttribute(_ s: StoredItem, _ key: String) throws -> String? {
        switch key {
        case "id": return s.item.id
        case "type": return s.item.type
        case "version": return String(s.item.version)
        case "created_at": return s.item.createdAt
        case "updated_at": return s.item.updatedAt
        case "source": return s.item.source
        case "sync": return s.sync.rawValue
        case "blob": return TypeSchema.isBlobType(s.item.type) ? s.item.properties["blob_ref"]?.stringValue : nil
        case "tags": return try wrap { try store.tags(itemID: s.item.id) }.joined(separator: ",")
        case "favorite": return try wrap { try store.tags(itemID: s.item.id) }.contains("favorite") ? "1" : "0"
        case "tier": return s.item.tier.rawValue
        case "state": return s.item.state.rawValue
        default:
            if let prop = key.dropPrefix("prop."), let v = s.item.properties[prop] { return JSONCoding.encode(v) }
            return nil
        }
    }

    /// `reader`: the thread that asks (rsync's removals of properties change nothing: below).
    public func removexattr(_ ino: UInt64, name: String, reader: Int32 = 0) throws {
        if LocalFiles.owns(ino) { return try local.removexattr(ino, name) }
        guard name.hasPrefix("user.") else { throw FSError(.noData, name) }
        if name.hasPrefix(Self.remoteAttributePrefix) { throw FSError(.notPermitted, "user.mylifedb.* attributes are the server's") }
        let inv: [Invalidation] = try locked {
            let n = try node(ino)
            if case .scratch(let sid) = n { try removeScratchXattr(sid, name); return [] }
            guard case .item(let r) = n else { throw FSError(.noData, name) }
            try settleOnly([.item(r)])
            if let key = name.dropPrefix("user.marfa.") {
                // The attributes every item has (and its title, which lives in the file name) are
                // not removed: removing one changes nothing, so `rsync -X` from a plain file works
                // (FS-28). A property is removed from the item (its front-matter line), but not by
                // rsync: `rsync -X` removes from a file every attribute its source lacks, each time
                // it runs, and a plain file lacks them all (a second run would strip every note's
                // front matter; its bytes are synced as bytes).
                guard let prop = key.dropPrefix("prop."), !isRsyncTemporary(r), Writers.command(reader) != "rsync",
                      prop != store.type(catalog.items[r]?.type ?? "").titleField else { return [] }
                guard try wrap({ try store.setProperty(rowid: r, name: prop, value: nil) }) != nil else { return [] }
                return try refreshItem(r, .content)
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

// MARK: a scratch file's attributes (FS-14, FS-17)

extension FileSystem {
    /// Sets an attribute of scratch file `sid` (`rsync`'s temporary file has a scratch name now and
    /// then: `.name.XXXXXX` matches `.*.*sw?` when its random tail ends in `sw` and a letter). They
    /// are kept in memory, in the order written, and the item the file becomes takes them
    /// (`applyScratchXattrs`). Call with the lock held.
    func setScratchXattr(_ sid: Int64, _ name: String, _ value: [UInt8], create: Bool, replace: Bool) throws {
        var list = catalog.scratchXattrs[sid] ?? []
        let at = list.firstIndex { $0.name == name }
        if create && at != nil { throw FSError(.exists, name) }
        if replace && at == nil { throw FSError(.noData, name) }
        if let at { list[at].value = value } else { list.append((name, value)) }
        // The room a file has for the user's own (the item it becomes keeps them).
        do { try Store.checkXattrRoom(list.filter { !$0.name.hasPrefix("user.marfa.") }) } catch { throw FSError.from(error) }
        catalog.scratchXattrs[sid] = list
    }

    /// A scratch file's attribute `name` (nil: it has none). Call with the lock held.
    func scratchXattr(_ sid: Int64, _ name: String) -> [UInt8]? {
        catalog.scratchXattrs[sid]?.first { $0.name == name }?.value
    }

    /// The names of a scratch file's attributes, in the order written. Call with the lock held.
    func scratchXattrNames(_ sid: Int64) -> [String] {
        catalog.scratchXattrs[sid]?.map(\.name) ?? []
    }

    /// Removes a scratch file's attribute; ENODATA if it has none of that name. Call with the lock held.
    func removeScratchXattr(_ sid: Int64, _ name: String) throws {
        guard let at = catalog.scratchXattrs[sid]?.firstIndex(where: { $0.name == name }) else { throw FSError(.noData, name) }
        catalog.scratchXattrs[sid]?.remove(at: at)
    }

    /// A scratch file renamed to an item's name became item `r`: the attributes written to it go
    /// to the item as if written to it then, in the order written (a tool writes the original's id
    /// first, which makes the item a copy that keeps its place: `Catalog.copies`). One the item
    /// does not take is left out and logged: the tool was told it was set. Call with the lock held.
    func applyScratchXattrs(_ sid: Int64, to r: Int64) -> [Invalidation] {
        guard let list = catalog.scratchXattrs.removeValue(forKey: sid) else { return [] }
        var inv: [Invalidation] = []
        for (name, value) in list {
            do { inv += try setItemXattr(r, name, value, create: false, replace: false) } catch {
                log.warning("an attribute written to a temporary file was not taken by the file it became",
                            metadata: ["item": "\(r)", "name": "\(name)", "error": "\(error)"])
            }
        }
        return inv
    }
}
