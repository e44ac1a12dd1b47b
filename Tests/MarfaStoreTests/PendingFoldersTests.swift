import Foundation
import MarfaTestSupport
@testable import MarfaStore
import Synchronization
import Testing

/// FS-15 for folders made with `mkdir` (`Store.stageLocalTag`): recorded beside the store before
/// the request is answered, their rows written by the next write transaction. A store opened after
/// a kill (a second `Store` on the same file) has every one of them; one removed stays removed.
@Suite struct PendingFoldersTests {
    func rows(_ s: Store) throws -> [String] {
        try s.pool.read { db in try String.fetchAll(db, sql: "SELECT tag FROM local_tags ORDER BY tag") }
    }

    @Test func FS15_aFolderMadeSurvivesAKillBeforeItsRowIsWritten() throws {
        let t = try TempStore()
        try t.store.stageLocalTag("folder:a")
        try t.store.stageLocalTag("folder:a/b")
        try t.store.stageLocalTag("project")
        // No row yet, but the store counts them.
        #expect(try rows(t.store) == [])
        #expect(try t.store.localTags().sorted() == ["folder:a", "folder:a/b", "project"])
        #expect(try t.store.treeFolders() == ["a", "a/b"])
        // Killed here: the next store has them, and its first write writes their rows.
        let again = try Store(path: t.store.path)
        #expect(try again.localTags().sorted() == ["folder:a", "folder:a/b", "project"])
        #expect(again.hasPendingFolders)
        try again.flushPending()
        #expect(try rows(again) == ["folder:a", "folder:a/b", "project"])
        #expect(!again.hasPendingFolders)
        #expect(try String(contentsOfFile: t.store.path + "-folders", encoding: .utf8) == "", "the file keeps only pending folders")
    }

    @Test func FS15_anyWriteWritesThePendingRowsAndARemovedFolderStaysRemoved() throws {
        let t = try TempStore()
        try t.store.stageLocalTag("folder:x")
        try t.store.stageLocalTag("folder:y")
        try t.store.removeLocalTagLater("folder:x")
        // Any write transaction takes them along (here an item's).
        _ = try t.store.createItem(NewItem(type: "core.note", fileName: "n.md", content: Array("n\n".utf8)))
        #expect(try rows(t.store) == ["folder:y"])
        let again = try Store(path: t.store.path)
        #expect(try again.localTags() == ["folder:y"], "a kill after the removal does not bring it back")
        #expect(!again.hasPendingFolders)
    }

    /// FS-4, FS-15 for `rmdir` (`Store.removeLocalTagLater`): a folder removed is gone for every
    /// reader at once and after a kill, before its row is deleted; made again, it is back; its row
    /// goes with the next write, after the removals of its files.
    @Test func FS4_FS15_aFolderRemovedIsGoneAtOnceAndAfterAKill() throws {
        let t = try TempStore()
        try t.store.addLocalTag("folder:old")
        try t.store.addLocalTag("folder:old/inner")
        try t.store.addLocalTag("folder:again")
        try t.store.addLocalTag("work")
        let note = try t.store.createItem(NewItem(type: "core.note", fileName: "n.md", content: Array("n\n".utf8), tags: ["folder:old/inner"]))
        // `rm -rf old`: the note, then its folders, deepest first; `again` removed and made anew.
        _ = try t.store.trashLater(rowid: note.rowid)
        try t.store.removeLocalTagLater("folder:old/inner")
        try t.store.removeLocalTagLater("folder:old")
        try t.store.removeLocalTagLater("folder:again")
        try t.store.removeLocalTagLater("work")
        try t.store.stageLocalTag("folder:again")
        #expect(try rows(t.store) == ["folder:again", "folder:old", "folder:old/inner", "work"], "no row written yet")
        #expect(try t.store.localTags().sorted() == ["folder:again"])
        // Killed here: the next store reads the same from the file, and its first write deletes them.
        let again = try Store(path: t.store.path)
        #expect(try again.localTags().sorted() == ["folder:again"])
        #expect(again.hasPending)
        try again.flushPending()
        #expect(try rows(again) == ["folder:again"])
        #expect(try again.treeFolders() == ["again"])
        #expect(try again.summary(rowid: note.rowid)?.state == .trashed)
        #expect(!again.hasPending)
        #expect(try String(contentsOfFile: t.store.path + "-folders", encoding: .utf8) == "", "nothing left pending")
        // Made again after its row went: back, and kept across a kill.
        try again.stageLocalTag("folder:old")
        #expect(try Store(path: t.store.path).localTags().sorted() == ["folder:again", "folder:old"])
    }

    @Test func FS15_aTornOrInvalidLineIsSkipped() throws {
        let t = try TempStore()
        try t.store.stageLocalTag("folder:whole")
        // A power cut tore the next line; another holds a control character no tag may hold.
        let h = try #require(FileHandle(forWritingAtPath: t.store.path + "-folders"))
        h.seekToEndOfFile()
        h.write(Data("bad\u{1}tag\nfolder:to".utf8))
        try h.close()
        let again = try Store(path: t.store.path)
        #expect(try again.localTags() == ["folder:whole"])
        // What is appended next starts a line of its own.
        try again.stageLocalTag("folder:next")
        #expect(try Store(path: t.store.path).localTags().sorted() == ["folder:next", "folder:whole"])
    }

    /// A read of the folders that began before the write that commits a made or removed one,
    /// and is answered after it, has it as it now is (its snapshot has the rows from before, and
    /// it is no longer pending): a folder made is never missing, one removed never back.
    @Test func FS15_aReadRacingTheFoldersWriteHasThemAsTheyAre() throws {
        let t = try TempStore()
        let store = t.store
        // Folders to remove, their rows written.
        for n in 0..<300 { try store.stageLocalTag("folder:old\(n)") }
        try store.flushPending()
        let last = Mutex<Int?>(nil), done = Atomic<Bool>(false), wrong = Mutex<[Int]>([]), failure = Mutex<String?>(nil)
        // One thread makes a folder and removes another, each pair written at once; the other
        // reads the folders over and over. What it has read as made or removed stays so.
        DispatchQueue.concurrentPerform(iterations: 2) { i in
            if i == 0 {
                defer { done.store(true, ordering: .releasing) }
                do {
                    for n in 0..<300 {
                        try store.stageLocalTag("folder:new\(n)")
                        try store.removeLocalTagLater("folder:old\(n)")
                        last.withLock { $0 = n }
                        try store.flushPending()
                    }
                } catch { failure.withLock { $0 = "\(error)" } }
                return
            }
            while !done.load(ordering: .acquiring) {
                guard let n = last.withLock({ $0 }), let tags = try? Set(store.localTags()) else { continue }
                if !tags.contains("folder:new\(n)") || tags.contains("folder:old\(n)") { wrong.withLock { $0.append(n) } }
            }
        }
        #expect(failure.withLock { $0 } == nil)
        let misread = wrong.withLock { $0 }
        #expect(misread.count == 0, "the first after folder \(misread.first ?? -1)")
        #expect(try rows(t.store) == (0..<300).map { "folder:new\($0)" }.sorted())
    }
}
