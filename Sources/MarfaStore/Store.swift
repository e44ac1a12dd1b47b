import Crypto
import Foundation
import Synchronization
import GRDB
import GRDBSQLite
import Logging
import MarfaLayout
import MarfaModel

/// Errors of the store, mapped to errno by the filesystem core.
public enum StoreError: Error, Equatable, CustomStringConvertible {
    case notFound(String)
    case exists(String)
    case tooLarge(String)
    case notEmpty(String)
    case io(String)
    /// The disk (or the store's quota) is full.
    case noSpace(String)

    public var description: String {
        switch self {
        case .notFound(let s): return "not found: \(s)"
        case .exists(let s): return "already exists: \(s)"
        case .tooLarge(let s): return "too large: \(s)"
        case .notEmpty(let s): return "not empty: \(s)"
        case .io(let s): return "store I/O: \(s)"
        case .noSpace(let s): return "no space left: \(s)"
        }
    }
}

/// The local SQLite replica (GRDB, WAL). Owns items, metadata, edges, types, the `sqlar` blob cache
/// and the mutation queue. Every local change is committed together with its queued mutation in one
/// transaction. Never does network I/O; never imports the filesystem.
public final class Store: Sendable {
    public let path: String
    let pool: DatabasePool
    /// Read-only connections for reads of one statement (`readStatement`), taken in turn: reads
    /// of files run outside the core's lock, several at once (`rg`'s threads).
    let statements: [DatabaseQueue]
    let statementTurn = Atomic<Int>(0)
    let typeCache: TypeCache
    public let blobs: BlobReader
    /// Files made through the mount, not yet in the store (see `Staging`).
    let staging: Staging
    /// Folders made by `mkdir` whose rows the next write transaction writes (`stageLocalTag`).
    let pendingFolders: PendingFolders
    let pendingRemovals: PendingRemovals
    /// Blob files being written, until they settle (see `Spool`).
    public let spool: Spool
    /// Blobs copied into the cache and not yet named by their item, with how many copies hold them.
    let heldBlobs = Mutex<[String: Int]>([:])
    /// When the WAL's size was last looked at (`boundWAL`).
    let walCheck = Mutex<Date>(.distantPast)
    /// Writes waiting for the store's writer (`write`): the settler's batch gives way to them
    /// (`settleGivingWay`).
    let writersWaiting = Atomic<Int>(0)
    /// When the settler's commits settle quiet new files again (nanoseconds, wall clock): a
    /// while after the disk refused one (`finishQuietCommit`).
    let settleAtCommitFrom = Atomic<Int64>(0)
    /// Counts the write transactions committed (`commitCount`).
    private let commits = CommitCounter()
    /// The items `item(rowid:)` read last, and the commit count they were read at.
    private let recentItems = Mutex<(commits: Int, items: [(rowid: Int64, item: StoredItem)])>((-1, []))
    /// Rows that may be unsettled, with the number of their last marking (`markUnsettled`).
    let maybeUnsettled = Mutex<(marks: UInt64, rows: [Int64: UInt64])>((0, [:]))
    /// Blobs let go while something still named them (an unsettled save): looked at again when
    /// files settle (`recheckBlobs`).
    let blobsToRecheck = Mutex<Set<String>>([])
    /// No server has seen this store: queued changes keep no payload (`useLocalOnly`).
    let localOnly = Mutex(false)
    /// A staging journal recovery set aside (`recoverStaged`): its new name, and the row it named
    /// that this store does not have. Nil when none was.
    public let unrecoveredJournal = Mutex<(path: String, reason: String)?>(nil)
    /// The device label in the names of conflicted copies made here (FS-20, FS-24).
    public let device = Mutex(ProcessInfo.processInfo.hostName)
    /// Who makes the changes of the transaction under way, for history (`Store+History`).
    let versionOrigin = Mutex(VersionOrigin.local)
    /// The newest server frame of each item skipped while the item had changes of its own to send
    /// (`applyItem`), taken once they are all answered (`acknowledge`): its event may have come
    /// while our last write was on its way, so the answer to that write is older than it.
    let heldRemote = Mutex<[String: RemoteChange]>([:])
    /// During a store's first sync, its never-sent items by type and name (`Store+Twins`): read
    /// once, so each server item the first sync brings is looked up, not searched for.
    let twinCandidates = Mutex<[String: [Int64]]?>(nil)
    /// Versions kept since the history's size cap was last checked.
    let historyChecks = Mutex(0)
    /// Whether the writing connection has its history trigger.
    let historyReady = Mutex(false)
    let announced = Mutex(StoreChanges())
    let observers = Mutex<[@Sendable (StoreChanges) -> Void]>([])
    let rowids = RowidAllocator()
    /// Item numbers set since the last writing transaction (`setItemNumber`).
    let pendingNumbers = Mutex<[(number: Int64, rowid: Int64)]>([])
    /// What each writer last saw of each text item, and the saves under way (FS-29, `Store+Save`).
    let saveBases = SaveBases()
    /// The largest text file accepted (a note is text, not a disk image).
    public static let maxTextBytes = 16 << 20
    /// The room for one file's own `user.*` attributes, names and values together (the largest
    /// value Linux passes, XATTR_SIZE_MAX).
    public static let maxXattrBytes = 64 << 10
    /// The largest blob accepted through a write: one `sqlar` row, below SQLite's 1 GB value limit.
    public static let maxBlobBytes: Int64 = 900 << 20
    /// The largest file an item of `type` takes through a write.
    public static func maxFileBytes(type: String) -> Int64 { TypeSchema.isBlobType(type) ? maxBlobBytes : Int64(maxTextBytes) }

    /// The memory map of the pool's readers: none. A read transaction that begins after any
    /// commit drops its connection's map whole (SQLite unmaps it: a TLB shootdown on every core)
    /// and faults its pages in again, which for what is read back right after a write (an item's
    /// facts after an `unlink`: 13 % of it) costs more than the copies into the page cache it
    /// saves. Files' bytes are read through `statements`, which keep theirs: a `grep -r` makes no
    /// commit between its reads.
    static let readerMmapBytes = 0

    public init(path: String) throws {
        self.path = path
        let dir = (path as NSString).deletingLastPathComponent
        if !dir.isEmpty { try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true) }
        var config = Configuration()
        config.busyMode = .timeout(10)
        config.maximumReaderCount = 6
        config.prepareDatabase { db in
            try db.run("PRAGMA synchronous = NORMAL")
            // The WAL shrinks back after a large transaction (a blob entering the cache).
            try db.run("PRAGMA journal_size_limit = 16777216")
            // The writer reads through a memory map (no copy into SQLite's page cache); the
            // pool's readers do not (`Store.readerMmapBytes`).
            try db.run("PRAGMA mmap_size = \(db.configuration.readonly ? Store.readerMmapBytes : 4_294_967_296)")
            try db.run("PRAGMA cache_size = -32768")
            // MARFAFS_SLOW_SQL_MS=N: statements slower than N ms go to standard error.
            if let ms = ProcessInfo.processInfo.environment["MARFAFS_SLOW_SQL_MS"].flatMap(Double.init) {
                db.trace(options: .profile) { event in
                    if case .profile(let statement, let duration) = event, duration * 1000 >= ms {
                        FileHandle.standardError.write(Data("slow SQL (\(Int(duration * 1000)) ms): \(statement.expandedSQL)\n".utf8))
                    }
                }
            }
        }
        pool = try Self.openPool(path, config)
        try Self.useIncrementalVacuum(pool)
        try Schema.migrator().migrate(pool)
        var reading = Configuration()
        reading.readonly = true
        reading.busyMode = .timeout(10)
        reading.prepareDatabase { db in
            try db.run("PRAGMA mmap_size = 4294967296")
            try db.run("PRAGMA cache_size = -8192")
        }
        statements = try (0..<4).map { _ in try DatabaseQueue(path: path, configuration: reading) }
        pool.add(transactionObserver: commits, extent: .databaseLifetime)
        typeCache = TypeCache(try pool.read { db in
            try Row.fetchAll(db, sql: "SELECT json FROM types").compactMap {
                try? JSONCoding.decode(TypeSchema.self, from: $0["json"] as String)
            }
        })
        // A store known to be local-only (`useLocalOnly`) is so from its opening on, until it is
        // bound to a server: what is queued before the mount says so (the recovery of a journal,
        // the settler's first passes) keeps no payload either.
        let local = try pool.read { try Self.recordedBinding($0) } == false
        localOnly.withLock { $0 = local }
        blobs = try BlobReader(path: path)
        staging = Staging(path: path + "-staged")
        pendingFolders = PendingFolders(path: path + "-folders")
        pendingRemovals = PendingRemovals(path: path + "-removals")
        spool = Spool(directory: path + "-spool")
        try loadUnsettledMarks()
    }

    /// Opens the pool. GRDB makes the WAL non-empty first if it is missing or empty (a commit),
    /// which a disk with no room refuses (FS-28). So the store never leaves its WAL empty
    /// (`truncateWAL` leaves a commit in it; the daemon never closes its connections, so SQLite's
    /// checkpoint on the last close, which deletes the log, does not run). A store whose log is
    /// gone all the same (an older build, a copy without it) has its reserve given back for that
    /// commit.
    static func openPool(_ path: String, _ config: Configuration) throws -> DatabasePool {
        do {
            return try DatabasePool(path: path, configuration: config)
        } catch let e as DatabaseError where e.resultCode == .SQLITE_FULL {
            guard unlink(path + "-reserve") == 0 else {
                throw StoreError.noSpace("cannot open \(path): the disk has no room for its log (a few KiB)")
            }
            do { return try DatabasePool(path: path, configuration: config) } catch {
                throw storeError(error)
            }
        }
    }

    /// How many write transactions have committed since the store was opened, whoever made them
    /// (a request, the settler, the sync engine): counted on the writer as each commits, before
    /// the call that made it returns. A read taken with the count in hand is still the store's
    /// while the count is the same (`facts(_:)`).
    public var commitCount: Int { commits.count.load(ordering: .acquiring) }

    /// Free pages are given back to the file system (FS-28): a new store is made with
    /// `auto_vacuum = INCREMENTAL`; an older one is converted once (a `VACUUM`).
    static func useIncrementalVacuum(_ pool: DatabasePool) throws {
        try pool.writeWithoutTransaction { db in
            guard try Int.fetchOne(db, sql: "PRAGMA auto_vacuum") != 2 else { return }
            // The mode takes effect only through a VACUUM once the file exists (cheap for a new store).
            try db.execute(sql: "PRAGMA auto_vacuum = INCREMENTAL")
            try db.execute(sql: "VACUUM")
        }
    }

    /// Returns the store's free pages to the file system when there are many (after blobs or
    /// items were deleted).
    public func shrink(minimumFreeBytes: Int64 = 4 << 20) throws {
        try pool.writeWithoutTransaction { db in
            let free = try Int64.fetchOne(db, sql: "PRAGMA freelist_count") ?? 0
            let page = try Int64.fetchOne(db, sql: "PRAGMA page_size") ?? 4096
            guard free * page >= minimumFreeBytes else { return }
            try db.execute(sql: "PRAGMA incremental_vacuum")
            try db.execute(sql: "PRAGMA wal_checkpoint(PASSIVE)")
        }
        ensureReserve()
    }

    // MARK: types

    public func type(_ id: String) -> TypeSchema { typeCache.get(id) }
    public func allTypes() -> [TypeSchema] { typeCache.all() }

    // MARK: reads

    /// A read made of one statement, on a read-only connection of its own (`statements`). SQLite
    /// runs a lone statement in an implicit transaction of its own (one snapshot of a WAL
    /// database), so the explicit one `pool.read` opens is not needed; that and the pool's
    /// bookkeeping (a `BEGIN` and a `COMMIT` prepared anew each time, the schema's version, a
    /// reader taken from the pool) cost more than the statement itself: most of an editor's save
    /// over a note, which reads the bytes the save began from under the core's lock. A read of more
    /// than one statement that must agree uses `pool.read`.
    func readStatement<T>(_ body: (Database) throws -> T) throws -> T {
        let turn = statementTurn.add(1, ordering: .relaxed).oldValue
        return try statements[turn % statements.count].unsafeRead(body)
    }

    public func allSummaries() throws -> [ItemSummary] {
        let seen = removals
        return try pool.read { db in try Row.fetchAll(db, sql: "SELECT \(ItemSummary.columns) FROM items").map(ItemSummary.init(row:)) }.map { overlaid($0, seen) }
    }

    public func summary(rowid: Int64) throws -> ItemSummary? {
        let seen = removals
        return try readStatement { db in
            try db.row("SELECT \(ItemSummary.columns) FROM items WHERE rowid = ?", [rowid]).map(ItemSummary.init(row:))
        }.map { overlaid($0, seen) }
    }

    public func summary(id: String) throws -> ItemSummary? {
        let seen = removals
        return try readStatement { db in
            try db.row("SELECT \(ItemSummary.columns) FROM items WHERE id = ?", [id]).map(ItemSummary.init(row:))
        }.map { overlaid($0, seen) }
    }

    public func edge(id: String) throws -> EdgeRecord? {
        try readStatement { db in try db.row("SELECT * FROM edges WHERE id = ?", [id]).map(EdgeRecord.init(row:)) }
    }

    /// (item rowid, tag) for every tag of every item.
    public func allTags() throws -> [(Int64, String)] {
        try pool.read { db in
            try Row.fetchAll(db, sql: "SELECT items.rowid AS r, tags.tag AS t FROM tags JOIN items ON items.id = tags.item_id")
                .map { ($0["r"], $0["t"]) }
        }
    }

    public func localTags() throws -> [String] {
        let seen = pendingFolders.seen
        return Array(pendingFolders.localTags(try pool.read { db in try String.fetchAll(db, sql: "SELECT tag FROM local_tags") }, seen))
    }

    public func allEdges() throws -> [EdgeRecord] {
        try pool.read { db in try Row.fetchAll(db, sql: "SELECT * FROM edges").map(EdgeRecord.init(row:)) }
    }

    public func edgeDirs() throws -> [(String, String)] {
        try pool.read { db in try Row.fetchAll(db, sql: "SELECT item_id, edge_type FROM edge_dirs").map { ($0[0], $0[1]) } }
    }

    /// Item `rowid` as stored. The last few read are kept with the commit count they were read
    /// at, and given again while no write has committed since (`commitCount`): a file's
    /// attributes are read one after another (`cp -a`, `getfattr -d`, `tar --xattrs`: some thirty
    /// reads of one row, each parsing its properties).
    public func item(rowid: Int64) throws -> StoredItem? {
        let count = commitCount, seen = removals
        if let kept = recentItems.withLock({ $0.commits == count ? $0.items.last { $0.rowid == rowid }?.item : nil }) { return overlaid(kept, seen) }
        let found = try readStatement { db in try Self.fetchItem(db, rowid: rowid) }
        if let found {
            recentItems.withLock { kept in
                // A read taken before a newer one's commit count is not kept.
                if kept.commits != count {
                    guard count > kept.commits else { return }
                    kept = (count, [])
                }
                kept.items.removeAll { $0.rowid == rowid }
                kept.items.append((rowid, found))
                if kept.items.count > 4 { kept.items.removeFirst() }
            }
        }
        return found.map { overlaid($0, seen) }
    }

    public func tags(itemID: String) throws -> [String] {
        try readStatement { db in try Self.tags(db, itemID) }
    }

    static func fetchItem(_ db: Database, rowid: Int64) throws -> StoredItem? {
        try db.row("SELECT * FROM items WHERE rowid = ?", [rowid]).map(StoredItem.init(row:))
    }

    static func tags(_ db: Database, _ itemID: String) throws -> [String] {
        try String.fetchAll(db.cachedStatement(sql: "SELECT tag FROM tags WHERE item_id = ? ORDER BY tag"), arguments: [itemID])
    }

    /// The bytes of a text item's file: what was written (FS-9), else the rendering (FS-8).
    public func textContent(rowid: Int64) throws -> [UInt8] {
        // The row is read, and its bytes made outside the connection's queue.
        let found = try readStatement { db in try db.row("SELECT raw, raw_head, size, properties, type, blob_ref FROM items WHERE rowid = ?", [rowid]) }
        guard let row = found else { throw StoreError.notFound("item \(rowid)") }
        if let d: Data = row["raw"] { return [UInt8](d.prefix(row["size"] as Int)) }
        // A blob item's bytes are its blob, never a rendering of its properties.
        if TypeSchema.isBlobType(row["type"]) {
            guard let h: String = row["blob_ref"] else { return [] }
            return blobs.read(hash: h, offset: 0, count: row["size"] as Int) ?? []
        }
        if let joined = RawText.join(head: row["raw_head"], propertiesJSON: row["properties"]) { return joined }
        return Array(render(type: type(row["type"]), properties: JSONCoding.object(from: row["properties"])).utf8)
    }

    func render(type: TypeSchema, properties: [String: JSONValue]) -> String {
        FrontMatter.render(properties, bodyField: type.bodyField, titleField: type.titleField)
    }

    public func mutations() throws -> [Mutation] {
        try pool.read { db in try Row.fetchAll(db, sql: "SELECT * FROM mutations ORDER BY seq").map(Mutation.init(row:)) }
    }

    public func itemCount() throws -> Int {
        try pool.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM items") ?? 0 }
    }

    public func invalidItems() throws -> [(String, String?)] {
        try pool.read { db in
            try Row.fetchAll(db, sql: "SELECT id, sync_error FROM items WHERE sync IN ('invalid','rejected') ORDER BY rowid").map { ($0[0], $0[1]) }
        }
    }

    /// Every source id that starts with `prefix` (what an import looks up, read once).
    public func sourceIDs(withPrefix prefix: String) throws -> Set<String> {
        try pool.read { db in
            Set(try String.fetchAll(db, sql: "SELECT source_id FROM items WHERE source_id >= ? AND source_id < ?", arguments: [prefix, prefix + "\u{10FFFF}"]))
        }
    }

    public func item(sourceID: String) throws -> StoredItem? {
        let seen = removals
        return try pool.read { db in try db.row("SELECT * FROM items WHERE source_id = ?", [sourceID]).map(StoredItem.init(row:)) }.map { overlaid($0, seen) }
    }

    /// Makes every committed change durable on local disk (FS-15 `fsync`): the WAL and the
    /// database file are synced (a commit is in one or, checkpointed, in the other; SQLite syncs
    /// the log before a checkpoint copies it back). Nothing is written, so a full disk does not
    /// refuse it. Taken as the store's writer: no commit is halfway meanwhile.
    ///
    /// Synced through SQLite's own handles of the two files (`SQLITE_FCNTL_JOURNAL_POINTER`,
    /// `SQLITE_FCNTL_FILE_POINTER`), never a descriptor of the mount's: closing any descriptor of a
    /// file drops every POSIX lock the process holds on it, SQLite's shared lock on the database
    /// among them, and the next `sqlite3` of another program to close the store then took it for
    /// the last user: it checkpointed and deleted the WAL and shared memory the mount was still
    /// writing to, and what the mount wrote after was gone at its next start.
    public func syncDurably() throws {
        try pool.writeWithoutTransaction { db in
            for (op, name) in [(SQLITE_FCNTL_JOURNAL_POINTER, "-wal"), (SQLITE_FCNTL_FILE_POINTER, "")] {
                var file: UnsafeMutablePointer<sqlite3_file>?
                guard sqlite3_file_control(db.sqliteConnection, "main", op, &file) == SQLITE_OK else {
                    throw Spool.error("cannot reach \(path + name) to sync it")
                }
                // A log not open (none since the last cut) has nothing to sync.
                guard let file, let sync = file.pointee.pMethods?.pointee.xSync else { continue }
                guard sync(file, SQLITE_SYNC_NORMAL) == SQLITE_OK else { throw Spool.error("cannot sync \(path + name)") }
            }
        }
    }

    func write<T>(_ body: (Database) throws -> T) throws -> T {
        defer { boundWAL() }
        let numbers = takePendingNumbers()
        do {
            // The history's temporary tables and triggers are made outside any transaction: made
            // in one that fails (a full disk), they went with its rollback, and every later write
            // failed on a missing table.
            if !historyReady.withLock({ $0 }) {
                try pool.writeWithoutTransaction { db in try Self.prepareHistory(db) }
                historyReady.withLock { $0 = true }
            }
            // Counted until its transaction begins (GRDB runs writes one at a time, in order).
            var waiting = true
            writersWaiting.add(1, ordering: .relaxed)
            defer { if waiting { writersWaiting.subtract(1, ordering: .relaxed) } }
            return try pool.write { db in
                waiting = false
                writersWaiting.subtract(1, ordering: .relaxed)
                // First: the body may remove an item, and its numbers with it; or a folder made
                // meanwhile, whose row it may look for. What waits beside the store in the order
                // it was made: the files' removals, then the folders (removed, then made).
                try Self.writeNumbers(db, numbers)
                try flushRemovals(db)
                try pendingFolders.flush(db)
                let result = try body(db)
                // Whatever the body changed, the bytes items had are kept as their history (FS-33).
                try keepVersions(db)
                return result
            }
        } catch {
            // Rolled back with the transaction: written with the next one.
            if !numbers.isEmpty { pendingNumbers.withLock { $0 = numbers + $0 } }
            let e = Self.storeError(error)
            if case StoreError.noSpace = e { staging.debt.met() }
            throw e
        }
    }

    /// A full disk as `noSpace`, from SQLite's result code; other errors as they are.
    public static func storeError(_ error: Error) -> Error {
        if let e = error as? DatabaseError, e.resultCode == .SQLITE_FULL { return StoreError.noSpace(e.message ?? "database or disk is full") }
        return error
    }

    /// A write that first settles every unsettled item, so queued mutations keep the order of the
    /// changes (an item's create before its tags, edges or transitions).
    func settledWrite<T>(_ body: (Database) throws -> T) throws -> T {
        try settlingWrite({ db in (try settle(db), try body(db)) }, settled: \.0).1
    }
}

/// Registered types, read on every naming decision; guarded for use from FUSE threads.
final class TypeCache: @unchecked Sendable {
    private let lock = NSLock()
    private var types: [String: TypeSchema]
    init(_ list: [TypeSchema]) { types = Dictionary(list.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a }) }
    func get(_ id: String) -> TypeSchema {
        lock.lock(); defer { lock.unlock() }
        if let t = types[id] { return t }
        // Unknown types name items like notes; a subtype inherits its parent's hints.
        if let dot = id.lastIndex(of: "."), let parent = types[String(id[..<dot])] {
            var t = parent; t.id = id; t.parent = parent.id; return t
        }
        return TypeSchema(id: id, label: id, fields: [:])
    }
    func all() -> [TypeSchema] { lock.lock(); defer { lock.unlock() }; return Array(types.values) }
    func add(_ list: [TypeSchema]) { lock.lock(); defer { lock.unlock() }; for t in list { types[t.id] = t } }
}

extension BlobHash {
    /// The name of a blob with these bytes.
    public static func of(_ bytes: [UInt8]) -> String { name(digest: SHA256.hash(data: bytes)) }
}

/// Counts the commits of the store's writer (`Store.commitCount`); observes no change itself.
private final class CommitCounter: TransactionObserver, Sendable {
    let count = Atomic<Int>(0)
    func observes(eventsOfKind eventKind: DatabaseEventKind) -> Bool { false }
    func databaseDidChange(with event: DatabaseEvent) {}
    func databaseDidCommit(_ db: Database) { count.add(1, ordering: .releasing) }
    func databaseDidRollback(_ db: Database) {}
}
