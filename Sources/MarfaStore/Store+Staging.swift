import Foundation
import GRDB
import MarfaLayout
import MarfaModel

/// Rowids of new items and scratch files, handed out by the store so that a staged file can have
/// its inode before it has a row (`Staging`). Every insert into `items` and `scratch` takes its
/// rowid here.
final class RowidAllocator: @unchecked Sendable {
    enum Table: String { case items, scratch }
    private let lock = NSLock()
    private var next: [Table: Int64] = [:]

    /// The next rowid of `table`, read from the database the first time.
    func next(_ table: Table, _ db: Database) throws -> Int64 {
        try take(table) { try Self.floor(table, db) }
    }

    func next(_ table: Table, pool: DatabasePool) throws -> Int64 {
        try take(table) { try pool.read { try Self.floor(table, $0) } }
    }

    private func take(_ table: Table, _ floor: () throws -> Int64) throws -> Int64 {
        lock.lock(); defer { lock.unlock() }
        let n = try next[table] ?? floor()
        next[table] = n + 1
        return n
    }

    /// One past the largest rowid the table has or had (AUTOINCREMENT remembers deleted ones).
    private static func floor(_ table: Table, _ db: Database) throws -> Int64 {
        let top = try Int64.fetchOne(db, sql: "SELECT max(rowid) FROM \(table.rawValue)") ?? 0
        let seq = try Int64.fetchOne(db, sql: "SELECT seq FROM sqlite_sequence WHERE name = ?", arguments: [table.rawValue]) ?? 0
        // Numbers handed out for inodes only (`reserveItemNumber`) are never an item's rowid.
        let reserved = table == .items ? try Int64.fetchOne(db, sql: "SELECT max(number) FROM item_numbers") ?? 0 : 0
        return max(top, seq, reserved) + 1
    }
}

extension Store {
    // MARK: staging

    /// Stages a new item made through the mount; its row is written at the next commit. Returns
    /// what the mount shows for it: the summary its row will have.
    public func stageItem(_ item: NewItem) throws -> ItemSummary {
        var n = item
        let id = n.id ?? ItemID.make()
        n.id = id
        return stagedSummary(try staging.createItem(n, rowid: rowids.next(.items, pool: pool)))!
    }

    /// Renames or moves a new item made through the mount that has no row yet: its name, type and
    /// tags change in the journal, nothing is written to SQLite or queued (its create, when it
    /// settles, carries them). Returns what the mount shows for it now; nil if it is not such an
    /// item (its row exists: the caller renames the stored item).
    public func moveStaged(rowid: Int64, type: String, fileName: String, tags: [String]) throws -> ItemSummary? {
        try staging.move(StagedKey(.item, rowid), type: type, fileName: fileName, tags: tags).flatMap(stagedSummary)
    }

    /// Renames or moves a new item that has its row but has never settled (committed from the
    /// staging between `rsync`'s write of its temporary file and the rename): nothing of it is
    /// queued yet, so its row takes the new name, folder and type and nothing settles (its create,
    /// when it settles, carries them). Only folder tags may change. Returns what the mount shows for
    /// it now; nil if it is not such an item (the caller renames the stored item).
    public func moveUnsent(rowid: Int64, type typeName: String, fileName: String, tags: [String]) throws -> ItemSummary? {
        try write { db -> ItemSummary? in
            guard let row = try db.row("SELECT id, type, unsettled, version FROM items WHERE rowid = ?", [rowid]) else { return nil }
            let id: String = row[0], unsettled: Int64 = row[2], version: Int64 = row[3]
            // Written bytes not parsed yet (a spooled blob is `unsettled = 2`), nothing sent: a note
            // may become a file item or the other way.
            guard unsettled == 1, version == 0, try !db.exists("SELECT 1 FROM mutations WHERE item_id = ?", [id]) else { return nil }
            let old = Set(try Self.tags(db, id)), new = Set(tags)
            guard old.symmetricDifference(new).allSatisfy({ $0.hasPrefix(VaultText.folderPrefix) }) else { return nil }
            let t = type(typeName)
            let props = initialProperties(NewItem(id: id, type: typeName, fileName: fileName, tags: tags), t)
            let (stem, ext) = Names.stemAndExt(id: id, type: t, properties: props, fileName: fileName)
            try db.run("UPDATE items SET type = ?, file_name = ?, stem = ?, ext = ?, properties = ? WHERE rowid = ?",
                       [typeName, fileName, stem, ext, JSONCoding.encode(props), rowid])
            for tag in old.subtracting(new) { try db.run("DELETE FROM tags WHERE item_id = ? AND tag = ?", [id, tag]) }
            for tag in new.subtracting(old) { try db.run("INSERT INTO tags(item_id, tag) VALUES (?, ?)", [id, tag]) }
            return try Self.fetchItem(db, rowid: rowid)?.summary
        }
    }

    /// What the mount shows for a new staged item: the summary its row will have.
    func stagedSummary(_ f: StagedFile) -> ItemSummary? {
        guard case .item(let n, let created) = f.origin, let id = n.id else { return nil }
        let t = type(n.type)
        // A usable file name is the name (FS-6); only another one needs the properties.
        let props = Names.isValidComponent(n.fileName) ? [:] : initialProperties(n, t)
        let (stem, ext) = Names.stemAndExt(id: id, type: t, properties: props, fileName: n.fileName)
        return ItemSummary(rowid: f.key.rowid, id: id, type: n.type, stem: stem, ext: ext, size: f.size, mtimeNs: f.mtimeNs,
                           createdAt: Timestamp.format(Date(timeIntervalSince1970: Double(created) / 1e9)), state: n.state, blobRef: nil)
    }

    /// Stages a new scratch file (FS-14).
    public func stageScratch(dir: String, name: String) throws -> ScratchFile {
        scratchFile(ofStaged: try staging.createScratch(dir: dir, name: name, rowid: rowids.next(.scratch, pool: pool)))!
    }

    public func scratchFile(ofStaged f: StagedFile) -> ScratchFile? {
        guard case .scratch(let dir, let name) = f.origin else { return nil }
        return ScratchFile(rowid: f.key.rowid, dir: dir, name: name, size: f.size, mtimeNs: f.mtimeNs)
    }

    /// Writes every staged file to the store in one transaction: new items as unsettled rows
    /// (they settle as any written file does), scratch files as scratch rows, an item's new bytes
    /// (a save over it) as its unsettled file; then starts a new journal generation. Nothing can
    /// be staged meanwhile (the staging lock is held throughout); a commit in flight (the
    /// settler's) ends first.
    ///
    /// While a full disk's room is owed, they are committed in place, a batch that fits in the
    /// room the disk has at a time (as the settler's commit is, `beginQuietCommit`), the WAL cut
    /// after each: one transaction for them all would fill the disk with its WAL, and fail.
    public func commitStaged() throws {
        guard owesRoom else {
            return try staging.commit({ files, g, _ in try writeStaged(files, generation: g) }, durable: { try syncDurably() })
        }
        let everything = (since: Int64.max, stagedBefore: Int64.max)
        while let c = try staging.beginCommit(quiet: everything, room: roomInPlace()) {
            try finishBegun(c) { files, g, dead in try writeStaged(files, generation: g, dead: dead) }
            reclaimAfterFullDisk()
            // (A journal of an older build's format: committed whole, at once.)
            if c.dead == nil { return }
        }
        if !staging.isEmpty { throw StoreError.noSpace("no room yet to store the staged files (\(staging.totalBytes) bytes)") }
    }

    /// Ends a commit begun with `room` (in place, if the journal can be punched); a batch the disk
    /// refuses gives the reserve back for the next (the files already written come first).
    private func finishBegun(_ c: Staging.PendingCommit, _ write: Staging.Write) throws {
        do {
            try staging.finishCommit(c, write, durable: { try syncDurably() })
        } catch StoreError.noSpace(let why) where c.dead != nil {
            _ = releaseReserve()
            throw StoreError.noSpace(why)
        }
    }

    /// The settler's commit, begun (`beginQuietCommit`) and not yet written.
    public struct QuietCommit: Sendable {
        let pending: Staging.PendingCommit
        /// How many files it commits.
        public var count: Int { pending.files.count }
    }

    /// Begins the settler's commit of the files quiet since `quiet.since` (nanoseconds, wall
    /// clock) or staged before `quiet.stagedBefore`, and of new bytes of stored items: the files
    /// that stay are written again in the journal's next generation, and the ones chosen are
    /// *committing* until `finishQuietCommit`: still staged (reads get their bytes), while a change
    /// to one, or a question that decides one (`isStaged`, `isNewlyStaged`, `commitStaged(ifAnyOf:)`,
    /// `changeFile`, `saveOver`, `syncFile`), waits for the end of the commit. Call it with the
    /// lock under which the mount asks and then acts (its requests' lock): no request's question
    /// and act fall on either side of it. Nil if nothing is to be committed.
    ///
    /// While a full disk's room is owed (`owesRoom`), the commit is made in place, a batch that
    /// fits in the room the disk has at a time (`Staging.beginInPlace`).
    public func beginQuietCommit(_ quiet: (since: Int64, stagedBefore: Int64)) throws -> QuietCommit? {
        try staging.beginCommit(quiet: quiet, room: owesRoom ? roomInPlace() : nil).map(QuietCommit.init)
    }

    /// Whether settling may go on (FS-28): a settled file's row takes more room than an unsettled
    /// one's, in the WAL first. While a full disk's room is owed and short, storing what is staged
    /// and cutting the WAL come first; settling waits for 4 MiB of room in place.
    public var roomToSettle: Bool { !owesRoom || roomInPlace() >= 4 << 20 }

    /// The room a commit in place may take: what the disk has free, less what a WAL not cut since
    /// the last batch may need in the database file when it is (its checkpoint). Committing more
    /// into a log that cannot be cut moves room from the journal to the log, and what the log
    /// holds needs room again in the database.
    func roomInPlace() -> Int {
        // Cut first if owed: a log cut needs no room in the database file.
        if staging.debt.wal.load(ordering: .relaxed) { truncateWAL() }
        var st = stat()
        let log = staging.debt.wal.load(ordering: .relaxed) && stat(path + "-wal", &st) == 0 ? Int(st.st_size) : 0
        return max(0, freeRoom() - log)
    }

    /// The bytes the store's file system has free for it.
    func freeRoom() -> Int {
        var sv = statvfs()
        let dir = (path as NSString).deletingLastPathComponent
        guard statvfs(dir.isEmpty ? "." : dir, &sv) == 0 else { return 0 }
        return Int(sv.f_bavail) * Int(sv.f_frsize)
    }

    /// Writes what `beginQuietCommit` chose to the store in one transaction, with no lock of the
    /// mount's held: requests on other files go on meanwhile (the store's writer is busy, so one
    /// that must write waits for it). On failure the files stay staged.
    ///
    /// A new text file quiet for the settle window is settled as it is committed (FS-14): parsed
    /// before the transaction begins, and written once, with its create queued, as `import` writes
    /// one. It would settle in the next batch anyway; written unsettled, it was written twice, and
    /// its bytes copied once more for its history. Returns the rows settled so; the mount's view
    /// of them is brought up to date by the caller, as after a batch of `settleGivingWay`.
    ///
    /// A file larger than `settleAtCommitBytes` (a note is a few kilobytes) is committed unsettled
    /// and settles in a batch: its parsing would hold back the commit of every other file, and a
    /// batch gives way to requests where the commit does not.
    ///
    /// A settled file takes more room than an unsettled one (its text parsed into properties, its
    /// create queued). When the disk refuses the commit, the same files go in unsettled at once,
    /// and for `settleAtCommitPause` seconds after, files are committed unsettled: a nearly full
    /// disk takes them a little at a time, as it did before, and they are not parsed again at
    /// every try.
    @discardableResult
    public func finishQuietCommit(_ c: QuietCommit) throws -> [Int64] {
        // Nothing may throw before `finishCommit`, which ends the commit begun.
        let prepared = prepareSettled(c.pending.files.filter { c.pending.quiet.contains($0.key) })
        var settled: [Int64] = []
        try finishBegun(c.pending) { files, g, dead in settled = try writeStaged(files, generation: g, dead: dead, settling: prepared) }
        return settled
    }

    /// The new text files among `files` parsed to be written settled by the commit that writes
    /// them (`writeStaged(_:generation:settling:)`): none larger than `settleAtCommitBytes`, none
    /// for `settleAtCommitPause` seconds after the disk refused such a commit. One that cannot be
    /// prepared goes in unsettled.
    private func prepareSettled(_ files: [StagedFile]) -> [StagedKey: PreparedItem] {
        guard Self.ns(Date()) >= settleAtCommitFrom.load(ordering: .relaxed) else { return [:] }
        var prepared: [StagedKey: PreparedItem] = [:]
        for f in files where f.bytes.count <= Self.settleAtCommitBytes {
            guard case .item(var n, let created) = f.origin, !TypeSchema.isBlobType(n.type) else { continue }
            n.content = f.bytes
            prepared[f.key] = try? prepareItem(n, createdNs: created)
        }
        return prepared
    }

    /// `files` written in one transaction, those `prepared` from the bytes they hold now written
    /// settled (with `modes`); returns their rows. When the disk refuses it, the same files go in
    /// unsettled at once, and commits settle nothing for `settleAtCommitPause` seconds.
    private func writeStaged(_ files: [StagedFile], generation g: Int64, dead: Staging.Dead? = nil,
                             settling prepared: [StagedKey: PreparedItem], modes: [Int64: UInt16] = [:]) throws -> [Int64] {
        var chosen: [StagedKey: PreparedItem] = [:]
        for f in files { if let p = prepared[f.key], p.new.content == f.bytes { chosen[f.key] = p } }
        do {
            try writeStaged(files, generation: g, dead: dead, settled: chosen, modes: modes)
            return files.compactMap { chosen[$0.key] != nil ? $0.key.rowid : nil }
        } catch StoreError.noSpace where !chosen.isEmpty {
            settleAtCommitFrom.store(Self.ns(Date()) + Int64(Self.settleAtCommitPause * 1e9), ordering: .relaxed)
            try writeStaged(files, generation: g, dead: dead)
            return []
        }
    }

    /// Seconds the settler's commits write new files unsettled after the disk refused one.
    static let settleAtCommitPause: Double = 30
    /// The largest file the settler's commit settles.
    static let settleAtCommitBytes = 32 << 10

    /// Staged files written in one transaction, which names generation `g + 1` as the journal's
    /// generation not yet committed, or with `dead` (a commit in place) the journal's records
    /// that are dead now, its generation unchanged.
    /// `settled`: new items written settled, as prepared (`finishQuietCommit`), with `modes`.
    private func writeStaged(_ files: [StagedFile], generation g: Int64, dead: Staging.Dead? = nil, settled: [StagedKey: PreparedItem] = [:],
                             modes: [Int64: UInt16] = [:]) throws {
        try write { db in
            for f in files {
                switch f.origin {
                case .item(var n, let created):
                    if let p = settled[f.key] {
                        _ = try insertPrepared(db, p, rowid: f.key.rowid, mtimeNs: f.mtimeNs)
                        // Its bits go in its row, with its create (as an import's do).
                        if let bits = modes[f.key.rowid], let stored = Self.storedMode(bits & 0o7777, default: Self.defaultFileMode) {
                            try db.run("UPDATE items SET mode = ? WHERE rowid = ?", [Int64(stored), f.key.rowid])
                        }
                        continue
                    }
                    n.content = f.bytes
                    markUnsettled(f.key.rowid)
                    _ = try insertItem(db, n, rowid: f.key.rowid, unsettled: true, createdNs: created, mtimeNs: f.mtimeNs)
                case .scratch(let dir, let name):
                    _ = try putScratch(db, dir: dir, name: name, data: f.bytes, rowid: f.key.rowid, mtimeNs: f.mtimeNs)
                case .overlay:
                    try putUnsettledBytes(db, f.bytes, into: f.key.rowid, mtimeNs: f.mtimeNs)
                }
            }
            if let dead {
                try Self.nameDead(db, dead)
            } else {
                try db.run("INSERT OR REPLACE INTO meta(key, value) VALUES ('staging_generation', ?)", [String(g + 1)])
            }
        }
    }

    /// Names `dead` the journal's dead records (`Staging.Dead`), read back by `recoverStaged`.
    static func nameDead(_ db: Database, _ dead: Staging.Dead) throws {
        try db.run("INSERT OR REPLACE INTO meta(key, value) VALUES ('staging_dead', ?)", [dead.text])
    }

    /// Commits what a killed mount left staged (its journal), before the store is used for
    /// anything else; then the journal is ready for new files. The mount, `import` and `resync`
    /// call this once, holding the store's lock.
    /// `keepOnFullDisk` (the mount): when the disk is too full to commit them (FS-28), even with
    /// the reserve given back, the files stay staged, the journal as it is and ready for more, and
    /// they are committed once there is room; without it the error is thrown.
    @discardableResult
    public func recoverStaged(keepOnFullDisk: Bool = false) throws -> Int {
        let (g, dead) = try pool.read { db in
            (try String.fetchOne(db, sql: "SELECT value FROM meta WHERE key = 'staging_generation'").flatMap { Int64($0) } ?? 0,
             try String.fetchOne(db, sql: "SELECT value FROM meta WHERE key = 'staging_dead'").flatMap(Staging.Dead.init(text:)))
        }
        // Blob files a killed mount was writing settle from their spool files.
        try recoverSpools()
        let (files, last) = try staging.recover(generation: g, dead: dead, durable: { try syncDurably() })
        guard !files.isEmpty else {
            try staging.startGeneration(g, fresh: true)
            return 0
        }
        // The journal is left as it is until the commit has made it history; the commit starts
        // a generation past every one it names.
        staging.restore(files, generation: last)
        // A disk without room for them twice over (journal and WAL) would be filled by the attempt
        // to store them at once, its WAL left at its largest: the mount stores them in place, a
        // batch at a time (`beginQuietCommit`), once the reserve is given back.
        let short = { self.freeRoom() < 2 * self.staging.totalBytes + Self.reserveBytes }
        if keepOnFullDisk, short(), !releaseReserve() || short() {
            try staging.resume()
            return files.count
        }
        do {
            try commitStaged()
        } catch StoreError.noSpace(let why) {
            // A full disk (FS-28): the reserve is given back for the commit; failing that, the
            // mount keeps the files staged.
            if releaseReserve(), (try? commitStaged()) != nil { return files.count }
            guard keepOnFullDisk else { throw StoreError.noSpace(why) }
            try staging.resume()
        } catch StoreError.notFound(let what) {
            // Records that name rows this store does not have: a journal left beside a store
            // that was deleted or replaced. It is kept whole under another name (said in
            // `unrecoveredJournal`), and this store starts a journal of its own.
            let aside = try staging.setAside()
            unrecoveredJournal.withLock { $0 = (aside, what) }
            try staging.startGeneration(g, fresh: true)
            return 0
        }
        return files.count
    }

    /// What the mount shows of the files left staged (a full disk at its start): new items with
    /// the tags they were made with, scratch files, and items' staged new bytes.
    public func stagedFiles() -> (items: [(ItemSummary, tags: [String])], scratch: [ScratchFile], overlays: [StagedFile]) {
        var out: (items: [(ItemSummary, tags: [String])], scratch: [ScratchFile], overlays: [StagedFile]) = ([], [], [])
        for f in staging.list() {
            switch f.origin {
            case .item(let n, _): if let s = stagedSummary(f) { out.items.append((s, n.tags)) }
            case .scratch: if let s = scratchFile(ofStaged: f) { out.scratch.append(s) }
            case .overlay: out.overlays.append(f)
            }
        }
        return out
    }

    // MARK: what is staged (safe from any thread: the staging has its own lock)

    /// Commits everything staged if one of `keys` is staged (its row is needed now).
    public func commitStaged(ifAnyOf keys: StagedKey...) throws {
        try commitStaged(ifAnyOf: keys)
    }

    public func commitStaged(ifAnyOf keys: [StagedKey]) throws {
        if keys.contains(where: staging.contains) { try commitStaged() }
    }

    /// Commits everything staged if one of `keys` is staged, as `commitStaged(ifAnyOf:)`, and
    /// settles the new text files among `keys` as they are committed: parsed first and written
    /// once, with their create queued and `modes` (the permission bits they were given before
    /// they had a row), as the settler's commit writes a quiet one. The caller wants them settled
    /// now (an attribute written to a copy in progress: `cp -a` wrote the original's id to each
    /// copy, which committed it unsettled and settled it in a second transaction). Other files go
    /// in unsettled. Returns the rows settled so. Call it with the lock under which the mount
    /// changes files (their bytes cannot change between the parse and the commit; they are
    /// compared anyway, and a file that changed goes in unsettled).
    public func commitStaged(settling keys: [StagedKey], modes: [Int64: UInt16] = [:]) throws -> [Int64] {
        guard keys.contains(where: staging.contains) else { return [] }
        let prepared = prepareSettled(keys.compactMap(staging.file))
        var settled: [Int64] = []
        try staging.commit({ files, g, _ in settled = try writeStaged(files, generation: g, settling: prepared, modes: modes) },
                           durable: { try syncDurably() })
        return settled
    }

    public func stagedFile(_ k: StagedKey) -> StagedFile? { staging.file(k) }
    /// Whether `k` is a file made through the mount that has no row yet.
    public func isNewlyStaged(_ k: StagedKey) -> Bool { staging.isNew(k) }
    public func isStaged(_ k: StagedKey) -> Bool { staging.contains(k) }
    /// Whether nothing is staged.
    public var stagingIsEmpty: Bool { staging.isEmpty }
    /// How many files are staged.
    public var stagedFileCount: Int { staging.count }

    /// New bytes staged for item `rowid` (a save over it): its file until they are committed.
    public func stagedOverlay(_ rowid: Int64) -> StagedFile? {
        guard let f = staging.file(StagedKey(.item, rowid)), case .overlay = f.origin else { return nil }
        return f
    }

    /// A change to a staged file's bytes or time.
    public enum StagedChange: Sendable {
        case write(offset: Int64, data: [UInt8])
        case truncate(size: Int64)
        case mtime(ns: Int64)

        /// Only the file's time changes (its bytes stay).
        public var isTime: Bool { if case .mtime = self { return true }; return false }
    }

    /// Changes staged file `k`, appended to the journal before it returns. A file that would grow
    /// past what is kept in memory (`Staging.maxFileBytes`) is not changed here: every staged
    /// file is committed and nil returned, and the caller makes the change in the store. When all
    /// staged bytes pass `Staging.maxTotalBytes`, everything staged is committed after the change.
    public func changeStaged(_ k: StagedKey, _ change: StagedChange) throws -> StagedFile? {
        let f: StagedFile
        switch change {
        case .write(let offset, let data):
            if offset + Int64(data.count) > Int64(Staging.maxFileBytes) { try commitStaged(); return nil }
            f = try staging.write(k, offset: offset, data: data)
        case .truncate(let size):
            if size > Int64(Staging.maxFileBytes) { try commitStaged(); return nil }
            f = try staging.truncate(k, size: size)
        case .mtime(let ns):
            f = try staging.setMtime(k, ns: ns)
        }
        if staging.totalBytes > Staging.maxTotalBytes { try commitStaged() }
        return f
    }

    /// Forgets a staged file (a scratch file removed before it was ever committed).
    public func dropStaged(_ k: StagedKey) throws { try staging.drop(k) }

    /// `fsync` of a file (FS-15): returns once its bytes are durable, by the journal while it is
    /// staged, else (committed meanwhile, or never staged) by the store.
    public func syncFile(_ k: StagedKey) throws {
        while let g = staging.generation(ifStaged: k) {
            try staging.sync()
            // Still the same generation: the file's records are durable. Else it was committed,
            // or it stayed staged and was written again in the new generation (a partial commit).
            if staging.generation == g { return }
        }
        try syncDurably()
    }

    /// `fsync` of a directory (FS-15): the names in it, staged and stored, are durable.
    public func syncNames() throws {
        try staging.sync()
        try syncDurably()
    }
}
