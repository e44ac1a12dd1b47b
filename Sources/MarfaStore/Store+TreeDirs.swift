import Foundation
import GRDB

/// The inode numbers of the vault tree's folders (FS-31). A folder is numbered the first time the
/// kernel sees it and keeps the number for its life: a rename moves the number with the folder and
/// its sub-folders, a remount reads it back. Local to this store: never queued, never synced.
extension Store {
    /// Every numbered folder: its path in the tree ("" for the top) and its number.
    public func treeDirInodes() throws -> [(path: String, ino: UInt64)] {
        let seen = pendingFolders.seen
        let rows = try pool.read { db in
            try Row.fetchAll(db, sql: "SELECT path, ino FROM tree_dirs").map { ($0[0] as String, UInt64(bitPattern: $0[1] as Int64)) }
        }
        let dropped = pendingFolders.droppedFolders(seen)
        return rows.filter { !dropped.contains($0.0) }
    }

    /// Records folders numbered since the last call, in one transaction.
    public func saveTreeDirInodes(_ numbers: [String: UInt64]) throws {
        if numbers.isEmpty { return }
        try write { db in
            for (path, ino) in numbers { try Self.numberTreeDir(db, path, ino) }
        }
    }

    /// The folder at `path` has number `ino` (its row made if it has none; whatever row had the
    /// number gives it up).
    static func numberTreeDir(_ db: Database, _ path: String, _ ino: UInt64) throws {
        try db.run("DELETE FROM tree_dirs WHERE ino = ? AND path <> ?", [Int64(bitPattern: ino), path])
        try db.run("INSERT INTO tree_dirs(path, ino) VALUES (?, ?) ON CONFLICT(path) DO UPDATE SET ino = excluded.ino", [path, Int64(bitPattern: ino)])
    }

    /// A folder renamed: its number and its sub-folders' follow it, as do the times set on them;
    /// whatever was numbered at the new paths (an empty folder renamed over) is forgotten.
    public func moveTreeDirs(from: String, to: String) throws {
        try write { db in
            let under = "substr(path, 1, length(?1) + 1) = ?1 || '/'"
            try db.run("DELETE FROM tree_dirs WHERE path = ?1 OR \(under)", [to])
            try db.run("UPDATE tree_dirs SET path = ?2 || substr(path, length(?1) + 1) WHERE path = ?1 OR \(under)", [from, to])
            let dirUnder = "substr(dir, 1, length(?1) + 1) = ?1 || '/'"
            let (vf, vt) = ("vault/" + from, "vault/" + to)
            try db.run("DELETE FROM dir_times WHERE dir = ?1 OR \(dirUnder)", [vt])
            try db.run("UPDATE dir_times SET dir = ?2 || substr(dir, length(?1) + 1) WHERE dir = ?1 OR \(dirUnder)", [vf, vt])
        }
    }

    /// A folder removed: its number is not given to the next folder of that path, and its mode,
    /// owner and times go. Recorded beside the store at once (`PendingFolders`: every reader of
    /// them leaves it out), its rows deleted by the next write transaction, before anything made
    /// again at the path is written: `rm -rf`'s `rmdir` does not wait for the store's writer.
    public func dropTreeDir(_ path: String) throws {
        try pendingFolders.drop(path)
    }
}
