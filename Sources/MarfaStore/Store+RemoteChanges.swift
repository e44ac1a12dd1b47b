import Foundation
import GRDB
import MarfaLayout
import MarfaModel

/// What a remote of files (a MyLifeDB server, FS-34) changed, applied to the store without queueing
/// anything: its files' bytes, moves and removals, and the settling of a concurrent edit (a merge,
/// or a conflicted copy). What the store knows of the remote's files: `Store+RemoteFiles`.
extension Store {
    /// The remote's file `f` with `body`, as the item at its path (a new one if none): taken unless
    /// the item has changes of its own still to send (those win until they are sent; the sending
    /// merges). Nothing is queued. A text's file keeps its bytes exactly.
    public func applyRemoteFile(_ f: RemoteFile, body: RemoteBody) throws -> StoreChanges {
        try applyRemoteFiles([(f, body)])
    }

    /// Several of the remote's files in one transaction (a first sync takes them a batch at a time).
    public func applyRemoteFiles(_ files: [(RemoteFile, RemoteBody)]) throws -> StoreChanges {
        try published { try write { db in
            var out = StoreChanges()
            changesCome(from: .remote)
            for (f, body) in files { try applyRemoteFile(db, f, body: body, into: &out) }
            return out
        } }
    }

    func applyRemoteFile(_ db: Database, _ f: RemoteFile, body: RemoteBody, into out: inout StoreChanges) throws {
        let row = try db.row("SELECT item_id, hash FROM remote_files WHERE path = ?", [f.path])
        let known = row.map { $0[0] as String }
        // What this mount sent meanwhile (recorded since the tree was read): the echo of our own
        // write changes nothing here, the file's time included.
        if let row, let h = f.hash, (row[1] as String) == h {
            try db.run("UPDATE remote_files SET modified_ms = ?, size = ? WHERE path = ?", [f.modifiedMs, f.size, f.path])
            return
        }
        let base: [UInt8]? = { if case .bytes(let b) = body, !Self.isBlobPath(f.path) { return b }; return nil }()
        let mtime = f.modifiedMs * 1_000_000
        if let id = known, let r = try db.row("SELECT rowid, unsettled FROM items WHERE id = ?", [id]) {
            if try keepsLocal(db, r, id) { out.skipped += 1; return }
            guard var cur = try Self.fetchItem(db, rowid: r[0]) else { return }
            if cur.item.state != .active {
                try db.run("UPDATE items SET state = 'active' WHERE rowid = ?", [cur.rowid])
                cur = try Self.fetchItem(db, rowid: cur.rowid)!
            }
            try replaceBytes(db, cur, body: body, mtimeNs: mtime)
            try remember(db, itemID: id, f, base: base)
            out.items.insert(id); out.content.insert(id); out.applied += 1
            return
        }
        let (folder, name) = Self.splitPath(f.path)
        // A file made here that the server does not know yet holds the path (its echo, or a file
        // made there under the same name meanwhile): the sending of it settles which.
        if try activeItem(db, folder: folder, name: name) != nil { out.skipped += 1; return }
        let ext = Names.split(name).ext.lowercased()
        let type = ext == ".md" ? "core.note" : Names.fileType(forMime: Names.mimeType(forExtension: ext))
        var n = NewItem(type: type, fileName: name, tags: folder.isEmpty ? [] : [VaultText.folderPrefix + folder])
        if case .bytes(let b) = body { n.content = b }
        var made = try insertItem(db, n, rowid: nil, unsettled: false, createdNs: mtime, mtimeNs: mtime)
        if case .blob(let hash, let size) = body, TypeSchema.isBlobType(type) {
            made.item.properties["blob_ref"] = .string(hash)
            try db.run("UPDATE items SET properties = ?, size = ? WHERE rowid = ?", [JSONCoding.encode(made.item.properties), size, made.rowid])
        }
        try db.run("DELETE FROM mutations WHERE item_id = ?", [made.item.id])
        try db.run("UPDATE items SET version = 1, sync = CASE WHEN sync = 'invalid' THEN sync ELSE 'synced' END WHERE rowid = ?", [made.rowid])
        if case .blob = body { try dropBlobIfUnused(db, BlobHash.of([])) }
        try remember(db, itemID: made.item.id, f, base: base)
        out.items.insert(made.item.id); out.applied += 1
    }

    /// The active item at a place of the vault's tree, if any.
    func activeItem(_ db: Database, folder: String, name: String) throws -> String? {
        if folder.isEmpty {
            return try String.fetchOne(db, sql: """
                SELECT id FROM items WHERE file_name = ? AND state = 'active'
                  AND NOT EXISTS (SELECT 1 FROM tags WHERE tags.item_id = items.id AND tags.tag LIKE 'folder:%') LIMIT 1
                """, arguments: [name])
        }
        return try String.fetchOne(db, sql: """
            SELECT items.id FROM tags JOIN items ON items.id = tags.item_id
            WHERE tags.tag = ? AND items.file_name = ? AND items.state = 'active' LIMIT 1
            """, arguments: [VaultText.folderPrefix + folder, name])
    }

    /// Replaces an item's bytes with the remote's, as a remote change: the bytes the mount showed
    /// until now become the base of an editor's next save (FS-24); the file's time moves strictly
    /// forward (FS-25).
    func replaceBytes(_ db: Database, _ cur: StoredItem, body: RemoteBody, mtimeNs: Int64) throws {
        let isBlob = TypeSchema.isBlobType(type(cur.item.type).id)
        switch body {
        case .bytes(let b):
            if !isBlob, cur.shownBase == nil {
                try db.run("UPDATE items SET shown_base = ? WHERE rowid = ?", [Data(try currentBytes(db, cur)), cur.rowid])
            }
            _ = try applyContent(db, cur, bytes: b, now: Date(timeIntervalSince1970: Double(mtimeNs) / 1e9), origin: .currentText)
        case .blob(let hash, let size):
            var props = cur.item.properties
            let old = props["blob_ref"]?.stringValue
            props["blob_ref"] = .string(hash)
            try db.run("UPDATE items SET properties = ?, raw = NULL, raw_head = NULL, size = ? WHERE rowid = ?", [JSONCoding.encode(props), size, cur.rowid])
            if let old, old != hash { try dropBlobIfUnused(db, old) }
        }
        try db.run("DELETE FROM mutations WHERE item_id = ?", [cur.item.id])
        try db.run("""
            UPDATE items SET version = version + 1, sync = CASE WHEN sync = 'invalid' THEN sync ELSE 'synced' END, sync_error = CASE WHEN sync = 'invalid' THEN sync_error END,
              mtime_ns = max(?, ? + 1) WHERE rowid = ?
            """, [mtimeNs, cur.mtimeNs, cur.rowid])
    }

    /// The remote moved or renamed the file at `from` to `to.path`: the item moves with it (the
    /// same inode, IN_MOVED_FROM/TO), unless it has changes of its own still to send, or the store
    /// recorded the file anew since `from` was read (this mount's own move, say).
    public func applyRemoteMove(from: KnownFile, to f: RemoteFile) throws -> StoreChanges {
        try published { try write { db in
            var out = StoreChanges()
            guard let id = try String.fetchOne(db, sql: "SELECT item_id FROM remote_files WHERE path = ? AND seen = ?", arguments: [from.path, from.seen]),
                  let r = try db.row("SELECT rowid, unsettled FROM items WHERE id = ?", [id]) else { return out }
            if try keepsLocal(db, r, id) { out.skipped += 1; return out }
            guard let cur = try Self.fetchItem(db, rowid: r[0]) else { return out }
            changesCome(from: .remote)
            try placeFile(db, cur, at: f.path)
            let base = try db.row("SELECT base FROM remote_files WHERE item_id = ?", [id]).flatMap { ($0[0] as Data?).map { [UInt8]($0) } }
            try remember(db, itemID: id, f, base: base)
            out.items.insert(id); out.applied += 1
            return out
        } }
    }

    /// Gives an item the folder and name of `path` (no mutation).
    func placeFile(_ db: Database, _ cur: StoredItem, at path: String) throws {
        let (folder, name) = Self.splitPath(path)
        let t = type(cur.item.type)
        var props = cur.item.properties
        var titleInFile = false
        if let raw = cur.raw, let p = try? FrontMatter.parse(raw, bodyField: t.bodyField, titleField: t.titleField) { titleInFile = p.hasTitleKey }
        if !titleInFile { props[t.titleField] = .string(Self.titleFromFileName(name, type: t)) }
        if TypeSchema.isBlobType(t.id) { props["filename"] = .string(name) }
        try db.run("UPDATE items SET file_name = ?, properties = ? WHERE rowid = ?", [name, JSONCoding.encode(props), cur.rowid])
        try refreshName(db, rowid: cur.rowid)
        var tags = Set(try Self.tags(db, cur.item.id).filter { !$0.hasPrefix(VaultText.folderPrefix) })
        if !folder.isEmpty { tags.insert(VaultText.folderPrefix + folder) }
        try replaceTags(db, cur.item.id, Array(tags))
    }

    /// The remote no longer has the file `known` was: its item goes to the trash (restorable,
    /// FS-28), unless it has changes of its own still to send (then it is sent again, as a new
    /// file), or the store recorded the file anew since `known` was read (a reading of the tree
    /// older than this mount's own move or write).
    public func applyRemoteRemoval(_ known: KnownFile) throws -> StoreChanges {
        try published { try write { db in
            var out = StoreChanges()
            guard let id = try String.fetchOne(db, sql: "SELECT item_id FROM remote_files WHERE path = ? AND seen = ?", arguments: [known.path, known.seen]) else { return out }
            try db.run("DELETE FROM remote_files WHERE item_id = ?", [id])
            guard let r = try db.row("SELECT rowid, unsettled FROM items WHERE id = ?", [id]) else { return out }
            if try keepsLocal(db, r, id) { out.skipped += 1; return out }
            changesCome(from: .remote)
            try db.run("UPDATE items SET state = 'trashed', mtime_ns = ? WHERE rowid = ? AND state = 'active'", [Self.ns(Date()), r[0] as Int64])
            out.items.insert(id); out.applied += 1
            return out
        } }
    }

    /// Two edits of a text overlapped (FS-20 with a remote of files): the item takes the remote's
    /// bytes, and a sibling file named `<stem> (conflicted copy <device> <UTC time>)<ext>`, tagged
    /// `conflicted-copy` and derived from it, holds `ours`; the copy is queued to be sent. Returns the
    /// copy's id.
    public func keepConflictedFile(itemID: String, remote f: RemoteFile, theirs: [UInt8], ours: [UInt8], upTo seq: Int64,
                                   device: String, now: Date = Date()) throws -> (StoreChanges, String) {
        var copyID = ""
        let changes = try published { try write { db in
            var out = StoreChanges()
            guard let r = try db.row("SELECT rowid FROM items WHERE id = ?", [itemID]), let cur = try Self.fetchItem(db, rowid: r[0]) else { return out }
            changesCome(from: .merge)
            let (folder, name) = Self.splitPath(f.path)
            let (stem, ext) = Names.split(name)
            let label = device.filter { $0 != "(" && $0 != ")" }
            let copyName = stem + " (conflicted copy \(label) \(Self.conflictStamp(now)))" + ext
            var tags = Set(try Self.tags(db, itemID)); tags.insert("conflicted-copy")
            if !folder.isEmpty { tags.insert(VaultText.folderPrefix + folder) }
            let copy = try insertItem(db, NewItem(type: cur.item.type, fileName: copyName, content: ours, tags: tags.sorted()),
                                      rowid: nil, unsettled: false, createdNs: Self.ns(now), mtimeNs: Self.ns(now))
            copyID = copy.item.id
            let ts = Timestamp.format(now)
            try db.run("INSERT INTO edges(id, source_id, target_id, edge_type, properties, created_at, updated_at) VALUES (?, ?, ?, 'derived-from', '{}', ?, ?)",
                       [ItemID.make(), copyID, itemID, ts, ts])
            try db.run("DELETE FROM mutations WHERE item_id = ? AND seq <= ?", [itemID, seq])
            if try !Self.hasUnsent(db, itemID) {
                try replaceBytes(db, cur, body: .bytes(theirs), mtimeNs: max(f.modifiedMs * 1_000_000, Self.ns(now)))
            }
            try remember(db, itemID: itemID, f, base: theirs)
            out.items.formUnion([itemID, copyID]); out.content.insert(itemID); out.applied += 1
            return out
        } }
        return (changes, copyID)
    }

    /// A merge of both edits was sent: the item takes it (a save made meanwhile stays, and is
    /// sent next).
    public func takeMerged(itemID: String, remote f: RemoteFile, merged: [UInt8], upTo seq: Int64) throws -> StoreChanges {
        try published { try write { db in
            var out = StoreChanges()
            changesCome(from: .merge)
            try db.run("DELETE FROM mutations WHERE item_id = ? AND seq <= ?", [itemID, seq])
            if try !Self.hasUnsent(db, itemID), let r = try db.row("SELECT rowid FROM items WHERE id = ?", [itemID]),
               let cur = try Self.fetchItem(db, rowid: r[0]) {
                try replaceBytes(db, cur, body: .bytes(merged), mtimeNs: max(f.modifiedMs * 1_000_000, Self.ns(Date())))
                out.items.insert(itemID); out.content.insert(itemID)
            }
            try remember(db, itemID: itemID, f, base: merged)
            out.applied += 1
            return out
        } }
    }

    static func splitPath(_ path: String) -> (folder: String, name: String) {
        guard let slash = path.lastIndex(of: "/") else { return ("", path) }
        return (String(path[..<slash]), String(path[path.index(after: slash)...]))
    }

    /// Whether a file at `path` is kept as a blob (anything but Markdown).
    public static func isBlobPath(_ path: String) -> Bool {
        Names.split(splitPath(path).name).ext.lowercased() != ".md"
    }
}
