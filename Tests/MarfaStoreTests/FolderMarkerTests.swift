import Foundation
import MarfaModel
@testable import MarfaStore
import Testing

/// Folder markers (FS-32, `FolderMarker`): which empty folders get one, when one is removed, and
/// how the remote's are taken, on a real store file.
@Suite struct FolderMarkerTests {
    func marker(_ id: String, _ path: JSONValue, state: ItemState = .active) -> RemoteChange {
        .item(Item(id: id, type: FolderMarker.type, properties: ["path": path], version: 1, timestamp: "2026-01-01T00:00:00Z",
                   createdAt: "2026-01-01T00:00:00Z", updatedAt: "2026-01-01T00:00:00Z", state: state, tier: .library),
              tags: [], extensions: nil)
    }

    func keptFolders(_ s: Store) throws -> [String] { try s.localTags().filter { $0.hasPrefix("folder:") }.sorted() }

    /// As a server's answers leave the queue: empty.
    func sendAll(_ s: Store) throws { try s.write { db in try db.execute(sql: "DELETE FROM mutations") } }

    @Test func FS32_theRemotesMarkersAreFoldersNeverItems() throws {
        let t = try TempStore()
        var c = try t.store.applyRemote([marker("m1", "a/b"), marker("m2", "../up"), marker("m3", .int(3)),
                                         marker("m4", .string(String(repeating: "x", count: 300)))])
        #expect(c.folders == ["folder:a/b"] && c.skipped == 3, "only a path a folder can have: \(c)")
        #expect(try keptFolders(t.store) == ["folder:a/b"])
        #expect(try t.store.allSummaries().isEmpty, "no item")
        #expect(try t.store.unsentCount() == 0)
        // Its removal (trashed, or deleted) removes the folder while it holds nothing.
        c = try t.store.applyRemote([.deleted(itemID: "m1")])
        let afterRemoval = try keptFolders(t.store)
        #expect(c.foldersRemoved == ["folder:a/b"] && afterRemoval.isEmpty)
        // A folder that holds a note here stays when its marker goes.
        _ = try t.store.applyRemote([marker("m5", "kept")])
        _ = try t.store.createItem(NewItem(type: "core.note", fileName: "n.md", content: Array("n\n".utf8), tags: ["folder:kept"]))
        c = try t.store.applyRemote([marker("m5", "kept", state: .trashed)])
        let held = try keptFolders(t.store)
        #expect(c.foldersRemoved.isEmpty && held == ["folder:kept"])
    }

    @Test func FS32_aMountsOwnMarkersFollowItsTree() throws {
        let t = try TempStore()
        func work(_ ripe: Set<String>) throws -> FolderMarkerWork { try t.store.folderMarkerWork(isLocalOnly: { $0.hasPrefix(".git") }, ripe: ripe) }
        for f in ["empty/deeper", "full", ".git/refs"] { try t.store.addLocalTag("folder:" + f) }
        _ = try t.store.createItem(NewItem(type: "core.note", fileName: "n.md", content: Array("n\n".utf8), tags: ["folder:full"]))
        // Not ripe yet: waiting, nothing to send. Ripe: only the deepest empty folder that travels.
        var w = try work([])
        #expect(w.send.isEmpty && w.waiting == ["empty/deeper"], "\(w)")
        try sendAll(t.store)
        w = try work(["empty/deeper"])
        #expect(w.send.map(\.path) == ["empty/deeper"] && w.remove.isEmpty, "\(w)")
        let id = w.send[0].id
        try t.store.folderMarkerSent(id)
        #expect(try work([]).isEmpty)
        // Its echo changes nothing.
        #expect(try t.store.applyRemote([marker(id, "empty/deeper")]).applied == 0)
        // Gone from the tree: removed, but only once nothing is left to send.
        try t.store.removeLocalTagLater("folder:empty/deeper")
        _ = try t.store.createItem(NewItem(type: "core.note", fileName: "m.md", content: Array("m\n".utf8)))
        #expect(try work([]).remove.isEmpty, "a change still to send goes first")
        try sendAll(t.store)
        w = try work([])
        #expect(w.remove.map(\.id) == [id], "\(w)")
        // The echo of its creation, late, does not bring the folder back.
        #expect(try t.store.applyRemote([marker(id, "empty/deeper")]).folders.isEmpty)
        try t.store.folderMarkerRemoved(id)
        let left = try keptFolders(t.store)
        #expect(try work([]).isEmpty && left == ["folder:.git/refs", "folder:full"], "\(left)")
    }
}
