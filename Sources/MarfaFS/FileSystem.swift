import Foundation
import Logging
import Synchronization
import MarfaLayout
import MarfaModel
import MarfaStore

/// The filesystem core: every operation as a method that returns values or throws `FSError`.
/// Owns the inode table, the in-memory catalog of names and the control files; knows nothing of
/// libfuse. All state is guarded by one lock; content reads run outside it.
public final class FileSystem: @unchecked Sendable {
    public let store: Store
    let log: Logger
    let lock = NSLock()
    var catalog: Catalog
    var inodes: InodeTable
    public let mountedAt = Date()
    /// The last failure of the store (a full disk, an I/O error), for `.marfafs/status`.
    private let lastFailure = Mutex<(message: String, at: Date)?>(nil)
    /// Called (outside the lock) with what the kernel must forget after a change.
    public var onInvalidate: (@Sendable ([Invalidation]) -> Void)?
    /// With a server configured: what the sync engine is doing (`.marfafs/status`, `flush`).
    public var syncStatus: (@Sendable () -> EngineState)?
    /// Fetches an uncached blob into the store's cache (the sync engine); false if it cannot.
    public var fetchBlob: (@Sendable (String) -> Bool)?
    /// The versions the server keeps of an item (FS-33), fetched when its history is listed.
    public var fetchVersions: (@Sendable (String) -> [JSONValue]?)?
    /// Whether the remote keeps symbolic links (a MyLifeDB server does not: `ln -s` in the vault's
    /// tree is refused with EPERM, FS-34).
    public var remoteKeepsSymlinks = true
    /// A MyLifeDB server's preview image by its name in the server's archive (FS-34); nil if it cannot.
    public var fetchPreview: (@Sendable (String) -> [UInt8]?)?
    /// The versions the server last said it keeps of each item that this store has no copy of,
    /// with their bytes, by item id, and when it said so (lock held).
    var serverVersions: [String: (at: Date, list: [(VersionRecord, [UInt8])])] = [:]
    /// Told of every stale save (FS-24): the item, and the conflicted copy made of the save (nil:
    /// it merged). The sync engine records them in `.marfafs/events`.
    public var onStaleSave: (@Sendable (String, String?) -> Void)?
    /// The latest sync events as JSON lines (`.marfafs/events`).
    public var syncEvents: (@Sendable () -> String)?
    /// `.marfafs/requests`: the kernel's requests answered, by operation (set by the FUSE shell).
    public var requestCounts: (@Sendable () -> String)?
    /// The thread id of the thread that replays changes on the mount for watchers (FS-25): its
    /// requests are answered from the state already applied and change nothing.
    public var replayThread: Int32 {
        get { replayTid.load(ordering: .relaxed) }
        set { replayTid.store(newValue, ordering: .relaxed) }
    }
    private let replayTid = Atomic<Int32>(-1)
    /// How many references to each inode the kernel holds (`kernelLooked`, `kernelForgot`).
    let kernelRefs = Mutex<[UInt64: UInt64]>([:])
    /// The change the replay thread is replaying now (`Notifier`, FS-25).
    let replaying = Mutex<Replay?>(nil)
    /// Seconds within which a file removed and made again under its name is the same item (FS-28).
    static let reattachWindow: Double = 5
    /// Seconds the kernel may cache entries and attributes of items and directories.
    public var cacheTimeout: Double = 86_400
    let uid: UInt32
    let gid: UInt32
    /// Settles written files once they have been quiet this long (FS-14).
    let settler: Settler
    /// Rows the settler's commit settled whose catalog entries it has not yet brought up to date
    /// (it does so a batch at a time, giving way to requests); a settle that needs them current
    /// takes them first (lock held).
    var settledUnseen: Set<Int64> = []
    /// The text of each control file as its last stat saw it: a read right after serves the same
    /// bytes, so the length the kernel was told and the bytes it reads agree.
    var controlSnapshots: [String: (text: String, at: Date)] = [:]
    /// The process (thread) whose request is being answered, for control-file snapshots: each
    /// reader gets the bytes its own stat measured, whoever else reads meanwhile.
    var currentReader: Int32 = 0
    /// Thread → program, for the bases of saves (FS-29).
    let writers = Writers()
    /// The program whose namespace request (a rename, a create) is being answered, under the lock:
    /// an editor's save by rename or by re-creating the file has its base (FS-29).
    var currentWriter: Writer = .unknown
    /// While the store's changes are followed: the replays of edge entries that came or went
    /// (`noteEdge`); nil otherwise.
    var edgeReplays: [Replay]?
    /// Local-only files of the tree (FS-32), and the rules last read (keyed by the rules file's
    /// item and time).
    let local: LocalFiles
    let localRulesCache = Mutex<(key: LocalRules.Source?, rules: LocalRules)?>(nil)

    public init(store: Store, logger: Logger, settleWindow: Double = 0.1) throws {
        self.store = store
        self.log = logger
        self.local = LocalFiles(store: store.path)
        // Files a killed mount left staged are committed, and files written before a crash
        // settle now, before anything is served (FS-15). On a disk too full for that (FS-28) the
        // mount comes up all the same: the files stay staged, and settle once there is room.
        try store.recoverStaged(keepOnFullDisk: true)
        if let (aside, why) = store.unrecoveredJournal.withLock({ $0 }) {
            logger.warning("a staging journal that is not this store's was set aside", metadata: ["kept_as": "\(aside)", "names": "\(why)"])
        }
        var fullDisk = !store.stagingIsEmpty
        do { try store.settle() } catch StoreError.noSpace { fullDisk = true }
        self.catalog = try Catalog(store: store)
        self.inodes = InodeTable(folders: try store.treeDirInodes())
        // Blob files that could not settle yet (a full disk): their spool file is their size.
        for r in store.spool.rowids {
            if let (size, mtime) = try? store.spool.attributes(r) { catalog.items[r]?.size = size; catalog.items[r]?.mtimeNs = mtime }
        }
        // Building the catalog leaves freed memory in the heap: give it back.
        _ = marfafs_malloc_trim(0)
        uid = getuid(); gid = getgid()
        settler = Settler(window: settleWindow)
        // A few MiB kept back so that deleting works on a full disk (FS-28).
        store.ensureReserve()
        // What the store commits for the sync engine shows in the mount (FS-19): the filesystem
        // learns of remote changes from the store, never from the sync engine.
        store.observe { [weak self] c in self?.storeChanged(c) }
        if fullDisk { showStagedAtMount() }
    }

    /// Files a full disk kept staged or unsettled when the mount began (FS-28): shown as they are,
    /// and the settler tries again.
    func showStagedAtMount() {
        let staged = store.stagedFiles()
        let inv: [Invalidation] = locked {
            for s in staged.scratch { catalog.addScratch(s) }
            for f in staged.overlays { wroteUnsettled(f.key.rowid, size: f.size, mtimeNs: f.mtimeNs) }
            return staged.items.flatMap { (s, tags) in (try? refreshItem(s.rowid, .made(s, Set(tags)))) ?? [] }
        }
        notify(inv)
        noteError(StoreError.noSpace("the disk was too full at the mount to store what was written before it: kept in the staging journal, stored once there is room"))
        settler.noteWrite()
    }

    /// Items the store dropped (purged) before anything was served: out of the catalog.
    public func forget(_ rowids: [Int64]) {
        let inv: [Invalidation] = locked { rowids.flatMap { (try? refreshItem($0, .removed)) ?? [] } }
        notify(inv)
    }

    /// Records a failure for `.marfafs/status` (any thread).
    func noteError(_ error: Error) {
        let text = (error as? FSError).map { "\($0.code == .noSpace ? "no space left on the store's disk" : "I/O error"): \($0.message)" } ?? "\(error)"
        lastFailure.withLock { $0 = (text, Date()) }
    }

    var lastError: (message: String, at: Date)? { lastFailure.withLock { $0 } }

    /// Items in the catalog (all states).
    public var itemCount: Int { locked { catalog.items.count } }

    func locked<T>(_ body: () throws -> T) rethrows -> T {
        lock.lock()
        // Folders numbered meanwhile are recorded by the settler, not while a request waits.
        defer { if inodes.hasUnsaved { settler.wake() }; lock.unlock() }
        return try body()
    }

    // MARK: inodes

    static let rootIno: UInt64 = 1
    static let itemInoBase: UInt64 = 16

    /// Whether an inode is a local-only file's (FS-32).
    public static func isLocalInode(_ ino: UInt64) -> Bool { LocalFiles.owns(ino) }

    func ino(_ n: Node) -> UInt64 {
        switch n {
        case .root: return Self.rootIno
        case .item(let r): return itemIno(r)
        default: return inodes.ino(n)
        }
    }

    func node(_ ino: UInt64) throws -> Node {
        if ino == Self.rootIno { return .root }
        if ino >= Self.itemInoBase && ino < InodeTable.dynamicBase {
            if catalog.detached[ino] != nil { return .detached(ino) }
            let r = Int64(ino - Self.itemInoBase)
            if catalog.items[r] != nil { return .item(r) }
            // An inode of a file saved over an item, maybe over and over (`a` over `b`, then `b`
            // over `c`): the item that has its bytes now.
            var t = r
            for _ in 0..<64 {
                guard let next = catalog.aliases[t] else { break }
                if catalog.items[next] != nil { return .item(next) }
                t = next
            }
            throw FSError(.notFound, "inode \(ino)")
        }
        guard let n = inodes.node(ino) else { throw FSError(.stale, "inode \(ino) is unknown") }
        if case .scratch(let id) = n, catalog.scratch[id] == nil {
            if let t = catalog.scratchAliases[id], catalog.items[t] != nil { return .item(t) }
            throw FSError(.notFound, "scratch file \(id)")
        }
        return n
    }

    /// The inode of a node if the kernel may know it, for invalidations.
    func knownIno(_ n: Node) -> UInt64? {
        switch n {
        case .root: return Self.rootIno
        case .item(let r): return itemIno(r)
        default: return inodes.existing(n)
        }
    }

    // MARK: attributes

    /// A node's attributes before the permission bits and the access and change times.
    func baseAttr(_ n: Node, _ i: UInt64) throws -> FileAttr {
        switch n {
        case .item(let r):
            guard let s = catalog.items[r] else { throw FSError(.notFound, "item \(r)") }
            return FileAttr(ino: i, kind: itemKind(r), size: s.size, mtimeNs: s.mtimeNs, nlink: 1, timeout: cacheTimeout)
        case .detached(let d):
            guard let f = catalog.detached[d] else { throw FSError(.notFound, "inode \(d)") }
            return FileAttr(ino: i, kind: .file, size: f.size, mtimeNs: f.mtimeNs, nlink: 0, timeout: cacheTimeout)
        case .scratch(let id):
            guard let s = catalog.scratch[id] else { throw FSError(.notFound, "scratch file \(id)") }
            if let target = s.link { return FileAttr(ino: i, kind: .symlink, size: Int64(target.utf8.count), mtimeNs: s.mtimeNs, nlink: 1, timeout: cacheTimeout) }
            return FileAttr(ino: i, kind: .file, size: s.size, mtimeNs: s.mtimeNs, nlink: 1, timeout: cacheTimeout)
        case .controlFile(let name):
            let size = Int64(controlSnapshot(name, .stat).utf8.count)
            return FileAttr(ino: i, kind: .file, size: size, mtimeNs: Int64(Date().timeIntervalSince1970 * 1e9), nlink: 1, timeout: 0)
        case .historyVersion(let r, let seq):
            return try historyAttr(i, r, seq)
        case .historyRoot, .historyType, .historyItem, .previewDir:
            return historyDirAttr(i)
        case .previewFile(let r):
            return try previewAttr(i, r)
        case .tagEntry, .linkEntry, .byIDEntry, .vaultLink, .historyLink:
            let target = try readlinkLocked(n)
            return FileAttr(ino: i, kind: .symlink, size: Int64(target.utf8.count), mtimeNs: mtimeOf(n), nlink: 1, timeout: cacheTimeout)
        default:
            let mtime = dirKey(n).flatMap { catalog.dirTimes[$0] } ?? Int64(mountedAt.timeIntervalSince1970 * 1e9)
            return FileAttr(ino: i, kind: .directory, size: 4096, mtimeNs: mtime, nlink: 2 + subdirectoryCount(n), timeout: cacheTimeout)
        }
    }

    func mtimeOf(_ n: Node) -> Int64 {
        switch n {
        case .tagEntry(_, let r), .byIDEntry(let r): return catalog.items[r]?.mtimeNs ?? 0
        case .linkEntry(_, let e):
            return catalog.edges[e].flatMap { Timestamp.parse($0.edge.createdAt) }.map { Int64($0 * 1e9) } ?? 0
        default: return Int64(mountedAt.timeIntervalSince1970 * 1e9)
        }
    }

    public func getattr(_ ino: UInt64, reader: Int32 = 0) throws -> FileAttr {
        if LocalFiles.owns(ino) { return try local.attr(ino: ino) }
        do {
            return try withPreviews(ino) {
                try locked { currentReader = reader; let n = try node(ino); return (try attr(n), Self.isPreview(n)) }
            }
        } catch let e as FSError where e.code == .stale || e.code == .notFound {
            // A directory on a replay's way that a later change removed (its number retired): the
            // kernel checks its permissions as it walks through it.
            if isReplay(reader), let ghost = replayedGhost(ino) { return ghost }
            throw Self.goneIfUnknown(e)
        }
    }

    /// What anyone but a replay is told of a number the daemon no longer knows (a folder removed,
    /// by another device too, while a program holds it, before the kernel has been told): ENOENT,
    /// as a removed directory's listing is natively (`IS_DEADDIR`), which every program and
    /// watcher takes for gone. ESTALE reached `opendir`'s `fstat` and a watcher's rescan as an
    /// error Node does not know (chokidar died on it). A lookup under such a number stays ESTALE,
    /// which the kernel's path walk retries.
    static func goneIfUnknown(_ e: FSError) -> FSError {
        e.code == .stale ? FSError(.notFound, "a removed directory: \(e.message)") : e
    }

    public func lookup(parent: UInt64, name: String, reader: Int32 = 0) throws -> FileAttr {
        guard isReplay(reader) else { return try lookupName(parent: parent, name: name, reader: reader) }
        // A replayed change (FS-25): the names it concerns as they were before it, and the
        // directories on its way that a later change removed as they were when it was applied.
        if let answer = replayedLookup(parent: parent, name: name) { return try answer.get() }
        do { return try lookupName(parent: parent, name: name, reader: reader) } catch let e as FSError where e.code == .notFound {
            if let ghost = replayedWalk(parent: parent, name: name) { return ghost }
            throw e
        }
    }

    private func lookupName(parent: UInt64, name: String, reader: Int32) throws -> FileAttr {
        // A name no directory can hold is ENAMETOOLONG, as a disk answers, not ENOENT.
        if name.utf8.count > Names.maxNameBytes { throw FSError(.nameTooLong, name) }
        if LocalFiles.owns(parent) { return try local.attr(VaultIndex.join(try local.rel(parent), name)) }
        askServerForVersions(parent)
        // One pass under the lock; a name the tree does not have may be a local-only one (FS-32).
        let (found, folder): (FileAttr?, String?) = try withPreviews(parent) {
            try locked {
                currentReader = reader
                let p = try node(parent)
                if let child = try childNode(p, name) {
                    noteShown(child)
                    return ((try attr(child), nil), Self.isPreview(p))
                }
                if case .treeDir(let f) = p { return ((nil, f), false) }
                noteMissing(name, in: p)
                throw FSError(.notFound, name)
            }
        }
        if let found { return found }
        let rel = VaultIndex.join(folder ?? "", name)
        if local.exists(rel) { return try local.attr(rel) }
        locked { if let p = try? node(parent) { noteMissing(name, in: p) } }
        throw FSError(.notFound, name)
    }

    /// A directory's entries (one the daemon no longer knows: `goneIfUnknown`).
    public func readdir(_ ino: UInt64) throws -> [DirEntry] {
        do { return try listDirectory(ino) } catch let e as FSError { throw Self.goneIfUnknown(e) }
    }

    private func listDirectory(_ ino: UInt64) throws -> [DirEntry] {
        if LocalFiles.owns(ino) { return try local.list(try local.rel(ino)) }
        askServerForVersions(ino)
        let (out, folder): ([DirEntry], String?) = try withPreviews(ino) {
            try locked {
                let n = try node(ino)
                guard n.kind == .directory else { throw FSError(.notDirectory, "inode \(ino)") }
                var out: [DirEntry] = []
                for (name, child) in try children(n) {
                    noteShown(child)
                    out.append(DirEntry(name: name, attr: try attr(child)))
                }
                if case .treeDir(let f) = n { return ((out, f), false) }
                return ((out, nil), Self.isPreview(n))
            }
        }
        guard let folder else { return out }
        // A folder's local-only entries (`.git`) show beside its own (FS-32).
        return out + localEntries(folder, besides: Set(out.map(\.name)))
    }

    // MARK: content

    public func readlink(_ ino: UInt64) throws -> String {
        if LocalFiles.owns(ino) { return try local.readlink(ino) }
        let (n, link): (Node, String?) = try locked {
            let n = try node(ino)
            if case .item(let r) = n, itemKind(r) == .symlink { return (n, nil) }
            return (n, try readlinkLocked(n))
        }
        if let link { return link }
        guard case .item(let r) = n else { throw FSError(.invalid, "not a symlink") }
        return try symlinkTarget(r)
    }

    /// `cancelled`: whether the request was interrupted or the mount is going away (only a read
    /// that waits asks: `.marfafs/flush`).
    public func read(_ ino: UInt64, offset: Int64, size: Int, reader: Int32 = 0, cancelled: () -> Bool = { false }) throws -> [UInt8] {
        if LocalFiles.owns(ino) { return try local.read(ino, offset: offset, size: size) }
        let (n, summary, staged): (Node, ItemSummary?, [UInt8]?) = try locked {
            let n = try node(ino)
            // A staged file is read from memory, a spooled blob from its spool file (FS-28).
            if let f = stagedToRead(n) {
                let bytes = f.bytes, k = f.key
                if k.kind == .item { store.noteRead(k.rowid, by: writers.writer(reader), bytes) }
                return (n, nil, Self.slice(bytes, offset: offset, size: size))
            }
            if case .detached(let d) = n { return (n, nil, try readDetached(d, offset: offset, size: size)) }
            if case .item(let r) = n, store.spool.has(r) { return (n, nil, try wrap { try store.spool.read(r, offset: offset, count: size) }) }
            if case .item(let r) = n, var s = catalog.items[r] {
                // A blob file whose new bytes were committed after the catalog last looked: its
                // blob is the store's (its bytes are never the rendering of its properties).
                if TypeSchema.isBlobType(s.type), s.blobRef == nil, let stored = try wrap({ try store.summary(rowid: r) }), stored.blobRef != nil {
                    s.blobRef = stored.blobRef
                    catalog.items[r]?.blobRef = stored.blobRef
                }
                return (n, s, nil)
            }
            return (n, nil, nil)
        }
        if let staged { return staged }
        switch n {
        case .item(let r):
            guard let s = summary else { throw FSError(.notFound, "item \(r)") }
            if TypeSchema.isBlobType(s.type), let h = s.blobRef {
                if let bytes = store.blobs.read(hash: h, offset: offset, count: size) { return bytes }
                // FS-11: fetched from the server on first read (outside the lock: only this read waits).
                if let fetch = fetchBlob, fetch(h), let bytes = store.blobs.read(hash: h, offset: offset, count: size) { return bytes }
                log.error("blob is not in the local cache and could not be fetched", metadata: ["item.id": "\(s.id)", "blob": "\(h)"])
                throw FSError(.io, "blob \(h) of \(s.id) is not cached")
            }
            // What this reader saw is the base of its next save (FS-29).
            let bytes = try store.readText(rowid: r, by: writers.writer(reader))
            return Self.slice(bytes, offset: offset, size: size)
        case .scratch(let id):
            return Self.slice(try wrap { try store.scratchData(id) }, offset: offset, size: size)
        case .historyVersion(let r, let seq):
            return try locked { try historyBytes(r, seq, offset: offset, size: size) }
        case .previewFile(let r):
            return try locked { try previewBytes(r, offset: offset, size: size) }
        case .controlFile(let name):
            return try controlRead(name, offset: offset, size: size, reader: reader, cancelled: cancelled)
        default:
            throw FSError(.isDirectory, "inode \(ino)")
        }
    }

    static func slice(_ bytes: [UInt8], offset: Int64, size: Int) -> [UInt8] {
        guard offset < bytes.count, offset >= 0 else { return [] }
        let end = min(bytes.count, Int(offset) + size)
        return Array(bytes[Int(offset)..<end])
    }

    /// Writes bytes at an offset of a file. An item's bytes commit before the reply and the file
    /// settles later (FS-14). A write that would take the file past its limit is refused whole
    /// (EFBIG) before any work.
    /// `writer`: the thread that writes (its program's save has a base: FS-29).
    public func write(_ ino: UInt64, offset: Int64, data: [UInt8], writer: Int32 = 0) throws -> Int {
        guard offset >= 0, offset <= Int64.max - Int64(data.count) else {
            throw FSError(.tooLarge, "a write to byte \(offset) is past any file's limit")
        }
        if LocalFiles.owns(ino) { return try local.write(ino, offset: offset, data: data) }
        try changeFile(ino, reaching: offset + Int64(data.count), .write(offset: offset, data: data), by: writer)
        return data.count
    }

    /// Changes the bytes of an item (committed now, settled later) or of a scratch file, after
    /// checking that the file may grow to `end` bytes: a text item to a note's limit, a blob item or
    /// a scratch file to one cached blob's. Where the bytes go, and the base of the save a change
    /// begins, are the store's decision (`Store.changeFile`); the catalog takes the new size and time.
    func changeFile(_ ino: UInt64, reaching end: Int64, _ change: Store.StagedChange, by thread: Int32) throws {
        let w = writers.writer(thread)
        // A change that builds on a blob this mount never fetched fetches it first, outside the lock.
        guard let hash = try changeFile(ino, reaching: end, change, by: w, fetched: false) else { return }
        _ = fetchBlob?(hash)
        _ = try changeFile(ino, reaching: end, change, by: w, fetched: true)
    }

    /// `changeFile` in one pass under the lock; returns instead the blob to fetch first
    /// (`uncachedBlob`), unless `fetched`.
    private func changeFile(_ ino: UInt64, reaching end: Int64, _ change: Store.StagedChange, by w: Writer, fetched: Bool) throws -> String? {
        try locked {
            let n = try node(ino)
            let limit: Int64
            let ref: Store.FileRef
            switch n {
            case .item(let r):
                if !fetched, let hash = uncachedBlob(r, change) { return hash }
                limit = catalog.items[r].map { Store.maxFileBytes(type: $0.type) } ?? Int64(Store.maxTextBytes)
                ref = .item(r, type: catalog.items[r]?.type)
            case .scratch(let s): limit = Store.maxBlobBytes; ref = .scratch(s)
            case .detached(let d):
                guard end <= Self.maxDetachedCopy else { throw FSError(.tooLarge, "a removed file held open grows to at most \(Self.maxDetachedCopy) bytes") }
                try changeDetached(d, change)
                changed(n)
                return nil
            case .controlFile: throw FSError(.notPermitted, "control files are read-only")
            case .historyVersion: throw FSError(.readOnly, "history/ is read-only: copy a version over the file to restore it")
            case .previewFile: throw FSError(.readOnly, "previews are the server's, read-only")
            default: throw FSError(.isDirectory, "not a file")
            }
            guard end <= limit else { throw FSError(.tooLarge, "\(end) bytes is past the limit of \(limit) bytes") }
            let f = try wrap { try store.changeFile(ref, change, by: w) }
            changed(n)
            if case .item(let r, _) = ref { wroteUnsettled(r, size: f.size, mtimeNs: f.mtimeNs) }
            else if let s = f.scratch { catalog.addScratch(s); if f.staged { settler.noteWrite() } }
            return nil
        }
    }

    /// `fsync` returns once the file's bytes are durable (FS-15): a staged file's journal, else
    /// the store; for a directory (the names in it), both.
    public func fsync(_ ino: UInt64) throws {
        if LocalFiles.owns(ino) { return try local.fsync(ino) }
        let n = locked { try? node(ino) }
        do {
            switch n {
            case .item(let r)?:
                if store.spool.has(r) { try store.spool.sync(r) } else { try store.syncFile(StagedKey(.item, r)) }
            case .scratch(let s)?: try store.syncFile(StagedKey(.scratch, s))
            case let d? where d.kind == .directory: try store.syncNames()
            default: try store.syncDurably()
            }
        } catch { throw FSError.from(error) }
    }

    func notify(_ inv: [Invalidation]) {
        if !inv.isEmpty, let cb = onInvalidate { cb(inv) }
    }
}

/// glibc's `malloc_trim(3)` (malloc.h is not in Swift's Glibc module).
@_silgen_name("malloc_trim") func marfafs_malloc_trim(_ pad: Int) -> Int32
