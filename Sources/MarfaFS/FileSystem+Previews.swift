import Foundation
import MarfaLayout
import MarfaStore

/// `.marfafs/previews/` (FS-34): the preview images a MyLifeDB server makes of its files
/// (screenshots of documents and the like, served from its SQLite Archive at `/sqlar/<name>`),
/// read-only, in the vault's folders:
///
///     .marfafs/previews/<folder…>/<file name><preview's extension>
///
/// Only files the server has a preview of are listed (`user.mylifedb.preview_sqlar`); a preview's
/// bytes are fetched the first time its folder is listed or it is looked up, outside the lock, and
/// kept in the store, so they are there offline.
extension FileSystem {
    static let previewsName = "previews"

    /// The preview names of the items in vault folder `f` that have one: name shown → (rowid, the
    /// server's name of the preview). Lock held.
    func previewEntries(_ f: String) throws -> [String: (rowid: Int64, sqlar: String)] {
        guard let table = try treeTable(f) else { return [:] }
        let previews = store.previewNames()
        guard !previews.isEmpty else { return [:] }
        var out: [String: (Int64, String)] = [:]
        for name in table.sorted() {
            guard let r = table.keyOf[name], let s = catalog.items[r], let sqlar = previews[s.id] else { continue }
            let ext = (sqlar as NSString).pathExtension
            out[name + (ext.isEmpty ? ".preview" : "." + ext)] = (r, sqlar)
        }
        return out
    }

    func previewChild(_ f: String, _ name: String) throws -> Node? {
        if catalog.subfolders(f).contains(name) { return .previewDir(VaultIndex.join(f, name)) }
        return try previewEntries(f)[name].map { .previewFile($0.rowid) }
    }

    func previewChildren(_ f: String) throws -> [(String, Node)] {
        let files = try previewEntries(f).map { ($0.key, Node.previewFile($0.value.rowid)) }
        return (catalog.subfolders(f).sorted().map { ($0, Node.previewDir(VaultIndex.join(f, $0))) } + files).sorted { $0.0 < $1.0 }
    }

    static func isPreview(_ n: Node) -> Bool {
        switch n { case .previewDir, .previewFile: return true; default: return false }
    }

    /// Runs `pass` (one pass under the lock, which says whether it answered for a preview node);
    /// for a preview node of a mount that fetches previews, the previews it shows that are not
    /// kept yet are fetched (outside the lock) and the pass runs again. Any other node costs
    /// nothing more (the hot path of getattr, lookup and readdir).
    func withPreviews<T>(_ ino: UInt64, _ pass: () throws -> (T, Bool)) throws -> T {
        let (answer, preview) = try pass()
        guard preview, fetchPreview != nil else { return answer }
        fetchPreviews(ino)
        return try pass().0
    }

    /// Before a previews folder is listed or looked into, or a preview is read (outside the lock):
    /// the previews it shows that are not kept yet are fetched.
    func fetchPreviews(_ ino: UInt64) {
        guard let fetch = fetchPreview else { return }
        let wanted: [String] = locked {
            switch try? node(ino) {
            case .previewDir(let f)?: return ((try? previewEntries(f)) ?? [:]).values.map(\.sqlar)
            case .previewFile(let r)?: return catalog.items[r].flatMap { store.previewNames()[$0.id] }.map { [$0] } ?? []
            default: return []
            }
        }
        for name in wanted where store.preview(name) == nil {
            if let bytes = fetch(name) { try? store.keepPreview(name, bytes) }
        }
    }

    func previewAttr(_ ino: UInt64, _ r: Int64) throws -> FileAttr {
        guard let s = catalog.items[r], let sqlar = store.previewNames()[s.id] else { throw FSError(.notFound, "preview of item \(r)") }
        var a = FileAttr(ino: ino, kind: .file, size: Int64(store.preview(sqlar)?.count ?? 0), mtimeNs: s.mtimeNs, nlink: 1, timeout: 1)
        a.mode = 0o444
        return a
    }

    func previewBytes(_ r: Int64, offset: Int64, size: Int) throws -> [UInt8] {
        guard let s = catalog.items[r], let sqlar = store.previewNames()[s.id] else { throw FSError(.notFound, "preview of item \(r)") }
        guard let bytes = store.preview(sqlar) else { throw FSError(.io, "the preview \(sqlar) is not fetched (offline?)") }
        return Self.slice(bytes, offset: offset, size: size)
    }
}
