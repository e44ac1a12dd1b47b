import Foundation
import GRDB

/// The numbers items' inodes come from (FS-31). An item's inode is its rowid's until its file is
/// replaced under its name — a save by rename takes the renamed file's number, a file removed and
/// made again at once takes a new one — so a descriptor open on the old file keeps it. The numbers
/// are kept across mounts and never given to another item.
extension Store {
    /// Every item that has a number other than its rowid: number → item rowid.
    public func itemNumbers() throws -> [(number: Int64, rowid: Int64)] {
        try pool.read { db in try Row.fetchAll(db, sql: "SELECT number, rowid FROM item_numbers ORDER BY number").map { ($0[0], $0[1]) } }
    }

    /// Item `rowid` shows under `number` from now on (its earlier numbers keep naming it).
    public func setItemNumber(rowid: Int64, number: Int64) throws {
        try write { db in try db.run("INSERT OR REPLACE INTO item_numbers(number, rowid) VALUES (?, ?)", [number, rowid]) }
    }

    /// A number no item has or will have, for an item's new inode.
    public func reserveItemNumber() throws -> Int64 {
        try rowids.next(.items, pool: pool)
    }
}
