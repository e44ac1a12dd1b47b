import Foundation
import GRDB

/// Owners (FS-31): a file's or folder's owner and group, set by `chown` or by the user who made it
/// (a mount with `--allow-other`), kept in this store as a disk keeps them and never queued or
/// synced (another mount shows its own user). Nil for the mount's own user or group, which is what
/// a file has until then.
extension Store {
    public struct Owner: Sendable, Hashable {
        public var uid: UInt32?
        public var gid: UInt32?
        public init(uid: UInt32? = nil, gid: UInt32? = nil) { self.uid = uid; self.gid = gid }
        public var isDefault: Bool { uid == nil && gid == nil }
    }

    /// The items with an owner or group of their own, by rowid.
    public func itemOwners() throws -> [Int64: Owner] {
        try pool.read { db in
            let rows = try Row.fetchAll(db, sql: "SELECT items.rowid AS r, owners.uid, owners.gid FROM owners JOIN items ON items.id = owners.item_id")
            return Dictionary(rows.map { ($0["r"] as Int64, Self.owner($0)) }, uniquingKeysWith: { a, _ in a })
        }
    }

    /// Sets item `itemID`'s owner (its row need not exist yet: a file staged by the mount).
    public func setOwner(itemID: String, _ o: Owner) throws {
        try write { db in
            if o.isDefault {
                try db.run("DELETE FROM owners WHERE item_id = ?", [itemID])
            } else {
                try db.run("INSERT OR REPLACE INTO owners(item_id, uid, gid) VALUES (?, ?, ?)", [itemID, o.uid.map { Int64($0) }, o.gid.map { Int64($0) }])
            }
        }
    }

    /// The folders of the tree with an owner or group of their own, by path (those set and not
    /// yet written too).
    public func treeDirOwners() throws -> [String: Owner] {
        let seen = pendingFolders.seen
        var owners = try pool.read { db in
            let rows = try Row.fetchAll(db, sql: "SELECT path, uid, gid FROM tree_dirs WHERE uid IS NOT NULL OR gid IS NOT NULL")
            return Dictionary(rows.map { ($0["path"] as String, Self.owner($0)) }, uniquingKeysWith: { a, _ in a })
        }
        for f in pendingFolders.droppedFolders(seen) { owners[f] = nil }
        for case let (path, .owner(u, g)) in pendingFolders.pendingAttrs(.owner, seen) {
            let o = Owner(uid: u.map { UInt32(truncatingIfNeeded: $0) }, gid: g.map { UInt32(truncatingIfNeeded: $0) })
            owners[path] = o.isDefault ? nil : o
        }
        return owners
    }

    /// A row's `uid` and `gid` columns.
    private static func owner(_ row: Row) -> Owner {
        Owner(uid: (row["uid"] as Int64?).map { UInt32(truncatingIfNeeded: $0) }, gid: (row["gid"] as Int64?).map { UInt32(truncatingIfNeeded: $0) })
    }

    /// Sets the owner of the folder at `path`, numbered `ino` by the mount, without waiting for the
    /// store's writer (as `setTreeDirMode`).
    public func setTreeDirOwner(_ path: String, ino: UInt64, _ o: Owner) throws {
        try pendingFolders.set(.init(path: path, ino: ino, .owner(uid: o.uid.map { Int64($0) }, gid: o.gid.map { Int64($0) })))
    }
}
