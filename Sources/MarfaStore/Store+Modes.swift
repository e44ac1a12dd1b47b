import Foundation
import GRDB
import MarfaModel

/// Permission bits (FS-31). A file's travel with it as the item extension `fs.stat`
/// (`{"mode": 493}`), so `chmod +x` on one mount shows on the others and git sees no change; a
/// folder's stay in this store (`tree_dirs.mode`). The stored value is NULL for the default.
extension Store {
    public static let defaultFileMode: UInt16 = 0o644
    /// A symlink's MIME type (freedesktop.org's), and its mode.
    public static let symlinkMime = "inode/symlink"
    public static let symlinkMode: UInt16 = 0o120777

    /// Makes a symlink in the vault's tree (FS-31): a file item of type `core.file` whose bytes are
    /// its target, exact, synced and exported as a symlink.
    public func createSymlink(name: String, target: String, tags: [String], sourceID: String? = nil) throws -> ItemSummary {
        try settledWrite { db in
            let now = Self.ns(Date())
            let n = NewItem(type: "core.file", fileName: name, content: Array(target.utf8), tags: tags, sourceID: sourceID, mimeType: Self.symlinkMime)
            return try insertItem(db, n, rowid: nil, unsettled: false, createdNs: now, mtimeNs: now).summary
        }
    }
    public static let defaultDirMode: UInt16 = 0o755
    /// The stored mode of a file or folder whose permission bits are all clear (`chmod 000`):
    /// the regular-file type bit alone, since a stored 0 (or NULL) means the kind's default.
    public static let noPermissionsMark: UInt16 = 0o100000

    /// What to store for permission bits `bits`: nil for the kind's default `d`.
    public static func storedMode(_ bits: UInt16, default d: UInt16) -> UInt16? {
        let b = bits & 0o7777
        return b == d ? nil : b == 0 ? noPermissionsMark : b
    }

    /// The permission bits a stored mode stands for (a symlink's are 0777).
    public static func permissions(_ stored: UInt16, default d: UInt16) -> UInt16 {
        if stored == 0 { return d }
        if stored & 0o170000 == 0o120000 { return 0o777 }
        return stored & 0o7777
    }

    /// Whether a stored mode is a symlink's.
    public static func isSymlinkMode(_ stored: UInt16) -> Bool { stored & 0o170000 == 0o120000 }
    static let statExtension = "fs.stat"

    /// `fs.stat`: the permission bits and the file's own time (FS-32), always together (a
    /// namespace travels whole).
    static func statValue(mode: UInt16, mtimeNs: Int64) -> JSONValue {
        .object(["mode": .int(Int64(permissions(mode, default: defaultFileMode))), "mtime_ns": .int(mtimeNs)])
    }

    /// The file time an item's extensions give, if any.
    static func mtime(from extensions: [String: JSONValue]?) -> Int64? {
        guard case .int(let t)? = extensions?[statExtension]?.objectValue?["mtime_ns"], t > 0 else { return nil }
        return t
    }

    /// A file's own time travels when it is not the time of its last write, within the time a
    /// write takes to settle: set by `touch -d`, `rsync -a`, `cp -a` or an import (`explicit`:
    /// set just now, on a settled file). It goes as an update of its own after the bytes', so the
    /// other mounts take the bytes (their time: the server's) and then this time (FS-32).
    func enqueueFileTime(_ db: Database, _ cur: StoredItem, explicit: Bool = false) throws {
        // A store no server has seen writes its queue anew from the items when it meets one
        // (`localExtensions` carries the time then).
        if isLocalOnly { return }
        // A file made with bits of its own (`chmod +x` before it settled) sends them after its create.
        let ownBits = cur.mode != 0 && !Self.isSymlinkMode(cur.mode)
        let firstSend = try ownBits && Self.pendingCreate(db, cur.item.id)
        guard explicit || abs(Self.ns(Date()) - cur.mtimeNs) > 2_000_000_000 || firstSend else { return }
        // Behind a create still waiting, it folds into the extensions that follow the create
        // (the file's form): still after the bytes.
        try enqueue(db, kind: .update, itemID: cur.item.id, payload: [
            "extensions": .object([Self.statExtension: Self.statValue(mode: cur.mode, mtimeNs: cur.mtimeNs)]),
            "base_version": .int(Int64(cur.item.version)),
        ], coalesce: try Self.pendingCreateSeq(db, cur.item.id) != nil)
    }

    /// The permission bits an item's extensions give: nil when they say nothing (or nothing valid).
    static func mode(from extensions: [String: JSONValue]?) -> UInt16? {
        guard case .int(let m)? = extensions?[statExtension]?.objectValue?["mode"], (0...0o7777).contains(m) else { return nil }
        return UInt16(m)
    }

    /// Takes the permission bits a remote item's extensions give; true if they changed.
    @discardableResult
    func applyStat(_ db: Database, _ extensions: [String: JSONValue]?, rowid: Int64) throws -> Bool {
        let (t, m) = (Self.mtime(from: extensions), Self.mode(from: extensions))
        guard t != nil || m != nil, let row = try db.row("SELECT mtime_ns, mode FROM items WHERE rowid = ?", [rowid]) else { return false }
        var changed = false
        if let t, row[0] != t {
            try db.run("UPDATE items SET mtime_ns = ? WHERE rowid = ?", [t, rowid])
            changed = true
        }
        guard let m else { return changed }
        let stored: Int64? = Self.storedMode(m, default: Self.defaultFileMode).map { Int64($0) }
        let before: Int64? = row[1]
        // A symlink's mode is its kind's.
        if before == stored || Self.isSymlinkMode(UInt16(truncatingIfNeeded: before ?? 0)) { return changed }
        try db.run("UPDATE items SET mode = ? WHERE rowid = ?", [stored, rowid])
        return true
    }

    /// Permission bits of files made through the mount, given before they had a row (a temporary
    /// file's `creat(0600)` and `fchmod`), stored in one transaction once they have one. A file
    /// whose create is not queued yet only takes them in its row: its create, when it settles,
    /// sends them (`enqueueFileTime`). Bits that are the default change nothing. Any other file
    /// goes through `setMode`.
    public func setStagedModes(_ modes: [(rowid: Int64, mode: UInt16)]) throws {
        let own = modes.filter { Self.storedMode($0.mode & 0o7777, default: Self.defaultFileMode) != nil }
        if own.isEmpty { return }
        var rest: [(rowid: Int64, mode: UInt16)] = []
        try write { db in
            for (r, bits) in own {
                guard let row = try db.row("SELECT id, unsettled, mode FROM items WHERE rowid = ?", [r]) else { continue }
                let id: String = row[0], unsettled: Int64 = row[1], before: Int64? = row[2]
                guard unsettled == 1, before == nil, try !db.exists("SELECT 1 FROM mutations WHERE item_id = ?", [id]) else {
                    rest.append((r, bits)); continue
                }
                try db.run("UPDATE items SET mode = ? WHERE rowid = ?", [Self.storedMode(bits & 0o7777, default: Self.defaultFileMode).map { Int64($0) }, r])
            }
        }
        for (r, bits) in rest { try setMode(rowid: r, mode: bits) }
    }

    /// Sets an item's permission bits; a change is queued as `fs.stat`.
    public func setMode(rowid: Int64, mode: UInt16) throws {
        let m = mode & 0o7777
        try settledWrite { db in
            guard let cur = try Self.fetchItem(db, rowid: rowid) else { throw StoreError.notFound("item \(rowid)") }
            if Self.permissions(cur.mode, default: Self.defaultFileMode) == m || Self.isSymlinkMode(cur.mode) { return }
            try db.run("UPDATE items SET mode = ? WHERE rowid = ?", [Self.storedMode(m, default: Self.defaultFileMode).map { Int64($0) }, rowid])
            try enqueue(db, kind: .update, itemID: cur.item.id, payload: [
                "extensions": .object([Self.statExtension: Self.statValue(mode: Self.storedMode(m, default: Self.defaultFileMode) ?? 0, mtimeNs: cur.mtimeNs)]),
                "base_version": .int(Int64(cur.item.version)),
            ], coalesce: true)
        }
    }

    /// The extensions a store first bound to a server sends for an item: its attributes and its
    /// permission bits, when it has any.
    static func localExtensions(_ cur: StoredItem) -> [String: JSONValue] {
        var ext: [String: JSONValue] = [:]
        if !cur.xattrs.isEmpty { ext["fs.xattr"] = .object(cur.xattrs.mapValues { .string(Data($0).base64EncodedString()) }) }
        ext[statExtension] = statValue(mode: cur.mode, mtimeNs: cur.mtimeNs)
        return ext
    }

    /// The folders' permission bits other than the default, by path (those set and not yet
    /// written too).
    public func treeDirModes() throws -> [String: UInt16] {
        let seen = pendingFolders.seen
        var modes = try pool.read { db in
            Dictionary(try Row.fetchAll(db, sql: "SELECT path, mode FROM tree_dirs WHERE mode IS NOT NULL").map { ($0[0] as String, UInt16(truncatingIfNeeded: $0[1] as Int64)) },
                       uniquingKeysWith: { a, _ in a })
        }
        for f in pendingFolders.droppedFolders(seen) { modes[f] = nil }
        for case let (path, .mode(m)) in pendingFolders.pendingAttrs(.mode, seen) { modes[path] = m.map { UInt16(truncatingIfNeeded: $0) } }
        return modes
    }

    /// Sets the permission bits of the folder at `path`, numbered `ino` by the mount, without
    /// waiting for the store's writer: recorded at once beside the store and written by the next
    /// write transaction, as a folder made by `mkdir` is (`PendingFolders`).
    public func setTreeDirMode(_ path: String, ino: UInt64, mode: UInt16) throws {
        try pendingFolders.set(.init(path: path, ino: ino, .mode(Self.storedMode(mode, default: Self.defaultDirMode).map { Int64($0) })))
    }
}
