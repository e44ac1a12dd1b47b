import Foundation
import MarfaTestSupport
@testable import MarfaStore
import Testing

/// FS-28: the store never leaves its WAL empty, so it opens on a disk with no room
/// (GRDB commits into an empty log when it opens a pool).
@Suite struct StoreLogTests {
    func walSize(_ path: String) -> Int? {
        (try? FileManager.default.attributesOfItem(atPath: path + "-wal"))?[.size] as? Int
    }

    /// A store that goes away leaves its log as it is: were its connections closed, SQLite's
    /// checkpoint on the last close would delete the log (`Store.openPool`).
    @Test func FS28_aStoreThatGoesAwayLeavesItsLog() throws {
        let tmp = try TempDirectory("marfafs-store")
        let path = tmp.path + "/store.sqlite"
        do {
            let store = try Store(path: path)
            _ = try store.createItem(NewItem(type: "core.note", fileName: "a.md", content: Array("hello\n".utf8)))
            #expect((walSize(path) ?? 0) > 0)
        }
        #expect((walSize(path) ?? 0) > 0, "the log after the store went away: \(walSize(path).map(String.init) ?? "gone")")
        #expect(try Store(path: path).allSummaries().count == 1)
    }

    /// A cut of the log (after a full disk, at unmount) leaves one small commit in it.
    @Test func FS28_aCutLogKeepsOneSmallCommit() throws {
        let tmp = try TempDirectory("marfafs-store")
        let path = tmp.path + "/store.sqlite"
        let store = try Store(path: path)
        for i in 0..<50 { _ = try store.createItem(NewItem(type: "core.note", fileName: "n\(i).md", content: Array(String(repeating: "x", count: 4000).utf8))) }
        #expect((walSize(path) ?? 0) > 100_000)
        store.truncateWAL()
        let after = walSize(path) ?? 0
        #expect(after > 0 && after < 20_000, "\(after) bytes")
    }
}
