import Foundation
import Logging
@testable import MarfaFS
import MarfaLayout
import MarfaModel
import MarfaStore
import MarfaTestSupport
import Testing

/// A filesystem core over a fresh store, no kernel.
final class Core {
    let tmp: TempDirectory
    private(set) var store: Store
    private(set) var fs: FileSystem
    init() throws {
        tmp = try TempDirectory("marfafs-core")
        store = try Store(path: tmp.path + "/s.sqlite")
        fs = try FileSystem(store: store, logger: Logger(label: "test"))
    }

    /// An unmount and a mount of the same store: what was written settles, a new core starts.
    func remount() throws {
        fs.stopSettling()
        store = try Store(path: tmp.path + "/s.sqlite")
        fs = try FileSystem(store: store, logger: Logger(label: "test"))
    }

    func ino(_ path: String) throws -> UInt64 {
        var ino: UInt64 = 1
        for c in path.split(separator: "/") { ino = try fs.lookup(parent: ino, name: String(c)).ino }
        return ino
    }
    func names(_ path: String) throws -> [String] { try fs.readdir(try ino(path)).map(\.name) }
    func write(_ path: String, _ text: String) throws {
        let parts = path.split(separator: "/")
        let parent = try ino(parts.dropLast().joined(separator: "/"))
        let name = String(parts.last!)
        let f = try (try? fs.lookup(parent: parent, name: name).ino) ?? fs.create(parent: parent, name: name).ino
        _ = try fs.setattr(f, size: 0)
        _ = try fs.write(f, offset: 0, data: Array(text.utf8))
    }
    func read(_ path: String) throws -> String {
        String(decoding: try fs.read(try ino(path), offset: 0, size: 1 << 20), as: UTF8.self)
    }
}

@Suite struct FileSystemTests {
    @Test func errnoTableNeverAnswersENOSYS() {
        for code in FSError.Code.allCases { #expect(FSError.errno(code) != ENOSYS && FSError.errno(code) > 0) }
        #expect(FSError.errno(.notFound) == ENOENT)
        #expect(FSError.errno(.readOnly) == EROFS)
        #expect(FSError.errno(.crossView) == EXDEV)
        #expect(FSError.errno(.noData) == ENODATA)
        #expect(FSError.from(StoreError.notEmpty("t")).errno == ENOTEMPTY)
        #expect(FSError.from(NSError(domain: "x", code: 1)).errno == EIO)
    }

    @Test func FS13_renameOverKeepsTheTargetAtCoreLevel() throws {
        let c = try Core()
        try c.write("types/core.note/n.md", "old")
        let id = try c.fs.getxattr(try c.ino("types/core.note/n.md"), name: "user.marfa.id")
        try c.write("types/core.note/n.md.tmp", "new")
        let dir = try c.ino("types/core.note")
        let tmpIno = try c.ino("types/core.note/n.md.tmp")
        try c.fs.rename(parent: dir, name: "n.md.tmp", newParent: dir, newName: "n.md")
        #expect(try c.names("types/core.note") == ["n.md"])
        #expect(try c.read("types/core.note/n.md") == "new")
        #expect(try c.fs.getxattr(try c.ino("types/core.note/n.md"), name: "user.marfa.id") == id)
        // The kernel may still use the absorbed inode: it reaches the target.
        #expect(String(decoding: try c.fs.read(tmpIno, offset: 0, size: 10), as: UTF8.self) == "new")
    }

    @Test func FS14_writtenFilesQueueOnlyOnceTheySettle() throws {
        let c = try Core()
        try c.write("types/core.note/a.md", "---\ntitle: Alpha\n---\nbody")
        #expect(try c.store.mutations().isEmpty, "nothing queued while the file is being written")
        #expect(c.store.stagedFileCount == 1, "a new file is staged")
        #expect(try !c.store.hasUnsettled())
        // A temporary file renamed over the note before it settles never reaches the queue.
        try c.write("types/core.note/a.md.tmp", "second")
        let dir = try c.ino("types/core.note")
        try c.fs.rename(parent: dir, name: "a.md.tmp", newParent: dir, newName: "a.md")
        try c.fs.settleNow()
        let queued = try c.store.mutations()
        #expect(queued.map(\.kind) == [.create])
        #expect(queued.first?.payload["properties"]?.objectValue?["body"]?.stringValue == "second")
        #expect(try !c.store.hasUnsettled())
        // Settling keeps the time the kernel saw at the write.
        let f = try c.ino("types/core.note/a.md")
        let before = try c.fs.getattr(f).mtimeNs
        // (The note has the renamed file's inode, FS-31: it is found by its id.)
        let id = String(decoding: try c.fs.getxattr(f, name: "user.marfa.id"), as: UTF8.self)
        #expect(try c.store.item(id: id)?.mtimeNs == before)
    }

    /// A settled file's rename settles that file (its update goes before the rename), not every
    /// file written before it: a new file being written meanwhile stays staged, nothing of it
    /// queued (a rename in the middle of `rsync -a` once settled the whole copy under the lock).
    @Test func FS14_aRenameSettlesTheFileItMovesAlone() throws {
        let c = try Core()
        try c.write("types/core.note/a.md", "# A\n")
        try c.fs.settleNow()
        try c.write("types/core.note/a.md", "# A again\n")
        try c.write("types/core.note/b.md", "# B\n")
        #expect(c.store.stagedFileCount == 1, "b staged")
        #expect(try c.store.hasUnsettled(), "a's new bytes unsettled")
        let dir = try c.ino("types/core.note")
        try c.fs.rename(parent: dir, name: "a.md", newParent: dir, newName: "c.md")
        #expect(c.store.stagedFileCount == 1, "b is still being written")
        #expect(try !c.store.hasUnsettled(), "a settled before its rename")
        let queued = try c.store.mutations()
        let a = String(decoding: try c.fs.getxattr(try c.ino("types/core.note/c.md"), name: "user.marfa.id"), as: UTF8.self)
        #expect(Set(queued.map(\.itemID)) == [a], "nothing of b: \(queued.map(\.kind))")
        #expect(queued.first?.payload["properties"]?.objectValue?["body"]?.stringValue == "# A again\n")
        try c.fs.settleNow()
        #expect(try c.names("types/core.note") == ["b.md", "c.md"])
        #expect(try c.read("types/core.note/c.md") == "# A again\n")
    }

    @Test func FS9_sequentialWritesOfALargeFileAreExact() throws {
        let c = try Core()
        let f = try c.fs.create(parent: try c.ino("types/core.note"), name: "big.md").ino
        var expected = [UInt8]()
        for i in 0..<48 {
            let chunk = [UInt8](repeating: UInt8(ascii: "a") + UInt8(i % 26), count: 64 * 1024 + i)
            _ = try c.fs.write(f, offset: Int64(expected.count), data: chunk)
            expected += chunk
        }
        _ = try c.fs.setattr(f, size: 2_000_000)
        expected.removeSubrange(2_000_000...)
        _ = try c.fs.write(f, offset: 2_500_000, data: Array("end".utf8))
        expected += [UInt8](repeating: 0, count: 500_000) + Array("end".utf8)
        #expect(try c.fs.getattr(f).size == Int64(expected.count))
        #expect(try c.fs.read(f, offset: 0, size: expected.count) == expected)
        try c.fs.settleNow()
        #expect(try c.fs.read(f, offset: 1_999_990, size: 20) == Array(expected[1_999_990..<2_000_010]))
        #expect(try c.store.textContent(rowid: Int64(f - 16)) == expected)
        #expect(throws: FSError.self) { _ = try c.fs.write(f, offset: Int64(Store.maxTextBytes) - 1, data: [1, 2]) }
    }

    @Test func FS17_refusedXattrChangesNothing() throws {
        let c = try Core()
        try c.write("types/core.note/a.md", "a")
        let f = try c.ino("types/core.note/a.md")
        try c.fs.settleNow()
        let before = try c.store.mutations().count
        for (n, v) in [("user.marfa.tier", "gold"), ("user.marfa.tags", "ok,bad\u{7}"), ("user.marfa.state", "gone")] {
            #expect(throws: FSError.self) { try c.fs.setxattr(f, name: n, value: Array(v.utf8)) }
        }
        #expect(try c.store.mutations().count == before)
        #expect(try c.fs.getxattr(f, name: "user.marfa.tier") == Array("library".utf8))
        #expect(throws: FSError.self) { _ = try c.fs.getxattr(f, name: "security.selinux") }
    }

    /// Random operations on notes, compared with a model of the tree: names → contents per view.
    @Test(arguments: [1, 2, 3, 4, 5]) func randomOperationsMatchAModel(seed: UInt64) throws {
        let c = try Core()
        var rng = SplitMix(seed: seed)
        var active: [String: String] = [:], trashed: [String: String] = [:]
        let pool = ["a.md", "b.md", "c d.md", "é.md", "x.txt", "long name.md"]
        let types = try c.ino("types/core.note"), trash = try c.ino("trash/core.note")
        for step in 0..<300 {
            let name = pool[Int(rng.next() % UInt64(pool.count))]
            let other = pool[Int(rng.next() % UInt64(pool.count))]
            switch rng.next() % 6 {
            case 0, 1:
                if trashed[name] != nil && active[name] == nil { continue }   // a trashed twin would take a suffix
                let text = "step \(step) " + String(repeating: "z", count: Int(rng.next() % 50))
                try c.write("types/core.note/\(name)", text); active[name] = text
            case 2:
                guard active[name] != nil else { continue }
                if rng.next() % 2 == 0 {
                    let f = try c.ino("types/core.note/\(name)")
                    let off = Int64(rng.next() % 20)
                    _ = try c.fs.write(f, offset: off, data: Array("XY".utf8))
                    var b = Array(active[name]!.utf8)
                    if b.count < Int(off) + 2 { b += Array(repeating: 0, count: Int(off) + 2 - b.count) }
                    b.replaceSubrange(Int(off)..<Int(off) + 2, with: Array("XY".utf8))
                    active[name] = String(decoding: b, as: UTF8.self)
                }
            case 3:
                guard let text = active[name], name != other, trashed[other] == nil else { continue }
                try c.fs.rename(parent: types, name: name, newParent: types, newName: other)
                active[name] = nil; active[other] = text
            case 4:
                guard let text = active[name], trashed[name] == nil else { continue }
                try c.fs.unlink(parent: types, name: name)
                active[name] = nil; trashed[name] = text
            default:
                guard let text = trashed[name], active[name] == nil else { continue }
                try c.fs.rename(parent: trash, name: name, newParent: types, newName: name)
                trashed[name] = nil; active[name] = text
            }
            #expect(try c.names("types/core.note") == active.keys.sorted(), "step \(step)")
        }
        for (n, t) in active { #expect(try c.read("types/core.note/\(n)") == t) }
        #expect(Set(try c.names("trash/core.note")).isSuperset(of: Set(trashed.keys)))
        for (n, t) in trashed { #expect(try c.read("trash/core.note/\(n)") == t) }
    }
}

struct SplitMix {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9e3779b97f4a7c15
        var z = state
        z = (z ^ (z >> 30)) &* 0xbf58476d1ce4e5b9
        z = (z ^ (z >> 27)) &* 0x94d049bb133111eb
        return z ^ (z >> 31)
    }
}

/// FS-7: a name table kept up one claim at a time names exactly what resolving the whole
/// directory names, whatever order claims arrive, change and leave in.
@Suite struct NameTableTests {
    @Test(arguments: [1, 2, 3, 4]) func FS7_incrementalNamesMatchAWholeDirectoryResolve(seed: UInt64) {
        var rng = SplitMix(seed: seed)
        let table = NameTable()
        var claims: [Int64: NameClaim] = [:]
        let stems = ["a", "b", "new-1", "note", "x", "y", "z", "w"]
        for step in 0..<400 {
            let key = Int64(rng.next() % 40)
            let namesBefore = Set(table.keyOf.keys)
            var changed: [String]
            if rng.next() % 4 == 0 {
                changed = table.remove(key); claims[key] = nil
            } else {
                // Times mostly increase (new files), sometimes not (a sync brings an older item).
                let t = rng.next() % 5 == 0 ? Int(rng.next() % 400) : step
                let c = NameClaim(key: key, stem: stems[Int(rng.next() % 8)], ext: ".md",
                                  createdAt: String(format: "2026-11-21T00:00:%03d", t), id: String(format: "%08x", rng.next() % 0xffff_ffff))
                changed = table.upsert(c); claims[key] = c
            }
            let want = Names.resolve(claims: Array(claims.values))
            #expect(table.nameOf == want, "step \(step)")
            #expect(Set(table.keyOf.keys) == Set(want.values), "step \(step)")
            // What the kernel is told to forget covers every name that came or went.
            #expect(namesBefore.symmetricDifference(table.keyOf.keys).isSubset(of: changed), "step \(step)")
        }
    }
}

extension FileSystemTests {
    /// FS-31: a folder of the tree that holds files only through their `folder:` tags (an import,
    /// a remote's files) stays when its last file is removed or moved out, as a disk's folder
    /// does: `rm -r`'s final `rmdir` finds it (it failed with ENOENT, and `rm` exited 1), and a
    /// shell inside it keeps its working directory; so does a folder its last sub-folder leaves.
    /// `rmdir` then removes them.
    @Test func FS31_aFolderStaysWhenItsLastFileGoesUntilItIsRemoved() throws {
        let c = try Core()
        _ = try c.store.createItem(NewItem(type: "core.note", fileName: "n.md", content: Array("n\n".utf8), tags: ["folder:a/x"]))
        _ = try c.store.createItem(NewItem(type: "core.note", fileName: "m.md", content: Array("m\n".utf8), tags: ["folder:a/y"]))
        try c.remount()
        let x = try c.ino(".marfafs/vault/a/x"), y = try c.ino(".marfafs/vault/a/y"), top = try c.ino(".marfafs/vault")
        try c.fs.unlink(parent: x, name: "n.md")
        try c.fs.rename(parent: y, name: "m.md", newParent: top, newName: "m.md")
        try c.fs.locked { try c.fs.settleNow() }
        #expect(try c.names(".marfafs/vault/a").sorted() == ["x", "y"])
        #expect(try c.names(".marfafs/vault/a/x").isEmpty && c.names(".marfafs/vault/a/y").isEmpty)
        let a = try c.ino(".marfafs/vault/a")
        try c.fs.rmdir(parent: a, name: "x")
        try c.fs.rmdir(parent: a, name: "y")
        #expect(try c.names(".marfafs/vault/a").isEmpty, "a folder left by its sub-folders stays too")
        try c.fs.rmdir(parent: top, name: "a")
        #expect(try c.names(".marfafs/vault") == ["m.md"])
        try c.remount()
        #expect(try c.names(".marfafs/vault") == ["m.md"])
    }
}

/// What a removal settles first (FS-14, FS-15).
@Suite struct RemovalTests {
    /// A removal settles the files written before it, so that its mutation follows theirs; with
    /// none written since everything last settled it does not write the store at all: the move to
    /// the trash is recorded beside it (`Store.trashLater`) and written by the next write. Each
    /// `unlink` of `rm -rf` once looked for unsettled files, wrote the folders' times and the
    /// trash, a transaction each.
    @Test func FS14_aRemovalSettlesOnlyWhenFilesWereWrittenBeforeIt() throws {
        let c = try Core()
        _ = try c.fs.mkdir(parent: try c.ino(".marfafs/vault"), name: "d")
        for i in 0..<4 { try c.write(".marfafs/vault/d/n\(i).md", "# N\(i)\nsee [[n\((i + 1) % 4)]]\n") }
        try c.fs.locked { try c.fs.settleNow() }
        // Links in use: a name that goes has the links naming it resolved again, by the settler.
        #expect(try !c.names("backlinks/core.note").isEmpty)
        let d = try c.ino(".marfafs/vault/d")

        try c.fs.unlink(parent: d, name: "n3.md")
        let before = c.store.commitCount
        try c.fs.unlink(parent: d, name: "n1.md")
        #expect(c.store.commitCount == before, "the trash is recorded, not written")
        #expect(try c.names(".marfafs/vault/d") == ["n0.md", "n2.md"])
        #expect(try c.names("trash/core.note").contains { $0.hasPrefix("n1") })
        // The next write writes it; the settler's pass writes it if nothing else does.
        #expect(c.store.hasPending)
        try c.store.flushPending()
        #expect(c.store.commitCount == before + 1 && !c.store.hasPending)
        // Read as another store would, with nothing pending beside it.
        // Read without the removals file: the row itself is trashed.
        try? FileManager.default.removeItem(atPath: c.store.path + "-removals")
        let other = try Store(path: c.store.path)
        #expect(try other.allSummaries().first { $0.stem == "n1" }?.state == .trashed)

        // A file written, then another removed: the written one settles first.
        try c.write(".marfafs/vault/d/n2.md", "# N2 again\n")
        let n2 = try c.ino(".marfafs/vault/d/n2.md")
        let row = Int64(n2 - FileSystem.itemInoBase)
        #expect(try c.store.item(rowid: row)?.unsettled == true)
        try c.fs.unlink(parent: d, name: "n0.md")
        #expect(try c.store.item(rowid: row)?.unsettled == false)
        #expect(try c.store.textContent(rowid: row) == Array("# N2 again\n".utf8))
    }

    /// A note moved to the trash by `unlink` keeps its links in the index (its bytes did not
    /// change; none are read for it): its edges go while it is in the trash and come back when it
    /// is restored, with no edit of its text, as in an index built afresh.
    @Test func FS4_FS26_aNoteRemovedAndRestoredKeepsItsLinks() throws {
        let c = try Core()
        _ = try c.fs.mkdir(parent: try c.ino(".marfafs/vault"), name: "d")
        try c.write(".marfafs/vault/d/hub.md", "# Hub\n")
        try c.write(".marfafs/vault/d/n1.md", "# N1\nsee [[hub]]\n")
        try c.fs.locked { try c.fs.settleNow() }
        #expect(try c.names("backlinks/core.note/hub.md/references") == ["n1.md"])
        let d = try c.ino(".marfafs/vault/d")
        try c.fs.unlink(parent: d, name: "n1.md")
        #expect(try c.names("backlinks/core.note").contains("hub.md") == false, "a note in the trash links to nothing")
        #expect(try c.names(".marfafs/vault/d") == ["hub.md"] && c.names("trash/core.note") == ["n1.md"])
        try c.fs.rename(parent: try c.ino("trash/core.note"), name: "n1.md", newParent: try c.ino("types/core.note"), newName: "n1.md")
        try c.fs.locked { try c.fs.settleNow() }
        #expect(try c.names("backlinks/core.note/hub.md/references") == ["n1.md"], "restored, it links again")
        #expect(try c.names(".marfafs/vault/d") == ["hub.md", "n1.md"])
    }

    /// A file still staged when it is removed (no row yet: its removal reaches the store before
    /// any commit of it) goes to the trash and stays there once committed. Recorded for later
    /// like a stored file's, the commit's own transaction wrote the removals first, found no row,
    /// dropped it, then wrote the row active: the file came back (stress-ng's open stressor).
    @Test func FS4_FS14_aFileRemovedBeforeItsRowExistsStaysRemoved() throws {
        let c = try Core()
        _ = try c.fs.mkdir(parent: try c.ino(".marfafs/vault"), name: "d")
        try c.write(".marfafs/vault/d/kept.md", "kept\n")
        try c.fs.locked { try c.fs.settleNow() }
        try c.write(".marfafs/vault/d/gone.md", "gone\n")
        let gone = Int64(try c.ino(".marfafs/vault/d/gone.md") - FileSystem.itemInoBase)
        // As if the settler had just passed: nothing the removal's own settling commits.
        c.fs.settler.settledAll(roomOwed: false)
        #expect(c.store.isNewlyStaged(StagedKey(.item, gone)))
        try c.fs.unlink(parent: try c.ino(".marfafs/vault/d"), name: "gone.md")
        try c.store.commitStaged()
        try c.store.flushPending()
        #expect(try c.names(".marfafs/vault/d") == ["kept.md"])
        #expect(try c.names("trash/core.note").contains("gone.md"))
        // Read without the removals file: the row itself is trashed.
        try? FileManager.default.removeItem(atPath: c.store.path + "-removals")
        #expect(try Store(path: c.store.path).summary(rowid: gone)?.state == .trashed)
        try c.remount()
        #expect(try c.names(".marfafs/vault/d") == ["kept.md"])
    }

    /// A folder removed while a program still holds it (its number retired before the kernel
    /// heard: another device's `rm -rf` replayed after the listing began): its listing and its
    /// attributes are ENOENT, which every watcher takes for gone. ESTALE crashed chokidar
    /// (`opendir`'s fstat, then the listing).
    @Test func FS31_theListingOfARemovedFolderIsENOENTAsANativeOnes() throws {
        let c = try Core()
        _ = try c.fs.mkdir(parent: try c.ino(".marfafs/vault"), name: "gone")
        let d = try c.ino(".marfafs/vault/gone")
        #expect(try c.fs.readdir(d).isEmpty)
        try c.fs.rmdir(parent: try c.ino(".marfafs/vault"), name: "gone")
        #expect { try c.fs.readdir(d) } throws: { ($0 as? FSError)?.code == .notFound }
        #expect { try c.fs.getattr(d) } throws: { ($0 as? FSError)?.code == .notFound }
    }

    /// `rmdir` of a folder its files have left (`rm -rf`) writes nothing either: the folder's row,
    /// number, mode and times go beside the store (`Store.removeLocalTagLater`, `dropTreeDir`), with
    /// the files' removals, by the next write; a kill before it brings none of them back, and a
    /// folder made again at the path is a new folder (its own number, the default mode). Each
    /// `rmdir` of `rm -rf` wrote the removals of its folder's files: a third of its time.
    @Test func FS4_FS31_rmdirOfAnEmptiedFolderWritesNothingAndStaysRemoved() throws {
        let c = try Core()
        _ = try c.fs.mkdir(parent: try c.ino(".marfafs/vault"), name: "d")
        _ = try c.fs.mkdir(parent: try c.ino(".marfafs/vault/d"), name: "e")
        let e = try c.ino(".marfafs/vault/d/e")
        _ = try c.fs.setattr(e, FileSystem.AttrChange(mode: 0o700))
        try c.write(".marfafs/vault/d/e/n.md", "# N\n")
        try c.fs.locked { try c.fs.settleNow() }
        #expect(try c.store.treeDirModes()["d/e"] == 0o700)
        let vault = try c.ino(".marfafs/vault"), d = try c.ino(".marfafs/vault/d")

        let before = c.store.commitCount
        try c.fs.unlink(parent: e, name: "n.md")
        try c.fs.rmdir(parent: d, name: "e")
        try c.fs.rmdir(parent: vault, name: "d")
        #expect(c.store.commitCount == before, "the folders' removals are recorded, not written")
        #expect(try !c.names(".marfafs/vault").contains("d"))
        #expect(try !c.store.localTags().contains { $0.hasPrefix("folder:d") })
        #expect(try c.store.treeDirModes()["d/e"] == nil)
        #expect(try !c.store.treeDirInodes().contains { $0.path.hasPrefix("d") })

        // Killed before anything wrote them: still gone after the remount.
        try c.remount()
        #expect(try !c.names(".marfafs/vault").contains("d"))
        #expect(try c.names("trash/core.note") == ["n.md"])
        // Made again: a new folder, not the old one's number or mode.
        _ = try c.fs.mkdir(parent: try c.ino(".marfafs/vault"), name: "d")
        _ = try c.fs.mkdir(parent: try c.ino(".marfafs/vault/d"), name: "e")
        let again = try c.ino(".marfafs/vault/d/e")
        #expect(again != e)
        #expect(try c.fs.getattr(again).permissions == 0o755)
        // Its own mode, written after the old row is deleted (in the same transaction).
        _ = try c.fs.setattr(again, FileSystem.AttrChange(mode: 0o750))
        try c.fs.locked { try c.fs.settleNow() }
        #expect(try c.store.localTags().contains("folder:d/e"))
        #expect(try c.store.treeDirModes()["d/e"] == 0o750)
        try c.remount()
        #expect(try c.ino(".marfafs/vault/d/e") == again)
        #expect(try c.fs.getattr(again).permissions == 0o750)
        // Removed and made again before anything wrote the removal: the old row goes first, the
        // new folder's number and mode are written after it.
        try c.fs.rmdir(parent: try c.ino(".marfafs/vault/d"), name: "e")
        _ = try c.fs.mkdir(parent: try c.ino(".marfafs/vault/d"), name: "e")
        let third = try c.ino(".marfafs/vault/d/e")
        _ = try c.fs.setattr(third, FileSystem.AttrChange(mode: 0o711))
        #expect(third != again)
        try c.fs.locked { try c.fs.settleNow() }
        #expect(try c.store.treeDirModes()["d/e"] == 0o711)
        try c.remount()
        #expect(try c.ino(".marfafs/vault/d/e") == third)
        #expect(try c.fs.getattr(third).permissions == 0o711)
    }
}
