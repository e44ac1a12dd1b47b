import Foundation
import GRDB
import MarfaModel

/// The `sqlar` blob cache: a blob item's bytes, and deleting what no item needs any more (FS-11, FS-28).
extension Store {
    /// A blob item's bytes are now the cached blob `hash`: the item is settled, its upload and
    /// update queued. Returns the item as now stored.
    @discardableResult
    func applyBlob(_ db: Database, _ cur: StoredItem, hash: String, size: Int64, now: Date) throws -> StoredItem {
        var cur = cur
        cur.item.updatedAt = Timestamp.format(now)
        cur.mtimeNs = Self.ns(now)
        cur.size = size
        cur.item.properties["blob_ref"] = .string(hash)
        cur.sync = .pending; cur.syncError = nil
        try db.run("UPDATE items SET properties = ?, raw = NULL, raw_head = NULL, size = ?, updated_at = ?, mtime_ns = ?, sync = 'pending', sync_error = NULL, unsettled = 0 WHERE rowid = ?",
                   [JSONCoding.encode(cur.item.properties), size, cur.item.updatedAt, cur.mtimeNs, cur.rowid])
        try enqueue(db, kind: .uploadBlob, itemID: cur.item.id,
                    payload: ["hash": .string(hash), "size": .int(size), "mime_type": cur.item.properties["mime_type"] ?? .null], coalesce: false)
        try enqueueItemChange(db, cur.item)
        try enqueueFileTime(db, cur)
        return cur
    }

    /// Deletes a cached blob that no item names and no queued upload needs any more (FS-28).
    func dropBlobIfUnused(_ db: Database, _ hash: String) throws {
        if isHeld(hash) { return }
        if try db.exists("SELECT 1 FROM items INDEXED BY items_by_blob WHERE blob_ref = ? LIMIT 1", [hash]) { return }
        // An item being rewritten (unsettled, or a spool file) still names its old blob in its properties.
        if try db.exists("SELECT 1 FROM items INDEXED BY items_unsettled WHERE unsettled = 1 AND json_extract(properties, '$.blob_ref') = ? LIMIT 1", [hash]) { return }
        for r in spool.rowids {
            if try String.fetchOne(db, sql: "SELECT json_extract(properties, '$.blob_ref') FROM items WHERE rowid = ?", arguments: [r]) == hash { return }
        }
        // A queued upload needs its bytes (a local-only store uploads nothing: its queue is written
        // anew from the items when it meets a server).
        if !isLocalOnly, try db.exists("SELECT 1 FROM mutations WHERE kind = 'upload_blob' AND json_extract(payload, '$.hash') = ? LIMIT 1", [hash]) { return }
        // An earlier version of a file (FS-33).
        if try db.exists("SELECT 1 FROM versions WHERE blob_ref = ? LIMIT 1", [hash]) { return }
        try db.run("DELETE FROM sqlar WHERE name = ?", [hash])
    }

    /// Gives back a hold on a blob (`holdBlob`) and deletes it if nothing needs it any more.
    public func releaseBlobAndDropIfUnused(_ hash: String) {
        releaseBlob(hash)
        do {
            try write { db in
                try dropBlobIfUnused(db, hash)
                if try db.exists("SELECT 1 FROM sqlar WHERE name = ?", [hash]) { blobsToRecheck.withLock { _ = $0.insert(hash) } }
            }
        } catch {}
    }

    /// Drops the blobs let go earlier that nothing names any more (after a settle).
    func recheckBlobs(_ db: Database) throws {
        let hashes = blobsToRecheck.withLock { $0 }
        if hashes.isEmpty { return }
        for h in hashes {
            try dropBlobIfUnused(db, h)
            if !(try db.exists("SELECT 1 FROM sqlar WHERE name = ?", [h])) { blobsToRecheck.withLock { _ = $0.remove(h) } }
        }
    }

    /// Deletes every cached blob no item names and no queued upload needs; returns how many.
    @discardableResult
    public func dropUnusedBlobs() throws -> Int {
        let n = try write { db -> Int in
            let names = try String.fetchAll(db, sql: "SELECT name FROM sqlar WHERE name LIKE 'sha256:%'")
            var n = 0
            for h in names {
                let before = db.totalChangesCount
                try dropBlobIfUnused(db, h)
                if db.totalChangesCount != before { n += 1 }
            }
            return n
        }
        if n > 0 { try shrink() }
        return n
    }

    func putBlob(_ db: Database, _ bytes: [UInt8], hash: String) throws -> String {
        try db.run("INSERT OR IGNORE INTO sqlar(name, mode, mtime, sz, data) VALUES (?, 33188, ?, ?, ?)",
                       [hash, Int(Date().timeIntervalSince1970), bytes.count, Data(bytes)])
        return hash
    }
}
