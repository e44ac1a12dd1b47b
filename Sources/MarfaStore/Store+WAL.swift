import Foundation
import GRDB

/// The store's write-ahead log: bounded under writes that never pause, cut at unmount, and
/// the room a full disk left taken given back (FS-15, FS-28).
extension Store {
    /// Keeps the WAL from growing without bound under writes that never pause while reads never
    /// pause either (SQLite's automatic checkpoints copy pages back but restart the log only when
    /// no reader uses it): about once a second, a log past 64 MiB is checkpointed and restarted,
    /// if that can be done without waiting. After a full disk (`FullDiskDebt.wal`), the log is cut
    /// whatever its size: left at its largest, it keeps room the settling of what the disk took
    /// back needs.
    func boundWAL() {
        let due = walCheck.withLock { last -> Bool in
            let now = Date()
            guard now.timeIntervalSince(last) >= 1 else { return false }
            last = now
            return true
        }
        // stat(2) itself: Foundation's attributes look up the owner's and group's names as well.
        var st = stat()
        let owed = staging.debt.wal.load(ordering: .relaxed)
        guard due, stat(path + "-wal", &st) == 0, Int64(st.st_size) > (owed ? 0 : 64 << 20) else { return }
        truncateWAL()
    }

    /// Checkpoints the whole WAL and cuts it to one small commit, if that can be done without
    /// waiting for a reader; done, a full disk's WAL debt is paid. At unmount (`marfafs mount`),
    /// so the database file alone, copied after an unmount, holds the store; if a reader holds the
    /// log or the disk refuses, the next open reads the log as it is.
    /// The commit: a store whose WAL is empty cannot be opened on a disk with no room (GRDB writes
    /// to the log of a pool it opens when the log is empty: `openPool`), and the room the cut has
    /// just given back is there for it. Should the commit fail all the same (the room taken
    /// meanwhile), a full disk's debt stays owed: the next pass cuts (nothing) and commits again.
    /// `readerWaitMs`: how long the cut may wait for readers to leave the log (the writer held
    /// meanwhile); 0: not at all, the next check tries again.
    public func truncateWAL(readerWaitMs: Int = 0) {
        let done = (try? pool.writeWithoutTransaction { db -> Bool in
            try db.execute(sql: "PRAGMA busy_timeout = \(readerWaitMs)")
            defer { try? db.execute(sql: "PRAGMA busy_timeout = 10000") }
            // (busy, log frames, checkpointed frames): busy 0 when it was done.
            let row = try Row.fetchOne(db, sql: "PRAGMA wal_checkpoint(TRUNCATE)")
            guard row.map({ ($0[0] as Int64?) == 0 }) ?? false else { return false }
            try db.inTransaction {
                try db.execute(sql: "INSERT OR REPLACE INTO meta(key, value) VALUES ('wal_cut', ?)", arguments: [String(Int64(Date().timeIntervalSince1970))])
                return .commit
            }
            return true
        }) ?? false
        if done { staging.debt.wal.store(false, ordering: .relaxed) }
    }

    /// Gives back the room a full disk left taken once there is room again: the staging journal's
    /// committed records and the WAL (the settler calls this at each pass; nothing to do costs
    /// two atomic loads). Failing (the disk still full), it is tried again at the next pass.
    public func reclaimAfterFullDisk() {
        staging.compactIfOwed(durable: { try syncDurably() }, name: { dead in try write { db in try Self.nameDead(db, dead) } })
        // A reader of the log (another program's `sqlite3`, a backup) may hold it at every pass:
        // the cut waits for it a moment rather than only trying.
        if staging.debt.wal.load(ordering: .relaxed) { truncateWAL(readerWaitMs: 250) }
    }

    /// Room a full disk left taken is still to be given back (`reclaimAfterFullDisk` has not
    /// managed yet: the disk still full, or a reader holding the log at the moment of the cut).
    public var owesRoom: Bool { staging.debt.wal.load(ordering: .relaxed) || staging.debt.journal.load(ordering: .relaxed) }
}
