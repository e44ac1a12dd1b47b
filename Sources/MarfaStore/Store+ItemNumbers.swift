import Foundation
import GRDB

/// The numbers items' inodes come from (FS-31). An item's inode is its rowid's until its file is
/// replaced under its name — a save by rename takes the renamed file's number, a file removed and
/// made again at once takes a new one — so a descriptor open on the old file keeps it. The numbers
/// are kept across mounts and never given to another item.
extension Store {
    /// Every item that has a number other than its rowid: number → item rowid (numbers not
    /// written yet are written first).
    public func itemNumbers() throws -> [(number: Int64, rowid: Int64)] {
        try saveItemNumbers()
        return try pool.read { db in try Row.fetchAll(db, sql: "SELECT number, rowid FROM item_numbers ORDER BY number").map { ($0[0], $0[1]) } }
    }

    /// Item `rowid` shows under `number` from now on (its earlier numbers keep naming it). The
    /// number is written with the store's next writing transaction (`write`), not in one of its
    /// own: an editor's save by rename sets one each time. Until then a crash forgets it, and the
    /// item keeps the number it had; none of these numbers is ever an item's rowid.
    public func setItemNumber(rowid: Int64, number: Int64) {
        pendingNumbers.withLock { $0.append((number, rowid)) }
    }

    /// Writes the numbers set since the last writing transaction (at unmount).
    public func saveItemNumbers() throws {
        if pendingNumbers.withLock({ $0.isEmpty }) { return }
        try write { _ in }
    }

    /// Takes the numbers not written yet, for the writing transaction under way.
    func takePendingNumbers() -> [(number: Int64, rowid: Int64)] {
        pendingNumbers.withLock { p in defer { p.removeAll() }; return p }
    }

    /// Writes numbers taken by `takePendingNumbers`, in the order they were set.
    static func writeNumbers(_ db: Database, _ numbers: [(number: Int64, rowid: Int64)]) throws {
        for (number, rowid) in numbers { try db.run("INSERT OR REPLACE INTO item_numbers(number, rowid) VALUES (?, ?)", [number, rowid]) }
    }

    /// A number no item has or will have, for an item's new inode.
    public func reserveItemNumber() throws -> Int64 {
        try rowids.next(.items, pool: pool)
    }
}
