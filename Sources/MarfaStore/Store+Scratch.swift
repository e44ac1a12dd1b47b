import Foundation
import GRDB
import MarfaModel

/// A scratch file (FS-14): local only, never queued.
public struct ScratchFile: Hashable, Sendable {
    public var rowid: Int64
    public var dir: String
    public var name: String
    public var size: Int64
    public var mtimeNs: Int64
    /// A scratch symlink's target (Emacs' lock file `.#name`); nil for a file.
    public var link: String?

    public init(rowid: Int64, dir: String, name: String, size: Int64, mtimeNs: Int64, link: String? = nil) {
        self.rowid = rowid; self.dir = dir; self.name = name; self.size = size; self.mtimeNs = mtimeNs; self.link = link
    }

    init(row: Row) {
        rowid = row["rowid"]; dir = row["dir"]; name = row["name"]; size = row["size"]; mtimeNs = row["mtime_ns"]; link = row["link"]
    }
}

extension Store {
    static let scratchColumns = "rowid, dir, name, length(data) AS size, mtime_ns, link"

    public func allScratch() throws -> [ScratchFile] {
        try pool.read { db in try db.rows("SELECT \(Self.scratchColumns) FROM scratch").map(ScratchFile.init(row:)) }
    }

    /// Writes a scratch file, replacing one of the same name in the same directory.
    func putScratch(_ db: Database, dir: String, name: String, data: [UInt8], rowid: Int64? = nil, mtimeNs: Int64? = nil) throws -> ScratchFile {
        try db.run("DELETE FROM scratch WHERE dir = ? AND name = ?", [dir, name])
        let r = try rowid ?? rowids.next(.scratch, db)
        try db.run("INSERT INTO scratch(rowid, dir, name, mtime_ns, data) VALUES (?, ?, ?, ?, ?)", [r, dir, name, mtimeNs ?? Self.ns(Date()), Data(data)])
        return try Self.fetchScratch(db, r)
    }

    static func fetchScratch(_ db: Database, _ rowid: Int64) throws -> ScratchFile {
        guard let r = try db.row("SELECT \(scratchColumns) FROM scratch WHERE rowid = ?", [rowid]) else {
            throw StoreError.notFound("scratch file \(rowid)")
        }
        return ScratchFile(row: r)
    }

    public func scratchData(_ rowid: Int64) throws -> [UInt8] {
        try pool.read { db in
            guard let d = try Data.fetchOne(db.cachedStatement(sql: "SELECT data FROM scratch WHERE rowid = ?"), arguments: [rowid]) else {
                throw StoreError.notFound("scratch file \(rowid)")
            }
            return [UInt8](d)
        }
    }

    public func modifyScratch(_ rowid: Int64, _ edit: (inout [UInt8]) throws -> Void) throws -> ScratchFile {
        try write { db in
            guard let d = try Data.fetchOne(db.cachedStatement(sql: "SELECT data FROM scratch WHERE rowid = ?"), arguments: [rowid]) else {
                throw StoreError.notFound("scratch file \(rowid)")
            }
            var bytes = [UInt8](d)
            try edit(&bytes)
            guard bytes.count <= Self.maxBlobBytes else { throw StoreError.tooLarge("scratch file of \(bytes.count) bytes") }
            try db.run("UPDATE scratch SET data = ?, mtime_ns = ? WHERE rowid = ?", [Data(bytes), Self.ns(Date()), rowid])
            return try Self.fetchScratch(db, rowid)
        }
    }

    /// Renames a scratch file, replacing a scratch file already at the new name.
    public func renameScratch(_ rowid: Int64, dir: String, name: String) throws -> ScratchFile {
        try write { db in
            try db.run("DELETE FROM scratch WHERE dir = ? AND name = ? AND rowid != ?", [dir, name, rowid])
            try db.run("UPDATE scratch SET dir = ?, name = ? WHERE rowid = ?", [dir, name, rowid])
            return try Self.fetchScratch(db, rowid)
        }
    }

    /// A scratch symlink (FS-14: Emacs' lock file `.#note.md` → `user@host.pid:time`).
    public func makeScratchLink(dir: String, name: String, target: String) throws -> ScratchFile {
        try write { db in
            if try db.exists("SELECT 1 FROM scratch WHERE dir = ? AND name = ?", [dir, name]) { throw StoreError.exists(name) }
            let r = try rowids.next(.scratch, db)
            try db.run("INSERT INTO scratch(rowid, dir, name, mtime_ns, data, link) VALUES (?, ?, ?, ?, x'', ?)", [r, dir, name, Self.ns(Date()), target])
            return try Self.fetchScratch(db, r)
        }
    }

    /// Times set on directories (`types/core.note`, `tags/x`): `rsync -a` keeps them (FS-28).
    /// A removed folder's, not yet deleted (`dropTreeDir`), is left out.
    public func dirTimes() throws -> [String: Int64] {
        let seen = pendingFolders.seen
        let times = try pool.read { db in
            Dictionary(try Row.fetchAll(db, sql: "SELECT dir, mtime_ns FROM dir_times").map { ($0[0] as String, $0[1] as Int64) }, uniquingKeysWith: { a, _ in a })
        }
        let dropped = Set(pendingFolders.droppedFolders(seen).map { "vault/" + $0 })
        return times.filter { !dropped.contains($0.key) }
    }

    /// Times of several directories, in one transaction.
    public func setDirTimes(_ times: [String: Int64]) throws {
        if times.isEmpty { return }
        try write { db in
            for (dir, ns) in times { try db.run("INSERT OR REPLACE INTO dir_times(dir, mtime_ns) VALUES (?, ?)", [dir, ns]) }
        }
    }

    public func setScratchMtime(_ rowid: Int64, ns: Int64) throws -> ScratchFile {
        try write { db in
            try db.run("UPDATE scratch SET mtime_ns = ? WHERE rowid = ?", [ns, rowid])
            return try Self.fetchScratch(db, rowid)
        }
    }

    public func deleteScratch(_ rowid: Int64) throws {
        try write { db in try db.run("DELETE FROM scratch WHERE rowid = ?", [rowid]) }
    }

    /// An editor's save through a scratch name (FS-13, `saveOver`): the item takes the scratch
    /// file's bytes, and the scratch file is gone, in one transaction.
    func saveScratch(_ target: Int64, from rowid: Int64, by writer: Writer) throws {
        try write { db in
            try beginSave(db, target, by: writer, patch: false)
            guard let d = try Data.fetchOne(db.cachedStatement(sql: "SELECT data FROM scratch WHERE rowid = ?"), arguments: [rowid]),
                  let dst = try Self.fetchItem(db, rowid: target) else { throw StoreError.notFound("scratch file or item") }
            _ = try applyContent(db, dst, bytes: [UInt8](d), now: Date())
            try db.run("DELETE FROM scratch WHERE rowid = ?", [rowid])
        }
    }

    /// A scratch file renamed to an ordinary name becomes an item (e.g. a finished download).
    public func promoteScratch(_ rowid: Int64, as item: NewItem) throws -> StoredItem {
        var n = item
        n.content = try scratchData(rowid)
        // The file keeps the time it was given (`rsync -a` sets it before the rename).
        let now = Self.ns(Date())
        let mtime = try pool.read { db in try Int64.fetchOne(db, sql: "SELECT mtime_ns FROM scratch WHERE rowid = ?", arguments: [rowid]) } ?? now
        let stored = try write { db in try insertItem(db, n, rowid: nil, unsettled: false, createdNs: now, mtimeNs: mtime) }
        try deleteScratch(rowid)
        return stored
    }

    /// A scratch file still staged (never committed) renamed to an item's name: the item is made
    /// from its staged bytes and time, then the scratch leaves the journal; the other staged files
    /// stay staged. (`promoteScratch` needs the scratch's row: everything staged was committed
    /// for it, each time a temporary name of `rsync` happened to look like a swap file's,
    /// `.name.md.abcsw4`.) Call with the mount's requests' lock held, so that no commit begins
    /// between the question and the act. nil: it is not staged.
    public func promoteStagedScratch(_ rowid: Int64, as item: NewItem) throws -> StoredItem? {
        let k = StagedKey(.scratch, rowid)
        // `isStaged` waits for a commit in flight, which may have taken the file.
        guard staging.contains(k), let f = staging.file(k) else { return nil }
        var n = item
        n.content = f.bytes
        let stored = try write { db in try insertItem(db, n, rowid: nil, unsettled: false, createdNs: Self.ns(Date()), mtimeNs: f.mtimeNs) }
        // Made first: a crash between the two leaves the scratch file as well, never neither.
        try staging.drop(k)
        return stored
    }

    /// An item renamed to a scratch name (a backup, `note.md~`): its bytes are kept in a scratch
    /// file of that name; the item itself stays as it is until it is re-attached or removed.
    public func backupItem(_ rowid: Int64, dir: String, name: String) throws -> ScratchFile {
        try write { db in
            guard let cur = try Self.fetchItem(db, rowid: rowid) else { throw StoreError.notFound("item \(rowid)") }
            return try putScratch(db, dir: dir, name: name, data: try currentBytes(db, cur))
        }
    }
}
