import Foundation
import GRDB
import MarfaModel
import MarfaTestSupport
@testable import MarfaStore
import Testing

/// FS-15, FS-28: the staging journal on a disk that fills up, on a real tmpfs.
@Suite struct StagingFullDiskTests {
    /// A store on a tmpfs of `size`: `body` gets the store and the tmpfs's path; the tmpfs is
    /// undone after.
    static func onSmallDisk(_ size: String, _ body: (Store, String) throws -> Void) throws {
        let tmp = try TempDirectory("marfafs-fulldisk")
        let disk = tmp.path + "/disk"
        try FileManager.default.createDirectory(atPath: disk, withIntermediateDirectories: true)
        let mounted = Shell.run(["mount", "-t", "tmpfs", "-o", "size=\(size)", "tmpfs", disk])
        try #require(mounted.status == 0, "\(mounted.stderr)")
        defer { _ = Shell.run(["umount", "-l", disk]) }
        let s = try Store(path: disk + "/kb.sqlite")
        try s.recoverStaged()
        try body(s, disk)
    }

    /// Fills the disk at `dir` with a file until it refuses a byte more.
    static func fill(_ dir: String) {
        _ = Shell.run(["/bin/sh", "-c", "dd if=/dev/zero of='\(dir)'/filler bs=64k 2>/dev/null; head -c 65536 /dev/zero >> '\(dir)'/filler 2>/dev/null; sync"])
    }

    /// A commit of the quiet files begins the journal's next generation with the files that stay
    /// (a file still being written), written whole. On a disk that fills midway it fails, and the
    /// journal is cut back to where the generation began: a store opened after it (a kill) gives
    /// back the files that stayed whole, not made empty by the half of the new generation that was
    /// written, and the quiet file too.
    @Test func FS15_aCommitThatMeetsAFullDiskLeavesTheStayingFileWhole() throws {
        try Self.onSmallDisk("12m") { s, disk in
            let quiet = try StagingTests.note(s, "quiet.md", "# Quiet\n")
            Thread.sleep(forTimeInterval: 0.02)
            let cut = Store.ns(Date())
            Thread.sleep(forTimeInterval: 0.02)
            // Together larger than the journal is grown ahead of its records (each under what a
            // file may hold in memory): written again, they need room.
            let texts = (0..<3).map { f in (0..<15_000).map { "line \($0) of file \(f), still being written\n" }.joined() }
            let busy = try texts.enumerated().map { try StagingTests.note(s, ".busy\($0.offset).md.Ab12Cd", $0.element) }
            Self.fill(disk)
            #expect(throws: (any Error).self, "the staying file's records do not fit") {
                try StagingTests.commitQuiet(s, (since: cut, stagedBefore: cut - 1_000_000_000))
            }
            #expect(busy.allSatisfy(s.isNewlyStaged) && s.isNewlyStaged(quiet), "all stay staged")
            #expect(Shell.run(["/bin/rm", "-f", disk + "/filler"]).status == 0)
            let after = try Store(path: s.path)
            #expect(try after.recoverStaged() == 4)
            for (k, text) in zip(busy, texts) {
                #expect(try after.textContent(rowid: k.rowid) == Array(text.utf8), "a staying file is whole")
            }
            #expect(try after.textContent(rowid: quiet.rowid) == Array("# Quiet\n".utf8))
        }
    }

    /// FS-28, FS-15: a full disk leaves the staging journal's committed records and the WAL at
    /// their largest, which a store whose data takes much of its disk cannot spare. Once the files
    /// are in the store, their room is given back: the journal holds only what is still staged,
    /// the WAL is cut. What is staged after is still in a generation a kill recovers.
    @Test func FS28_theRoomAFullDiskLeftTakenIsGivenBackOnceTheFilesAreStored() throws {
        // Smaller than the journal's size past which it starts over anyway (8 MiB).
        try Self.onSmallDisk("12m") { s, disk in
            _ = Shell.run(["/bin/sh", "-c", "head -c 4000000 /dev/zero > '\(disk)'/filler"])
            let text = String(repeating: "a line of a note on a disk that fills up\n", count: 3_000)
            var keys: [StagedKey] = [], refused = false
            for i in 0..<400 where !refused {
                do {
                    keys.append(try StagingTests.note(s, "n\(i).md", text))
                    if i % 8 == 7 { try s.commitStaged() }
                } catch { refused = true }
            }
            #expect(refused, "the disk filled")
            #expect(Shell.run(["/bin/rm", "-f", disk + "/filler"]).status == 0)
            try s.commitStaged()
            s.reclaimAfterFullDisk()
            let journal = try StagingTests.recordsEnd(s.path + "-staged")
            #expect(journal < 4096, "the journal holds \(journal) bytes of records, nothing being staged")
            let wal = (try? FileManager.default.attributesOfItem(atPath: s.path + "-wal")[.size] as? Int) ?? 0
            #expect(wal < 1 << 20, "the WAL takes \(wal) bytes")
            let later = try StagingTests.note(s, "later.md", "after the disk had room again\n")
            // A kill: the store opened again recovers the file staged after, and has the others.
            let after = try Store(path: s.path)
            #expect(try after.recoverStaged() == 1)
            #expect(try after.textContent(rowid: later.rowid) == Array("after the disk had room again\n".utf8))
            let whole = try keys.filter { try after.textContent(rowid: $0.rowid) == Array(text.utf8) }.count
            #expect(whole >= keys.count - 1, "\(whole) of \(keys.count) notes whole (the one the disk refused may be cut)")
        }
    }

    /// FS-28, FS-15: a mount killed with more than the journal's 8 MiB staged stores them at the
    /// next start and then cuts the journal (it did not: a journal just recovered was not open, so
    /// its size read as nothing, and its stored records stayed, taking room a full disk needed).
    /// With nothing staged, a full disk's debt is paid by cutting the journal where it is, which
    /// needs no room (writing a new journal beside it did, on a disk with none).
    @Test func FS28_aRecoveredJournalIsCutOnceStoredAndAFullDiskCutsItInPlace() throws {
        try Self.onSmallDisk("24m") { s, disk in
            let text = String(repeating: "a line of a note written before the kill\n", count: 12_000)
            for i in 0..<20 { try StagingTests.note(s, "k\(i).md", text) }
            let records = try StagingTests.recordsEnd(s.path + "-staged")
            #expect(records > 8 << 20)
            // Its records to the last byte (as a full disk leaves it: no zeros grown ahead).
            #expect(truncate(s.path + "-staged", off_t(records)) == 0)
            let after = try Store(path: s.path)
            #expect(try after.recoverStaged() == 20)
            #expect(try StagingTests.recordsEnd(s.path + "-staged") < 4096, "the stored records are dropped")
            // A full disk with nothing staged: the debt is paid with no room at all.
            let more = try StagingTests.note(after, "more.md", text)
            try after.commitStaged()
            #expect(try StagingTests.recordsEnd(s.path + "-staged") > 100_000)
            Self.fill(disk)
            #expect(Shell.run(["/bin/sh", "-c", "echo x >> '\(disk)'/filler"]).status != 0, "the disk is full")
            after.staging.debt.met()
            after.reclaimAfterFullDisk()
            #expect(try StagingTests.recordsEnd(s.path + "-staged") < 4096, "cut in place on a full disk")
            #expect(try after.textContent(rowid: more.rowid) == Array(text.utf8))
        }
    }

    /// FS-28, FS-15: a disk filled by staged files has no room to store them beside their journal
    /// (nor to write the journal again): they are stored in place, a batch that fits at a time,
    /// each batch's records named dead in the store and punched out of the journal, which gives
    /// the next batch its room; the records of files committed before the disk filled are given
    /// back first, with no room at all. A kill midway recovers the files not yet stored, once
    /// each, even where a punch was cut short (the dead records skipped whatever they hold). A
    /// commit of everything staged (an unmount's) is made the same way. At the end the journal's
    /// room is given back, and every file is whole, stored once.
    @Test func FS28_aJournalLargerThanTheRoomLeftIsStoredInPlaceABatchAtATime() throws {
        try Self.onSmallDisk("16m") { s, disk in
            #expect(Shell.run(["/bin/sh", "-c", "head -c 3000000 /dev/zero > '\(disk)'/filler"]).status == 0)
            var notes: [(StagedKey, String)] = []
            for i in 0..<400 {
                let text = String(repeating: "line of note \(i), staged until the disk is full\n", count: 2_000)
                guard let k = try? StagingTests.note(s, "n\(i).md", text) else { break }
                notes.append((k, text))
                // The first ones committed as the disk had room: their records stay in the
                // journal (under its 8 MiB), history to a replay.
                if i < 30 && i % 10 == 9 { try s.commitStaged() }
            }
            #expect(notes.count > 80 && notes.count < 400, "the disk filled after \(notes.count) notes")
            let blocks = { () -> Int in var st = stat(); _ = stat(s.path + "-staged", &st); return Int(st.st_blocks) * 512 }
            // With no room for a batch, the history (the 30 notes committed before) is given back.
            let full = blocks()
            s.reclaimAfterFullDisk()
            #expect(blocks() < full - (2 << 20), "\(full) bytes of journal, then \(blocks())")
            #expect(Shell.run(["/bin/rm", "-f", disk + "/filler"]).status == 0)
            #expect(s.owesRoom)
            let all = { Store.ns(Date()) }
            func storeABatch(_ st: Store) {
                try? StagingTests.commitQuiet(st, (since: all(), stagedBefore: all()))
                st.reclaimAfterFullDisk()
            }
            storeABatch(s)
            let stored = try s.itemCount()
            #expect(stored > 30 && stored < notes.count, "a batch stores part of \(notes.count): \(stored)")
            // The journal's blocks are those of the files still staged: the stored ones' records
            // are punched out, and so is the history before them.
            var st = stat()
            #expect(stat(s.path + "-staged", &st) == 0 && Int(st.st_blocks) * 512 < s.staging.totalBytes + (3 << 19), "\(st.st_blocks * 512) bytes for \(s.staging.totalBytes) staged")
            // A kill, and a punch cut short: part of the first dead range holds bytes (not records).
            let dead = try #require(try s.pool.read { try String.fetchOne($0, sql: "SELECT value FROM meta WHERE key = 'staging_dead'") }.flatMap(Staging.Dead.init(text:)))
            let first = try #require(dead.ranges.first)
            // (Named for this journal: not one written again beside it.)
            try #require(JournalFile.readHeader([UInt8](try #require(FileManager.default.contents(atPath: s.path + "-staged")))[...])?.id == dead.journal)
            #expect(first.count > 1 << 20, "\(dead.ranges)")
            let fd = open(s.path + "-staged", O_WRONLY)
            let junk = [UInt8](repeating: 0xA5, count: 4096)
            #expect(junk.withUnsafeBytes { pwrite(fd, $0.baseAddress!, $0.count, first.lowerBound + 100) } == junk.count)
            close(fd)
            let killed = blocks()
            let after = try Store(path: s.path)
            let recovered = try after.recoverStaged(keepOnFullDisk: true)
            // What the kill left written in a range the store names dead is given back at once
            // (the room the rest needs to be stored in place).
            #expect(blocks() < killed, "\(killed) bytes of journal, then \(blocks())")
            #expect(recovered >= notes.count - stored && recovered <= notes.count - stored + 1, "\(recovered) recovered, \(stored) of \(notes.count) stored")
            // All at once, as at an unmount or a rename: in place too, a batch at a time.
            try after.commitStaged()
            #expect(after.stagedFileCount == 0)
            after.reclaimAfterFullDisk()
            #expect(stat(s.path + "-staged", &st) == 0 && Int(st.st_blocks) * 512 < 2 << 20, "the journal's room is given back: \(Shell.run(["/bin/ls", "-ls", disk]).out)")
            let whole = try notes.filter { try after.textContent(rowid: $0.0.rowid) == Array($0.1.utf8) }.count
            #expect(whole == notes.count)
            // (The note the disk refused has its row too, empty.)
            #expect(try after.itemCount() <= notes.count + 1)
            #expect(try Store(path: s.path).recoverStaged() == 0, "nothing is replayed again")
        }
    }
}
