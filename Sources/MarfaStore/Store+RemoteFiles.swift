import Foundation
import GRDB
import MarfaLayout
import MarfaModel

/// A remote that keeps files by path rather than items by id (a MyLifeDB server, FS-34). The store
/// keeps, for every item the remote has, the file it is there (`remote_files`: its path, the hash
/// and time the remote last gave, and for a text the bytes both sides last agreed on: the base a
/// concurrent edit is merged against). A queued mutation of such a store carries no payload (as a
/// local-only store's): it says only that the item changed, and the sync engine sends the item's
/// state as it is when its turn comes (`fileState`). What the remote changed is applied here
/// (`applyRemoteFile`, `applyRemoteMove`, `applyRemoteRemoval`) without queueing anything.

/// A file as the remote describes it.
public struct RemoteFile: Sendable, Equatable {
    public var path: String
    public var size: Int64
    public var modifiedMs: Int64
    /// SHA-256, lowercase hex (nil: not asked for yet).
    public var hash: String?
    /// What the remote says of the file besides its bytes, shown as extended attributes
    /// (`user.<namespace>.<key>`).
    public var attributes: [String: String]
    public init(path: String, size: Int64, modifiedMs: Int64, hash: String? = nil, attributes: [String: String] = [:]) {
        self.path = path; self.size = size; self.modifiedMs = modifiedMs; self.hash = hash; self.attributes = attributes
    }
}

/// What the store knows of an item's file on the remote.
public struct KnownFile: Sendable, Equatable {
    public var itemID: String
    public var path: String
    public var hash: String
    public var size: Int64
    public var modifiedMs: Int64
    /// A text's bytes as both sides last had them (nil for other files).
    public var base: [UInt8]?
    /// When the store last recorded it (a counter): a reading of the tree that began before may
    /// not undo what was recorded since (`applyRemoteMove`, `applyRemoteRemoval`).
    public var seen: Int64
}

/// An item's file as the store holds it now: what the remote must be made to hold.
public struct FileState: Sendable {
    public var itemID: String
    /// Its place in the vault's tree; nil when it has none there any more (trashed, purged).
    public var path: String?
    public var isText: Bool
    public var isSymlink: Bool
    public var hash: String
    public var size: Int64
    public var mtimeNs: Int64
    /// The newest of the item's queued mutations when this state was read: sending this state
    /// sends them all.
    public var queuedUpTo: Int64
}

/// A file's bytes from the remote: fetched whole, or (a large file) named by its hash and fetched
/// when read.
public enum RemoteBody: Sendable {
    case bytes([UInt8])
    case blob(hash: String, size: Int64)
}

extension Store {
    static let filesRemoteKey = "files_remote"

    /// The mount follows a remote of files at `server`: the queue keeps no payloads, and items the
    /// remote does not have yet (a store used before without it) are queued once, to be sent.
    /// Returns how many were queued.
    @discardableResult
    public func useFileRemote(server: String) throws -> Int {
        localOnly.withLock { $0 = true }
        // Bound to this server already: nothing is written (a mount on a full disk starts).
        if try boundServer().map({ $0.server == server && $0.files }) ?? false { return 0 }
        return try write { db -> Int in
            let before = try Self.meta(db, Self.filesRemoteKey)
            try Self.setMeta(db, "server", server)
            try db.run("DELETE FROM meta WHERE key = 'local_only'")
            guard before == nil else { return 0 }
            try Self.setMeta(db, Self.filesRemoteKey, server)
            try db.run("""
                INSERT INTO mutations(id, idempotency_key, kind, item_id, payload, created_at)
                SELECT lower(hex(randomblob(16))), lower(hex(randomblob(16))), 'update', id, '{}', ? FROM items
                WHERE state = 'active' AND id NOT IN (SELECT item_id FROM remote_files)
                  AND id NOT IN (SELECT item_id FROM mutations)
                """, [Timestamp.now()])
            return db.changesCount
        }
    }

    /// The server this store was last mounted with, and whether it is a remote of files.
    public func boundServer() throws -> (server: String, files: Bool)? {
        try pool.read { db in
            guard let s = try Self.meta(db, "server") else { return nil }
            return (s, try Self.meta(db, Self.filesRemoteKey) != nil)
        }
    }

    // MARK: what is known of the remote

    /// The files known at and below folder `scope` ("": all), without their base bytes.
    public func knownFiles(under scope: String = "") throws -> [KnownFile] {
        try pool.read { db in
            let columns = "item_id, path, hash, size, modified_ms, NULL AS base, seen"
            if scope.isEmpty { return try Row.fetchAll(db, sql: "SELECT \(columns) FROM remote_files").map(Self.known) }
            return try Row.fetchAll(db, sql: "SELECT \(columns) FROM remote_files WHERE path = ? OR path LIKE ? ESCAPE '\\'",
                                    arguments: [scope, Self.likePrefix(scope + "/")]).map(Self.known)
        }
    }

    public func knownFile(itemID: String) throws -> KnownFile? {
        try pool.read { db in try db.row("SELECT * FROM remote_files WHERE item_id = ?", [itemID]).map(Self.known) }
    }

    public func knownFile(path: String) throws -> KnownFile? {
        try pool.read { db in try db.row("SELECT * FROM remote_files WHERE path = ?", [path]).map(Self.known) }
    }

    /// The remote file whose bytes are blob `hash` (a large file fetched when read).
    public func knownFile(blob hash: String) throws -> KnownFile? {
        guard hash.hasPrefix(BlobHash.prefix) else { return nil }
        return try pool.read { db in try db.row("SELECT * FROM remote_files WHERE hash = ? LIMIT 1", [String(hash.dropFirst(BlobHash.prefix.count))]).map(Self.known) }
    }

    static func known(_ r: Row) -> KnownFile {
        KnownFile(itemID: r["item_id"], path: r["path"], hash: r["hash"], size: r["size"], modifiedMs: r["modified_ms"],
                  base: (r["base"] as Data?).map { [UInt8]($0) }, seen: r["seen"])
    }

    /// Folders the remote has.
    public func knownFolders() throws -> Set<String> {
        try pool.read { db in Set(try String.fetchAll(db, sql: "SELECT path FROM remote_folders")) }
    }

    public func setKnownFolders(adding: [String], removing: [String]) throws {
        guard !adding.isEmpty || !removing.isEmpty else { return }
        try write { db in
            for p in adding { try db.run("INSERT OR IGNORE INTO remote_folders(path) VALUES (?)", [p]) }
            for p in removing { try db.run("DELETE FROM remote_folders WHERE path = ?", [p]) }
        }
    }

    /// Every folder of the vault's tree here: those holding an active item, those kept while empty,
    /// and the folders above them.
    public func treeFolders() throws -> Set<String> {
        let tags = try pool.read { db in
            try String.fetchAll(db, sql: """
                SELECT DISTINCT tags.tag FROM tags JOIN items ON items.id = tags.item_id
                WHERE tags.tag LIKE 'folder:%' AND items.state = 'active'
                """)
        } + keptFolderTags { try pool.read($0) }
        var out = Set<String>()
        for t in tags {
            var f = Substring(t.dropFirst(VaultText.folderPrefix.count))
            while !f.isEmpty, out.insert(String(f)).inserted {
                guard let i = f.lastIndex(of: "/") else { break }
                f = f[..<i]
            }
        }
        return out
    }

    /// Folders the remote has, shown in the vault's tree even while empty.
    @discardableResult
    public func addRemoteFolders(_ folders: [String]) throws -> StoreChanges {
        guard !folders.isEmpty else { return StoreChanges() }
        return try published { try write { db in
            var out = StoreChanges()
            for f in folders where !f.isEmpty {
                let tag = VaultText.folderPrefix + f
                guard Self.isLocalTag(tag) else { continue }
                try db.run("INSERT OR IGNORE INTO local_tags(tag) VALUES (?)", [tag])
                if db.changesCount > 0 { out.folders.insert(tag) }
            }
            return out
        } }
    }

    /// Folders the remote removed: those left empty here go from the tree (deepest first).
    @discardableResult
    public func removeRemoteFolders(_ folders: [String]) throws -> StoreChanges {
        guard !folders.isEmpty else { return StoreChanges() }
        return try published { try write { db in
            var out = StoreChanges()
            for f in folders.sorted(by: { $0.count > $1.count }) where !f.isEmpty {
                if try removeFolderIfEmpty(db, f) { out.foldersRemoved.insert(VaultText.folderPrefix + f) }
            }
            return out
        } }
    }

    static func likePrefix(_ s: String) -> String {
        s.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "%", with: "\\%").replacingOccurrences(of: "_", with: "\\_") + "%"
    }

    /// The remote's extended attributes of an item (`user.<namespace>.<key>` → value).
    public func remoteAttributes(itemID: String) -> [String: [UInt8]] {
        // One statement: no transaction of the pool's (`listxattr` asks this of every file).
        guard let text = try? readStatement({ db in
            try String.fetchOne(db.cachedStatement(sql: "SELECT attrs FROM remote_files WHERE item_id = ?"), arguments: [itemID])
        }) else { return [:] }
        var out: [String: [UInt8]] = [:]
        for (k, v) in JSONCoding.object(from: text) { if let s = v.stringValue { out[k] = Array(s.utf8) } }
        return out
    }

    // MARK: the item's side

    /// Items changed here with something to send, oldest first.
    public func fileState(itemID: String) throws -> FileState? {
        try pool.read { db in
            guard let r = try db.row("SELECT rowid FROM items WHERE id = ?", [itemID]), let cur = try Self.fetchItem(db, rowid: r[0]) else { return nil }
            let t = type(cur.item.type)
            let isText = !TypeSchema.isBlobType(t.id)
            let hash: String
            if isText {
                hash = String(BlobHash.of(try currentBytes(db, cur)).dropFirst(BlobHash.prefix.count))
            } else {
                hash = String((cur.item.properties["blob_ref"]?.stringValue ?? "").dropFirst(BlobHash.prefix.count))
            }
            let tags = try Self.tags(db, itemID)
            var path: String?
            if cur.item.state == .active {
                let folder = tags.filter { $0.hasPrefix(VaultText.folderPrefix) }.min().map { String($0.dropFirst(VaultText.folderPrefix.count)) } ?? ""
                let name = cur.fileName ?? Names.compose(stem: cur.stem, ext: cur.ext)
                path = folder.isEmpty ? name : folder + "/" + name
            }
            let upTo = try Int64.fetchOne(db, sql: "SELECT max(seq) FROM mutations WHERE item_id = ?", arguments: [itemID]) ?? 0
            return FileState(itemID: itemID, path: path, isText: isText, isSymlink: cur.mode == Self.symlinkMode, hash: hash,
                             size: cur.size, mtimeNs: cur.mtimeNs, queuedUpTo: upTo)
        }
    }

    /// The bytes of an item's file now (a text's, or its cached blob's).
    public func fileBytes(itemID: String) throws -> [UInt8] {
        try pool.read { db in
            guard let r = try db.row("SELECT rowid FROM items WHERE id = ?", [itemID]), let cur = try Self.fetchItem(db, rowid: r[0]) else {
                throw StoreError.notFound("item \(itemID)")
            }
            return try currentBytes(db, cur)
        }
    }

    /// The remote took the item's file as `f` (`base`: its bytes, for a text): its mutations up to
    /// `seq` leave the queue, and the item counts as synced once nothing of it is left to send.
    public func filePushed(itemID: String, upTo seq: Int64, file f: RemoteFile?, base: [UInt8]?) throws {
        try write { db in
            try db.run("DELETE FROM mutations WHERE item_id = ? AND seq <= ? AND state != 'rejected'", [itemID, seq])
            if let f {
                try remember(db, itemID: itemID, f, base: base)
                try db.run("UPDATE items SET version = max(version, 1) WHERE id = ?", [itemID])
            } else {
                try db.run("DELETE FROM remote_files WHERE item_id = ?", [itemID])
            }
            if try !db.exists("SELECT 1 FROM mutations WHERE item_id = ? AND state != 'rejected'", [itemID]) {
                try db.run("UPDATE items SET sync = 'synced', sync_error = NULL WHERE id = ? AND sync = 'pending'", [itemID])
            }
        }
    }

    func remember(_ db: Database, itemID: String, _ f: RemoteFile, base: [UInt8]?) throws {
        try db.run("DELETE FROM remote_files WHERE path = ? AND item_id != ?", [f.path, itemID])
        // Sent from here, the file has no description from the server yet: it keeps the last one,
        // with the hash it now has.
        var attrs = f.attributes.mapValues(JSONValue.string)
        if attrs.isEmpty {
            attrs = JSONCoding.object(from: try String.fetchOne(db, sql: "SELECT attrs FROM remote_files WHERE item_id = ?", arguments: [itemID]) ?? "{}")
            if let h = f.hash, attrs["user.mylifedb.hash"] != nil { attrs["user.mylifedb.hash"] = .string(h) }
        }
        try db.run("""
            INSERT INTO remote_files(item_id, path, hash, size, modified_ms, base, attrs, seen)
            VALUES (?, ?, ?, ?, ?, ?, ?, (SELECT coalesce(max(seen), 0) + 1 FROM remote_files))
            ON CONFLICT(item_id) DO UPDATE SET path = excluded.path, hash = excluded.hash, size = excluded.size,
              modified_ms = excluded.modified_ms, base = excluded.base, attrs = excluded.attrs, seen = excluded.seen
            """, [itemID, f.path, f.hash ?? "", f.size, f.modifiedMs, base.map { Data($0) }, JSONCoding.encode(attrs)])
    }

    /// Only the remote's description of a file changed (its attributes, its time), not its bytes.
    public func noteRemoteFile(_ f: RemoteFile) throws -> StoreChanges {
        try published { try write { db in
            var out = StoreChanges()
            guard let id = try String.fetchOne(db, sql: "SELECT item_id FROM remote_files WHERE path = ?", arguments: [f.path]) else { return out }
            let before = try String.fetchOne(db, sql: "SELECT attrs FROM remote_files WHERE item_id = ?", arguments: [id])
            try db.run("UPDATE remote_files SET modified_ms = ?, size = ?, attrs = ? WHERE item_id = ?",
                       [f.modifiedMs, f.size, JSONCoding.encode(f.attributes.mapValues(JSONValue.string)), id])
            if before != JSONCoding.encode(f.attributes.mapValues(JSONValue.string)) { out.attributes.insert(id); out.items.insert(id) }
            return out
        } }
    }
}
