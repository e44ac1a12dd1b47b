import Foundation
import GRDB
import MarfaModel

/// Folders (and tags) made through the mount with `mkdir` before their `local_tags` row is written,
/// and folders' permission bits and owners set by `chmod` and `chown` before their `tree_dirs` row
/// is: the request does not wait for the store's writer, which the settler may hold through a
/// commit and whose commits may wait for the disk (a WAL header's sync, pages under writeback).
/// `cp -r` makes a folder before each folder's files; waiting there cost a tenth of its time.
/// `rsync -a` makes each folder 0700 and sets its mode once its files are in: waiting there for
/// the settler's commit of a thousand files stopped the copy for a tenth of a second each time.
///
/// Each is appended to `<store>-folders` at once (a line each, in one `write(2)`), so a killed mount
/// loses none; the next write transaction of the store writes them all (`Store.write`: `flush`),
/// and once it has committed the file holds only the ones still pending, rewritten aside and
/// renamed over. A made folder's line is its tag (`tag\n`); a folder's mode or owner is a tab and
/// a JSON object (`\t{"ino":…,"kind":"mode","mode":…,"path":…}\n`, `"kind":"owner"` with `uid`
/// and `gid`; null: the mount's default), which no tag can be (a tag holds no control character),
/// so an older reader skips it. The last line for a path wins. A line without its newline (torn by
/// a power cut), or not one of these, is skipped. A store opened reads what the file holds as
/// pending.
///
/// Lock order: the store's writer, then `lock` (nothing here takes the writer).
final class PendingFolders: @unchecked Sendable {
    /// A folder's mode or owner as set, with the number the mount gave the folder (its
    /// `tree_dirs` row may not exist yet). Nil values: the default.
    struct Attr: Sendable, Hashable {
        enum Value: Sendable, Hashable {
            case mode(Int64?)
            case owner(uid: Int64?, gid: Int64?)
        }
        enum Kind: String, Sendable { case mode, owner }
        var path: String
        var ino: UInt64
        var value: Value

        var kind: Kind {
            if case .mode = value { return .mode }
            return .owner
        }
        struct Key: Hashable { var kind: Kind; var path: String }
        var key: Key { Key(kind: kind, path: path) }

        var line: String {
            var o: [String: JSONValue] = ["kind": .string(kind.rawValue), "path": .string(path), "ino": .int(Int64(bitPattern: ino))]
            switch value {
            case .mode(let m): o["mode"] = m.map(JSONValue.int) ?? .null
            case .owner(let u, let g): o["uid"] = u.map(JSONValue.int) ?? .null; o["gid"] = g.map(JSONValue.int) ?? .null
            }
            return "\t" + JSONCoding.encode(o) + "\n"
        }

        init(path: String, ino: UInt64, _ value: Value) { self.path = path; self.ino = ino; self.value = value }

        /// The attribute a line after its tab holds; nil if it holds none.
        init?(line: String) {
            guard let o = (try? JSONParser.parse(line))?.objectValue, let kind = o["kind"]?.stringValue.flatMap(Kind.init),
                  let path = o["path"]?.stringValue, case .int(let ino)? = o["ino"] else { return nil }
            func int(_ k: String) -> Int64? { if case .int(let v)? = o[k] { return v }; return nil }
            self.init(path: path, ino: UInt64(bitPattern: ino), kind == .mode ? .mode(int("mode")) : .owner(uid: int("uid"), gid: int("gid")))
        }

        /// Writes it to the folder's row, numbered first (`Store.numberTreeDir`: the row made if
        /// it has none yet).
        func write(_ db: Database) throws {
            try Store.numberTreeDir(db, path, ino)
            switch value {
            case .mode(let m): try db.run("UPDATE tree_dirs SET mode = ? WHERE path = ?", [m, path])
            case .owner(let u, let g): try db.run("UPDATE tree_dirs SET uid = ?, gid = ? WHERE path = ?", [u, g, path])
            }
        }
    }

    var path: String { file.path }
    private let lock = NSLock()
    private var tags: Set<String>
    private var attrs: [Attr.Key: Attr]
    private var file: LineFile

    init(path: String) {
        file = LineFile(path: path)
        (tags, attrs) = Self.read(path)
    }

    deinit { file.close() }

    private func locked<T>(_ body: () throws -> T) rethrows -> T { lock.lock(); defer { lock.unlock() }; return try body() }

    var all: Set<String> { locked { tags } }
    var isEmpty: Bool { locked { tags.isEmpty && attrs.isEmpty } }
    /// The folders' modes or owners waiting for their rows, by path.
    func pendingAttrs(_ kind: Attr.Kind) -> [String: Attr.Value] {
        locked { Dictionary(attrs.values.filter { $0.kind == kind }.map { ($0.path, $0.value) }, uniquingKeysWith: { a, _ in a }) }
    }

    /// Records `tag` as made; it is in the file when this returns.
    func add(_ tag: String) throws {
        try locked {
            if tags.contains(tag) { return }
            try file.append(tag + "\n", what: "folder \(tag)")
            tags.insert(tag)
        }
    }

    /// Records a folder's mode or owner as set; it is in the file when this returns.
    func set(_ a: Attr) throws {
        try locked {
            if attrs[a.key] == a { return }
            try file.append(a.line, what: "the \(a.kind.rawValue) of folder \(a.path)")
            attrs[a.key] = a
        }
    }

    /// Inside a write transaction (`Store.write`): writes every pending tag's row and folder
    /// attribute; once the transaction commits they are no longer pending (an attribute set again
    /// meanwhile stays, with its new value).
    func flush(_ db: Database) throws {
        let (pending, set) = locked { (tags, attrs) }
        if pending.isEmpty && set.isEmpty { return }
        for t in pending { try db.run("INSERT OR IGNORE INTO local_tags(tag) VALUES (?)", [t]) }
        for a in set.values { try a.write(db) }
        db.afterNextTransaction(onCommit: { [self] _ in committed(pending, set) })
    }

    /// `done` and `doneAttrs` are in the store: the file keeps the rest (rewritten aside, renamed
    /// over; on failure it keeps them all, which a later flush writes again to no effect).
    private func committed(_ done: Set<String>, _ doneAttrs: [Attr.Key: Attr]) {
        locked {
            tags.subtract(done)
            for (k, a) in doneAttrs where attrs[k] == a { attrs[k] = nil }
            file.rewrite(tags.sorted().map { $0 + "\n" } + attrs.values.map(\.line))
        }
    }

    /// The tags and attributes a file holds: whole lines that are valid tags, or attributes (the
    /// last for each folder).
    private static func read(_ path: String) -> (Set<String>, [Attr.Key: Attr]) {
        var out = Set<String>(), attrs: [Attr.Key: Attr] = [:]
        for l in LineFile.lines(path) {
            if l.first == UInt8(ascii: "\t") {
                if let a = Attr(line: String(decoding: l.dropFirst(), as: UTF8.self)) { attrs[a.key] = a }
                continue
            }
            let tag = String(decoding: l, as: UTF8.self)
            if Store.isLocalTag(tag) { out.insert(tag) }
        }
        return (out, attrs)
    }
}
