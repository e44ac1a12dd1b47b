import Foundation
import MarfaLayout
import MarfaModel
import MarfaStore

/// `history/` (FS-33): the earlier versions of each active item, read-only.
///
///     history -> .marfafs/history                    a symlink, so `grep -r` and `find` skip it
///     .marfafs/history/<type>/<name>/<time>.<ext>     one file per earlier version, named by when
///                                                     it was made (UTC, to the millisecond)
///
/// The item's current bytes are its file in `types/` (or `vault/`); `cp` of a version over it
/// makes a new version, so nothing is ever rewritten. `user.marfa.made_by` says who made a
/// version (`local: <device>`, `remote`, `merge`). Kept as `Store+History` says.
extension FileSystem {
    static let historyName = "history"
    static let historyLinkTarget = ".marfafs/history"

    /// Whether a node is part of `history/` or `.marfafs/previews/` (read-only).
    static func isHistory(_ n: Node) -> Bool {
        switch n {
        case .historyRoot, .historyType, .historyItem, .historyVersion, .previewDir, .previewFile: return true
        default: return false
        }
    }

    /// Before a history directory is listed or looked into (outside the lock): what the server
    /// keeps of the item, asked at most every 30 seconds, when the mount has a server.
    func askServerForVersions(_ ino: UInt64) {
        guard let fetch = fetchVersions else { return }
        let id: String? = locked {
            guard case .historyItem(let r)? = try? node(ino), let s = catalog.items[r] else { return nil }
            if let c = serverVersions[s.id], Date().timeIntervalSince(c.at) < 30 { return nil }
            return s.id
        }
        guard let id, let list = fetch(id) else { return }
        locked {
            guard let r = catalog.byID[id], let s = catalog.items[r] else { return }
            let local = (try? store.versions(itemID: id)) ?? []
            serverVersions[id] = (Date(), serverOnlyVersions(s, list, local: local))
        }
    }

    /// The server's versions of an item that this store has no copy of (a version made while
    /// this mount was away, or before it existed), as records with negative numbers (`-version`),
    /// with their bytes. Text items only: a file's old blob is not fetched for a listing.
    func serverOnlyVersions(_ s: ItemSummary, _ list: [JSONValue], local: [VersionRecord]) -> [(VersionRecord, [UInt8])] {
        guard !TypeSchema.isBlobType(s.type) else { return [] }
        var known = Set(local.compactMap { try? store.versionBytes(seq: $0.seq) })
        if let current = try? store.textContent(rowid: s.rowid) { known.insert(current) }
        let t = store.type(s.type)
        return list.compactMap { v -> (VersionRecord, [UInt8])? in
            guard let o = v.objectValue, case .int(let n)? = o["version"], case .object(let props)? = o["properties"] else { return nil }
            let bytes = Array(FrontMatter.render(props, bodyField: t.bodyField, titleField: t.titleField).utf8)
            guard !bytes.isEmpty, known.insert(bytes).inserted else { return nil }
            let at = o["created_at"]?.stringValue.flatMap(Timestamp.parse).map { Int64($0 * 1e9) } ?? 0
            return (VersionRecord(seq: -n, itemID: s.id, madeNs: at, replacedNs: at, madeBy: "server", size: Int64(bytes.count)), bytes)
        }
    }

    /// An item's earlier versions by the names they have in its history directory: the UTC time
    /// each was made, to the millisecond (so names sort as times do), `-2`, `-3`… when two share one.
    func historyNames(_ r: Int64) throws -> [(name: String, version: VersionRecord)] {
        guard let s = catalog.items[r] else { return [] }
        let ext = (catalog.name(of: r).map { ($0 as NSString).pathExtension } ?? "")
        let local = try wrap { try store.versions(itemID: s.id) }
        let versions = (local + (serverVersions[s.id]?.list ?? []).map(\.0)).sorted { ($0.madeNs, $0.seq) > ($1.madeNs, $1.seq) }
        var seen: [String: Int] = [:]
        return versions.reversed().map { v in
            let base = Self.historyStamp(v.madeNs)
            let n = (seen[base] ?? 0) + 1
            seen[base] = n
            let stem = n == 1 ? base : "\(base)-\(n)"
            return (ext.isEmpty ? stem : stem + "." + ext, v)
        }.reversed()
    }

    /// `2026-11-26T10.41.07.123Z`: a time in a file name (no colons, which some tools refuse).
    static func historyStamp(_ ns: Int64) -> String {
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        f.timeZone = TimeZone(identifier: "UTC")
        f.dateFormat = "yyyy-MM-dd'T'HH.mm.ss.SSS'Z'"
        return f.string(from: Date(timeIntervalSince1970: Double(ns) / 1e9))
    }

    func historyChild(_ p: Node, _ name: String) throws -> Node? {
        switch p {
        case .historyRoot:
            return typeListed(name) ? .historyType(name) : nil
        case .historyType(let t):
            return catalog.typeTable(.types, t)?.keyOf[name].map { .historyItem($0) }
        case .historyItem(let r):
            return try historyNames(r).first { $0.name == name }.map { .historyVersion(r, $0.version.seq) }
        default:
            return nil
        }
    }

    func historyChildren(_ n: Node) throws -> [(String, Node)] {
        switch n {
        case .historyRoot:
            return catalog.typesIn(.types).sorted().map { ($0, .historyType($0)) }
        case .historyType(let t):
            guard let table = catalog.typeTable(.types, t) else { return [] }
            return table.sorted().map { ($0, .historyItem(table.keyOf[$0]!)) }
        case .historyItem(let r):
            return try historyNames(r).map { ($0.name, .historyVersion(r, $0.version.seq)) }.sorted { $0.0 < $1.0 }
        default:
            return []
        }
    }

    /// A directory of `history/`: never kept by the kernel (each listing is made anew, as a new
    /// modification time makes the kernel drop what it kept), read-only.
    func historyDirAttr(_ ino: UInt64) -> FileAttr {
        var a = FileAttr(ino: ino, kind: .directory, size: 4096, mtimeNs: Int64(Date().timeIntervalSince1970 * 1e9), nlink: 2, timeout: 0)
        a.mode = 0o555
        return a
    }

    /// A version file's attributes: read-only, its size, the time it was made.
    func historyAttr(_ ino: UInt64, _ r: Int64, _ seq: Int64) throws -> FileAttr {
        guard let v = try historyNames(r).first(where: { $0.version.seq == seq })?.version else { throw FSError(.notFound, "version \(seq)") }
        var a = FileAttr(ino: ino, kind: .file, size: v.size, mtimeNs: v.madeNs, nlink: 1, timeout: 1)
        a.mode = 0o444
        a.ctimeNs = v.replacedNs
        return a
    }

    func historyBytes(_ r: Int64, _ seq: Int64, offset: Int64, size: Int) throws -> [UInt8] {
        if seq < 0 {
            // One of the server's versions, as it was listed.
            guard let s = catalog.items[r], let v = serverVersions[s.id]?.list.first(where: { $0.0.seq == seq }) else {
                throw FSError(.notFound, "version \(-seq) of item \(r)")
            }
            return Self.slice(v.1, offset: offset, size: size)
        }
        return Self.slice(try wrap { try store.versionBytes(seq: seq) }, offset: offset, size: size)
    }

    /// `user.marfa.made_by` of a version.
    func historyXattr(_ r: Int64, _ seq: Int64, _ name: String) throws -> [UInt8]? {
        guard name == "user.marfa.made_by" else { return nil }
        guard let v = try historyNames(r).first(where: { $0.version.seq == seq })?.version else { throw FSError(.notFound, "version \(seq)") }
        return Array((v.madeBy ?? "unknown").utf8)
    }
}
