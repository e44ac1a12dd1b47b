import Foundation
import MarfaLayout
import MarfaModel
import MarfaTestSupport
@testable import MarfaStore
import Synchronization
import Testing

/// FS-15 for staged files: every change is in the journal before it is answered, so a store
/// opened after a kill (a second `Store` on the same file, the first never committed) recovers it.
@Suite struct StagingTests {
    /// A store whose staged files were never committed: what a killed daemon leaves.
    static func killed(_ t: TempStore, _ body: (Store) throws -> Void) throws -> Store {
        try t.store.recoverStaged()
        try body(t.store)
        return try Store(path: t.store.path)
    }

    /// Stages a new note with `text` as its bytes; returns its key.
    @discardableResult
    static func note(_ s: Store, _ name: String, _ text: String, tags: [String] = []) throws -> StagedKey {
        let k = StagedKey(.item, try s.stageItem(NewItem(type: "core.note", fileName: name, tags: tags)).rowid)
        _ = try s.changeStaged(k, .write(offset: 0, data: Array(text.utf8)))
        return k
    }

    /// Where the journal's records end, read from what it holds (the file is grown ahead of them
    /// in zeros): past the 8-byte header, records of `length u32, checksum u32, payload`, up to a
    /// zero length.
    static func recordsEnd(_ path: String) throws -> Int {
        let b = [UInt8](try #require(FileManager.default.contents(atPath: path)))
        var pos = try #require(JournalFile.readHeader(b[...])).length
        while pos + 8 <= b.count {
            let len = Int(b[pos]) | Int(b[pos + 1]) << 8 | Int(b[pos + 2]) << 16 | Int(b[pos + 3]) << 24
            if len == 0 || pos + 8 + len > b.count { break }
            pos += 8 + len
        }
        return pos
    }

    /// The settler's commit, both steps at once (no mount's lock to begin it under).
    static func commitQuiet(_ s: Store, _ quiet: (since: Int64, stagedBefore: Int64)) throws {
        if let c = try s.beginQuietCommit(quiet) { try s.finishQuietCommit(c) }
    }

    static func scratch(_ s: Store, _ name: String) throws -> StagedKey {
        StagedKey(.scratch, try s.stageScratch(dir: "types/core.note", name: name).rowid)
    }

    @Test func FS15_stagedFilesSurviveAKill() throws {
        let t = try TempStore()
        var itemRow: Int64 = 0, scratchRow: Int64 = 0, goneRow: Int64 = 0
        let after = try Self.killed(t) { s in
            let f = try Self.note(s, "new.md", "hello world", tags: ["inbox"])
            itemRow = f.rowid
            _ = try s.changeStaged(f, .truncate(size: 5))
            _ = try s.changeStaged(f, .write(offset: 5, data: Array("!".utf8)))
            let sc = try Self.scratch(s, ".new.md.swp")
            scratchRow = sc.rowid
            _ = try s.changeStaged(sc, .write(offset: 0, data: [1, 2, 3]))
            let gone = try Self.scratch(s, "4913")
            goneRow = gone.rowid
            try s.dropStaged(gone)
        }
        #expect(try after.recoverStaged() == 2)
        let item = try #require(try after.item(rowid: itemRow))
        #expect(try after.textContent(rowid: itemRow) == Array("hello!".utf8))
        #expect(item.fileName == "new.md")
        #expect(try after.tags(itemID: item.item.id) == ["inbox"])
        #expect(try after.mutations().isEmpty, "recovered files settle at the mount, like any written file")
        #expect(try after.hasUnsettled())
        let scratch = try after.allScratch()
        #expect(scratch.map(\.rowid) == [scratchRow])
        #expect(try after.scratchData(scratchRow) == [1, 2, 3])
        #expect(!scratch.contains { $0.rowid == goneRow }, "a dropped scratch file stays dropped")
        // Settled, it queues exactly one create.
        try after.settle()
        #expect(try after.mutations().map(\.kind) == [.create])
        // A second open finds nothing more to recover.
        #expect(try Store(path: t.store.path).recoverStaged() == 0)
    }

    /// A journal being written again beside itself (`<journal>.new`, renamed over it once whole)
    /// when the mount was killed: the journal it was to replace is whole, and the half-written one
    /// is removed by the recovery, its room given back.
    @Test func FS15_aJournalHalfWrittenAgainAtAKillIsRemoved() throws {
        let t = try TempStore()
        let after = try Self.killed(t) { s in _ = try Self.note(s, "kept.md", "kept") }
        let half = t.store.path + "-staged.new"
        #expect(FileManager.default.createFile(atPath: half, contents: Data(repeating: 7, count: 1 << 20)))
        #expect(try after.recoverStaged() == 1)
        #expect(!FileManager.default.fileExists(atPath: half))
    }

    /// The settler commits only the files quiet since a time (FS-14): a file still being written
    /// (`rsync`'s temporary file between its writes and its rename) stays staged, written again
    /// at the head of the journal's next generation. After a kill the journal gives back exactly
    /// the files that stayed, with what changed after the commit; the committed ones are the
    /// store's and are not made twice. A file staged for too long commits however busy it is.
    @Test func FS15_aFileStillBeingWrittenStaysStagedThroughACommitAndAKill() throws {
        let t = try TempStore()
        var quiet: Int64 = 0, busy: Int64 = 0, empty: Int64 = 0, scratch: Int64 = 0
        let after = try Self.killed(t) { s in
            quiet = try Self.note(s, "quiet.md", "# Quiet\n").rowid
            Thread.sleep(forTimeInterval: 0.02)
            let cut = Store.ns(Date())
            Thread.sleep(forTimeInterval: 0.02)
            let b = try Self.note(s, ".busy.md.Ab12Cd", "# Busy\n", tags: ["folder:x"])
            busy = b.rowid
            // An old mtime (`rsync -a` sets it before the rename) does not make it quiet.
            _ = try s.changeStaged(b, .mtime(ns: 1_500_000_000_000_000_000))
            empty = try s.stageItem(NewItem(type: "core.note", fileName: "empty.md")).rowid
            let sc = try Self.scratch(s, ".busy.md.swp")
            scratch = sc.rowid
            _ = try s.changeStaged(sc, .write(offset: 0, data: [1, 2, 3]))
            try Self.commitQuiet(s, (since: cut, stagedBefore: cut - 1_000_000_000))
            #expect(try s.item(rowid: quiet) != nil, "the quiet file is committed")
            #expect(s.isNewlyStaged(b) && s.stagedFileCount == 3, "the busy ones stay staged")
            #expect(try s.item(rowid: busy) == nil)
            // What happens after the commit lands in the new generation.
            _ = try s.changeStaged(b, .write(offset: 7, data: Array("more\n".utf8)))
            _ = try s.changeStaged(b, .mtime(ns: 1_600_000_000_000_000_000))
            #expect(try s.moveStaged(rowid: busy, type: "core.note", fileName: "busy.md", tags: ["folder:y"]) != nil)
        }
        #expect(try after.recoverStaged() == 3, "the three files that stayed, not the committed one")
        let item = try #require(try after.item(rowid: busy))
        #expect(item.fileName == "busy.md")
        #expect(item.mtimeNs == 1_600_000_000_000_000_000)
        #expect(try after.tags(itemID: item.item.id) == ["folder:y"])
        #expect(try after.textContent(rowid: busy) == Array("# Busy\nmore\n".utf8))
        #expect(try after.item(rowid: empty)?.fileName == "empty.md")
        #expect(try after.scratchData(scratch) == [1, 2, 3])
        #expect(try after.textContent(rowid: quiet) == Array("# Quiet\n".utf8))
        #expect(try after.allSummaries().filter { $0.stem == "quiet" }.count == 1)

        // Staged for longer than the settler lets a file wait: committed, busy or not.
        let s = after
        let late = try Self.note(s, "late.md", "# Late\n")
        let now = Store.ns(Date())
        try Self.commitQuiet(s, (since: now - 60_000_000_000, stagedBefore: now + 1_000_000_000))
        #expect(s.stagingIsEmpty)
        #expect(try s.item(rowid: late.rowid) != nil)
    }

    /// A journal grown past its bound while a file stays staged is replaced, not truncated, by one
    /// that holds that file alone (written aside, renamed over it): it shrinks, and a kill after
    /// it still gives the file back.
    @Test func FS15_aJournalStartsOverAroundTheFileThatStays() throws {
        let t = try TempStore()
        let journal = t.store.path + "-staged"
        var busy: Int64 = 0
        let after = try Self.killed(t) { s in
            let chunk = [UInt8](repeating: UInt8(ascii: "a"), count: 900_000)
            for i in 0..<10 {
                let k = StagedKey(.item, try s.stageItem(NewItem(type: "core.file", fileName: "big\(i).bin")).rowid)
                _ = try s.changeStaged(k, .write(offset: 0, data: chunk))
            }
            Thread.sleep(forTimeInterval: 0.02)
            let cut = Store.ns(Date())
            Thread.sleep(forTimeInterval: 0.02)
            busy = try Self.note(s, ".busy.md.Xy12Zw", "# Busy\n").rowid
            let size = { (try? FileManager.default.attributesOfItem(atPath: journal)[.size] as? Int) ?? 0 }
            #expect(size() > 9_000_000)
            try Self.commitQuiet(s, (since: cut, stagedBefore: cut - 1_000_000_000))
            // Its records are the one file's; the file holds them and the room it is grown by.
            let records = try Self.recordsEnd(journal)
            #expect(records < 10_000 && size() <= records + Int(Staging.growth) + 4096,
                    "started over around the one file that stayed: \(records) bytes of records, \(size()) in all")
            #expect(!FileManager.default.fileExists(atPath: journal + ".new"))
            #expect(s.stagedFileCount == 1)
            _ = try s.changeStaged(StagedKey(.item, busy), .write(offset: 7, data: Array("more\n".utf8)))
        }
        #expect(try after.recoverStaged() == 1)
        #expect(try after.textContent(rowid: busy) == Array("# Busy\nmore\n".utf8))
        #expect(try after.allSummaries().filter { $0.type == "core.file" }.count == 10)
    }

    /// `rsync`'s temporary file renamed to its name and folder before it was ever committed: the
    /// move is one journal record, so a kill after it recovers the file under its final name,
    /// folder and type, and nothing was queued for the temporary name.
    @Test func FS32_aMoveOfAStagedFileSurvivesAKill() throws {
        let t = try TempStore()
        var row: Int64 = 0
        let after = try Self.killed(t) { s in
            let k = try Self.note(s, ".a.md.Ab12Cd", "# A\nsee [[b]]\n", tags: ["folder:x"])
            row = k.rowid
            let shown = try #require(try s.moveStaged(rowid: row, type: "core.note", fileName: "a.md", tags: ["folder:y/z"]))
            #expect(shown.rowid == row && shown.stem == "a" && shown.ext == ".md")
            _ = try s.changeStaged(k, .mtime(ns: 1_600_000_000_000_000_000))
            #expect(try s.mutations().isEmpty)
            // A file that is not a new staged item is not moved here.
            #expect(try s.moveStaged(rowid: row + 100, type: "core.note", fileName: "b.md", tags: []) == nil)
        }
        #expect(try after.recoverStaged() == 1)
        let item = try #require(try after.item(rowid: row))
        #expect(item.fileName == "a.md")
        #expect(item.mtimeNs == 1_600_000_000_000_000_000)
        #expect(try after.tags(itemID: item.item.id) == ["folder:y/z"])
        #expect(try after.textContent(rowid: row) == Array("# A\nsee [[b]]\n".utf8))
    }

    /// The same rename after the settler committed the temporary file but before it settled: the
    /// row takes the final name and folder, nothing is queued for the temporary name, and the
    /// create (once it settles) carries the final ones. A file that has settled is not moved so.
    @Test func FS32_aCommittedFileThatNeverSettledMovesInItsRow() throws {
        let t = try TempStore()
        let s = t.store
        try s.recoverStaged()
        let k = try Self.note(s, ".a.md.Ab12Cd", "# A\n", tags: ["folder:x"])
        try s.commitStaged()
        let shown = try #require(try s.moveUnsent(rowid: k.rowid, type: "core.note", fileName: "a.md", tags: ["folder:y"]))
        #expect(shown.stem == "a" && shown.ext == ".md")
        #expect(try s.mutations().isEmpty)
        // Only folders move so: another tag is the stored item's rename.
        #expect(try s.moveUnsent(rowid: k.rowid, type: "core.note", fileName: "a.md", tags: ["folder:y", "topic"]) == nil)
        _ = try s.settle()
        let item = try #require(try s.item(rowid: k.rowid))
        #expect(item.fileName == "a.md")
        #expect(try s.tags(itemID: item.item.id) == ["folder:y"])
        let created = try s.mutations().filter { $0.kind == .create }
        #expect(created.count == 1 && !"\(created[0].payload)".contains("Ab12Cd"), "\(created)")
        #expect(try s.moveUnsent(rowid: k.rowid, type: "core.note", fileName: "b.md", tags: ["folder:y"]) == nil, "settled: queued, so a rename of the item")
        // A file whose temporary name said another type takes the one its name says.
        let d = StagedKey(.item, try s.stageItem(NewItem(type: "core.file", fileName: "d.tmp")).rowid)
        _ = try s.changeStaged(d, .write(offset: 0, data: Array("# D\n".utf8)))
        try s.commitStaged()
        #expect(try s.moveUnsent(rowid: d.rowid, type: "core.note", fileName: "d.md", tags: []) != nil)
        _ = try s.settle()
        let note = try #require(try s.item(rowid: d.rowid))
        #expect(note.item.type == "core.note" && note.fileName == "d.md")
        #expect(try s.textContent(rowid: d.rowid) == Array("# D\n".utf8))
    }

    @Test func FS13_aSaveOverAnItemSurvivesAKill() throws {
        let t = try TempStore()
        let note = try t.store.createItem(NewItem(type: "core.note", fileName: "n.md", content: Array("old\n".utf8)))
        let after = try Self.killed(t) { s in
            let tmp = try Self.note(s, "n.md.tmp", "new\n")
            let f = try s.saveOver(note.rowid, from: .item(tmp.rowid))
            #expect(f?.bytes == Array("new\n".utf8), "a new staged file saved over an item stays staged")
            #expect(s.staging.hasOverlay(note.rowid))
        }
        #expect(try after.recoverStaged() == 1)
        #expect(try after.textContent(rowid: note.rowid) == Array("new\n".utf8))
        #expect(try after.itemCount() == 1, "the temporary file never became an item")
        try after.settle()
        #expect(try after.mutations().map(\.kind) == [.create], "the save folds into the unsent create")
        #expect(try after.item(rowid: note.rowid)?.item.properties["body"] == "new\n")
    }

    /// A journal left beside a store that was deleted and made again (its records name rows the
    /// new store does not have) is set aside whole, not applied; the store starts a journal of its
    /// own and works, and the next recovery finds nothing.
    @Test func FS15_aJournalThatIsNotTheStoresIsSetAsideWhole() throws {
        let t = try TempStore()
        let note = try t.store.createItem(NewItem(type: "core.note", fileName: "n.md", content: Array("old\n".utf8)))
        _ = try Self.killed(t) { s in _ = try s.saveOver(note.rowid, from: .item(try Self.note(s, "n.md.tmp", "new\n").rowid)) }
        // Its records (the zeros the journal is grown ahead in are not kept).
        let bytes = try Data(contentsOf: URL(fileURLWithPath: t.store.path + "-staged")).prefix(try Self.recordsEnd(t.store.path + "-staged"))
        for suffix in ["", "-wal", "-shm"] { try FileManager.default.removeItem(atPath: t.store.path + suffix) }
        let fresh = try Store(path: t.store.path)
        #expect(try fresh.recoverStaged() == 0)
        let aside = try #require(fresh.unrecoveredJournal.withLock { $0 })
        #expect(aside.reason.contains("\(note.rowid)"), "\(aside.reason)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: aside.path)) == bytes, "its records kept whole")
        try Self.note(fresh, "m.md", "mine\n")
        try fresh.commitStaged()
        #expect(try fresh.itemCount() == 1)
        #expect(try Store(path: fresh.path).recoverStaged() == 0)
    }

    @Test func FS15_committedGenerationsAreNotReplayed() throws {
        let t = try TempStore()
        let after = try Self.killed(t) { s in
            try Self.note(s, "a.md", "a")
            try s.commitStaged()
            #expect(s.stagingIsEmpty)
            // The committed item is then removed; its old records must not bring it back.
            try s.write { db in try db.execute(sql: "DELETE FROM items") }
            try Self.note(s, "b.md", "b")
        }
        #expect(try after.recoverStaged() == 1)
        #expect(try after.allSummaries().map(\.stem) == ["b"])
    }

    /// A power cut can lose a commit whose WAL was not synced while the journal's next records
    /// survive: recovery then takes every generation from the one the store still names.
    @Test func FS15_aLostCommitIsReplayedWithTheGenerationsAfterIt() throws {
        let t = try TempStore()
        let after = try Self.killed(t) { s in
            try Self.note(s, "a.md", "a")
            try s.commitStaged()
            try Self.note(s, "b.md", "b")
            // The commit is lost: its row and its generation are gone.
            try s.write { db in
                try db.execute(sql: "DELETE FROM items")
                try db.execute(sql: "UPDATE meta SET value = '0' WHERE key = 'staging_generation'")
            }
        }
        #expect(try after.recoverStaged() == 2)
        #expect(try after.allSummaries().map(\.stem).sorted() == ["a", "b"])
        // The next generation is past every one the journal named: nothing comes back twice.
        #expect(try Store(path: t.store.path).recoverStaged() == 0)
    }

    @Test func FS15_aTornLastRecordIsIgnored() throws {
        let t = try TempStore()
        let after = try Self.killed(t) { s in
            let f = try Self.note(s, "a.md", "kept")
            _ = try s.changeStaged(f, .write(offset: 4, data: Array(repeating: UInt8(ascii: "x"), count: 100)))
        }
        // The kill tore the last write: half of it reached the file.
        let path = t.store.path + "-staged"
        #expect(truncate(path, off_t(try Self.recordsEnd(path) - 50)) == 0)
        #expect(try after.recoverStaged() == 1)
        #expect(try after.textContent(rowid: try after.allSummaries()[0].rowid) == Array("kept".utf8))
    }

    @Test func FS15_aStoreWithoutRecoveryRefusesToStage() throws {
        let t = try TempStore()
        #expect(throws: StoreError.self) { _ = try t.store.stageItem(NewItem(type: "core.note", fileName: "a.md")) }
    }
}

extension StagingTests {
    /// FS-15: a kill in the middle of a journal record leaves a torn record at the end. The next
    /// open recovers what comes before it, and the records appended after that recovery must not
    /// be hidden behind the torn one at the open after that (a second kill).
    @Test func FS15_aTornRecordDoesNotHideLaterOnes() throws {
        let t = try TempStore()
        let first = try Self.killed(t) { s in try Self.note(s, "one.md", "first") }
        // The kill cut the last record short: half of another write's record.
        let journal = first.staging.path
        let fd = open(journal, O_WRONLY)
        let torn: [UInt8] = [200, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7]
        let end = try Self.recordsEnd(journal)
        _ = torn.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, off_t(end)) }
        close(fd)
        #expect(try first.recoverStaged() == 1, "the record before the torn one is recovered")
        let secondRow = try Self.note(first, "two.md", "second").rowid
        // Killed again before anything committed the second file.
        let second = try Store(path: t.store.path)
        #expect(try second.recoverStaged() == 1)
        #expect(try second.textContent(rowid: secondRow) == Array("second".utf8), "the file written after the first recovery survives the second kill")
        #expect(try second.itemCount() == 2)
    }

    /// FS-15: the journal is grown ahead of its records in zeros (an `fsync` then writes no size
    /// or blocks), so its records end where a zero length is, not where the file does: a kill
    /// leaves them followed by zeros, and what is appended after the recovery is found after the
    /// next kill.
    @Test func FS15_aJournalGrownAheadInZerosRecoversEveryRecord() throws {
        let t = try TempStore()
        let journal = t.store.staging.path
        var oneRow: Int64 = 0
        let first = try Self.killed(t) { s in
            oneRow = try Self.note(s, "one.md", "first").rowid
            let size = try #require(try FileManager.default.attributesOfItem(atPath: journal)[.size] as? Int)
            let records = try Self.recordsEnd(journal)
            #expect(size >= Int(Staging.growth) && size > records, "grown ahead: \(size) bytes, \(records) of records")
        }
        #expect(try first.recoverStaged() == 1)
        let twoRow = try Self.note(first, "two.md", "second").rowid
        _ = try first.changeStaged(StagedKey(.item, twoRow), .write(offset: 6, data: Array(" and more".utf8)))
        let second = try Store(path: t.store.path)
        #expect(try second.recoverStaged() == 1)
        #expect(try second.textContent(rowid: oneRow) == Array("first".utf8))
        #expect(try second.textContent(rowid: twoRow) == Array("second and more".utf8))
    }

    /// The settler's commit writes the store with no lock held (FS-14, FS-15): while it is in
    /// flight, files it does not commit are written and made as usual, the ones it commits read
    /// as they are, and a change to one of those waits for the commit and then goes to the store.
    /// A kill while it is in flight loses nothing: the journal holds both generations.
    @Test func FS15_aCommitInFlightHoldsBackOnlyTheFilesItCommits() throws {
        let t = try TempStore()
        var quietRow: Int64 = 0, busyRow: Int64 = 0, newRow: Int64 = 0
        let after = try Self.killed(t) { s in
            let q = try Self.note(s, "quiet.md", "# Quiet\n")
            quietRow = q.rowid
            Thread.sleep(forTimeInterval: 0.02)
            let cut = Store.ns(Date())
            Thread.sleep(forTimeInterval: 0.02)
            let b = try Self.note(s, "busy.md", "# Busy\n")
            busyRow = b.rowid
            let c = try #require(try s.beginQuietCommit((since: cut, stagedBefore: cut - 1_000_000_000)))
            #expect(c.count == 1)
            // In flight: another file is written and a new one made without waiting.
            _ = try s.changeStaged(b, .write(offset: 7, data: Array("more\n".utf8)))
            let n = try Self.note(s, "new.md", "# New\n")
            newRow = n.rowid
            // The committing file reads as it is; a change to it waits for the commit's end.
            #expect(s.stagedFile(q)?.bytes == Array("# Quiet\n".utf8))
            let changed = DispatchSemaphore(value: 0), row = quietRow
            Thread {
                _ = try? s.changeFile(.item(row, type: "core.note"), .write(offset: 8, data: Array("edit\n".utf8)))
                changed.signal()
            }.start()
            #expect(changed.wait(timeout: .now() + 0.2) == .timedOut, "a change to a file being committed waits for the commit")
            #expect(try s.item(rowid: quietRow) == nil, "not in the store before the commit is written")
            try s.finishQuietCommit(c)
            #expect(changed.wait(timeout: .now() + 5) == .success)
            #expect(!s.isStaged(q), "committed: the change went to its row")
            #expect(try s.textContent(rowid: quietRow) == Array("# Quiet\nedit\n".utf8))
            #expect(s.isNewlyStaged(b) && s.isNewlyStaged(n))
            // A second commit begun and never finished: the kill comes while it is in flight.
            let now = Store.ns(Date())
            _ = try #require(try s.beginQuietCommit((since: now, stagedBefore: now)))
            _ = try s.changeStaged(StagedKey(.item, try s.stageItem(NewItem(type: "core.note", fileName: "late.md")).rowid),
                                   .write(offset: 0, data: Array("# Late\n".utf8)))
        }
        #expect(try after.recoverStaged() == 3, "busy, new and late: the commit in flight never reached the store")
        #expect(try after.textContent(rowid: busyRow) == Array("# Busy\nmore\n".utf8))
        #expect(try after.textContent(rowid: newRow) == Array("# New\n".utf8))
        #expect(try after.textContent(rowid: quietRow) == Array("# Quiet\nedit\n".utf8))
        #expect(try after.allSummaries().filter { $0.stem == "late" }.count == 1)
        #expect(try after.allSummaries().filter { $0.stem == "quiet" }.count == 1)
    }

    /// The settler's batch gives way to a write that waits for the store's writer (FS-14): a
    /// request's `mkdir` waits for one file's settling, not a whole batch's. The batch stops
    /// early, says more may be waiting, and the next one goes on where it stopped.
    @Test func FS14_theSettlersBatchGivesWayToAWaitingWrite() throws {
        let t = try TempStore()
        let s = t.store
        try s.recoverStaged()
        let body = String(repeating: "A line of a note with [[a link]] and #tag.\n", count: 40)
        for i in 0..<400 { _ = try Self.note(s, "n\(i).md", "---\ntitle: Note \(i)\n---\n" + body) }
        try s.commitStaged()
        let wrote = DispatchSemaphore(value: 0)
        Thread {
            Thread.sleep(forTimeInterval: 0.02)
            try? s.addLocalTag("folder:made-meanwhile")
            wrote.signal()
        }.start()
        let first = try s.settleGivingWay(writtenBefore: .max, limit: 400)
        #expect(wrote.wait(timeout: .now() + 5) == .success)
        #expect(first.rows.count < 400, "the batch stopped for the waiting write")
        #expect(first.more)
        var settled = first.rows.count
        while true {
            let next = try s.settleGivingWay(writtenBefore: .max, limit: 400)
            settled += next.rows.count
            if !next.more { break }
        }
        #expect(settled == 400)
        #expect(try !s.hasUnsettled())
        #expect(try s.mutations().filter { $0.kind == .create }.count == 400)
    }

    /// The staging is safe on its own (its lock): files made and written from several threads while
    /// another commits over and over lose no file and no byte. A write that finds its file already
    /// committed goes to the store, as the mount's does.
    @Test func FS15_stagingFromManyThreadsWhileCommittingLosesNothing() throws {
        let t = try TempStore()
        let s = t.store
        try s.recoverStaged()
        let writers = 4, perWriter = 60
        let made = Mutex<[(Int64, String)]>([])
        let failures = Mutex<[String]>([])
        let writing = Atomic<Int>(writers)
        DispatchQueue.concurrentPerform(iterations: writers + 1) { i in
            if i == writers {
                // The committer: commits whatever is staged until every writer is done, in turn
                // whole and as the settler does (its store write with no lock held).
                var quietTurn = false
                while writing.load(ordering: .acquiring) > 0 {
                    quietTurn.toggle()
                    let now = Store.ns(Date())
                    do {
                        if quietTurn { try Self.commitQuiet(s, (since: now, stagedBefore: now)) } else { try s.commitStaged() }
                    } catch { failures.withLock { $0.append("commit: \(error)") } }
                }
                return
            }
            for j in 0..<perWriter {
                let text = "writer \(i) note \(j)\n" + String(repeating: "x", count: 100 * (j % 7))
                do {
                    let row = try s.stageItem(NewItem(type: "core.note", fileName: "w\(i)-\(j).md")).rowid
                    let data = Array(text.utf8)
                    // Two writes, so a commit can fall between them.
                    for (offset, part) in [(0, Array(data.prefix(10))), (10, Array(data.dropFirst(10)))] {
                        let k = StagedKey(.item, row)
                        if s.isStaged(k), (try? s.changeStaged(k, .write(offset: Int64(offset), data: part))) != nil { continue }
                        _ = try s.writeUnsettled(rowid: row, offset: Int64(offset), data: part, type: "core.note")
                    }
                    made.withLock { $0.append((row, text)) }
                } catch { failures.withLock { $0.append("writer \(i): \(error)") } }
            }
            writing.subtract(1, ordering: .releasing)
        }
        #expect(failures.withLock { $0 }.isEmpty, "\(failures.withLock { $0 })")
        try s.commitStaged()
        #expect(s.stagingIsEmpty)
        let all = made.withLock { $0 }
        #expect(all.count == writers * perWriter)
        #expect(try s.itemCount() == writers * perWriter)
        for (row, text) in all { #expect(try s.textContent(rowid: row) == Array(text.utf8), "item \(row)") }
    }
}
