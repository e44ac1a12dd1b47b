import Crypto
import Foundation
import GRDB
import GRDBSQLite
import MarfaModel

/// A spooled blob copied into the cache, waiting to become the item's bytes (`finishSpool`).
public struct CachedSpool: Sendable {
    public var rowid: Int64
    public var hash: String
    public var size: Int64
    public var mtimeNs: Int64
    /// The spool file's change count when it was read: a write since makes the copy stale.
    var changes: UInt64
}

/// Blob items written through the mount (FS-28): their bytes go to a spool file (`Spool`) and
/// enter `sqlar` once, when they settle. The item's row says `unsettled = 2` meanwhile (the
/// settle of text files does not take it) and holds no bytes.
extension Store {
    /// The bytes copied per step between a spool file and the cache.
    static let spoolChunk = 1 << 20

    /// Whether a write to item `rowid` goes to its spool file, starting one for a blob item (with
    /// the item's current bytes) on its first write. `type`: the item's, when the caller knows it.
    /// `emptied`: the first change is a truncate to nothing (`O_TRUNC`, a file made again): the
    /// spool starts empty, so a blob whose bytes were never fetched can be written over offline.
    func spooling(_ rowid: Int64, type known: String?, emptied: Bool = false) throws -> Bool {
        if spool.has(rowid) { return true }
        guard let t = try known ?? pool.read({ db in try String.fetchOne(db, sql: "SELECT type FROM items WHERE rowid = ?", arguments: [rowid]) }) else {
            throw StoreError.notFound("item \(rowid)")
        }
        guard TypeSchema.isBlobType(t) else { return false }
        try write { db in
            guard let row = try db.row("SELECT size, unsettled, raw IS NOT NULL AS has_raw, json_extract(properties, '$.blob_ref') AS ref FROM items WHERE rowid = ?", [rowid]) else {
                throw StoreError.notFound("item \(rowid)")
            }
            let size: Int64 = row["size"]
            try spool.create(rowid) { fd in
                if emptied { return }
                if (row["has_raw"] as Bool) {
                    try Self.copyBlob(db, table: "items", column: "raw", rowid: rowid, size: size, to: fd)
                } else if let ref: String = row["ref"] {
                    guard let b = try db.row("SELECT rowid, sz FROM sqlar WHERE name = ?", [ref]) else {
                        throw StoreError.io("blob \(ref) is not cached and could not be fetched: a write into it needs its bytes")
                    }
                    try Self.copyBlob(db, table: "sqlar", column: "data", rowid: b[0], size: b[1], to: fd)
                }
            }
            try db.run("UPDATE items SET raw = NULL, blob_ref = NULL, unsettled = 2 WHERE rowid = ?", [rowid])
        }
        return true
    }

    /// Copies `size` bytes of a blob column into a file descriptor, a chunk at a time.
    static func copyBlob(_ db: Database, table: String, column: String, rowid: Int64, size: Int64, to fd: Int32) throws {
        guard size > 0 else { return }
        var blob: OpaquePointer?
        guard sqlite3_blob_open(db.sqliteConnection, "main", table, column, rowid, 0, &blob) == SQLITE_OK, let blob else {
            throw StoreError.io("cannot open \(table).\(column) of row \(rowid)")
        }
        defer { sqlite3_blob_close(blob) }
        var buf = [UInt8](repeating: 0, count: spoolChunk)
        var at: Int64 = 0
        let total = min(size, Int64(sqlite3_blob_bytes(blob)))
        while at < total {
            let n = Int(min(Int64(spoolChunk), total - at))
            let rc = buf.withUnsafeMutableBytes { sqlite3_blob_read(blob, $0.baseAddress, Int32(n), Int32(at)) }
            guard rc == SQLITE_OK else { throw StoreError.io("cannot read \(table).\(column) of row \(rowid) (\(rc))") }
            try Spool.pwriteAll(fd, buf[0..<n], at: at, path: "a spool file")
            at += Int64(n)
        }
    }

    /// Hashes a spool file and copies it into `sqlar` under its hash (once: a blob already cached
    /// is not copied again), in one transaction that never holds more than SQLite's page cache in
    /// memory. Runs outside the filesystem's lock; nil when the file changed meanwhile (it settles
    /// later) or is not spooled.
    public func cacheSpool(_ rowid: Int64) throws -> CachedSpool? {
        guard let changes = spool.changes(rowid) else { return nil }
        let (size, mtime) = try spool.attributes(rowid)
        var h = SHA256()
        var at: Int64 = 0
        while at < size {
            let chunk = try spool.read(rowid, offset: at, count: Self.spoolChunk)
            if chunk.isEmpty { break }
            h.update(data: chunk)
            at += Int64(chunk.count)
        }
        guard at == size, spool.changes(rowid) == changes else { return nil }
        let hash = BlobHash.name(digest: h.finalize())
        holdBlob(hash)
        do {
            try write { db in
                if try db.exists("SELECT 1 FROM sqlar WHERE name = ?", [hash]) { return }
                try db.run("INSERT INTO sqlar(name, mode, mtime, sz, data) VALUES (?, 33188, ?, ?, zeroblob(?))",
                           [hash, Int(Date().timeIntervalSince1970), size, size])
                let blobRow = db.lastInsertedRowID
                var blob: OpaquePointer?
                guard sqlite3_blob_open(db.sqliteConnection, "main", "sqlar", "data", blobRow, 1, &blob) == SQLITE_OK, let blob else {
                    throw StoreError.io("cannot open the cached blob \(hash)")
                }
                defer { sqlite3_blob_close(blob) }
                var off: Int64 = 0
                while off < size {
                    let chunk = try spool.read(rowid, offset: off, count: Self.spoolChunk)
                    if chunk.isEmpty { break }
                    let rc = chunk.withUnsafeBytes { sqlite3_blob_write(blob, $0.baseAddress, Int32($0.count), Int32(off)) }
                    guard rc == SQLITE_OK else { throw Self.sqliteError(rc, "cannot write the cached blob \(hash)") }
                    off += Int64(chunk.count)
                }
                // A write during the copy: the bytes copied may not be the bytes hashed.
                if off != size || spool.changes(rowid) != changes { throw SpoolChanged() }
            }
        } catch is SpoolChanged {
            releaseBlob(hash)
            return nil
        } catch {
            releaseBlob(hash)
            throw error
        }
        return CachedSpool(rowid: rowid, hash: hash, size: size, mtimeNs: mtime, changes: changes)
    }

    struct SpoolChanged: Error {}

    /// Makes a cached spool file the item's bytes and removes the spool file: the item is settled
    /// (its upload and update queued). Call where no write to the item can come in meanwhile (the
    /// filesystem's lock); false when a write came since `cacheSpool` (it settles later).
    public func finishSpool(_ c: CachedSpool) throws -> Bool {
        defer { releaseBlob(c.hash) }
        guard spool.changes(c.rowid) == c.changes else { return false }
        try write { db in
            guard let cur = try Self.fetchItem(db, rowid: c.rowid) else { throw StoreError.notFound("item \(c.rowid)") }
            let old = cur.item.properties["blob_ref"]?.stringValue
            try applyBlob(db, cur, hash: c.hash, size: c.size, now: Date(timeIntervalSince1970: Double(c.mtimeNs) / 1e9))
            if let old, old != c.hash { try dropBlobIfUnused(db, old) }
        }
        spool.remove(c.rowid)
        try write { db in try recheckBlobs(db) }
        // The blob it replaced, if no longer used, gave its pages back.
        try shrink()
        return true
    }

    /// Settles every spool file now (a mount's recovery, or anything that needs the item's row:
    /// rename, attributes, the queue). Call where no write can come in meanwhile.
    @discardableResult
    public func settleSpools(_ rowids: [Int64]? = nil) throws -> [Int64] {
        var done: [Int64] = []
        for r in rowids ?? spool.rowids {
            if let c = try cacheSpool(r), try finishSpool(c) { done.append(r) }
        }
        return done
    }

    /// Takes up spool files a killed mount left: an item still waiting for its bytes settles from
    /// its file now; any other spool file is stale (its bytes reached the store) and is removed.
    func recoverSpools() throws {
        for r in spool.onDisk() {
            let waiting = try pool.read { db in try db.exists("SELECT 1 FROM items WHERE rowid = ? AND unsettled = 2", [r]) }
            if waiting { try spool.adopt(r) } else { spool.remove(r) }
        }
        // A spool file that cannot settle now (a full disk) stays the item's bytes: the mount
        // serves it and settles it later.
        for r in spool.rowids {
            do { try settleSpools([r]) } catch { continue }
        }
    }

    /// The size and mtime of an item's spool file, for a write or truncate that went there.
    public func spoolWrite(rowid: Int64, offset: Int64, data: [UInt8], type: String?) throws -> (size: Int64, mtimeNs: Int64)? {
        guard try spooling(rowid, type: type) else { return nil }
        return try spool.write(rowid, offset: offset, data: data)
    }

    public func spoolTruncate(rowid: Int64, size: Int64, type: String?) throws -> (size: Int64, mtimeNs: Int64)? {
        guard try spooling(rowid, type: type, emptied: size == 0) else { return nil }
        return try spool.truncate(rowid, size: size)
    }

    /// Whole bytes of a spool file (a small blob an editor saves over another item).
    func spoolBytes(_ rowid: Int64) throws -> [UInt8] {
        let (size, _) = try spool.attributes(rowid)
        return try spool.read(rowid, offset: 0, count: Int(size))
    }

    static func sqliteError(_ rc: Int32, _ what: String) -> StoreError {
        rc == SQLITE_FULL ? .noSpace(what) : .io("\(what) (\(rc))")
    }
}
