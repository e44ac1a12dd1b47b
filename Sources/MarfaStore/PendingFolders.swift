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
/// so an older reader skips it. A folder or tag removed with `rmdir` is a tab and
/// `{"kind":"gone","tag":…}`, a removed folder's number and times `{"kind":"dropped","path":…}`:
/// their rows are deleted by the same flush, after the removals of its files and before anything
/// made again (`rm -rf` removes each folder once its files are gone: writing them there cost a
/// third of its time). The last line for a path or tag wins. A line without its newline (torn by
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

        /// The attribute a line's JSON object (after its tab) holds; nil if it holds none.
        init?(_ o: [String: JSONValue]) {
            guard let kind = o["kind"]?.stringValue.flatMap(Kind.init),
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
    /// Removed with `rmdir`; never also in `tags`.
    private var gone: Set<String>
    /// Folders removed whose `tree_dirs` row (number, mode, owner) and times go; a folder made
    /// again at the path is numbered anew after the row is deleted.
    private var dropped: Set<String>
    private var attrs: [Attr.Key: Attr]
    private var file: LineFile

    init(path: String) {
        file = LineFile(path: path)
        (tags, gone, dropped, attrs) = Self.read(path)
    }

    deinit { file.close() }

    private func locked<T>(_ body: () throws -> T) rethrows -> T { lock.lock(); defer { lock.unlock() }; return try body() }

    /// What waits here as a read of the store takes it, before the read begins: a flush may commit
    /// while the read runs, its snapshot older than the commit and the rows no longer pending after
    /// it (as with the removals of files, `Removals`). Each answer below applies it, then what
    /// waits when it is given.
    struct Seen {
        fileprivate let tags, gone, dropped: Set<String>
        fileprivate let attrs: [Attr.Key: Attr]
    }

    /// Taken before every read of `local_tags` or `tree_dirs` outside a write transaction.
    var seen: Seen { locked { Seen(tags: tags, gone: gone, dropped: dropped, attrs: attrs) } }

    /// `local_tags` as it is with what waits here, from `rows` read outside a write transaction:
    /// the tags removed left out, those made added. Every such reader of it goes through here.
    func localTags<S: Sequence<String>>(_ rows: S, _ before: Seen) -> Set<String> {
        locked { Set(rows).subtracting(before.gone).union(before.tags).subtracting(gone).union(tags) }
    }
    /// The folders whose `tree_dirs` row is to be deleted: every reader of it outside a write
    /// transaction leaves them out (and then takes the attributes pending).
    func droppedFolders(_ before: Seen) -> Set<String> { locked { before.dropped.union(dropped) } }
    var isEmpty: Bool { locked { tags.isEmpty && gone.isEmpty && dropped.isEmpty && attrs.isEmpty } }
    /// The folders' modes or owners waiting for their rows, by path (a folder removed since the
    /// read began has none).
    func pendingAttrs(_ kind: Attr.Kind, _ before: Seen) -> [String: Attr.Value] {
        locked {
            let now = attrs.values.filter { $0.kind == kind }.map { ($0.path, $0.value) }
            let then = before.attrs.values.filter { $0.kind == kind && !dropped.contains($0.path) }.map { ($0.path, $0.value) }
            return Dictionary(then, uniquingKeysWith: { a, _ in a }).merging(now, uniquingKeysWith: { _, b in b })
        }
    }

    /// Records `tag` as made; it is in the file when this returns.
    func add(_ tag: String) throws {
        try locked {
            if tags.contains(tag) { return }
            try file.append(tag + "\n", what: "folder \(tag)")
            tags.insert(tag)
            gone.remove(tag)
        }
    }

    /// Records `tag` as removed; it is in the file when this returns.
    func remove(_ tag: String) throws {
        try locked {
            if gone.contains(tag) { return }
            try file.append(Self.goneLine(tag), what: "the removal of folder \(tag)")
            gone.insert(tag)
            tags.remove(tag)
        }
    }

    /// Records that the folder at `path` was removed: its number, mode, owner and times go (those
    /// set and not yet written too); it is in the file when this returns.
    func drop(_ path: String) throws {
        try locked {
            if dropped.contains(path) && !attrs.keys.contains(where: { $0.path == path }) { return }
            try file.append(Self.droppedLine(path), what: "the removal of folder \(path)")
            dropped.insert(path)
            for k in attrs.keys where k.path == path { attrs[k] = nil }
        }
    }

    private static func goneLine(_ tag: String) -> String {
        "\t" + JSONCoding.encode(["kind": .string("gone"), "tag": .string(tag)]) + "\n"
    }

    private static func droppedLine(_ path: String) -> String {
        "\t" + JSONCoding.encode(["kind": .string("dropped"), "path": .string(path)]) + "\n"
    }

    /// Records a folder's mode or owner as set; it is in the file when this returns.
    func set(_ a: Attr) throws {
        try locked {
            if attrs[a.key] == a { return }
            try file.append(a.line, what: "the \(a.kind.rawValue) of folder \(a.path)")
            attrs[a.key] = a
        }
    }

    /// Inside a write transaction, after the removals of files (`Store.write`): deletes the rows
    /// of the folders and tags removed, then writes every pending tag's row and folder attribute
    /// (a folder removed and made again ends made, numbered anew); once the transaction commits
    /// they are no longer pending (an attribute set again meanwhile stays, with its new value). A
    /// removed folder that holds an active item again (a note synced into it since) keeps its
    /// place through that item's tag.
    func flush(_ db: Database) throws {
        let (pending, removed, drops, set) = locked { (tags, gone, dropped, attrs) }
        if pending.isEmpty && removed.isEmpty && drops.isEmpty && set.isEmpty { return }
        for t in removed { try db.run("DELETE FROM local_tags WHERE tag = ?", [t]) }
        for f in drops {
            try db.run("DELETE FROM tree_dirs WHERE path = ?", [f])
            try db.run("DELETE FROM dir_times WHERE dir = ?", ["vault/" + f])
        }
        for t in pending { try db.run("INSERT OR IGNORE INTO local_tags(tag) VALUES (?)", [t]) }
        for a in set.values { try a.write(db) }
        db.afterNextTransaction(onCommit: { [self] _ in committed(made: pending, gone: removed, dropped: drops, set) })
    }

    /// What a flush wrote is in the store: the file keeps the rest (rewritten aside, renamed over;
    /// on failure it keeps them all, which a later flush writes again to no effect).
    private func committed(made: Set<String>, gone removed: Set<String>, dropped drops: Set<String>, _ doneAttrs: [Attr.Key: Attr]) {
        locked {
            tags.subtract(made)
            gone.subtract(removed)
            dropped.subtract(drops)
            for (k, a) in doneAttrs where attrs[k] == a { attrs[k] = nil }
            file.rewrite(gone.sorted().map(Self.goneLine) + dropped.sorted().map(Self.droppedLine)
                         + tags.sorted().map { $0 + "\n" } + attrs.values.map(\.line))
        }
    }

    /// The tags made and removed and the attributes a file holds: whole lines that are valid tags,
    /// removals, or attributes (the last for each folder or tag).
    private static func read(_ path: String) -> (Set<String>, Set<String>, Set<String>, [Attr.Key: Attr]) {
        var out = Set<String>(), gone = Set<String>(), dropped = Set<String>(), attrs: [Attr.Key: Attr] = [:]
        for l in LineFile.lines(path) {
            if l.first == UInt8(ascii: "\t") {
                guard let o = (try? JSONParser.parse(String(decoding: l.dropFirst(), as: UTF8.self)))?.objectValue else { continue }
                switch o["kind"]?.stringValue {
                case "gone"?:
                    guard let tag = o["tag"]?.stringValue, Store.isLocalTag(tag) else { continue }
                    gone.insert(tag); out.remove(tag)
                case "dropped"?:
                    guard let f = o["path"]?.stringValue else { continue }
                    dropped.insert(f)
                    for k in attrs.keys where k.path == f { attrs[k] = nil }
                default:
                    if let a = Attr(o) { attrs[a.key] = a }
                }
                continue
            }
            let tag = String(decoding: l, as: UTF8.self)
            if Store.isLocalTag(tag) { out.insert(tag); gone.remove(tag) }
        }
        return (out, gone, dropped, attrs)
    }
}
