import ArgumentParser
import Foundation
import MarfaLayout
import MarfaModel
import MarfaStore

/// FS-23: a folder of Markdown (an Obsidian vault, say) in and out of a store.
enum Vault {
    /// A folder path from a `folder:` tag, with no `.` or `..` that could leave the export's folder.
    static func safeFolder(_ tag: String) -> String {
        tag.dropFirst(VaultText.folderPrefix.count).split(separator: "/").filter { $0 != ".." && $0 != "." }.joined(separator: "/")
    }

    /// Files and symlinks under `dir`, relative, sorted; hidden files and folders (`.obsidian`,
    /// `.git`) are skipped. A symlink is one, wherever it points (FS-31).
    static func files(in dir: String) throws -> [String] {
        guard let e = FileManager.default.enumerator(atPath: dir) else { throw CLIError("cannot read \(dir)") }
        var out: [String] = []
        while let rel = e.nextObject() as? String {
            let last = (rel as NSString).lastPathComponent
            if last.hasPrefix(".") { e.skipDescendants(); continue }
            let type = (try? FileManager.default.attributesOfItem(atPath: dir + "/" + rel))?[.type] as? FileAttributeType
            if type == .typeRegular || type == .typeSymbolicLink { out.append(rel) }
        }
        return out.sorted()
    }

    /// A file's permission bits and, for a symlink, its target.
    static func stat(_ path: String) -> (mode: UInt16, link: String?) {
        let a = try? FileManager.default.attributesOfItem(atPath: path)
        let mode = UInt16(truncatingIfNeeded: (a?[.posixPermissions] as? Int) ?? 0o644)
        guard a?[.type] as? FileAttributeType == .typeSymbolicLink else { return (mode, nil) }
        return (mode, try? FileManager.default.destinationOfSymbolicLink(atPath: path))
    }
}

struct ImportCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "import", abstract: "Import a folder of Markdown: one note per .md file, other files as blobs.",
        discussion: "Each file keeps its name and bytes; its folder becomes the tag folder:<path>. Running it again changes only what changed.")

    @Argument(help: "The folder to import.")
    var dir: String

    @OptionGroup var storeOption: StoreOption

    func run() throws {
        do { try importAll() } catch let e as CLIError { fail(e) }
    }

    func importAll() throws {
        let root = Paths.absolute(dir)
        var isDir: ObjCBool = false
        guard FileManager.default.fileExists(atPath: root, isDirectory: &isDir), isDir.boolValue else { throw CLIError("\(root) is not a folder") }
        let lock = try StoreLock(store: storeOption.path)
        lock.record("import by pid \(getpid())")
        let store = try Store(path: storeOption.path)
        // Files a killed mount left staged are committed before anything is added.
        try store.recoverStaged()
        // No server: the queue keeps no payloads (a later mount with --server writes them).
        try store.useLocalOnly()
        let files = try Vault.files(in: root)
        var progress = Progress(label: "importing", total: files.count)
        var created = 0, updated = 0, same = 0, failed = 0
        for (i, rel) in files.enumerated() {
            defer { progress.update(i + 1) }
            let name = (rel as NSString).lastPathComponent
            let folder = (rel as NSString).deletingLastPathComponent
            let (mode, link) = Vault.stat(root + "/" + rel)
            guard let data = link.map({ Data($0.utf8) }) ?? FileManager.default.contents(atPath: root + "/" + rel) else {
                FileHandle.standardError.write(Data("\nmarfafs: cannot read \(rel)\n".utf8)); failed += 1; continue
            }
            let bytes = [UInt8](data)
            let sourceID = "import:" + rel
            do {
                if let existing = try store.item(sourceID: sourceID) {
                    let current = TypeSchema.isBlobType(existing.item.type) ? nil : try store.textContent(rowid: existing.rowid)
                    let currentBlob = existing.item.properties["blob_ref"]?.stringValue
                    if current == bytes || (current == nil && currentBlob == BlobHash.of(bytes)) {
                        if link == nil { try store.setMode(rowid: existing.rowid, mode: mode) }
                        same += 1; continue
                    }
                    _ = try store.writeContent(rowid: existing.rowid, bytes: bytes)
                    if link == nil { try store.setMode(rowid: existing.rowid, mode: mode) }
                    updated += 1
                    continue
                }
                let ext = Names.split(name).ext.lowercased()
                let type = ext == ".md" ? "core.note" : Names.fileType(forMime: Names.mimeType(forExtension: ext))
                // A folder of any length (FS-31: a long one travels in a short form).
                var tags = folder.isEmpty ? [] : [VaultText.folderPrefix + folder]
                if let t = tags.first, !Store.isLocalTag(t) {
                    FileHandle.standardError.write(Data("\nmarfafs: \(rel): its folder is not kept (a control character)\n".utf8))
                    tags = []
                }
                if let link {
                    _ = try store.createSymlink(name: name, target: link, tags: tags, sourceID: sourceID)
                } else {
                    let made = try store.createItem(NewItem(type: type, fileName: name, content: bytes, tags: tags, sourceID: sourceID))
                    try store.setMode(rowid: made.rowid, mode: mode)
                }
                created += 1
            } catch {
                FileHandle.standardError.write(Data("\nmarfafs: \(rel): \(error)\n".utf8)); failed += 1
            }
        }
        try store.syncDurably()
        print("imported \(files.count) files from \(root): \(created) new, \(updated) changed, \(same) unchanged\(failed > 0 ? ", \(failed) failed" : "")")
        if failed > 0 { throw ExitCode(Exit.failure) }
    }
}

struct ExportCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "export", abstract: "Write every active item into a folder: notes as Markdown, blobs as files.",
        discussion: "An item goes into the folder its folder:<path> tag names (the top level if none), under the name it was imported or created with.")

    @Argument(help: "The folder to write into (made if missing).")
    var dir: String

    @OptionGroup var storeOption: StoreOption

    func run() throws {
        do { try exportAll() } catch let e as CLIError { fail(e) }
    }

    func exportAll() throws {
        let root = Paths.absolute(dir)
        guard FileManager.default.fileExists(atPath: storeOption.path) else { throw CLIError("no store at \(storeOption.path)") }
        // A mounted store is refused (man 1): the mount may hold changes not yet in it.
        let lock = try StoreLock(store: storeOption.path)
        lock.record("export by pid \(getpid())")
        defer { withExtendedLifetime(lock) {} }
        let store = try Store(path: storeOption.path)
        // What a killed mount left (staged files, blobs being written) is taken up first.
        try store.recoverStaged()
        let items = try store.allSummaries().filter { $0.state == .active }.sorted { ($0.createdAt, $0.id) < ($1.createdAt, $1.id) }
        var progress = Progress(label: "exporting", total: items.count)
        var used = Set<String>()
        var failed = 0
        for (i, s) in items.enumerated() {
            defer { progress.update(i + 1) }
            guard let full = try store.item(rowid: s.rowid) else { continue }
            // The first `folder:` tag in order, as the mount's tree places the item.
            let safeFolder = try store.tags(itemID: s.id).filter { $0.hasPrefix(VaultText.folderPrefix) }.min().map(Vault.safeFolder) ?? ""
            var name = full.fileName ?? Names.compose(stem: s.stem, ext: s.ext)
            var path = safeFolder.isEmpty ? name : safeFolder + "/" + name
            if used.contains(path) {   // FS-7 across types: the younger item takes the id suffix
                name = Names.compose(stem: Names.split(name).stem, suffix: Names.collisionSuffix(id: s.id), ext: Names.split(name).ext)
                path = safeFolder.isEmpty ? name : safeFolder + "/" + name
            }
            used.insert(path)
            // A blob that is not cached is reported and skipped, before anything is written.
            var blob: (hash: String, size: Int64)?
            if TypeSchema.isBlobType(s.type) {
                guard let h = s.blobRef, let size = store.blobs.size(hash: h) else {
                    FileHandle.standardError.write(Data("\nmarfafs: \(path): its blob is not cached\n".utf8)); failed += 1; continue
                }
                blob = (h, size)
            }
            let target = root + "/" + path
            try FileManager.default.createDirectory(atPath: (target as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            if s.mode == Store.symlinkMode, let (h, size) = blob {
                // A symlink item is a symlink again (FS-31).
                guard let bytes = store.blobs.read(hash: h, offset: 0, count: Int(size)) else { throw CLIError("cannot read the blob of \(path)") }
                try? FileManager.default.removeItem(atPath: target)
                try FileManager.default.createSymbolicLink(atPath: target, withDestinationPath: String(decoding: bytes, as: UTF8.self))
                continue
            }
            guard FileManager.default.createFile(atPath: target, contents: nil), let out = FileHandle(forWritingAtPath: target) else {
                throw CLIError("cannot write \(target)")
            }
            defer { try? out.close() }
            if let (h, size) = blob {
                // A blob is copied a chunk at a time: a large one never sits in memory whole.
                var at: Int64 = 0
                while at < size {
                    guard let chunk = store.blobs.read(hash: h, offset: at, count: 1 << 20), !chunk.isEmpty else { throw CLIError("cannot read the blob of \(path)") }
                    try out.write(contentsOf: chunk)
                    at += Int64(chunk.count)
                }
            } else {
                try out.write(contentsOf: try store.textContent(rowid: s.rowid))
            }
            if s.mode != 0 { _ = chmod(target, mode_t(s.mode)) }
        }
        // Folders made in the vault's tree and still empty (FS-27).
        for tag in try store.localTags() where tag.hasPrefix(VaultText.folderPrefix) {
            let folder = Vault.safeFolder(tag)
            if !folder.isEmpty { try FileManager.default.createDirectory(atPath: root + "/" + folder, withIntermediateDirectories: true) }
        }
        print("exported \(items.count - failed) items to \(root)\(failed > 0 ? " (\(failed) failed)" : "")")
        if failed > 0 { throw ExitCode(Exit.failure) }
    }
}
