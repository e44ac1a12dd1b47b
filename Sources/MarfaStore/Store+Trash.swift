import Foundation
import GRDB
import MarfaModel

/// Space comes back (FS-28): an item removed from `trash/` is purged from the store (its row,
/// tags, edges and, when no other item uses it, its cached blob), and the file shrinks. The wire
/// contract has no purge: a server keeps the item trashed, and the store remembers the purge so
/// that the server's copy does not come back unless it is restored there.
extension Store {
    /// Purges one trashed item; returns its id. Items in other states are refused (they are
    /// trashed first).
    @discardableResult
    public func purge(rowid: Int64) throws -> String {
        let id = try write { db -> String in
            guard let cur = try Self.fetchItem(db, rowid: rowid) else { throw StoreError.notFound("item \(rowid)") }
            guard cur.item.state == .trashed else { throw StoreError.notEmpty("item \(cur.item.id) is not in the trash") }
            try purge(db, cur)
            return cur.item.id
        }
        try shrink()
        return id
    }

    func purge(_ db: Database, _ cur: StoredItem) throws {
        let id = cur.item.id
        let sent = try db.exists("SELECT 1 FROM mutations WHERE item_id = ? AND state != 'pending'", [id])
        if cur.item.version == 0 && !sent {
            // The server never saw it: nothing of it is left to send.
            try db.run("DELETE FROM mutations WHERE item_id = ?", [id])
        } else {
            try db.run("INSERT OR REPLACE INTO purged(id, at) VALUES (?, ?)", [id, Timestamp.now()])
        }
        try db.run("DELETE FROM tags WHERE item_id = ?", [id])
        try db.run("DELETE FROM edges WHERE source_id = ? OR target_id = ?", [id, id])
        try db.run("DELETE FROM edge_dirs WHERE item_id = ?", [id])
        // Its history goes with it (a trigger), and the blobs only that history named.
        let versionBlobs = try String.fetchAll(db, sql: "SELECT DISTINCT blob_ref FROM versions WHERE item_id = ? AND blob_ref IS NOT NULL", arguments: [id])
        try db.run("DELETE FROM items WHERE rowid = ?", [cur.rowid])
        for h in versionBlobs { try dropBlobIfUnused(db, h) }
        try db.run("DELETE FROM item_numbers WHERE rowid = ?", [cur.rowid])
        spool.remove(cur.rowid)
        // What programs saw of it is no one's base any more (FS-29).
        saveBases.forget(cur.rowid)
        if let h = cur.item.properties["blob_ref"]?.stringValue { try dropBlobIfUnused(db, h) }
    }

    /// Purges trashed items whose move to the trash is older than `olderThan` (nil: every one);
    /// returns the rowids purged.
    @discardableResult
    public func purgeTrash(olderThan: Date? = nil) throws -> [Int64] {
        let cutoff = olderThan.map { Timestamp.format($0) } ?? "9999"
        let rows = try write { db -> [Int64] in
            let rows = try Int64.fetchAll(db, sql: "SELECT rowid FROM items INDEXED BY items_trashed WHERE state = 'trashed' AND updated_at < ?", arguments: [cutoff])
            for r in rows { if let cur = try Self.fetchItem(db, rowid: r) { try purge(db, cur) } }
            return rows
        }
        if !rows.isEmpty { try shrink() }
        return rows
    }

    /// Whether an item was purged here (a remote copy still trashed is not taken again).
    static func wasPurged(_ db: Database, _ id: String) throws -> Bool {
        try db.exists("SELECT 1 FROM purged WHERE id = ?", [id])
    }

    // MARK: a reserve for a full disk

    var reservePath: String { path + "-reserve" }
    static let reserveBytes = 8 << 20

    /// Keeps a few MiB of disk for deleting when the disk is full (FS-28): made when there is room.
    public func ensureReserve() {
        if FileManager.default.fileExists(atPath: reservePath) { return }
        // Not while staged files wait for room to be stored (FS-28): theirs comes first.
        guard freeRoom() > Self.reserveBytes * 2 + 2 * staging.totalBytes else { return }
        let fd = open(reservePath, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { return }
        defer { close(fd) }
        if posix_fallocate(fd, 0, off_t(Self.reserveBytes)) != 0 { ftruncate(fd, 0); unlink(reservePath) }
    }

    /// Gives the reserve back to the disk, so a delete can go through; false if there was none.
    public func releaseReserve() -> Bool {
        unlink(reservePath) == 0
    }
}
