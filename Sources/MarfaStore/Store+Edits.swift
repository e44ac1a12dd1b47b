import Foundation
import GRDB
import MarfaLayout
import MarfaModel

/// A new item as the filesystem or an import makes it.
public struct NewItem: Sendable {
    public var id: String?
    public var type: String
    public var fileName: String
    public var content: [UInt8]
    public var tags: [String]
    public var state: ItemState
    public var sourceID: String?
    /// A blob's MIME type when not the one its name's extension gives (`inode/symlink`).
    public var mimeType: String?
    public init(id: String? = nil, type: String, fileName: String, content: [UInt8] = [], tags: [String] = [],
                state: ItemState = .active, sourceID: String? = nil, mimeType: String? = nil) {
        self.id = id; self.type = type; self.fileName = fileName; self.content = content; self.tags = tags
        self.state = state; self.sourceID = sourceID; self.mimeType = mimeType
    }
}

extension Store {
    // MARK: items

    /// Replaces an item's file bytes (FS-9): text is parsed into properties; a blob goes to `sqlar`.
    public func writeContent(rowid: Int64, bytes: [UInt8]) throws -> StoredItem {
        try modifyContent(rowid: rowid) { $0 = bytes }
    }

    /// Reads the current bytes, lets `edit` change them, and stores the result, in one transaction.
    public func modifyContent(rowid: Int64, _ edit: (inout [UInt8]) throws -> Void) throws -> StoredItem {
        try settledWrite { db in
            guard let cur = try Self.fetchItem(db, rowid: rowid) else { throw StoreError.notFound("item \(rowid)") }
            var bytes = try currentBytes(db, cur)
            try edit(&bytes)
            return try applyContent(db, cur, bytes: bytes, now: Date())
        }
    }

    func currentBytes(_ db: Database, _ cur: StoredItem) throws -> [UInt8] {
        if spool.has(cur.rowid) { return try spoolBytes(cur.rowid) }
        let t = type(cur.item.type)
        // An unsettled file's `raw` may have spare room past its size.
        if let raw = cur.raw, TypeSchema.isBlobType(t.id) || raw.count != Int(cur.size) { return Array(raw.prefix(Int(cur.size))) }
        if TypeSchema.isBlobType(t.id) {
            guard let h = cur.item.properties["blob_ref"]?.stringValue else { return [] }
            guard let d = try Data.fetchOne(db.cachedStatement(sql: "SELECT data FROM sqlar WHERE name = ?"), arguments: [h]) else {
                throw StoreError.notFound("blob \(h) is not cached")
            }
            return [UInt8](d)
        }
        if let raw = cur.raw { return raw }
        return Array(render(type: t, properties: cur.item.properties).utf8)
    }

    /// Renames an item's file (FS-5, FS-6): the chosen name is kept; a `.md` name also sets the title,
    /// unless the file's own front matter names the title.
    public func rename(rowid: Int64, to fileName: String) throws -> StoredItem {
        try settledWrite { db in
            guard let cur = try Self.fetchItem(db, rowid: rowid) else { throw StoreError.notFound("item \(rowid)") }
            try renameLocked(db, cur, to: fileName)
            return try Self.fetchItem(db, rowid: rowid)!
        }
    }

    /// An item moved in the vault's tree (FS-27): its tags changed (`adding`, `removing`: the
    /// `folder:` tags of the new folder and the old one) and its file name, each when given, in
    /// one transaction; returns its `ItemFacts` as the transaction leaves them, read on the
    /// writer's connection (a pool reader would first catch up with the commit).
    public func move(rowid: Int64, tags: (adding: Set<String>, removing: Set<String>)?, fileName: String?) throws -> ItemFacts? {
        try settledWrite { db in
            guard let cur = try Self.fetchItem(db, rowid: rowid) else { throw StoreError.notFound("item \(rowid)") }
            if let tags { try changeTags(db, cur, adding: tags.adding, removing: tags.removing) }
            if let fileName {
                // The tags may have rewritten the text (a note holds them): the row as it is now.
                let current = tags == nil ? cur : try Self.fetchItem(db, rowid: rowid)!
                try renameLocked(db, current, to: fileName)
            }
            return try Self.facts(db, rowid: rowid)
        }
    }

    private func renameLocked(_ db: Database, _ cur: StoredItem, to fileName: String) throws {
        var cur = cur
        let rowid = cur.rowid
        let t = type(cur.item.type)
        var titleInFile = false
        if let raw = cur.raw, let p = try? FrontMatter.parse(raw, bodyField: t.bodyField, titleField: t.titleField) {
            titleInFile = p.hasTitleKey
        }
        if !titleInFile { cur.item.properties[t.titleField] = .string(Self.titleFromFileName(fileName, type: t)) }
        if TypeSchema.isBlobType(t.id) { cur.item.properties["filename"] = .string(fileName) }
        let now = Date()
        cur.item.updatedAt = Timestamp.format(now)
        // A text's links go with its properties (FS-26): marked stale, they were read again in a
        // transaction of their own for the mount's view of the moved file (`rsync -aX` renames
        // each temporary file once its attributes settled it). A blob has none; an invalid text
        // keeps those it has.
        let writesLinks = !TypeSchema.isBlobType(t.id) && cur.sync != .invalid
        var arguments: StatementArguments = [fileName, JSONCoding.encode(cur.item.properties), cur.item.updatedAt]
        if writesLinks { arguments += [Self.linksColumn(VaultText.read(properties: cur.item.properties, bodyField: t.bodyField).links)] }
        arguments += [rowid]
        try db.run("UPDATE items SET file_name = ?, properties = ?, updated_at = ?, sync = CASE WHEN sync = 'invalid' THEN sync ELSE 'pending' END"
                   + (writesLinks ? ", links = ?, \(Self.linksWritten)" : "") + " WHERE rowid = ?", arguments)
        if cur.sync != .invalid { try enqueueItemChange(db, cur.item) }
        try refreshName(db, rowid: rowid)
    }

    /// Moves an item between `active`, `archived` and `trashed` and queues the transition.
    public func setState(rowid: Int64, _ state: ItemState) throws -> StoredItem {
        try settledWrite { db in
            guard let cur = try Self.fetchItem(db, rowid: rowid) else { throw StoreError.notFound("item \(rowid)") }
            return try setStateLocked(db, cur, state)
        }
    }

    /// `setState`, and the item's `ItemFacts` as the transaction leaves them, read on the writer's
    /// connection before it commits: a pool reader would first have to catch up with the commit
    /// (a quarter of each `unlink` of `rm -rf`). The item's text is read only if the change
    /// queues it (a never-sent item restored).
    public func setStateReadingFacts(rowid: Int64, _ state: ItemState) throws -> ItemFacts? {
        try settledWrite { db in
            guard let row = try db.row("SELECT id, state, version FROM items WHERE rowid = ?", [rowid]) else {
                throw StoreError.notFound("item \(rowid)")
            }
            let id: String = row[0], version: Int = row[2]
            if ItemState(rawValue: row[1]) != state {
                _ = try changeState(db, rowid: rowid, id: id, version: version, to: state) {
                    guard let cur = try Self.fetchItem(db, rowid: rowid) else { throw StoreError.notFound("item \(rowid)") }
                    return cur.item
                }
            }
            return try Self.facts(db, rowid: rowid)
        }
    }

    func setStateLocked(_ db: Database, _ cur: StoredItem, _ state: ItemState) throws -> StoredItem {
        if cur.item.state == state { return cur }
        let (ts, ns) = try changeState(db, rowid: cur.rowid, id: cur.item.id, version: cur.item.version, to: state) { cur.item }
        // The row as it is now: these three columns changed (no trigger follows them), so it is
        // not read again, text and all (each `unlink` of `rm -rf` read every note twice).
        var after = cur
        after.item.state = state; after.item.updatedAt = ts; after.mtimeNs = ns
        return after
    }

    /// The state change of item `rowid` (`id`, at server `version`) and its queued transition;
    /// `item`: the item as stored, asked for only when its create must be queued again. Returns
    /// the new `updated_at` and mtime.
    func changeState(_ db: Database, rowid: Int64, id: String, version: Int, to state: ItemState, at now: Date = Date(),
                             item: () throws -> Item) throws -> (updatedAt: String, mtimeNs: Int64) {
        let (ts, ns) = (Timestamp.format(now), Self.ns(now))
        try db.run("UPDATE items SET state = ?, updated_at = ?, mtime_ns = ? WHERE rowid = ?", [state.rawValue, ts, ns, rowid])
        // With no version acknowledged, the server has the item only if a change of it is out (in
        // flight, or held as a conflict): a create it refused (413 on the bytes) made nothing there.
        let sent = try db.exists("SELECT 1 FROM mutations WHERE item_id = ? AND state IN ('sending', 'conflict')", [id])
        if version == 0 && !sent {
            // The server never saw this item: trashing it leaves nothing to send (its edges
            // keep theirs), nor anything refused to list; restoring it queues its create again.
            if state == .trashed {
                try db.run("DELETE FROM mutations WHERE item_id = ? AND kind NOT IN ('create_edge', 'delete_edge')", [id])
                try db.run("UPDATE items SET sync = 'pending', sync_error = NULL WHERE rowid = ? AND sync = 'rejected'", [rowid])
            } else {
                var c = try item(); c.state = state; c.updatedAt = ts
                try enqueueItemChange(db, c)
            }
        } else {
            try enqueue(db, kind: .transition, itemID: id, payload: ["state": .string(state.rawValue)], coalesce: false)
        }
        return (ts, ns)
    }

    /// Brings an item just moved to the trash back to `active`: the transition to the trash, if
    /// still waiting, is taken back instead of followed by another.
    public func untrash(rowid: Int64) throws {
        try settledWrite { db in try untrash(db, rowid) }
    }

    /// An item removed a moment ago and made again under its name (FS-28): back from the trash
    /// and emptied, in one transaction (a blob's bytes, in its spool file, in two). `type`: the
    /// item's, when known (else read). Returns its size and time. What the writer then writes is
    /// a new file, not an edit of one it read (`git checkout`, `tar -x`, `unzip -o` delete before
    /// they write): its save's base is the item as it is, so its bytes are what the item becomes
    /// (FS-29), never merged back to a remote edit the program wrote over on purpose.
    public func untrashEmptied(rowid: Int64, type: String?, by writer: Writer = .unknown) throws -> (size: Int64, mtimeNs: Int64) {
        if try spooling(rowid, type: type, emptied: true) {
            try untrash(rowid: rowid)
            return try truncateUnsettled(rowid: rowid, size: 0, type: type, by: writer)
        }
        return try settledWrite { db in
            try untrash(db, rowid)
            let f = try openUnsettled(db, rowid, patch: false, replacing: true, by: writer)
            return try f.finish(db, size: 0)
        }
    }

    private func untrash(_ db: Database, _ rowid: Int64) throws {
        guard let cur = try Self.fetchItem(db, rowid: rowid) else { throw StoreError.notFound("item \(rowid)") }
        guard cur.item.state == .trashed else { return }
        if let head = try Self.lastMutationHead(db, cur.item.id), head.kind == .transition, head.state == .pending {
            try db.run("DELETE FROM mutations WHERE seq = ?", [head.seq])
            try db.run("UPDATE items SET state = 'active' WHERE rowid = ?", [rowid])
            if cur.item.version == 0, try !db.exists("SELECT 1 FROM mutations WHERE item_id = ? AND kind = 'create'", [cur.item.id]) {
                var c = cur.item; c.state = .active
                try enqueueItemChange(db, c)
            }
            return
        }
        _ = try setStateLocked(db, cur, .active)
    }

    public func setTier(rowid: Int64, _ tier: Tier) throws -> StoredItem {
        try settledWrite { db in
            guard var cur = try Self.fetchItem(db, rowid: rowid) else { throw StoreError.notFound("item \(rowid)") }
            if cur.item.tier == tier { return cur }
            cur.item.tier = tier
            try db.run("UPDATE items SET tier = ?, updated_at = ? WHERE rowid = ?", [tier.rawValue, Timestamp.now(), rowid])
            try enqueueItemChange(db, cur.item)
            return try Self.fetchItem(db, rowid: rowid)!
        }
    }

    /// Sets (or with nil removes) one property (`user.marfa.prop.<name>`). The value it already
    /// has changes nothing (FS-28); a file with written text has only that key's front-matter
    /// line changed (comments, order and style kept), any other file is rendered anew. Returns nil
    /// when nothing changed.
    @discardableResult
    public func setProperty(rowid: Int64, name: String, value: JSONValue?) throws -> StoredItem? {
        try settledWrite { db in
            guard var cur = try Self.fetchItem(db, rowid: rowid) else { throw StoreError.notFound("item \(rowid)") }
            let t = type(cur.item.type)
            if value == nil && cur.item.properties[name] == nil { throw StoreError.notFound("property \(name)") }
            if cur.item.properties[name] == value { return nil }
            let before = cur.item.properties
            cur.item.properties[name] = value
            let isBlob = TypeSchema.isBlobType(t.id)
            var raw: Data?
            if !isBlob, name == t.titleField, let old = cur.raw,
               (try? FrontMatter.parse(Array(old.prefix(Int(cur.size))), bodyField: t.bodyField, titleField: t.titleField))?.hasTitleKey == false {
                // The title lives in the file name, not in the text: the text stays as it is.
                raw = Data(old.prefix(Int(cur.size)))
            } else if !isBlob, name != t.bodyField, let old = cur.raw, let text = String(validating: old.prefix(Int(cur.size)), as: UTF8.self),
               let edited = FrontMatter.settingKey(text, key: name, to: value),
               let parsed = try? Self.parseText(Array(edited.utf8), type: t, fileName: cur.fileName, previous: cur.item.properties),
               parsed == cur.item.properties {
                raw = Data(edited.utf8)
            }
            let size = isBlob ? cur.size : Int64(raw?.count ?? render(type: t, properties: cur.item.properties).utf8.count)
            let now = Date()
            cur.item.updatedAt = Timestamp.format(now)
            let (rawCol, head) = raw.map { RawText.columns([UInt8]($0), properties: cur.item.properties, bodyField: t.bodyField) } ?? (nil, nil)
            try db.run("UPDATE items SET properties = ?, raw = ?, raw_head = ?, size = ?, updated_at = ?, mtime_ns = ?, sync = 'pending', sync_error = NULL, unsettled = 0 WHERE rowid = ?",
                           [JSONCoding.encode(cur.item.properties), rawCol, head, size, cur.item.updatedAt, Self.ns(now), rowid])
            try enqueueItemChange(db, cur.item)
            try refreshName(db, rowid: rowid)
            // A note's tags and every text's links follow what its text says now (FS-26): a
            // `tags:` key set or removed changes the note's tags as an editor's save would.
            if !isBlob, let now = try Self.fetchItem(db, rowid: rowid) {
                try followText(db, now, before: before, said: VaultText.read(properties: now.item.properties, bodyField: t.bodyField))
            }
            return try Self.fetchItem(db, rowid: rowid)!
        }
    }

    /// One file's own attributes, names and values together, take at most `maxXattrBytes`, as a
    /// disk gives each inode a bounded room for them: ENOSPC past that.
    public static func checkXattrRoom(_ attributes: [(name: String, value: [UInt8])]) throws {
        if attributes.reduce(0, { $0 + $1.name.utf8.count + $1.value.count }) > maxXattrBytes {
            throw StoreError.noSpace("a file's attributes take at most \(maxXattrBytes) bytes")
        }
    }

    /// Sets (nil: removes) an extra `user.*` attribute kept with the item as `fs.xattr` (FS-17).
    public func setXattr(rowid: Int64, name: String, value: [UInt8]?) throws {
        try settledWrite { db in
            guard let cur = try Self.fetchItem(db, rowid: rowid) else { throw StoreError.notFound("item \(rowid)") }
            var x = cur.xattrs
            if value == nil && x[name] == nil { throw StoreError.notFound("attribute \(name)") }
            if x[name] == value { return }   // the value it has: nothing changes (FS-28)
            x[name] = value
            if value != nil { try Self.checkXattrRoom(x.map { ($0.key, $0.value) }) }
            let enc = Xattrs.encode(x)
            try db.run("UPDATE items SET xattrs = ? WHERE rowid = ?", [enc, rowid])
            let ext: JSONValue = .object(["fs.xattr": .object(x.mapValues { .string(Data($0).base64EncodedString()) })])
            try enqueue(db, kind: .update, itemID: cur.item.id,
                             payload: ["extensions": ext, "base_version": .int(Int64(cur.item.version))], coalesce: true)
        }
    }

    // MARK: tags

    /// Replaces an item's tag set and queues it (consecutive tag changes coalesce).
    /// Tags put on (`adding`) and taken off (`removing`) an item, against the tags the store has
    /// now: what the mount has seen of a note a commit has just settled may lack those its text
    /// holds, and a whole set made from that would write them out of the text.
    public func changeTags(rowid: Int64, adding: Set<String> = [], removing: Set<String> = []) throws {
        try settledWrite { db in
            guard let cur = try Self.fetchItem(db, rowid: rowid) else { throw StoreError.notFound("item \(rowid)") }
            try changeTags(db, cur, adding: adding, removing: removing)
        }
    }

    func changeTags(_ db: Database, _ cur: StoredItem, adding: Set<String>, removing: Set<String>) throws {
        let now = Set(try Self.tags(db, cur.item.id))
        let next = now.subtracting(removing).union(adding)
        if next != now { try setTagsFollowingText(db, cur, next) }
    }

    public func setTags(rowid: Int64, _ tags: Set<String>) throws {
        try settledWrite { db in
            guard let cur = try Self.fetchItem(db, rowid: rowid) else { throw StoreError.notFound("item \(rowid)") }
            try setTagsFollowingText(db, cur, tags)
        }
    }

    /// `known`: the tags it has now, when the caller has just read them.
    func setTags(_ db: Database, _ cur: StoredItem, _ tags: Set<String>, known: Set<String>? = nil) throws {
        let old = try known ?? Set(Self.tags(db, cur.item.id))
        if old == tags { return }
        try storeTags(db, cur, tags, replacing: old)
        try db.run("UPDATE items SET updated_at = ? WHERE rowid = ?", [Timestamp.now(), cur.rowid])
        if cur.item.version == 0, try Self.pendingCreate(db, cur.item.id) {
            try enqueueItemChange(db, cur.item)
        } else {
            try enqueueTags(db, cur, tags, before: old)
        }
    }

    /// Writes item `cur`'s tags in the table, `old` being those it has there.
    func storeTags(_ db: Database, _ cur: StoredItem, _ tags: Set<String>, replacing old: Set<String>) throws {
        for t in old.subtracting(tags) { try db.run("DELETE FROM tags WHERE item_id = ? AND tag = ?", [cur.item.id, t]) }
        for t in tags.subtracting(old) { try db.run("INSERT INTO tags(item_id, tag) VALUES (?, ?)", [cur.item.id, t]) }
    }

    /// Queues new tags of an item the server knows (or whose create is on its way) as their own change.
    func enqueueTags(_ db: Database, _ cur: StoredItem, _ tags: Set<String>, before old: Set<String>) throws {
        // A long folder's whole path travels first, so the tags it stands for never arrive alone.
        try enqueueFolderExtension(db, itemID: cur.item.id, tags: Array(tags), before: Array(old), version: Int64(cur.item.version))
        try enqueue(db, kind: .setTags, itemID: cur.item.id,
                         payload: ["tags": .array(Self.wireTags(tags.sorted()).tags.map(JSONValue.string))], coalesce: true)
    }

    public func addLocalTag(_ tag: String) throws {
        try write { db in try db.run("INSERT OR IGNORE INTO local_tags(tag) VALUES (?)", [tag]) }
    }

    /// A folder or tag made by the mount's `mkdir`, kept as `addLocalTag` keeps it without waiting
    /// for the store's writer: recorded at once beside the store (`PendingFolders`), its row
    /// written by the next write transaction (`flushPending`). Every query of
    /// `local_tags` runs in a write transaction, or counts the pending ones too (and leaves out
    /// those `removeLocalTagLater` recorded).
    public func stageLocalTag(_ tag: String) throws {
        try pendingFolders.add(tag)
    }

    /// A folder or tag removed by the mount's `rmdir`, once the mount found it empty: recorded at
    /// once beside the store (`PendingFolders`), its row deleted by the next write transaction
    /// after the removals of the files it held (`flushPending`), not in the request. Unlike
    /// `removeLocalTag`, it does not ask the store whether an active item still has the tag: the
    /// mount's catalog answered that (trashed and archived items keep their tags, so a restore
    /// puts them back where they were, but hold no place in the directory: FS-31).
    public func removeLocalTagLater(_ tag: String) throws {
        try pendingFolders.remove(tag)
    }

    /// Whether folders `stageLocalTag` or `removeLocalTagLater` recorded wait for their rows.
    public var hasPendingFolders: Bool { !pendingFolders.isEmpty }

    /// Whether folders `stageLocalTag` or `removeLocalTagLater` recorded, or removals
    /// `trashLater` did, wait for their rows.
    public var hasPending: Bool { !pendingFolders.isEmpty || !pendingRemovals.isEmpty }

    /// Writes the rows of the folders `stageLocalTag` recorded and of the removals `trashLater`
    /// did, if any.
    public func flushPending() throws {
        if !hasPending { return }
        try write { _ in }
    }

    /// Renames a tag on every item that has it; returns the rowids of those items.
    public func renameTag(_ from: String, to: String) throws -> [Int64] {
        try settledWrite { db in
            let rows = try Int64.fetchAll(db.cachedStatement(sql: "SELECT items.rowid FROM items JOIN tags ON tags.item_id = items.id WHERE tags.tag = ?"), arguments: [from])
            for r in rows {
                guard let cur = try Self.fetchItem(db, rowid: r) else { continue }
                var set = Set(try Self.tags(db, cur.item.id)); set.remove(from); set.insert(to)
                try setTagsFollowingText(db, cur, set)
            }
            if try db.exists("SELECT 1 FROM local_tags WHERE tag = ?", [from]) || rows.isEmpty {
                try db.run("DELETE FROM local_tags WHERE tag = ?", [from])
                try db.run("INSERT OR IGNORE INTO local_tags(tag) VALUES (?)", [to])
            }
            return rows
        }
    }

    // MARK: edges

    public func createEdge(sourceID: String, targetID: String, edgeType: String) throws -> EdgeRecord {
        try settledWrite { db in
            if let existing = try db.row("SELECT * FROM edges WHERE source_id = ? AND target_id = ? AND edge_type = ?",
                                               [sourceID, targetID, edgeType]) {
                throw StoreError.exists("edge \(EdgeRecord(row: existing).edge.id)")
            }
            let ts = Timestamp.now()
            let id = ItemID.make()
            try db.run("INSERT INTO edges(id, source_id, target_id, edge_type, properties, created_at, updated_at) VALUES (?, ?, ?, ?, '{}', ?, ?)",
                           [id, sourceID, targetID, edgeType, ts, ts])
            let rec = try db.row("SELECT * FROM edges WHERE rowid = ?", [db.lastInsertedRowID]).map(EdgeRecord.init(row:))!
            try enqueue(db, kind: .createEdge, itemID: sourceID, payload: [
                "id": .string(id), "source_id": .string(sourceID), "target_id": .string(targetID), "edge_type": .string(edgeType),
            ], coalesce: false)
            return rec
        }
    }

    public func deleteEdge(rowid: Int64) throws {
        try settledWrite { db in
            guard let rec = try db.row("SELECT * FROM edges WHERE rowid = ?", [rowid]).map(EdgeRecord.init(row:)) else {
                throw StoreError.notFound("edge \(rowid)")
            }
            try db.run("DELETE FROM edges WHERE rowid = ?", [rowid])
            // An edge the server never saw is simply forgotten.
            try db.run("DELETE FROM mutations WHERE kind = 'create_edge' AND state = 'pending' AND json_extract(payload, '$.id') = ?",
                           [rec.edge.id])
            if db.changesCount == 0 {
                try enqueue(db, kind: .deleteEdge, itemID: rec.edge.sourceID, payload: [
                    "id": .string(rec.edge.id), "edge_type": .string(rec.edge.edgeType),
                    "source_id": .string(rec.edge.sourceID), "target_id": .string(rec.edge.targetID),
                ], coalesce: false)
            }
        }
    }

    public func addEdgeDir(itemID: String, edgeType: String) throws {
        try write { db in try db.run("INSERT OR IGNORE INTO edge_dirs(item_id, edge_type) VALUES (?, ?)", [itemID, edgeType]) }
    }

    public func removeEdgeDir(itemID: String, edgeType: String) throws {
        try write { db in
            if try db.exists("SELECT 1 FROM edges WHERE source_id = ? AND edge_type = ?", [itemID, edgeType]) {
                throw StoreError.notEmpty("\(edgeType)")
            }
            try db.run("DELETE FROM edge_dirs WHERE item_id = ? AND edge_type = ?", [itemID, edgeType])
        }
    }

    // MARK: helpers

    func refreshName(_ db: Database, rowid: Int64) throws {
        guard let cur = try Self.fetchItem(db, rowid: rowid) else { return }
        let (stem, ext) = Names.stemAndExt(id: cur.item.id, type: type(cur.item.type), properties: cur.item.properties, fileName: cur.fileName)
        try db.run("UPDATE items SET stem = ?, ext = ? WHERE rowid = ?", [stem, ext, rowid])
    }

    /// The title a file name gives (FS-5): the name without `.md`; other names are kept whole.
    static func titleFromFileName(_ name: String, type t: TypeSchema) -> String {
        if TypeSchema.isBlobType(t.id) { return Names.unescape(Names.split(name).stem) }
        let (stem, ext) = Names.split(name)
        return Names.unescape(ext.lowercased() == ".md" ? stem : name)
    }

    static func ns(_ d: Date) -> Int64 { Int64(d.timeIntervalSince1970 * 1_000_000_000) }
}

extension Store {
    /// A saved-over source item disappears (FS-13): forgotten if the server never saw it (its
    /// queued create and everything else of it dropped), else trashed.
    func forgetOrTrash(_ db: Database, _ src: StoredItem) throws {
        let sentBefore = try db.exists("SELECT 1 FROM mutations WHERE item_id = ? AND state != 'pending'", [src.item.id])
        if src.item.version == 0 && !sentBefore {
            try db.run("DELETE FROM mutations WHERE item_id = ?", [src.item.id])
            try db.run("DELETE FROM tags WHERE item_id = ?", [src.item.id])
            try db.run("DELETE FROM edges WHERE source_id = ? OR target_id = ?", [src.item.id, src.item.id])
            try db.run("DELETE FROM items WHERE rowid = ?", [src.rowid])
            spool.remove(src.rowid)
            // Its blob goes with it unless another item names it.
            if let h = src.item.properties["blob_ref"]?.stringValue { try dropBlobIfUnused(db, h) }
        } else {
            try db.run("UPDATE items SET state = 'trashed', updated_at = ? WHERE rowid = ?", [Timestamp.now(), src.rowid])
            try enqueue(db, kind: .transition, itemID: src.item.id, payload: ["state": "trashed"], coalesce: false)
        }
    }
}
