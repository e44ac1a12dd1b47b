import Foundation
import GRDB
import MarfaLayout
import MarfaModel

/// A new item's row worked out before the transaction that writes it: its id, properties
/// (parsed text), the JSON and byte columns, its name, tags and links. Making one reads no
/// database, so an import makes them on every core while the previous batch is being written;
/// `Store.insertPrepared` only writes it.
public struct PreparedItem: Sendable {
    let new: NewItem
    let id: String
    let item: Item
    let propertiesJSON: String
    let raw: Data?
    let head: Data?
    let stem: String
    let ext: String
    let sync: SyncState
    let syncError: String?
    let blobHash: String?
    let tags: [String]
    let links: [VaultLink]?
    let unsettled: Bool
    /// The file's bytes.
    public var size: Int { new.content.count }
}

extension Store {
    // MARK: new items

    /// Creates an item and queues its create, in one transaction. Its id is minted here (FS-22).
    /// (A file made through the mount is staged first: `Store.stageItem`.)
    public func createItem(_ n: NewItem) throws -> StoredItem {
        let now = Self.ns(Date())
        return try write { db in try insertItem(db, n, rowid: nil, unsettled: false, createdNs: now, mtimeNs: now) }
    }

    /// A file brought in whole (an import): the item, its permission bits and its own time, in
    /// one transaction.
    public func createItem(_ n: NewItem, mode: UInt16, mtimeNs: Int64?) throws -> StoredItem {
        let now = Self.ns(Date())
        return try createItems([(try prepareItem(n, createdNs: now), mode, mtimeNs)])[0]
    }

    /// Files brought in whole, prepared (`prepareItem`), in one transaction (an import writes
    /// them a few hundred at a time: a transaction per file was most of its time). All or none.
    public func createItems(_ files: [(item: PreparedItem, mode: UInt16, mtimeNs: Int64?)]) throws -> [StoredItem] {
        let now = Self.ns(Date())
        return try write { db in
            try files.map { f in
                var made = try insertPrepared(db, f.item, rowid: nil, mtimeNs: f.mtimeNs ?? now)
                if let stored = Self.storedMode(f.mode, default: Self.defaultFileMode) {
                    try db.run("UPDATE items SET mode = ? WHERE rowid = ?", [Int64(stored), made.rowid])
                    made.mode = stored
                }
                return made
            }
        }
    }

    /// The properties a new item starts with before its bytes are parsed: the title from the
    /// file name, and for a blob its file name and MIME type.
    func initialProperties(_ n: NewItem, _ t: TypeSchema) -> [String: JSONValue] {
        var props: [String: JSONValue] = [t.titleField: .string(Self.titleFromFileName(n.fileName, type: t))]
        if TypeSchema.isBlobType(t.id) {
            props["filename"] = .string(n.fileName)
            props["mime_type"] = .string(n.mimeType ?? Names.mimeType(forExtension: Names.split(n.fileName).ext))
        }
        return props
    }

    /// Inserts a new item (with `rowid`, or the next one) and, unless unsettled or invalid, queues its create.
    func insertItem(_ db: Database, _ n: NewItem, rowid: Int64?, unsettled: Bool, createdNs: Int64, mtimeNs: Int64) throws -> StoredItem {
        try insertPrepared(db, try prepareItem(n, unsettled: unsettled, createdNs: createdNs), rowid: rowid, mtimeNs: mtimeNs)
    }

    /// Works out new item `n`'s row without touching the database (safe from any thread): its
    /// text parsed (a text that does not parse is kept, `invalid`, with what can be read of it),
    /// a blob's hash, the columns as they are written. `unsettled`: bytes not parsed yet.
    public func prepareItem(_ n: NewItem, unsettled: Bool = false, createdNs: Int64) throws -> PreparedItem {
        let id = n.id ?? ItemID.make()
        let t = type(n.type)
        let ts = Timestamp.format(Date(timeIntervalSince1970: Double(createdNs) / 1e9))
        let isBlob = TypeSchema.isBlobType(t.id)
        var props = initialProperties(n, t)
        var sync = SyncState.pending
        var syncError: String?
        var hash: String?
        var readable: [String: JSONValue]?
        if isBlob && !unsettled {
            guard Int64(n.content.count) <= Self.maxBlobBytes else { throw StoreError.tooLarge("blob of \(n.content.count) bytes") }
            hash = BlobHash.of(n.content)
            props["blob_ref"] = .string(hash!)
        } else if !isBlob {
            guard n.content.count <= Self.maxTextBytes else { throw StoreError.tooLarge("text file of \(n.content.count) bytes") }
            if !unsettled {
                do {
                    props = try Self.parseText(n.content, type: t, fileName: n.fileName, previous: props)
                } catch let e as FrontMatterError {
                    sync = .invalid; syncError = e.description
                    // What can be read of it still gives its links and tags (FS-32).
                    readable = FrontMatter.salvage(n.content, bodyField: t.bodyField)
                }
            }
        }
        let (stem, ext) = Names.stemAndExt(id: id, type: t, properties: props, fileName: n.fileName)
        var item = Item(id: id, type: n.type, properties: props, version: 0, timestamp: ts, createdAt: ts, updatedAt: ts,
                        state: n.state, tier: .library)
        item.sourceID = n.sourceID
        var (raw, head): (Data?, Data?) = (isBlob && !unsettled ? nil : Data(n.content), nil)
        if !isBlob && !unsettled && sync != .invalid { (raw, head) = RawText.columns(n.content, properties: props, bodyField: t.bodyField) }
        // FS-26: what a text says, read once: a note's tags are also those its text holds.
        let said = isBlob || unsettled ? nil
            : sync != .invalid ? VaultText.read(properties: props, bodyField: t.bodyField)
            : readable.map { VaultText.read(properties: $0, bodyField: t.bodyField) }
        let tags = Self.tagsFollowText(t.id) ? Self.adding(said?.tags ?? [], to: Set(n.tags)) : Set(n.tags)
        return PreparedItem(new: n, id: id, item: item, propertiesJSON: JSONCoding.encode(props), raw: raw, head: head,
                            stem: stem, ext: ext, sync: sync, syncError: syncError, blobHash: hash, tags: tags.sorted(),
                            links: said?.links, unsettled: unsettled)
    }

    /// Writes a prepared item's row, tags, links, blob and queued create.
    func insertPrepared(_ db: Database, _ p: PreparedItem, rowid: Int64?, mtimeNs: Int64) throws -> StoredItem {
        let n = p.new, id = p.id, ts = p.item.createdAt
        if try db.exists("SELECT 1 FROM items WHERE id = ?", [id]) { throw StoreError.exists(id) }
        let row = try rowid ?? rowids.next(.items, db)
        try db.run("""
            INSERT INTO items(rowid, id, type, properties, raw, raw_head, file_name, stem, ext, size, version, source, source_id,
              timestamp, created_at, updated_at, mtime_ns, state, tier, sync, sync_error, unsettled, links, links_stale)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, 'marfafs', ?, ?, ?, ?, ?, ?, 'library', ?, ?, ?, ?, ?)
            """, [row, id, n.type, p.propertiesJSON, p.raw, p.head, n.fileName, p.stem, p.ext,
                  n.content.count, n.sourceID, ts, ts, ts, mtimeNs, n.state.rawValue, p.sync.rawValue, p.syncError, p.unsettled,
                  p.links.flatMap(Self.linksColumn), TypeSchema.isBlobType(n.type) ? 0 : p.links == nil ? 1 : 2])
        for tag in p.tags { try db.run("INSERT INTO tags(item_id, tag) VALUES (?, ?)", [id, tag]) }
        if let hash = p.blobHash {
            _ = try putBlob(db, n.content, hash: hash)
            try enqueue(db, kind: .uploadBlob, itemID: id, payload: [
                "hash": .string(hash), "size": .int(Int64(n.content.count)), "mime_type": p.item.properties["mime_type"] ?? .null,
            ], coalesce: false)
        }
        var made = StoredItem(rowid: row, item: p.item, raw: p.blobHash == nil ? n.content : nil, fileName: n.fileName,
                              size: Int64(n.content.count), mtimeNs: mtimeNs, sync: p.sync, syncError: p.syncError, stem: p.stem, ext: p.ext,
                              unsettled: p.unsettled)
        if p.sync != .invalid && !p.unsettled { try enqueueCreate(db, p.item, tags: p.tags, row: made) }
        // What the insert's trigger gives a symlink (Schema: items_symlink_insert).
        if TypeSchema.isBlobType(n.type), p.item.properties["mime_type"] == .string(Self.symlinkMime) { made.mode = Self.symlinkMode }
        if p.sync != .invalid && !p.unsettled { try enqueueFileTime(db, made) }
        return made
    }
}
