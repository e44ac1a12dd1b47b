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

    /// Folders whose files stay out of a store: a tool's own repository (FS-32).
    static let localOnlyFolders: Set<String> = [".git", ".hg", ".svn"]

    /// What a folder holds, relative and sorted: its files and symlinks (hidden ones too: an
    /// Obsidian vault's `.obsidian/` is its settings), its folders (empty ones too), and the
    /// folders left out with the number of files in each.
    struct Listing {
        var files: [String] = []
        var folders: [String] = []
        var skipped: [(folder: String, files: Int)] = []
    }

    static func list(_ dir: String) throws -> Listing {
        guard let top = opendir(dir) else { throw CLIError("cannot read \(dir)") }
        closedir(top)
        var out = Listing()
        // readdir(3)'s entry types: no stat(2) per file (a cold tree's inodes are read later, by
        // the threads that read the files).
        func walk(_ rel: String) {
            let path = rel.isEmpty ? dir : dir + "/" + rel
            guard let d = opendir(path) else { return }
            defer { closedir(d) }
            while let e = readdir(d) {
                let name = withUnsafeBytes(of: e.pointee.d_name) { String(cString: $0.bindMemory(to: CChar.self).baseAddress!) }
                if name == "." || name == ".." { continue }
                let child = rel.isEmpty ? name : rel + "/" + name
                var kind = Int32(e.pointee.d_type)
                if kind == Int32(DT_UNKNOWN) {
                    var st = Glibc.stat()
                    guard lstat(dir + "/" + child, &st) == 0 else { continue }
                    kind = st.st_mode & S_IFMT == S_IFDIR ? Int32(DT_DIR) : st.st_mode & S_IFMT == S_IFREG ? Int32(DT_REG)
                        : st.st_mode & S_IFMT == S_IFLNK ? Int32(DT_LNK) : Int32(DT_UNKNOWN)
                }
                if kind == Int32(DT_DIR) {
                    if localOnlyFolders.contains(name) {
                        let inside = FileManager.default.enumerator(atPath: dir + "/" + child)?.allObjects.count ?? 0
                        out.skipped.append((child, inside))
                        continue
                    }
                    out.folders.append(child)
                    walk(child)
                } else if kind == Int32(DT_REG) || kind == Int32(DT_LNK) {
                    out.files.append(child)
                }
            }
        }
        walk("")
        out.files.sort(); out.folders.sort(); out.skipped.sort { $0.0 < $1.0 }
        return out
    }

    /// Folders (FS-32): an empty one is kept as a folder of its own (a folder that holds a file or
    /// a folder is there through what it holds); every one keeps its time. Returns how many were
    /// empty.
    static func keepFolders(_ listing: Listing, from root: String, in store: Store) throws -> Int {
        let holding = Set((listing.files + listing.folders).flatMap { rel -> [String] in
            var out: [String] = [], f = parent(rel)
            while !f.isEmpty { out.append(f); f = parent(f) }
            return out
        })
        var empty = 0
        for folder in listing.folders where !holding.contains(folder) {
            let tag = VaultText.folderPrefix + folder
            guard Store.isLocalTag(tag) else { continue }
            try store.addLocalTag(tag)
            empty += 1
        }
        var times: [String: Int64] = [:]
        for folder in listing.folders { times["vault/" + folder] = mtimeNs(root + "/" + folder) }
        times["vault/"] = mtimeNs(root)
        try store.setDirTimes(times)
        return empty
    }

    /// A file imported before, imported again: its bytes if they changed (true), its permission
    /// bits and its time.
    static func reimport(_ existing: StoredItem, bytes: [UInt8], isLink: Bool, mode: UInt16, mtime: Int64?, in store: Store) throws -> Bool {
        let current = TypeSchema.isBlobType(existing.item.type) ? nil : try store.textContent(rowid: existing.rowid)
        let currentBlob = existing.item.properties["blob_ref"]?.stringValue
        let same = current == bytes || (current == nil && currentBlob == BlobHash.of(bytes))
        if !same { _ = try store.writeContent(rowid: existing.rowid, bytes: bytes) }
        if !isLink { try store.setMode(rowid: existing.rowid, mode: mode) }
        if let t = mtime, !same || t != existing.mtimeNs { _ = try store.setMtime(rowid: existing.rowid, ns: t) }
        return !same
    }

    /// The folder a relative path is in ("" at the top).
    static func parent(_ rel: String) -> String {
        rel.lastIndex(of: "/").map { String(rel[..<$0]) } ?? ""
    }

    /// A path's modification time in nanoseconds (of a symlink itself, not what it names).
    static func mtimeNs(_ path: String) -> Int64? { stat(path)?.mtimeNs }

    /// Sets a path's modification time (and access time) to `ns`, not following a symlink.
    static func setMtime(_ path: String, _ ns: Int64) {
        let t = timespec(tv_sec: Int(ns / 1_000_000_000), tv_nsec: Int(ns % 1_000_000_000))
        let times = [t, t]
        _ = utimensat(AT_FDCWD, path, times, AT_SYMLINK_NOFOLLOW)
    }

    /// What reading one file of an import gave.
    enum Outcome {
        case failed(String)
        /// Imported before (its `import:<path>` source id): changed in place if it changed.
        case existing(StoredItem, (bytes: [UInt8], mode: UInt16, mtimeNs: Int64?, link: String?))
        case symlink(name: String, target: String, tags: [String], mtimeNs: Int64?)
        /// A new item, parsed: written with its batch.
        case new(PreparedItem, mode: UInt16, mtimeNs: Int64?)
    }

    /// Reads, looks up and parses `rels` on several threads (no store writes: files not in the
    /// page cache are read a few at a time, and parsing takes the cores the writer leaves); the
    /// outcomes in order.
    static func readAll(_ rels: [String], from root: String, store: Store, known: Set<String>) -> [Outcome] {
        if rels.isEmpty { return [] }
        // Ids are minted here, in the files' order, and the files are made at one instant: of two
        // files with one name, the first keeps the plain name (FS-7: the older, then the smaller
        // id), whichever thread reads it first.
        let ids = rels.map { _ in ItemID.make() }
        let createdNs = Int64(Date().timeIntervalSince1970 * 1e9)
        return Array(unsafeUninitializedCapacity: rels.count) { buffer, count in
            let base = UInt(bitPattern: buffer.baseAddress)
            let next = Ticket()
            let done = DispatchGroup()
            // Fewer readers than cores: the batches' writer (one thread, the slower stage) keeps
            // a core of its own; more readers only took turns with it. Two at least, so a
            // read waiting for the disk does not stop the other.
            for _ in 0..<min(max(2, ProcessInfo.processInfo.activeProcessorCount - 1), rels.count) {
                done.enter()
                Thread {
                    // Each file's slot is initialized by the one thread that took its number.
                    while let i = next.take(below: rels.count) {
                        (UnsafeMutablePointer<Outcome>(bitPattern: base)! + i).initialize(to: read(rels[i], id: ids[i], createdNs: createdNs, from: root, store: store, known: known))
                    }
                    done.leave()
                }.start()
            }
            done.wait()
            count = rels.count
        }
    }

    /// Hands out 0, 1, 2, … once each, to any thread.
    final class Ticket: @unchecked Sendable {
        private let lock = NSLock()
        private var next = 0
        func take(below n: Int) -> Int? {
            lock.lock(); defer { lock.unlock() }
            guard next < n else { return nil }
            next += 1
            return next - 1
        }
    }

    static func read(_ rel: String, id: String, createdNs: Int64, from root: String, store: Store, known: Set<String>) -> Outcome {
        let path = root + "/" + rel
        guard let st = stat(path), let data = st.link.map({ Data($0.utf8) }) ?? FileManager.default.contents(atPath: path) else {
            return .failed("cannot read it")
        }
        let bytes = [UInt8](data)
        do {
            if known.contains("import:" + rel), let existing = try store.item(sourceID: "import:" + rel) { return .existing(existing, (bytes, st.mode, st.mtimeNs, st.link)) }
            let name = (rel as NSString).lastPathComponent
            let folder = parent(rel)
            let ext = Names.split(name).ext.lowercased()
            let type = ext == ".md" ? "core.note" : Names.fileType(forMime: Names.mimeType(forExtension: ext))
            // A folder of any length (FS-31: a long one travels in a short form).
            var tags = folder.isEmpty ? [] : [VaultText.folderPrefix + folder]
            if let t = tags.first, !Store.isLocalTag(t) {
                FileHandle.standardError.write(Data("\nmarfafs: \(rel): its folder is not kept (a control character)\n".utf8))
                tags = []
            }
            // The file's own time goes with it, so `rsync -a` from the original finds nothing to send (FS-32).
            if let link = st.link { return .symlink(name: name, target: link, tags: tags, mtimeNs: st.mtimeNs) }
            let item = try store.prepareItem(NewItem(id: id, type: type, fileName: name, content: bytes, tags: tags, sourceID: "import:" + rel),
                                             createdNs: createdNs)
            return .new(item, mode: st.mode, mtimeNs: st.mtimeNs)
        } catch {
            return .failed("\(error)")
        }
    }

    /// A file's permission bits, modification time (ns) and, for a symlink, its target: one
    /// `lstat(2)` (nil when the file cannot be read).
    static func stat(_ path: String) -> (mode: UInt16, mtimeNs: Int64, link: String?)? {
        var st = Glibc.stat()
        guard lstat(path, &st) == 0 else { return nil }
        let mode = UInt16(truncatingIfNeeded: st.st_mode & 0o7777)
        let t = Int64(st.st_mtim.tv_sec) * 1_000_000_000 + Int64(st.st_mtim.tv_nsec)
        guard st.st_mode & S_IFMT == S_IFLNK else { return (mode, t, nil) }
        return (mode, t, try? FileManager.default.destinationOfSymbolicLink(atPath: path))
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
        try store.recoverStagedSaying()
        // No server: the queue keeps no payloads (a later mount with --server writes them).
        try store.useLocalOnly()
        let listing = try Vault.list(root)
        let files = listing.files
        var progress = Progress(label: "importing", total: files.count)
        var updated = 0, same = 0, failed = 0
        // New files go in a few hundred at a time, one transaction each, written on a thread of
        // their own while the next batch is read and parsed on the other cores (a file that fails
        // makes its batch go again one by one, so only it is reported).
        let writer = ImportWriter(store: store)
        // What an earlier import brought in (looked up again only for those files).
        let known = try store.sourceIDs(withPrefix: "import:")
        var batch: [(rel: String, item: PreparedItem, mode: UInt16, mtimeNs: Int64?)] = [], batchBytes = 0
        var start = 0
        while start < files.count {
            let chunk = Array(files[start..<min(start + 256, files.count)])
            for (rel, outcome) in zip(chunk, Vault.readAll(chunk, from: root, store: store, known: known)) {
                switch outcome {
                case .failed(let why):
                    FileHandle.standardError.write(Data("\nmarfafs: \(rel): \(why)\n".utf8)); failed += 1
                case .existing(let existing, let f):
                    do {
                        if try Vault.reimport(existing, bytes: f.bytes, isLink: f.link != nil, mode: f.mode, mtime: f.mtimeNs, in: store) { updated += 1 } else { same += 1 }
                    } catch { FileHandle.standardError.write(Data("\nmarfafs: \(rel): \(error)\n".utf8)); failed += 1 }
                case .symlink(let name, let target, let tags, let mtime):
                    do {
                        let rowid = try store.createSymlink(name: name, target: target, tags: tags, sourceID: "import:" + rel).rowid
                        if let t = mtime { _ = try store.setMtime(rowid: rowid, ns: t) }
                        writer.count(created: 1)
                    } catch { FileHandle.standardError.write(Data("\nmarfafs: \(rel): \(error)\n".utf8)); failed += 1 }
                case .new(let item, let mode, let mtime):
                    batch.append((rel, item, mode, mtime))
                    batchBytes += item.size
                    if batch.count >= 256 || batchBytes >= 64 << 20 { writer.write(batch); batch = []; batchBytes = 0 }
                }
            }
            start += chunk.count
            progress.update(start)
        }
        writer.write(batch)
        let (created, writeFailed) = writer.finish()
        failed += writeFailed
        let emptyFolders = try Vault.keepFolders(listing, from: root, in: store)
        try store.syncDurably()
        var summary = "imported \(files.count) files from \(root): \(created) new, \(updated) changed, \(same) unchanged"
        if emptyFolders > 0 { summary += ", \(emptyFolders) empty folder\(emptyFolders == 1 ? "" : "s")" }
        if failed > 0 { summary += ", \(failed) failed" }
        for (folder, n) in listing.skipped {
            summary += "\n  skipped \(folder)/ (\(n) entries): a tool's repository stays out of the store"
        }
        print(summary)
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
        try store.recoverStagedSaying()
        let items = try store.allSummaries().filter { $0.state == .active }.sorted { ($0.createdAt, $0.id) < ($1.createdAt, $1.id) }
        var progress = Progress(label: "exporting", total: items.count)
        var used = Set<String>()
        // A file whose path is a folder's takes the id suffix, as the mount's tree shows it.
        let folders = Set(try store.treeFolders().map { Vault.safeFolder(VaultText.folderPrefix + $0) })
        var failed = 0
        for (i, s) in items.enumerated() {
            defer { progress.update(i + 1) }
            guard let full = try store.item(rowid: s.rowid) else { continue }
            // The first `folder:` tag in order, as the mount's tree places the item.
            let safeFolder = try store.tags(itemID: s.id).filter { $0.hasPrefix(VaultText.folderPrefix) }.min().map(Vault.safeFolder) ?? ""
            var name = full.fileName ?? Names.compose(stem: s.stem, ext: s.ext)
            var path = safeFolder.isEmpty ? name : safeFolder + "/" + name
            if used.contains(path) || folders.contains(path) {   // FS-7 across types: the younger item takes the id suffix
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
                Vault.setMtime(target, s.mtimeNs)
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
            if s.mode != 0 { _ = chmod(target, mode_t(Store.permissions(s.mode, default: Store.defaultFileMode))) }
            try? out.close()
            Vault.setMtime(target, s.mtimeNs)
        }
        // Folders made in the vault's tree and still empty (FS-27).
        for tag in try store.localTags() where tag.hasPrefix(VaultText.folderPrefix) {
            let folder = Vault.safeFolder(tag)
            if !folder.isEmpty { try FileManager.default.createDirectory(atPath: root + "/" + folder, withIntermediateDirectories: true) }
        }
        // Folders keep the times the store has for them, deepest first (a folder's own time
        // changes when something is written in it).
        for (dir, ns) in try store.dirTimes().sorted(by: { $0.key.count > $1.key.count }) where dir.hasPrefix("vault/") {
            let folder = Vault.safeFolder(VaultText.folderPrefix + dir.dropFirst("vault/".count))
            let path = folder.isEmpty ? root : root + "/" + folder
            if FileManager.default.fileExists(atPath: path) { Vault.setMtime(path, ns) }
        }
        print("exported \(items.count - failed) items to \(root)\(failed > 0 ? " (\(failed) failed)" : "")")
        if failed > 0 { throw ExitCode(Exit.failure) }
    }
}

/// Writes an import's batches of new items on a thread of its own, one batch behind the reading
/// (at most two waiting); a batch that fails goes again one item at a time, so only the failing
/// file is reported.
final class ImportWriter: @unchecked Sendable {
    private let store: Store
    private let queue = DispatchQueue(label: "marfafs.import.write")
    private let room = DispatchSemaphore(value: 2)
    private let lock = NSLock()
    private var created = 0, failed = 0

    init(store: Store) { self.store = store }

    func count(created n: Int) { lock.lock(); created += n; lock.unlock() }

    func write(_ batch: [(rel: String, item: PreparedItem, mode: UInt16, mtimeNs: Int64?)]) {
        if batch.isEmpty { return }
        room.wait()
        queue.async { [self] in
            defer { room.signal() }
            if (try? store.createItems(batch.map { ($0.item, $0.mode, $0.mtimeNs) })) != nil { count(created: batch.count); return }
            for b in batch {
                do { _ = try store.createItems([(b.item, b.mode, b.mtimeNs)]); count(created: 1) } catch {
                    FileHandle.standardError.write(Data("\nmarfafs: \(b.rel): \(error)\n".utf8))
                    lock.lock(); failed += 1; lock.unlock()
                }
            }
        }
    }

    /// Waits for every batch; (created, failed).
    func finish() -> (Int, Int) {
        queue.sync {}
        lock.lock(); defer { lock.unlock() }
        return (created, failed)
    }
}
