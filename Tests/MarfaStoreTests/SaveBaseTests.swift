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

    /// After a save conflicted, the file shows the item's text again: the next program with no
    /// record (`mv` of a temporary file, a new process each save) overwrites that, and is taken as
    /// written, not merged against the conflicted bytes into a copy of its own.
    @Test func FS29_afterAConflictAnOverwriteByAnotherProgramIsTakenAsWritten() throws {
        let t = try TempStore()
        let editor = Writer(process: 4242)
        let (r, buffer) = try staleBuffer(t, editor: editor)
        try save(t, r, buffer.replacingOccurrences(of: "l1\n", with: "l1 from B\n"), by: editor)
        #expect(try t.store.allSummaries().filter { $0.stem.contains("conflicted copy") }.count == 1)
        try save(t, r, "mine 1\n", by: Writer(process: 99))
        try save(t, r, "mine 2\n", by: Writer(process: 100))
        #expect(try t.store.item(id: "i1")?.item.properties["body"] == "mine 2\n")
        let copies = try t.store.allSummaries().filter { $0.stem.contains("conflicted copy") }
        #expect(copies.count == 1, "one copy, of the editor's save: \(copies.map(\.stem))")
    }

    /// Process ids are reused (32,768 by default, gone through in minutes by a loop of `mv`s): a
    /// program that has the id of one that saved long ago is another writer, and that program's
    /// record is not its base. (Taken as its base, three different texts of one line conflicted,
    /// and a shell's save loop made a conflicted copy of its own saves.)
    @Test func FS29_aProgramWithAnEarlierProgramsIdIsAnotherWriter() throws {
        let t = try TempStore()
        try t.store.recoverStaged()
        _ = try t.store.applyRemote([.item(remote("mine 0\n", version: 1), tags: nil, extensions: nil)])
        let r = try #require(try t.store.item(id: "i1")).rowid
        try save(t, r, "mine 1\n", by: Writer(process: 99, started: 1_000))
        try save(t, r, "mine 2\n", by: Writer(process: 100, started: 1_001))
        try save(t, r, "mine 3\n", by: Writer(process: 99, started: 5_000))
        #expect(try text(t, r) == "mine 3\n")
        #expect(try t.store.allSummaries().filter { $0.stem.contains("conflicted copy") }.isEmpty)
        #expect(Writer(process: 99, started: 1_000) != Writer(process: 99, started: 5_000))
    }

    /// The settler runs beside requests: a read of the store's snapshot can end after a save
    /// settled, and a save can begin while one settles. Neither may give the next save a base
    /// older than the bytes it replaces (a writer's own quick saves conflicted with each other).
    @Test func FS29_aReadEndingAfterASaveSettledDoesNotBecomeTheNextSavesBase() {
        let b = SaveBases(), r: Int64 = 1
        let old = Array("mine 70\n".utf8), new = Array("mine 75\n".utf8)
        b.noteRead(r, by: Writer(process: 7), old)
        let since = b.readBegins(r)
        #expect(b.begin(r, SaveBases.Save(writer: Writer(process: 99), base: old, before: old)))
        let (save, _) = b.settles(r, wrote: new)
        #expect(save?.base == old)
        #expect(!b.isSaving(r) && b.shown(r) == new, "taken and shown in one step")
        // `grep` read "mine 70" from a snapshot taken before the settle; it ends now.
        b.noteRead(r, by: Writer(process: 8), old, since: since)
        #expect(b.shown(r) == new, "what the mount shows is still the settled save")
        #expect(b.seen(r, by: Writer(process: 8)) == old, "that reader did see the old bytes")
        #expect(b.seen(r, by: Writer(process: 99)) == new, "the saving program saw its own")
        // A conflicted settle: the file shows the item's text, unless something newer was noted.
        let theirs = Array("theirs\n".utf8)
        b.begin(r, SaveBases.Save(writer: Writer(process: 100), base: old, before: theirs))
        let (_, mark) = b.settles(r, wrote: Array("mine 76\n".utf8))
        b.settled(r, shows: theirs, mark: mark)
        #expect(b.shown(r) == theirs)
        b.begin(r, SaveBases.Save(writer: Writer(process: 101), base: theirs, before: theirs))
        let (_, mark2) = b.settles(r, wrote: Array("mine 77\n".utf8))
        b.noteRead(r, by: Writer(process: 9), Array("mine 77\n".utf8))
        b.settled(r, shows: theirs, mark: mark2)
        #expect(b.shown(r) == Array("mine 77\n".utf8), "a read after the settle began is newer")
    }

    /// A note made by `printf > .tmp && mv .tmp note.md` and saved so again and again: the first
    /// saves replace a file still staged; once it is committed (not settled yet) the next save
    /// replaces a stored row. Each `mv` is a new program with no record, and someone (`grep -r`)
    /// reads the file between saves: the saves are taken as written, never a copy.
    @Test func FS29_savesOverANoteStillBeingMadeAreTakenAsWritten() throws {
        let t = try TempStore()
        try t.store.recoverStaged()
        func tmp(_ text: String) throws -> StagedKey {
            let k = StagedKey(.item, try t.store.stageItem(NewItem(type: "core.note", fileName: ".mine.tmp")).rowid)
            _ = try t.store.changeStaged(k, .write(offset: 0, data: Array(text.utf8)))
            return k
        }
        let note = try tmp("mine 1\n")
        #expect(try t.store.moveStaged(rowid: note.rowid, type: "core.note", fileName: "mine.md", tags: []) != nil)
        var pid: Int32 = 100
        for k in 2...5 {
            // `grep -r` reads the staged file, then the next save replaces it.
            if let f = t.store.stagedFile(note) { t.store.noteRead(note.rowid, by: Writer(process: pid), f.bytes) }
            pid += 1
            try t.store.saveOver(note.rowid, from: .item(try tmp("mine \(k)\n").rowid), by: Writer(process: pid))
            pid += 1
        }
        // The settler commits it (a new row, unsettled); saves go on before it settles.
        try t.store.commitStaged()
        for k in 6...7 {
            try t.store.saveOver(note.rowid, from: .item(try tmp("mine \(k)\n").rowid), by: Writer(process: pid))
            pid += 1
            try t.store.commitStaged()
        }
        try t.store.settle()
        try t.store.saveOver(note.rowid, from: .item(try tmp("mine 8\n").rowid), by: Writer(process: pid))
        try t.store.commitStaged()
        try t.store.settle()
        #expect(try text(t, note.rowid) == "mine 8\n")
        let stems = try t.store.allSummaries().map(\.stem)
        #expect(!stems.contains { $0.contains("conflicted copy") }, "\(stems)")
    }
}
