import Foundation
import MarfaModel
import MarfaStore

/// A file replaced under its name while the kernel held its inode (FS-31): the bytes it had, for
/// the descriptors opened on it before. Kept in memory until the kernel forgets the inode (the last
/// descriptor closed), as a disk keeps an unlinked inode; never saved, never synced.
struct DetachedFile {
    enum Content { case bytes([UInt8]), blob(hash: String, size: Int64) }
    var content: Content
    var mtimeNs: Int64
    var mode: UInt16

    var size: Int64 {
        switch content { case .bytes(let b): Int64(b.count); case .blob(_, let n): n }
    }
}

/// Descriptors keep the file they opened (FS-31). An item's identity (id, tags, history) follows
/// its name through an editor's save (FS-13), but the inode is the file's: when an item's file is
/// replaced under its name — a save by rename, a file removed and made again at once, a backup
/// rename followed by a new file — the item takes a new inode (the renamed file's, or a new
/// number) and the old inode, if the kernel holds it, keeps the old bytes for whoever has it open.
///
/// The kernel's references are counted from the replies that hand out an inode (lookup, create,
/// mkdir, mknod, symlink, link, readdirplus entries) and the forgets that give them back
/// (`kernelLooked`, `kernelForgot`, called by the FUSE layer).
extension FileSystem {
    /// Item `r`'s inode: its rowid's, or the number it took when its file was replaced.
    func itemIno(_ r: Int64) -> UInt64 {
        UInt64(catalog.itemNumber[r] ?? r) + Self.itemInoBase
    }

    /// The kernel was handed inode `ino` once more (before the reply goes out).
    public func kernelLooked(_ ino: UInt64) {
        kernelRefs.withLock { $0[ino, default: 0] += 1 }
    }

    /// The kernel gave back `n` references to `ino`; at none, a detached file's bytes go.
    public func kernelForgot(_ ino: UInt64, _ n: UInt64) {
        let gone: Bool = kernelRefs.withLock { refs in
            guard let have = refs[ino] else { return false }
            if have > n { refs[ino] = have - n; return false }
            refs[ino] = nil
            return true
        }
        guard gone else { return }
        if LocalFiles.owns(ino) { return local.forget(ino) }
        let d = locked { catalog.detached.removeValue(forKey: ino) }
        // A replaced blob no one reads any more leaves the cache.
        if case .blob(let h, _)? = d?.content { store.releaseBlobAndDropIfUnused(h) }
    }

    /// Whether the kernel holds inode `ino` now (the root always).
    public func kernelHolds(_ ino: UInt64) -> Bool { ino == Self.rootIno || kernelRefs.withLock { $0[ino] != nil } }

    /// Item `r`'s file is replaced under its name (call with the lock held, before its bytes
    /// change): the item's inode becomes `number`'s (a new number when nil), and the old inode, if
    /// the kernel holds it, keeps the bytes it had.
    func replaceFile(of r: Int64, number: Int64?) throws {
        try renumber(r, number: number, held: heldFile(r))
    }

    /// The bytes the kernel's inode of item `r` must keep when its file is replaced, if the kernel
    /// holds it: taken before the bytes change.
    func heldFile(_ r: Int64) -> (ino: UInt64, file: DetachedFile)? {
        let old = ino(.item(r))
        guard kernelHolds(old), let f = snapshot(r) else { return nil }
        return (old, f)
    }

    /// Item `r` takes `number`'s inode (a new number when nil); `held` stays with the old inode.
    func renumber(_ r: Int64, number: Int64?, held: (ino: UInt64, file: DetachedFile)?) throws {
        let old = ino(.item(r))
        let n = try number ?? wrap { try store.reserveItemNumber() }
        guard UInt64(n) + Self.itemInoBase != old else {
            if let held, case .blob(let h, _) = held.file.content { store.releaseBlob(h) }
            return
        }
        if let held, held.ino == old {
            catalog.detached[old] = held.file
            log.debug("a replaced file stays with its descriptors", metadata: ["inode": "\(old)", "bytes": "\(held.file.size)"])
        }
        store.setItemNumber(rowid: r, number: n)
        catalog.itemNumber[r] = n
        catalog.aliases[n] = r
    }

    /// Detached files larger than this that are not a cached blob keep no bytes of their own: a
    /// descriptor on one reads the item's new bytes (man 7).
    static let maxDetachedCopy: Int64 = 64 << 20

    /// What item `r`'s file holds now, as a detached file.
    func snapshot(_ r: Int64) -> DetachedFile? {
        guard let s = catalog.items[r] else { return nil }
        let mode = s.mode
        if let f = store.stagedFile(StagedKey(.item, r)) { return DetachedFile(content: .bytes(f.bytes), mtimeNs: f.mtimeNs, mode: mode) }
        if store.spool.has(r) {
            guard s.size <= Self.maxDetachedCopy, let b = try? store.spool.read(r, offset: 0, count: Int(s.size)) else { return nil }
            return DetachedFile(content: .bytes(b), mtimeNs: s.mtimeNs, mode: mode)
        }
        if TypeSchema.isBlobType(s.type) {
            guard let h = s.blobRef ?? (try? store.summary(rowid: r))??.blobRef else { return DetachedFile(content: .bytes([]), mtimeNs: s.mtimeNs, mode: mode) }
            store.holdBlob(h)
            return DetachedFile(content: .blob(hash: h, size: s.size), mtimeNs: s.mtimeNs, mode: mode)
        }
        guard let b = try? store.textContent(rowid: r) else { return nil }
        return DetachedFile(content: .bytes(b), mtimeNs: s.mtimeNs, mode: mode)
    }

    /// Reads a detached file (with the lock held).
    func readDetached(_ ino: UInt64, offset: Int64, size: Int) throws -> [UInt8] {
        guard let d = catalog.detached[ino] else { throw FSError(.notFound, "inode \(ino)") }
        switch d.content {
        case .bytes(let b): return Self.slice(b, offset: offset, size: size)
        case .blob(let h, _):
            guard let b = store.blobs.read(hash: h, offset: offset, count: size) else { throw FSError(.io, "blob \(h) is not cached") }
            return b
        }
    }

    /// Writes, truncates or sets the time of a detached file (with the lock held).
    func changeDetached(_ ino: UInt64, _ change: Store.StagedChange) throws {
        guard var d = catalog.detached[ino] else { throw FSError(.notFound, "inode \(ino)") }
        var bytes: [UInt8]
        switch d.content {
        case .bytes(let b): bytes = b
        case .blob(let h, let n):
            guard n <= Self.maxDetachedCopy, let b = store.blobs.read(hash: h, offset: 0, count: Int(n)) else {
                throw FSError(.io, "a removed file of \(n) bytes is read-only to descriptors opened before its removal")
            }
            store.releaseBlob(h)
            bytes = b
        }
        switch change {
        case .write(let offset, let data):
            let end = Int(offset) + data.count
            if bytes.count < end { bytes += [UInt8](repeating: 0, count: end - bytes.count) }
            bytes.replaceSubrange(Int(offset)..<end, with: data)
            d.mtimeNs = Self.nowNs
        case .truncate(let size):
            if Int(size) < bytes.count { bytes.removeLast(bytes.count - Int(size)) } else { bytes += [UInt8](repeating: 0, count: Int(size) - bytes.count) }
            d.mtimeNs = Self.nowNs
        case .mtime(let ns):
            d.mtimeNs = ns
        }
        d.content = .bytes(bytes)
        catalog.detached[ino] = d
    }
}
