import Foundation
import GRDB
import MarfaLayout
import MarfaModel

/// A change the server reports (an event, a sweep row, or the answer to one of our writes).
public enum RemoteChange: Sendable {
    /// The full item; `tags` and `extensions` when the source carries metadata (a sweep row, an answer).
    case item(Item, tags: [String]?, extensions: [String: JSONValue]?)
    /// `metadata.changed`: the fields it names (nil: not given).
    case metadata(itemID: String, tags: [String]?, tier: Tier?, state: ItemState?, extensions: [String: JSONValue]?)
    /// `item.deleted`: trashed.
    case deleted(itemID: String)
    case edge(Edge)
    case edgeDeleted(id: String)
}

/// Applying the server's changes (W-15, W-17). A change to an item that still has changes of its
/// own to send (queued, in flight, held as a conflict, or refused) is skipped: the local bytes win
/// until the queue has settled them with the server, and the server's answer to the last of them
/// brings the merged state back (`acknowledge`). An item frame not newer than the local copy is
/// ignored; that is how the echo of our own writes is skipped.
extension Store {
    static let lastEventKey = "last_event_id"
    static let newestRemoteKey = "newest_remote_updated_at"
    static let firstSyncKey = "first_sync_done"

    /// Applies `changes` in one transaction, with the id of the last event they came with.
    /// `reseed`: the server's state is taken even where its version is not newer (`requestReseed`).
    @discardableResult
    public func applyRemote(_ changes: [RemoteChange], lastEventID: String? = nil, blobSizes: [String: Int64] = [:],
                            reseed: Bool = false) throws -> StoreChanges {
        try published { try write { db in
            var out = StoreChanges()
            changesCome(from: .remote)
            for c in changes { try applyRemote(db, c, blobSizes: blobSizes, mode: reseed ? .asServerHolds : .ifNewer, into: &out) }
            if let lastEventID { try Self.setMeta(db, Self.lastEventKey, lastEventID) }
            return out
        } }
    }

    /// The id of the last event applied (nil: none yet, or the log must be swept anew).
    public func lastEventID() throws -> String? { try pool.read { db in try Self.meta(db, Self.lastEventKey) } }

    /// Forgets the event position (after `catchup_too_old`: the next stream starts live).
    public func clearLastEventID() throws { try write { db in try db.run("DELETE FROM meta WHERE key = ?", [Self.lastEventKey]) } }

    /// The newest `updated_at` of an item the server has sent: where a sweep starts (W-17).
    public func newestRemoteUpdatedAt() throws -> String? { try pool.read { db in try Self.meta(db, Self.newestRemoteKey) } }

    static let reseedKey = "reseed_requested"

    public var firstSyncDone: Bool { ((try? pool.read { db in try Self.meta(db, Self.firstSyncKey) }) ?? nil) != nil }
    public func markFirstSyncDone() throws {
        try write { db in
            try Self.setMeta(db, Self.firstSyncKey, Timestamp.now())
            try db.run("DELETE FROM meta WHERE key = ?", [Self.reseedKey])
        }
        twinCandidates.withLock { $0 = nil }
    }

    /// `marfafs resync`: the next first sync fetches everything again and takes the server's state
    /// of every item, even one whose version is not newer, except items with changes of their own
    /// still to send (those are kept, and sent). Returns how many mutations are kept.
    public func requestReseed() throws -> Int {
        try write { db in
            try db.run("DELETE FROM meta WHERE key IN (?, ?, ?)", [Self.lastEventKey, Self.firstSyncKey, Self.newestRemoteKey])
            try Self.setMeta(db, Self.reseedKey, Timestamp.now())
            return try Int.fetchOne(db, sql: "SELECT count(*) FROM mutations") ?? 0
        }
    }

    /// Whether a first sync must take the server's state over the local one (`requestReseed`).
    public var reseedRequested: Bool { ((try? pool.read { db in try Self.meta(db, Self.reseedKey) }) ?? nil) != nil }

    /// Whether a blob's bytes are in the local cache.
    public func hasBlob(_ hash: String) throws -> Bool {
        try pool.read { db in try db.exists("SELECT 1 FROM sqlar WHERE name = ?", [hash]) }
    }

    /// Stores fetched blob bytes in the cache (FS-11); they must hash to `hash`.
    public func cacheBlob(_ bytes: [UInt8], hash: String) throws {
        guard BlobHash.of(bytes) == hash else { throw StoreError.io("the bytes fetched for \(hash) hash to something else") }
        try write { db in _ = try putBlob(db, bytes, hash: hash) }
    }

    /// Registers types the server knows (custom types, W-9), so their items are named and parsed right.
    public func registerTypes(_ types: [TypeSchema]) throws {
        let known = Set(allTypes().map(\.id))
        // The folder marker's type names no item here (`FolderMarker`).
        let fresh = types.filter { !known.contains($0.id) && $0.id != FolderMarker.type }
        guard !fresh.isEmpty else { return }
        try write { db in
            for t in fresh { try db.run("INSERT OR REPLACE INTO types(id, json) VALUES (?, ?)", [t.id, JSONCoding.encode(t)]) }
        }
        typeCache.add(fresh)
    }

    /// After a full edge listing: local edges the server no longer has go, except ours not yet sent.
    @discardableResult
    public func removeEdgesGoneFromServer(keeping ids: Set<String>) throws -> StoreChanges {
        try published { try write { db in
            var out = StoreChanges()
            for rec in try Row.fetchAll(db, sql: "SELECT * FROM edges").map(EdgeRecord.init(row:)) where !ids.contains(rec.edge.id) {
                if try db.exists("SELECT 1 FROM mutations WHERE kind = 'create_edge' AND state != 'rejected' AND json_extract(payload, '$.id') = ?", [rec.edge.id]) { continue }
                try db.run("DELETE FROM edges WHERE id = ?", [rec.edge.id])
                out.edgesRemoved.append(rec); out.applied += 1
            }
            return out
        } }
    }

    // MARK: one change

    /// Mutation kinds that carry an item's own fields: while one is unsent, the local copy wins.
    static let itemKinds = "('create', 'update', 'transition', 'set_tags')"

    static func hasUnsent(_ db: Database, _ itemID: String) throws -> Bool {
        try db.exists("SELECT 1 FROM mutations WHERE item_id = ? AND kind IN \(itemKinds) AND state IN ('pending', 'sending', 'conflict', 'rejected') LIMIT 1", [itemID])
    }

    /// Keeps a skipped server frame of an item until its own changes are answered (the newest one).
    func holdRemote(_ item: Item, tags: [String]?, extensions: [String: JSONValue]?) {
        heldRemote.withLock { held in
            if case .item(let old, _, _)? = held[item.id], old.version >= item.version { return }
            held[item.id] = .item(item, tags: tags, extensions: extensions)
        }
    }

    /// Whether an item's local bytes or changes are still to be sent (unsettled, staged new bytes,
    /// or queued mutations): a remote change to it is not applied (`row`: rowid, unsettled).
    func keepsLocal(_ db: Database, _ row: Row, _ id: String) throws -> Bool {
        try (row[1] as Int) != 0 || staging.hasOverlay(row[0]) || Self.hasUnsent(db, id)
    }

    /// How a server's item is taken (W-15, W-17).
    enum ApplyMode {
        /// From the stream or a sweep: taken where it is newer than the local copy.
        case ifNewer
        /// As the server holds it (a re-seed, or its answer to our own write): taken even where its
        /// version is not newer, never where it is older.
        case asServerHolds
    }

    func applyRemote(_ db: Database, _ c: RemoteChange, blobSizes: [String: Int64], mode: ApplyMode, into out: inout StoreChanges) throws {
        // An empty folder's marker is a folder here, never an item (FS-32).
        if try applyFolderMarker(db, c, into: &out) { return }
        // The folders the item is in before: a kept folder it leaves empty goes (`foldersLeft`).
        let id: String?
        switch c {
        case .item(let item, _, _): id = item.id
        case .metadata(let itemID, _, _, _, _), .deleted(let itemID): id = itemID
        case .edge, .edgeDeleted: id = nil
        }
        let before = try id.map { try activeFolders(db, $0) } ?? []
        try applyRemoteChange(db, c, blobSizes: blobSizes, mode: mode, into: &out)
        if let id, !before.isEmpty { try foldersLeft(db, before.subtracting(try activeFolders(db, id)), into: &out) }
    }

    private func applyRemoteChange(_ db: Database, _ c: RemoteChange, blobSizes: [String: Int64], mode: ApplyMode, into out: inout StoreChanges) throws {
        switch c {
        case let .item(item, tags, ext):
            // A long folder's short form is its whole path again (FS-31).
            let tags = tags.map { Self.localTags($0, extensions: ext) }
            try applyItem(db, item, tags: tags, extensions: ext, blobSizes: blobSizes, mode: mode, into: &out)
        case let .metadata(id, tags, tier, state, ext):
            let tags = tags.map { Self.localTags($0, extensions: ext) }
            guard let r = try db.row("SELECT rowid, unsettled FROM items WHERE id = ?", [id]) else { out.skipped += 1; return }
            if try keepsLocal(db, r, id) { out.skipped += 1; return }
            let rowid: Int64 = r[0]
            if let tags { try replaceTags(db, id, tags) }
            if let tier { try db.run("UPDATE items SET tier = ? WHERE rowid = ?", [tier.rawValue, rowid]) }
            if let state { try db.run("UPDATE items SET state = ? WHERE rowid = ?", [state.rawValue, rowid]) }
            if let x = ext?["fs.xattr"] { try db.run("UPDATE items SET xattrs = ? WHERE rowid = ?", [Self.xattrsJSON(x), rowid]) }
            if try applyStat(db, ext, rowid: rowid) { out.attributes.insert(id) }
            out.items.insert(id); out.applied += 1
        case .deleted(let id):
            guard let r = try db.row("SELECT rowid, unsettled FROM items WHERE id = ?", [id]) else { out.skipped += 1; return }
            if try keepsLocal(db, r, id) { out.skipped += 1; return }
            try db.run("UPDATE items SET state = 'trashed' WHERE rowid = ?", [r[0] as Int64])
            out.items.insert(id); out.applied += 1
        case .edge(let e):
            if try db.exists("SELECT 1 FROM edges WHERE id = ? OR (source_id = ? AND target_id = ? AND edge_type = ?)",
                             [e.id, e.sourceID, e.targetID, e.edgeType]) { out.skipped += 1; return }
            // Deleted here, the deletion not yet sent: the server's old news.
            if try db.exists("SELECT 1 FROM mutations WHERE kind = 'delete_edge' AND json_extract(payload, '$.id') = ?", [e.id]) {
                out.skipped += 1; return
            }
            try db.run("INSERT INTO edges(id, source_id, target_id, edge_type, properties, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                       [e.id, e.sourceID, e.targetID, e.edgeType, JSONCoding.encode(e.properties), e.createdAt, e.updatedAt])
            out.edgesAdded.insert(e.id); out.applied += 1
        case .edgeDeleted(let id):
            guard let rec = try db.row("SELECT * FROM edges WHERE id = ?", [id]).map(EdgeRecord.init(row:)) else { out.skipped += 1; return }
            try db.run("DELETE FROM edges WHERE id = ?", [id])
            // A deletion of ours still waiting is done already.
            try db.run("DELETE FROM mutations WHERE kind = 'delete_edge' AND state = 'pending' AND json_extract(payload, '$.id') = ?", [id])
            out.edgesRemoved.append(rec); out.applied += 1
        }
    }

    func applyItem(_ db: Database, _ remote: Item, tags: [String]?, extensions: [String: JSONValue]?, blobSizes: [String: Int64],
                   mode: ApplyMode, into out: inout StoreChanges) throws {
        let t = type(remote.type)
        let mtime = Timestamp.parse(remote.updatedAt).map { Int64($0 * 1_000_000_000) } ?? Self.ns(Date())
        try noteRemoteUpdatedAt(db, remote.updatedAt)
        guard let cur = try db.row("SELECT rowid, unsettled FROM items WHERE id = ?", [remote.id]) else {
            return try insertRemote(db, remote, type: t, tags: tags, extensions: extensions, blobSizes: blobSizes, mtimeNs: mtime, into: &out)
        }
        let force = mode == .asServerHolds
        let rowid: Int64 = cur[0]
        if try keepsLocal(db, cur, remote.id) {
            if mode == .ifNewer { holdRemote(remote, tags: tags, extensions: extensions) }
            out.skipped += 1; return
        }
        guard let stored = try Self.fetchItem(db, rowid: rowid) else { return }
        let local = stored.item
        // Older than the local copy: never taken, not even by a re-seed or an answer (a sweep's page
        // read before our own update was acknowledged would undo it).
        if remote.version < local.version { out.skipped += 1; return }
        let propsChange = remote.properties != local.properties && (remote.version > local.version || force)
        let metaNewer = remote.updatedAt >= local.updatedAt || remote.version > local.version || force
        if !propsChange && !metaNewer { out.skipped += 1; return }
        if propsChange {
            // The bytes the mount showed until now are the ancestor of the next local save, which
            // an editor may make from a buffer that never saw this change (FS-24).
            if !TypeSchema.isBlobType(t.id), stored.shownBase == nil {
                try db.run("UPDATE items SET shown_base = ? WHERE rowid = ?", [Data(try currentBytes(db, stored)), rowid])
            }
            let size = try remoteSize(db, remote, type: t, blobSizes: blobSizes)
            try db.run("UPDATE items SET properties = ?, size = ? WHERE rowid = ?", [JSONCoding.encode(remote.properties), size, rowid])
            // Its name and bytes: those the writer's extensions give, else its title's and its
            // rendering (FS-5, FS-32).
            _ = try takeFileForm(db, rowid: rowid, remote, extensions: extensions, previousTitle: local.properties[t.titleField], propertiesChanged: true)
            out.content.insert(remote.id)
        }
        try db.run("UPDATE items SET version = max(version, ?), sync = 'synced', sync_error = NULL WHERE rowid = ?", [remote.version, rowid])
        if force && !propsChange {
            return try takeServerMetadata(db, remote, local: local, rowid: rowid, tags: tags, extensions: extensions, into: &out)
        }
        // A file renamed, or its head rewritten, with its properties the same (`fs.name`, `fs.text`).
        var form = (named: false, bytes: false)
        if !propsChange, extensions != nil {
            form = try takeFileForm(db, rowid: rowid, remote, extensions: extensions, previousTitle: local.properties[t.titleField], propertiesChanged: false)
            if form.bytes { out.content.insert(remote.id) }
        }
        var shown = propsChange
        if metaNewer {
            // What the mount shows of it besides its bytes: state, tier, tags, attributes. The echo
            // of our own write changes none of them, and leaves the file's time alone (an editor
            // would think the file changed on disk; a watcher would see a change: FS-25).
            let newXattrs = extensions?["fs.xattr"].map(Self.xattrsJSON)
            let tagsChange = try tags.map { Set($0) != Set(try Self.tags(db, remote.id)) } ?? false
            let modeChange = (Self.mode(from: extensions).map { $0 != Self.permissions(stored.mode, default: Self.defaultFileMode) } ?? false)
                || (Self.mtime(from: extensions).map { $0 != stored.mtimeNs } ?? false)
            let attributesChange = remote.tier != local.tier || tagsChange || modeChange || (newXattrs.map { $0 != Xattrs.encode(stored.xattrs) } ?? false)
            if attributesChange { out.attributes.insert(remote.id) }
            shown = shown || remote.state != local.state || attributesChange
            // A file whose bytes changed shows a strictly later mtime, to the nanosecond (watchers
            // such as chokidar ignore a change that does not move it; FS-25).
            // A change of name only (a rename on the other mount) is no change of the bytes: the
            // file keeps its time, as on a disk (and the time its writer gave it, FS-32).
            var named = remote.properties, had = local.properties
            for k in [t.titleField, "filename"] { named[k] = nil; had[k] = nil }
            let bytesChange = (propsChange && named != had) || form.bytes
            let fileTime = bytesChange ? max(mtime, stored.mtimeNs + 1) : propsChange ? stored.mtimeNs : shown ? mtime : stored.mtimeNs
            try db.run("UPDATE items SET state = ?, tier = ?, updated_at = ?, mtime_ns = ? WHERE rowid = ?",
                       [remote.state.rawValue, remote.tier.rawValue, remote.updatedAt, fileTime, rowid])
            if tagsChange, let tags { try replaceTags(db, remote.id, tags) }
            if let newXattrs { try db.run("UPDATE items SET xattrs = ? WHERE rowid = ?", [newXattrs, rowid]) }
            if modeChange { try applyStat(db, extensions, rowid: rowid) }
        }
        if shown || form.named || form.bytes { out.items.insert(remote.id) }
        out.applied += 1
    }

    /// A server's item that is new here (or was purged here and is no longer trashed there).
    func insertRemote(_ db: Database, _ remote: Item, type t: TypeSchema, tags: [String]?, extensions: [String: JSONValue]?,
                      blobSizes: [String: Int64], mtimeNs: Int64, into out: inout StoreChanges) throws {
        // Purged here and still trashed there: it stays gone (FS-28).
        if try Self.wasPurged(db, remote.id) {
            if remote.state == .trashed { out.skipped += 1; return }
            try db.run("DELETE FROM purged WHERE id = ?", [remote.id])
        }
        // New here.
        let size = try remoteSize(db, remote, type: t, blobSizes: blobSizes)
        let (stem, ext) = Names.stemAndExt(id: remote.id, type: t, properties: remote.properties, fileName: nil)
        try db.run("""
            INSERT INTO items(rowid, id, type, properties, raw, file_name, stem, ext, size, version, schema_version, source, source_id,
              timestamp, created_at, updated_at, mtime_ns, state, tier, sync, xattrs)
            VALUES (?, ?, ?, ?, NULL, NULL, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'synced', ?)
            """, [try rowids.next(.items, db), remote.id, remote.type, JSONCoding.encode(remote.properties), stem, ext, size, remote.version, remote.schemaVersion,
                  remote.source, remote.sourceID, remote.timestamp, remote.createdAt, remote.updatedAt, mtimeNs,
                  remote.state.rawValue, remote.tier.rawValue, extensions?["fs.xattr"].map(Self.xattrsJSON) ?? "{}"])
        if let tags { try replaceTags(db, remote.id, tags) }
        if let r = try Int64.fetchOne(db, sql: "SELECT rowid FROM items WHERE id = ?", arguments: [remote.id]) {
            try applyStat(db, extensions, rowid: r)
            _ = try takeFileForm(db, rowid: r, remote, extensions: extensions, previousTitle: nil, propertiesChanged: true)
        }
        out.items.insert(remote.id); out.applied += 1
        // The same file made here before this store met the server: one item, the server's.
        try adoptLocalTwin(db, of: remote.id, into: &out)
    }

    /// The server's answer to our own write, with our properties: the file stays as it is (its
    /// mtime too: an editor would think it changed on disk); only a state, tier, tags or
    /// attributes the server holds otherwise are taken. The item takes the server's time of the
    /// change: a frame the stream brings later from before it (the echo of an earlier change of
    /// ours) is older, and changes nothing.
    func takeServerMetadata(_ db: Database, _ remote: Item, local: Item, rowid: Int64, tags: [String]?, extensions: [String: JSONValue]?,
                            into out: inout StoreChanges) throws {
        try db.run("UPDATE items SET updated_at = ? WHERE rowid = ?", [remote.updatedAt, rowid])
        if remote.state != local.state || remote.tier != local.tier {
            try db.run("UPDATE items SET state = ?, tier = ? WHERE rowid = ?", [remote.state.rawValue, remote.tier.rawValue, rowid])
            out.items.insert(remote.id)
        }
        if let tags, Set(tags) != Set(try Self.tags(db, remote.id)) { try replaceTags(db, remote.id, tags); out.items.insert(remote.id) }
        if let x = extensions?["fs.xattr"] { try db.run("UPDATE items SET xattrs = ? WHERE rowid = ?", [Self.xattrsJSON(x), rowid]) }
        if try applyStat(db, extensions, rowid: rowid) { out.items.insert(remote.id) }
        out.applied += 1
    }

    /// A remote item's file size: its rendering, or its blob's size (cached, reported, or 0 until known).
    func remoteSize(_ db: Database, _ remote: Item, type t: TypeSchema, blobSizes: [String: Int64]) throws -> Int64 {
        guard TypeSchema.isBlobType(t.id) else { return Int64(render(type: t, properties: remote.properties).utf8.count) }
        guard let h = remote.properties["blob_ref"]?.stringValue else { return 0 }
        if let sz = try Int64.fetchOne(db, sql: "SELECT sz FROM sqlar WHERE name = ?", arguments: [h]) { return sz }
        if let s = blobSizes[h] { return s }
        for k in ["size_bytes", "size"] { if case .int(let n)? = remote.properties[k] { return n } }
        return 0
    }

    func replaceTags(_ db: Database, _ itemID: String, _ tags: [String]) throws {
        try db.run("DELETE FROM tags WHERE item_id = ?", [itemID])
        for tag in Set(tags) { try db.run("INSERT INTO tags(item_id, tag) VALUES (?, ?)", [itemID, tag]) }
    }

    func noteRemoteUpdatedAt(_ db: Database, _ ts: String) throws {
        try db.run("""
            INSERT INTO meta(key, value) VALUES (?, ?)
            ON CONFLICT(key) DO UPDATE SET value = excluded.value WHERE excluded.value > meta.value
            """, [Self.newestRemoteKey, ts])
    }

    /// `fs.xattr` (name → base64) as the store keeps it; anything malformed is dropped.
    static func xattrsJSON(_ v: JSONValue) -> String {
        guard case .object(let o) = v else { return "{}" }
        return Xattrs.encode(o.compactMapValues { $0.stringValue.flatMap { Data(base64Encoded: $0) }.map { [UInt8]($0) } })
    }

    static func meta(_ db: Database, _ key: String) throws -> String? {
        try String.fetchOne(db, sql: "SELECT value FROM meta WHERE key = ?", arguments: [key])
    }

    static func setMeta(_ db: Database, _ key: String, _ value: String) throws {
        try db.run("INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value", [key, value])
    }
}
