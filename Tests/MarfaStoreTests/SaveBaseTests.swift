import Foundation
import MarfaModel
@testable import MarfaStore
import Testing

/// FS-29: a save's base is what its writer saw. One program (a writer) holds a note in a buffer
/// read before a remote edit and saves it again and again, as autosaving editors do.
@Suite struct SaveBaseTests {
    func remote(_ body: String, version: Int) -> Item {
        Item(id: "i1", type: "core.note", properties: ["title": "n", "body": .string(body)], version: version,
             timestamp: "2026-01-01T00:00:00Z", createdAt: "2026-01-01T00:00:00Z", updatedAt: "2026-01-0\(version)T00:00:00Z", state: .active, tier: .library)
    }

    /// A store with note i1 ("l1 l2 l3"), read by `editor`, then edited remotely (line 1).
    func staleBuffer(_ t: TempStore, editor: Writer) throws -> (Int64, String) {
        try t.store.recoverStaged()
        _ = try t.store.applyRemote([.item(remote("l1\nl2\nl3\n", version: 1), tags: nil, extensions: nil)])
        let r = try #require(try t.store.item(id: "i1")).rowid
        let buffer = String(decoding: try t.store.readText(rowid: r, by: editor), as: UTF8.self)
        _ = try t.store.applyRemote([.item(remote("l1 from A\nl2\nl3\n", version: 2), tags: nil, extensions: nil)])
        return (r, buffer)
    }

    /// Saves `text` in place (truncate to 0, then write) as `w`, and settles it.
    func save(_ t: TempStore, _ r: Int64, _ text: String, by w: Writer) throws {
        _ = try t.store.changeFile(.item(r, type: "core.note"), .truncate(size: 0), by: w)
        _ = try t.store.changeFile(.item(r, type: "core.note"), .write(offset: 0, data: Array(text.utf8)), by: w)
        try t.store.settle()
    }

    func text(_ t: TempStore, _ r: Int64) throws -> String { String(decoding: try t.store.textContent(rowid: r), as: UTF8.self) }

    func count(_ line: String, in text: String) -> Int { text.split(separator: "\n").filter { $0 == line }.count }

    @Test func FS29_threeSavesFromABufferReadBeforeARemoteEditKeepItAndDuplicateNothing() throws {
        let t = try TempStore()
        let editor = Writer(process: 4242)
        var (r, buffer) = try staleBuffer(t, editor: editor)
        for k in 1...3 {
            buffer += "B \(k)\n"
            try save(t, r, buffer, by: editor)
            let now = try text(t, r)
            #expect(count("l1 from A", in: now) == 1 && count("l1", in: now) == 0, "save \(k): \(now)")
            for j in 1...k { #expect(count("B \(j)", in: now) == 1, "save \(k): \(now)") }
            // Someone else reads the merge meanwhile (a `cat`, an indexer): the editor's base stays its own bytes.
            _ = try t.store.readText(rowid: r, by: Writer(process: 7))
        }
        #expect(try t.store.item(id: "i1")?.item.properties["body"] == "l1 from A\nl2\nl3\nB 1\nB 2\nB 3\n")
    }

    @Test func FS29_aReloadBetweenSavesMakesTheMergeTheBase() throws {
        let t = try TempStore()
        let editor = Writer(process: 4242)
        var (r, buffer) = try staleBuffer(t, editor: editor)
        buffer += "B 1\n"
        try save(t, r, buffer, by: editor)
        buffer = String(decoding: try t.store.readText(rowid: r, by: editor), as: UTF8.self)
        #expect(buffer.contains("l1 from A\n"))
        // The reloaded buffer drops line 2: a deliberate edit of text the editor saw, taken as it is.
        buffer = buffer.replacingOccurrences(of: "l2\n", with: "")
        try save(t, r, buffer, by: editor)
        #expect(try t.store.item(id: "i1")?.item.properties["body"] == "l1 from A\nl3\nB 1\n")
    }

    @Test func FS29_overlappingSavesKeepOneConflictedCopyPerConcurrentEdit() throws {
        let t = try TempStore()
        let editor = Writer(process: 4242)
        var (r, buffer) = try staleBuffer(t, editor: editor)
        buffer = buffer.replacingOccurrences(of: "l1\n", with: "l1 from B\n")
        for k in 1...3 {
            buffer = buffer.replacingOccurrences(of: "l1 from B\(k == 1 ? "" : " \(k - 1)")\n", with: "l1 from B \(k)\n")
            try save(t, r, buffer, by: editor)
        }
        let copies = try t.store.allSummaries().filter { $0.stem.contains("conflicted copy") }
        #expect(copies.count == 1, "\(copies.map(\.stem))")
        let copy = try #require(try t.store.item(id: copies.first?.id ?? ""))
        #expect(copy.item.properties["body"]?.stringValue?.contains("l1 from B 3") == true, "the copy holds the last save: \(copy.item.properties)")
        #expect(try text(t, r).contains("l1 from A\n"), "the item keeps the remote line")
    }

    @Test func FS29_aWriterWithNoRecordGetsWhatTheMountShowedBeforeTheRemoteEdit() throws {
        let t = try TempStore()
        let (r, _) = try staleBuffer(t, editor: Writer(process: 4242))
        // Another program reads A's edit; a program whose read of the old text came from the page
        // cache (no record) saves the old text plus a line: A's edit stays.
        _ = try t.store.readText(rowid: r, by: Writer(process: 7))
        try save(t, r, "l1\nl2\nl3\nnew\n", by: Writer(process: 99))
        #expect(try t.store.item(id: "i1")?.item.properties["body"] == "l1 from A\nl2\nl3\nnew\n")
        // Once a save has followed the remote edit, an overwrite by a program with no record is
        // merged against what the mount last showed anyone: the merge, once it has been read (a
        // `cat`), so the overwrite is taken as written.
        _ = try t.store.readText(rowid: r, by: Writer(process: 7))
        try save(t, r, "replaced\n", by: Writer(process: 100))
        #expect(try t.store.item(id: "i1")?.item.properties["body"] == "replaced\n")
    }
}
