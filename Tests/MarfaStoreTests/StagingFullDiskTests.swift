import Foundation
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
}
