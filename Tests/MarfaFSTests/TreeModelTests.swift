import Foundation
import Logging
@testable import MarfaFS
import MarfaStore
import MarfaTestSupport
import PropertyBased
import Testing

/// The filesystem core against a reference model (FS-31), as mountpoint-s3 tests its core: random
/// sequences of create, write, truncate, rename, unlink, mkdir, rmdir, symlink and reads in the
/// vault's tree run on the core (a real store, no kernel) and on a plain in-memory model of a
/// POSIX directory tree. Every answer — bytes, targets, listings, errno — must agree; a failing
/// sequence is shrunk to a minimal one. The checks the kernel's VFS makes before it calls a
/// filesystem (a name that exists for mkdir, a directory for unlink, a move into itself) are made
/// here as the kernel makes them, so what is compared is what the filesystem decides.
@Suite(.shrinking) struct TreeModelTests {
    /// The paths operations pick from: files of both kinds, folders, names in folders.
    static let paths = ["a.md", "b.md", "c.bin", "d", "d/a.md", "d/e.bin", "d/f", "d/f/g.md", "h", "h/a.md"]

    struct Op: Sendable, CustomStringConvertible {
        enum Kind: Int, CaseIterable { case create, write, truncate, read, rename, unlink, mkdir, rmdir, symlink, readlink, list, settle, remount }
        var kind: Kind, a: String, b: String, n: Int
        var description: String {
            switch kind {
            case .write: "write(\(a), at: \(n % 8), \(1 + n / 8)×\(Self.letter(n)))"
            case .truncate: "truncate(\(a), \(n % 12))"
            case .rename: "rename(\(a), \(b))"
            case .symlink: "symlink(t\(n), \(a))"
            default: "\(kind)(\(a))"
            }
        }
        static func letter(_ n: Int) -> Character { Character(UnicodeScalar(UInt8(ascii: "a") + UInt8(n % 26))) }
        var data: [UInt8] { [UInt8](repeating: UInt8(ascii: "a") + UInt8(n % 26), count: 1 + n / 8) }
    }

    static let ops = zip(Gen<Int>.int(in: 0...(Op.Kind.allCases.count - 1)), Gen<Int>.int(in: 0...(paths.count - 1)),
                         Gen<Int>.int(in: 0...(paths.count - 1)), Gen<Int>.int(in: 0...40))
        .map { k, a, b, n in Op(kind: Op.Kind(rawValue: k)!, a: paths[a], b: paths[b], n: n) }
        .array(of: 1...30)

    @Test func FS31_theCoreAgreesWithAModelOfADisk() async throws {
        await propertyCheck(count: 400, input: Self.ops) { ops in
            let mismatch = try Self.run(ops)
            #expect(mismatch == nil, "\(mismatch ?? "")\nsequence: \(ops)")
        }
    }

    /// Runs `ops` on a fresh core and on the model; the first disagreement, or nil.
    static func run(_ ops: [Op]) throws -> String? {
        let c = try Core()
        var vfs = try CoreVFS(c)
        var model = Model()
        for (i, op) in ops.enumerated() {
            let want = model.apply(op)
            let got = vfs.apply(op)
            if want != got { return "step \(i) \(op): the model says \(want), the core \(got)" }
        }
        let (want, got) = (model.tree(), try vfs.tree())
        return want == got ? nil : "at the end the model has \(want), the core \(got)"
    }
}

/// An operation's answer: what it read (bytes, a target, names), or an errno.
enum Outcome: Equatable, CustomStringConvertible {
    case ok, bytes(String), names([String]), error(Int32)
    var description: String {
        switch self {
        case .ok: "ok"
        case .bytes(let s): "\"\(s)\""
        case .names(let n): "\(n)"
        case .error(let e): String(cString: strerror(e))
        }
    }
}

/// A POSIX directory tree in memory: path → what is there.
struct Model {
    enum Entry: Equatable { case file([UInt8]), dir, link(String) }
    var entries: [String: Entry] = ["": .dir]

    static func parent(_ p: String) -> String { p.lastIndex(of: "/").map { String(p[..<$0]) } ?? "" }
    static func lastName(_ p: String) -> String { p.lastIndex(of: "/").map { String(p[p.index(after: $0)...]) } ?? p }

    /// ENOENT or ENOTDIR when `p`'s parent is not a directory; nil when it is.
    func parentError(_ p: String) -> Int32? {
        var at = ""
        for c in Self.parent(p).split(separator: "/") {
            at = at.isEmpty ? String(c) : at + "/" + c
            switch entries[at] {
            case nil: return ENOENT
            case .dir?: continue
            default: return ENOTDIR
            }
        }
        return nil
    }

    func children(_ d: String) -> [String] {
        entries.keys.filter { !$0.isEmpty && Self.parent($0) == d }.map(Self.lastName).sorted()
    }

    mutating func apply(_ op: TreeModelTests.Op) -> Outcome {
        let (a, b) = (op.a, op.b)
        if op.kind == .settle || op.kind == .remount { return .ok }
        if let e = parentError(a) { return .error(e) }
        let here = entries[a]
        switch op.kind {
        case .create:
            if here != nil { return .error(EEXIST) }
            entries[a] = .file([])
        case .write, .truncate:
            guard case .file(var bytes)? = here else { return here == nil ? .error(ENOENT) : here == .dir ? .error(EISDIR) : .ok }
            if op.kind == .write {
                let at = op.n % 8
                if bytes.count < at + op.data.count { bytes += [UInt8](repeating: 0, count: at + op.data.count - bytes.count) }
                bytes.replaceSubrange(at..<(at + op.data.count), with: op.data)
            } else {
                let size = op.n % 12
                bytes = size < bytes.count ? Array(bytes[..<size]) : bytes + [UInt8](repeating: 0, count: size - bytes.count)
            }
            entries[a] = .file(bytes)
        case .read:
            guard let here else { return .error(ENOENT) }
            switch here { case .file(let b): return .bytes(String(decoding: b, as: UTF8.self)); case .dir: return .error(EISDIR); case .link: return .ok }
        case .readlink:
            guard let here else { return .error(ENOENT) }
            if case .link(let t) = here { return .bytes(t) }
            return .error(EINVAL)
        case .list:
            let d = Self.parent(a)
            return .names(children(d))
        case .settle, .remount:
            return .ok
        case .unlink:
            guard let here else { return .error(ENOENT) }
            if here == .dir { return .error(EISDIR) }
            entries[a] = nil
        case .mkdir:
            if here != nil { return .error(EEXIST) }
            entries[a] = .dir
        case .rmdir:
            guard let here else { return .error(ENOENT) }
            if here != .dir { return .error(ENOTDIR) }
            if !children(a).isEmpty { return .error(ENOTEMPTY) }
            entries[a] = nil
        case .symlink:
            if here != nil { return .error(EEXIST) }
            entries[a] = .link("t\(op.n)")
        case .rename:
            guard let here else { return .error(ENOENT) }
            if let e = parentError(b) { return .error(e) }
            if a == b { return .ok }
            if here == .dir && b.hasPrefix(a + "/") { return .error(EINVAL) }
            if let there = entries[b] {
                if here == .dir && there != .dir { return .error(ENOTDIR) }
                if here != .dir && there == .dir { return .error(EISDIR) }
                if there == .dir && !children(b).isEmpty { return .error(ENOTEMPTY) }
            }
            if here == .dir && a.hasPrefix(b + "/") { return .error(ENOTEMPTY) }
            var moved: [String: Entry] = [:]
            for (p, e) in entries where p == a || p.hasPrefix(a + "/") { moved[b + p.dropFirst(a.count)] = e; entries[p] = nil }
            entries[b] = nil
            entries.merge(moved) { _, new in new }
        }
        return .ok
    }

    /// Every path with what it holds, as text.
    func tree() -> [String: String] {
        var out: [String: String] = [:]
        for (p, e) in entries where !p.isEmpty {
            switch e {
            case .file(let b): out[p] = "file " + String(decoding: b, as: UTF8.self)
            case .dir: out[p] = "dir"
            case .link(let t): out[p] = "link " + t
            }
        }
        return out
    }
}

/// The core driven as the kernel drives it: names looked up one by one from the vault's top, the
/// VFS's own checks made first, then the filesystem's operation.
struct CoreVFS {
    let c: Core
    var top: UInt64

    init(_ c: Core) throws {
        self.c = c
        top = try c.ino(".marfafs/vault")
    }

    /// The inode of `p` (nil: no such name), or the errno of the walk.
    func lookup(_ p: String) throws -> FileAttr? {
        var ino = top
        var attr: FileAttr?
        for comp in p.split(separator: "/") {
            if let a = attr, a.kind != .directory { throw FSError(.notDirectory, p) }
            do { attr = try c.fs.lookup(parent: ino, name: String(comp)) } catch let e as FSError where e.code == .notFound {
                return nil
            }
            ino = attr!.ino
        }
        return attr
    }

    /// The directory `p` is in, and its last name; throws ENOENT or ENOTDIR as a walk does.
    func parent(_ p: String) throws -> (UInt64, String) {
        let dir = Model.parent(p)
        let name = Model.lastName(p)
        if dir.isEmpty { return (top, name) }
        guard let a = try lookup(dir) else { throw FSError(.notFound, dir) }
        guard a.kind == .directory else { throw FSError(.notDirectory, dir) }
        return (a.ino, name)
    }

    mutating func apply(_ op: TreeModelTests.Op) -> Outcome {
        do {
            switch op.kind {
            case .settle: try c.fs.locked { try c.fs.settleNow() }
            case .remount: try c.remount(); top = try c.ino(".marfafs/vault")
            default: return try perform(op)
            }
            return .ok
        } catch let e as FSError { return .error(e.errno) } catch { return .error(EIO) }
    }

    func perform(_ op: TreeModelTests.Op) throws -> Outcome {
        let (dir, name) = try parent(op.a)
        let here = try lookup(op.a)
        switch op.kind {
        case .create:
            if here != nil { return .error(EEXIST) }
            _ = try c.fs.create(parent: dir, name: name)
        case .write, .truncate:
            guard let here else { return .error(ENOENT) }
            if here.kind == .directory { return .error(EISDIR) }
            if here.kind == .symlink { return .ok }   // the kernel follows it: not this test's business
            if op.kind == .write { _ = try c.fs.write(here.ino, offset: Int64(op.n % 8), data: op.data) } else { _ = try c.fs.setattr(here.ino, size: Int64(op.n % 12)) }
        case .read:
            guard let here else { return .error(ENOENT) }
            if here.kind == .directory { return .error(EISDIR) }
            if here.kind == .symlink { return .ok }
            return .bytes(String(decoding: try c.fs.read(here.ino, offset: 0, size: 1 << 16), as: UTF8.self))
        case .readlink:
            guard let here else { return .error(ENOENT) }
            guard here.kind == .symlink else { return .error(EINVAL) }
            return .bytes(try c.fs.readlink(here.ino))
        case .list:
            return .names(try c.fs.readdir(dir).map(\.name).filter { $0 != "." && $0 != ".." }.sorted())
        case .settle, .remount:
            return .ok
        case .unlink:
            guard let here else { return .error(ENOENT) }
            if here.kind == .directory { return .error(EISDIR) }
            try c.fs.unlink(parent: dir, name: name)
        case .mkdir:
            if here != nil { return .error(EEXIST) }
            _ = try c.fs.mkdir(parent: dir, name: name)
        case .rmdir:
            guard let here else { return .error(ENOENT) }
            if here.kind != .directory { return .error(ENOTDIR) }
            try c.fs.rmdir(parent: dir, name: name)
        case .symlink:
            if here != nil { return .error(EEXIST) }
            _ = try c.fs.symlink(target: "t\(op.n)", parent: dir, name: name)
        case .rename:
            guard let here else { return .error(ENOENT) }
            let (newDir, newName) = try parent(op.b)
            let there = try lookup(op.b)
            if there?.ino == here.ino { return .ok }
            if here.kind == .directory && op.b.hasPrefix(op.a + "/") { return .error(EINVAL) }
            if let there {
                if here.kind == .directory && there.kind != .directory { return .error(ENOTDIR) }
                if here.kind != .directory && there.kind == .directory { return .error(EISDIR) }
            }
            if here.kind == .directory && op.a.hasPrefix(op.b + "/") { return .error(ENOTEMPTY) }
            try c.fs.rename(parent: dir, name: name, newParent: newDir, newName: newName)
        }
        return .ok
    }

    /// Every path under the vault's top with what it holds, as text.
    func tree() throws -> [String: String] {
        var out: [String: String] = [:]
        func walk(_ ino: UInt64, _ path: String) throws {
            for e in try c.fs.readdir(ino) where e.name != "." && e.name != ".." {
                let p = path.isEmpty ? e.name : path + "/" + e.name
                switch e.attr.kind {
                case .directory: out[p] = "dir"; try walk(e.attr.ino, p)
                case .symlink: out[p] = "link " + (try c.fs.readlink(e.attr.ino))
                case .file: out[p] = "file " + String(decoding: try c.fs.read(e.attr.ino, offset: 0, size: 1 << 16), as: UTF8.self)
                }
            }
        }
        try walk(top, "")
        return out
    }
}

/// FS-26 under random changes: the link index is kept current in place — a note's own links
/// resolved again when its text or place changes, and in the notes that link to a name only
/// the links naming it, when a file of that name comes, goes or moves. After any sequence of
/// writes, renames, moves and removals in the vault's tree, what every link resolves to (and
/// which resolve to nothing) is what an index built afresh from the same notes says.
@Suite(.shrinking) struct LinkIndexModelTests {
    static let paths = ["a.md", "b.md", "c.md", "d/a.md", "d/b.md", "d/f/a.md", "h/a.md", "h/c.md"]
    static let links = ["[[a]]", "[[b]]", "[[c]]", "[[d/a]]", "[[f/a]]", "[[A]]", "[x](a.md)", "[y](../b.md)", "[z](./f/a.md)", "[[/h/c]]", "[[ c ]]"]

    struct Op: Sendable, CustomStringConvertible {
        enum Kind: Int, CaseIterable { case write, rename, unlink }
        var kind: Kind, a: Int, b: Int, text: [Int]
        var description: String {
            switch kind {
            case .write: "write(\(paths[a]), \(text.map { links[$0] }.joined(separator: " ")))"
            case .rename: "rename(\(paths[a]), \(paths[b]))"
            case .unlink: "unlink(\(paths[a]))"
            }
        }
    }

    static let ops = zip(Gen<Int>.int(in: 0...(Op.Kind.allCases.count - 1)), Gen<Int>.int(in: 0...(paths.count - 1)),
                         Gen<Int>.int(in: 0...(paths.count - 1)), Gen<Int>.int(in: 0...(links.count - 1)).array(of: 0...3))
        .map { k, a, b, t in Op(kind: Op.Kind(rawValue: k)!, a: a, b: b, text: t) }
        .array(of: 1...24)

    @Test func FS26_theLiveLinkIndexAgreesWithOneBuiltAfresh() async throws {
        await propertyCheck(count: 300, input: Self.ops) { ops in
            let mismatch = try Self.run(ops)
            #expect(mismatch == nil, "\(mismatch ?? "")\nsequence: \(ops)")
        }
    }

    /// What each link resolves to, by source: (target, edge type) pairs, and the links that name
    /// nothing.
    struct Resolution: Equatable, CustomStringConvertible {
        var edges: [Int64: Set<String>] = [:]
        var missing: [Int64: [String]] = [:]
        init(_ v: VaultIndex) {
            for (s, out) in v.derivedOut { edges[s] = Set(out.keys.map { "\($0.target)/\($0.edgeType)" }) }
            missing = v.unresolved
        }
        var description: String { "edges \(edges.sorted { $0.key < $1.key }), missing \(missing.sorted { $0.key < $1.key })" }
    }

    static func run(_ ops: [Op]) throws -> String? {
        let c = try Core()
        let vfs = try CoreVFS(c)
        for (i, op) in ops.enumerated() {
            let a = paths[op.a]
            switch op.kind {
            case .write:
                // Its folders first, each made if missing.
                var dir = ""
                for part in Model.parent(a).split(separator: "/") {
                    dir = dir.isEmpty ? String(part) : dir + "/" + part
                    if try vfs.lookup(dir) == nil { let (p, n) = try vfs.parent(dir); _ = try c.fs.mkdir(parent: p, name: n) }
                }
                let text = op.text.map { links[$0] }.joined(separator: " ") + "\n"
                let (p, n) = try vfs.parent(a)
                let f = try vfs.lookup(a)?.ino ?? c.fs.create(parent: p, name: n).ino
                _ = try c.fs.setattr(f, size: 0)
                _ = try c.fs.write(f, offset: 0, data: Array(text.utf8))
            case .rename:
                let b = paths[op.b], into = Model.parent(b)
                guard a != b, try vfs.lookup(a) != nil, try into.isEmpty || vfs.lookup(into) != nil else { continue }
                let (p, n) = try vfs.parent(a), (q, m) = try vfs.parent(b)
                try c.fs.rename(parent: p, name: n, newParent: q, newName: m)
            case .unlink:
                guard try vfs.lookup(a) != nil else { continue }
                let (p, n) = try vfs.parent(a)
                try c.fs.unlink(parent: p, name: n)
            }
            // Settled, so the text's links are read (a staged file has none yet).
            try c.fs.locked { try c.fs.settleNow() }
            // The links are resolved on first use: the first half of the steps change a tree whose
            // links were never resolved, and the first resolution must see every note as it is.
            if i < ops.count / 2 { continue }
            let live = try c.fs.locked { try c.fs.ensureLinks(); return Resolution(c.fs.catalog.vault!) }
            var fresh = c.fs.catalog
            fresh.vault = nil
            fresh.buildVault()
            fresh.loadLinks(try c.store.allLinks())
            _ = fresh.resolveAllLinks()
            let built = Resolution(fresh.vault!)
            if live != built { return "after step \(i) \(op): the live index has \(live), one built afresh \(built)" }
        }
        return nil
    }
}
