import Foundation
import MarfaLayout
import MarfaStore

/// Where the vault's tree meets its local-only files (FS-32, `LocalFiles`): a name in a folder of
/// the tree is local when `<store>-local/<folder>/<name>` exists, or, for a name being made, when
/// `LocalRules` says so; everything under a local directory is local. Each public operation of
/// `FileSystem` asks `localTarget` / `LocalFiles.owns` first and hands local names over whole.
extension FileSystem {
    /// A name in directory `parent` that is (or is to be made) local: its vault-relative path.
    /// `making`: the name is being made (a folder when `folder`); the rules then decide.
    /// Nil: the name belongs to the tree (or to another view).
    func localTarget(parent: UInt64, name: String, making: Bool = false, folder: Bool = false) throws -> String? {
        if LocalFiles.owns(parent) { return VaultIndex.join(try local.rel(parent), name) }
        // A name the tree has is the tree's (a folder of the tree holding local entries has a
        // directory of the same path here, holding them).
        let treeFolder: String? = locked {
            guard case .treeDir(let f)? = try? node(parent), ((try? childNode(.treeDir(f), name)) ?? nil) == nil else { return nil }
            return f
        }
        guard let treeFolder else { return nil }
        let rel = VaultIndex.join(treeFolder, name)
        if local.exists(rel) { return rel }
        guard making else { return nil }
        return localRules().isLocal(rel, folder: folder) ? rel : nil
    }

    /// Whether a vault-relative path is one the mount keeps to itself (FS-32): it, or a folder
    /// above it, is local by the rules in force. A remote's file there is never taken (FS-34).
    public func keepsLocal(_ path: String) -> Bool {
        let rules = localRules()
        let parts = path.split(separator: "/").map(String.init)
        var at = ""
        for (i, p) in parts.enumerated() {
            at = at.isEmpty ? p : at + "/" + p
            if rules.isLocal(at, folder: i < parts.count - 1) { return true }
        }
        return false
    }

    /// The rules in force: the defaults and the vault's `.marfafsignore`, read again when it changes.
    func localRules() -> LocalRules {
        let found: LocalRules.Source? = locked {
            guard let r = try? treeTable("")?.keyOf[LocalRules.fileName], let s = catalog.items[r] else { return nil }
            return LocalRules.Source(ino: ino(.item(r)), mtime: s.mtimeNs, size: s.size)
        }
        if let cached = localRulesCache.withLock({ $0 }), cached.key == found { return cached.rules }
        // Read as any reader reads it: a file just written is still staged.
        let text = found.flatMap { try? read($0.ino, offset: 0, size: Int(min($0.size, 1 << 20))) }.map { String(decoding: $0, as: UTF8.self) }
        let rules = LocalRules(text: text)
        localRulesCache.withLock { $0 = (found, rules) }
        return rules
    }

    /// A local name was made directly in tree folder `rel`'s folder: the folder is kept while it
    /// holds it (a folder that only holds `.git` is a folder), and its listing moves on.
    func madeLocal(_ rel: String, parent: UInt64) throws {
        if LocalFiles.owns(parent) { return }
        let folder = VaultIndex.parent(rel)
        if !folder.isEmpty {
            let tag = VaultText.folderPrefix + folder
            try locked {
                if !catalog.localTags.contains(tag) { try stageFolder(tag) }
            }
        }
        touchNames(parent)
    }

    /// The local entries a tree folder shows beside its own (never a name the tree has).
    func localEntries(_ folder: String, besides names: Set<String>) -> [DirEntry] {
        guard local.exists(folder) else { return [] }
        return ((try? local.list(folder)) ?? []).filter { !names.contains($0.name) }
    }

    /// Makes a local-only name: its tree folder's container first, then `make`.
    func makeLocal(_ rel: String, parent: UInt64, _ make: () throws -> FileAttr) throws -> FileAttr {
        if VaultIndex.lastComponent(rel).utf8.count > Names.maxNameBytes { throw FSError(.nameTooLong, rel) }
        if !LocalFiles.owns(parent) { try local.makeContainer(VaultIndex.parent(rel)) }
        let a = try make()
        try madeLocal(rel, parent: parent)
        return a
    }

    /// A rename among local-only names (true: done). Between them and the tree a move is a copy
    /// and a delete (EXDEV: `mv` does that) (FS-32), but for a FIFO, socket or device node, which
    /// is local-only wherever it is in the tree: it moves over a tree file of the new name, and a
    /// tree file moved over one takes its name.
    func renameLocalOnly(parent: UInt64, name: String, newParent: UInt64, newName: String, noReplace: Bool, exchange: Bool) throws -> Bool {
        let from = try localTarget(parent: parent, name: name)
        let fromAttr = from.flatMap { try? local.attr($0) }
        let isDir = fromAttr.map { $0.kind == .directory } ?? locked { (try? childNode(try node(parent), name))??.kind == .directory }
        var to = try localTarget(parent: newParent, name: newName, making: true, folder: isDir)
        if from != nil, to == nil, let a = fromAttr, a.special != 0 {
            to = try specialTarget(parent: newParent, name: newName, replacing: !noReplace && !exchange)
        }
        if let from, let to {
            try local.rename(from, to, noReplace: noReplace, exchange: exchange)
            for p in Set([parent, newParent]) where !LocalFiles.owns(p) { touchNames(p) }
            return true
        }
        if from == nil, let to, !exchange, let a = try? local.attr(to), a.special != 0,
           locked({ (try? childNode(try node(parent), name)) ?? nil }) != nil {
            if noReplace { throw FSError(.exists, newName) }
            if isDir { throw FSError(.notDirectory, newName) }
            try local.unlink(to)
            return false
        }
        if from != nil || to != nil { throw FSError(.crossView, "\(name): local-only files and the tree's are apart") }
        return false
    }

    // MARK: FIFOs, sockets and device nodes

    /// `mknod(2)` of anything but a regular file: a FIFO, socket or device node is made among the
    /// local-only files (FS-32), whatever its name, in any folder of the vault's tree; it holds no
    /// bytes to keep or sync. Elsewhere (`types/`, `tags/`) it is EPERM.
    public func mknod(parent: UInt64, name: String, mode: UInt32, rdev: UInt64) throws -> FileAttr {
        guard let rel = try specialTarget(parent: parent, name: name) else {
            throw FSError(.notPermitted, "FIFOs, sockets and device nodes are made only in the vault's tree")
        }
        return try makeLocal(rel, parent: parent) { try local.mknod(rel, mode: mode, rdev: rdev) }
    }

    /// Where a FIFO, socket or device node named `name` in `parent` lives among the local-only
    /// files: nil if `parent` is not a folder of the tree (or a local directory). A name the tree
    /// holds is EEXIST, or with `replacing` its file goes first (a directory: EISDIR).
    func specialTarget(parent: UInt64, name: String, replacing: Bool = false) throws -> String? {
        if LocalFiles.owns(parent) { return VaultIndex.join(try local.rel(parent), name) }
        let found: (folder: String, taken: Node?)? = try locked {
            guard case .treeDir(let f) = try node(parent) else { return nil }
            try checkName(name)
            return (f, try childNode(.treeDir(f), name))
        }
        guard let found else { return nil }
        if let taken = found.taken {
            guard replacing else { throw FSError(.exists, name) }
            if taken.kind == .directory { throw FSError(.isDirectory, name) }
            try unlink(parent: parent, name: name)
        }
        return VaultIndex.join(found.folder, name)
    }

    /// The folder of the tree a rename is about to move, and where to.
    func folderBeingMoved(parent: UInt64, name: String, newParent: UInt64, newName: String) -> (from: String, to: String)? {
        locked {
            guard case .treeDir(let f)? = try? childNode(try node(parent), name), case .treeDir(let pf)? = try? node(newParent) else { return nil }
            return (f, VaultIndex.join(pf, newName))
        }
    }

    /// After a folder's rename: its local-only entries follow it (unless the rename did not happen).
    func moveLocalFolder(_ move: (from: String, to: String), parent: UInt64, name: String) {
        guard local.exists(move.from), !locked({ ((try? childNode(try node(parent), name)) ?? nil) != nil }) else { return }
        do { try local.moveFolder(from: move.from, to: move.to) } catch {
            log.error("local-only files did not follow their folder", metadata: ["from": "\(move.from)", "error": "\(error)"])
        }
    }
}
