import Foundation
import MarfaTestSupport
@testable import MarfaStore
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
        // Any write transaction takes them along (here the one that removes one of them).
        try t.store.removeLocalTag("folder:x")
        #expect(try rows(t.store) == ["folder:y"])
        let again = try Store(path: t.store.path)
        #expect(try again.localTags() == ["folder:y"], "a kill after the removal does not bring it back")
        #expect(!again.hasPendingFolders)
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
}
