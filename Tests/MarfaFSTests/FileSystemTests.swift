import Foundation
import Logging
@testable import MarfaFS
import MarfaModel
import MarfaStore
import MarfaTestSupport
import Testing

/// A filesystem core over a fresh store, no kernel.
final class Core {
    let tmp: TempDirectory
    let store: Store
    let fs: FileSystem
    init() throws {
        tmp = try TempDirectory("marfafs-core")
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

    @Test func FS17_refusedXattrChangesNothing() throws {
        let c = try Core()
        try c.write("types/core.note/a.md", "a")
        let f = try c.ino("types/core.note/a.md")
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
