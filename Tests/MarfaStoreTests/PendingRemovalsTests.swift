import Foundation
import MarfaModel
import MarfaTestSupport
@testable import MarfaStore
import Synchronization
import Testing

/// FS-4 and FS-15 for `unlink` (`Store.trashLater`): the removal is recorded beside the store
/// before the request is answered and its row written by the next write transaction. Every read
/// sees the item in the trash from the start; a store opened after a kill (a second `Store` on
/// the same file) has every removal; later changes of the item come after it, in order.
@Suite struct PendingRemovalsTests {
    func state(_ s: Store, _ rowid: Int64) throws -> String? {
        try s.pool.read { db in try String.fetchOne(db, sql: "SELECT state FROM items WHERE rowid = ?", arguments: [rowid]) }
    }

    func note(_ t: TempStore, _ name: String, sent: Bool) throws -> Int64 {
        let made = try t.store.createItem(NewItem(type: "core.note", fileName: name, content: Array("\(name)\n".utf8)))
        if sent {
            // As if the server had acknowledged its create.
            try t.store.pool.write { db in
                try db.execute(sql: "UPDATE items SET version = 1, sync = 'synced' WHERE rowid = ?", arguments: [made.rowid])
                try db.execute(sql: "DELETE FROM mutations WHERE item_id = ?", arguments: [made.item.id])
            }
        }
        return made.rowid
    }

    @Test func FS4_FS15_aRemovalIsInTheTrashAtOnceAndSurvivesAKillBeforeItsRowIsWritten() throws {
        let t = try TempStore()
        let a = try note(t, "a.md", sent: true), b = try note(t, "b.md", sent: false)
        let before = Date()
        let at = try t.store.trashLater(rowid: a)
        _ = try t.store.trashLater(rowid: b)
        // Every read from now on finds it in the trash, with the time `trashLater` gave.
        #expect(try t.store.summary(rowid: a)?.mtimeNs == at)
        // No row written yet, but every read says so.
        #expect(try state(t.store, a) == "active")
        #expect(try t.store.summary(rowid: a)?.state == .trashed)
        #expect(try t.store.item(rowid: b)?.item.state == .trashed)
        #expect(try t.store.facts(rowids: [a, b]).values.allSatisfy { $0.summary.state == .trashed })
        // Killed here: the next store has both, and its first write writes their rows.
        let again = try Store(path: t.store.path)
        #expect(try again.summary(rowid: a)?.state == .trashed && again.hasPending)
        try again.flushPending()
        #expect(try state(again, a) == "trashed" && state(again, b) == "trashed")
        #expect(!again.hasPending)
        #expect(try String(contentsOfFile: t.store.path + "-removals", encoding: .utf8) == "", "the file keeps only pending removals")
        // The sent item's transition is queued; the never-sent one leaves nothing to send.
        let q = try again.mutations()
        #expect(q.map(\.kind) == [.transition] && q.first?.payload["state"] == "trashed", "\(q.map(\.kind))")
        // Its time is the unlink's, not the write's.
        let stored = try #require(try again.item(rowid: a))
        #expect(abs(Double(stored.mtimeNs) / 1e9 - before.timeIntervalSince1970) < 1)
    }

    @Test func FS4_aRestoreAfterARemovalComesAfterIt() throws {
        let t = try TempStore()
        let a = try note(t, "a.md", sent: true)
        _ = try t.store.trashLater(rowid: a)
        // The restore's own transaction writes the removal first.
        _ = try t.store.setState(rowid: a, .active)
        #expect(try state(t.store, a) == "active" && t.store.summary(rowid: a)?.state == .active)
        #expect(try t.store.mutations().map { $0.payload["state"] } == ["trashed", "active"])
        #expect(!t.store.hasPending)
        // A kill now does not put it back in the trash.
        let again = try Store(path: t.store.path)
        #expect(try again.summary(rowid: a)?.state == .active && !again.hasPending)
    }

    @Test func FS15_aTornLineOrARemovedItemIsSkipped() throws {
        let t = try TempStore()
        let a = try note(t, "a.md", sent: true), b = try note(t, "b.md", sent: true)
        _ = try t.store.trashLater(rowid: a)
        // A power cut tore the next line; another names an item that no longer exists.
        let h = try #require(FileHandle(forWritingAtPath: t.store.path + "-removals"))
        h.seekToEndOfFile()
        h.write(Data("999999 1\n\(b) 17".utf8))
        try h.close()
        let again = try Store(path: t.store.path)
        try again.flushPending()
        #expect(try state(again, a) == "trashed" && state(again, b) == "active")
        #expect(try again.mutations().count == 1)
    }

    /// A read that began before the write that commits a removal, and is shown after it, still
    /// shows the item in the trash: its snapshot has the row as it was, and the removal is no
    /// longer pending (it was seen in CI as a removed note back in `ls` a moment after `rm`,
    /// read back by a refresh while the settler wrote the removal).
    @Test func FS4_aReadRacingTheRemovalsWriteNeverShowsTheFileBack() throws {
        let t = try TempStore()
        let rows = try (0..<400).map { try note(t, "n\($0).md", sent: true) }
        let store = t.store
        let removed = Mutex<Int64?>(nil), done = Atomic<Bool>(false), back = Mutex<[Int64]>([]), failure = Mutex<String?>(nil)
        // One thread removes the notes one by one, each written at once; the other reads the
        // last one removed, as the mount's refreshes do, over and over.
        DispatchQueue.concurrentPerform(iterations: 2) { i in
            if i == 0 {
                defer { done.store(true, ordering: .releasing) }
                do {
                    for r in rows {
                        _ = try store.trashLater(rowid: r)
                        removed.withLock { $0 = r }
                        try store.flushPending()
                    }
                } catch { failure.withLock { $0 = "\(error)" } }
                return
            }
            while !done.load(ordering: .acquiring) {
                guard let r = removed.withLock({ $0 }) else { continue }
                let states = [try? store.summary(rowid: r)?.state, try? store.facts(rowid: r)?.summary.state, try? store.item(rowid: r)?.item.state]
                if states.contains(where: { $0 != .trashed }) { back.withLock { $0.append(r) } }
            }
        }
        #expect(failure.withLock { $0 } == nil)
        let shownBack = back.withLock { $0 }
        #expect(shownBack.count == 0, "the first of item \(shownBack.first ?? 0)")
        #expect(try rows.allSatisfy { try state(t.store, $0) == "trashed" })
    }
}
