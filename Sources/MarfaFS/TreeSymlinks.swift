import Foundation
import MarfaLayout
import MarfaModel
import MarfaStore

/// Symlinks in the vault's tree (FS-31): a symlink item (`core.file`, MIME type `inode/symlink`,
/// its bytes the target, exact) made by `ln -s` in `vault/`, shown as a symlink wherever the item
/// shows, synced, exported and imported as a symlink. In `tags/` and `links/`, `ln -s` keeps its
/// own meaning (a tag, an edge).
extension FileSystem {
    /// Whether item `r` is a file or a symlink.
    func itemKind(_ r: Int64) -> Node.Kind {
        (catalog.items[r]?.mode ?? 0) & 0o170000 == 0o120000 ? .symlink : .file
    }

    /// `ln -s target vault/<folder>/<name>` (with the lock held, everything settled).
    func makeTreeSymlink(_ target: String, in folder: String, named name: String) throws -> (FileAttr, [Invalidation]) {
        if try childNode(.treeDir(folder), name) != nil { throw FSError(.exists, name) }
        guard !target.isEmpty, target.utf8.count < 4096 else { throw FSError(.invalid, "a symlink's target is 1 to 4095 bytes") }
        let tags = folder.isEmpty ? [] : [VaultText.folderPrefix + folder]
        let s = try wrap { try store.createSymlink(name: name, target: target, tags: tags) }
        catalog.createdHere.insert(s.rowid)
        let inv = try refreshItem(s.rowid, .made(s, Set(tags)))
        return (try attr(.item(s.rowid)), inv)
    }

    /// A symlink item's target: its bytes, fetched from the server on first use like any blob.
    func symlinkTarget(_ r: Int64) throws -> String {
        // A symlink replaced by another (`ln -sfn`) holds its new target unsettled for a moment.
        if let f = store.stagedFile(StagedKey(.item, r)) { return String(decoding: f.bytes, as: UTF8.self) }
        guard let s = locked({ catalog.items[r] }) else { throw FSError(.notFound, "item \(r)") }
        guard let h = s.blobRef ?? (try? store.summary(rowid: r))??.blobRef else {
            return String(decoding: try wrap { try store.textContent(rowid: r) }, as: UTF8.self)
        }
        var bytes = store.blobs.read(hash: h, offset: 0, count: 4096)
        if bytes == nil, let fetch = fetchBlob, fetch(h) { bytes = store.blobs.read(hash: h, offset: 0, count: 4096) }
        guard let bytes else { throw FSError(.io, "the target of symlink \(s.id) is not cached") }
        return String(decoding: bytes, as: UTF8.self)
    }
}
