import Foundation
import GRDB
import MarfaLayout
import MarfaModel
import GRDBSQLite

/// Writes through the mount commit their bytes at once and settle later (FS-14): a write stores
/// the bytes (`items.raw`, `unsettled = 1`) in one short transaction, with no parsing and no queued
/// mutation; settling parses the bytes into properties and queues the create or update, in one
/// transaction. A crash between the two loses nothing: the next mount settles what is left.
///
/// While an item is unsettled, `raw` may be longer than the file (spare room, so sequential
/// writes are linear, not quadratic); `size` is the file's length.
extension Store {
    /// Writes `data` at `offset` of an item's file; returns the new size and mtime.
    /// `type`: the item's, when the caller knows it (a blob item's bytes go to its spool file).
    /// `writer`: the program that writes (FS-29: a save's base is what it saw).
    public func writeUnsettled(rowid: Int64, offset: Int64, data: [UInt8], type: String? = nil, by writer: Writer = .unknown) throws -> (size: Int64, mtimeNs: Int64) {
        if let done = try spoolWrite(rowid: rowid, offset: offset, data: data, type: type) { return done }
        return try write { db in
            var f = try openUnsettled(db, rowid, patch: true, by: writer)
            let end = Int(offset) + data.count
            try f.reserve(db, max(f.size, end), limit: f.limit)
            if Int(offset) > f.size { try f.put(db, at: f.size, [UInt8](repeating: 0, count: Int(offset) - f.size)) }
            try f.put(db, at: Int(offset), data)
            return try f.finish(db, size: max(f.size, end))
        }
    }

    /// Sets an item's file length (truncate or extend with zeros).
    public func truncateUnsettled(rowid: Int64, size: Int64, type: String? = nil, by writer: Writer = .unknown) throws -> (size: Int64, mtimeNs: Int64) {
        if let done = try spoolTruncate(rowid: rowid, size: size, type: type) { return done }
        return try write { db in
            var f = try openUnsettled(db, rowid, patch: size != 0, by: writer)
            let n = Int(size)
            try f.reserve(db, n, limit: f.limit)
            if n > f.size { try f.put(db, at: f.size, [UInt8](repeating: 0, count: n - f.size)) }
            return try f.finish(db, size: n)
        }
    }

    /// Sets an item's file time (`utimensat`); its `updated_at` stays (FS-28). Returns size and mtime.
    public func setMtime(rowid: Int64, ns: Int64) throws -> (size: Int64, mtimeNs: Int64) {
        if spool.has(rowid) { return try spool.setMtime(rowid, ns: ns) }
        return try write { db in
            guard let row = try db.row("SELECT size, mtime_ns, sync, unsettled FROM items WHERE rowid = ?", [rowid]) else {
                throw StoreError.notFound("item \(rowid)")
            }
            let size: Int64 = row[0]
            if row[1] == ns { return (size, ns) }
            try db.run("UPDATE items SET mtime_ns = ? WHERE rowid = ?", [ns, rowid])
            // The time travels (FS-32) once the item is one the queue sends.
            if !isLocalOnly, row[2] != SyncState.invalid.rawValue, row[3] == 0, var cur = try Self.fetchItem(db, rowid: rowid) {
                cur.mtimeNs = ns
                try enqueueFileTime(db, cur, explicit: true)
            }
            return (size, ns)
        }
    }

    /// An editor's atomic save (FS-13, `saveOver`): `target` takes `source`'s bytes (settled
    /// later) and keeps its identity; `source` disappears (forgotten if the server never saw it,
    /// else trashed).
    func saveUnsettled(_ target: Int64, from source: Int64, by writer: Writer) throws {
        try write { db in
            guard let src = try Self.fetchItem(db, rowid: source) else { throw StoreError.notFound("item \(source)") }
            try beginSave(db, target, by: writer, patch: false)
            if spool.has(source), TypeSchema.isBlobType(try Self.typeOf(db, target)) {
                // A large blob saved over another (rsync's temporary file): the spool file moves.
                let (size, mtime) = try spool.attributes(source)
                try spool.move(source, to: target)
                try db.run("UPDATE items SET raw = NULL, blob_ref = NULL, size = ?, mtime_ns = ?, unsettled = 2 WHERE rowid = ?", [size, mtime, target])
            } else {
                try putUnsettledBytes(db, try currentBytes(db, src), into: target, mtimeNs: src.mtimeNs)
            }
            try forgetOrTrash(db, src)
        }
    }

    /// `target` takes `bytes` as its file (unsettled: parsed and queued when it settles).
    func putUnsettledBytes(_ db: Database, _ bytes: [UInt8], into target: Int64, mtimeNs: Int64? = nil) throws {
        let t = try Self.typeOf(db, target)
        spool.remove(target)
        guard bytes.count <= Self.maxFileBytes(type: t) else { throw StoreError.tooLarge("\(bytes.count) bytes") }
        let blob = TypeSchema.isBlobType(t)
        markUnsettled(target)
        try db.run("UPDATE items SET raw = ?, size = ?, mtime_ns = ?, unsettled = 1\(blob ? ", blob_ref = NULL" : "") WHERE rowid = ?",
                   [Data(bytes), bytes.count, mtimeNs ?? Self.ns(Date()), target])
    }

    static func typeOf(_ db: Database, _ rowid: Int64) throws -> String {
        guard let t = try String.fetchOne(db.cachedStatement(sql: "SELECT type FROM items WHERE rowid = ?"), arguments: [rowid]) else {
            throw StoreError.notFound("item \(rowid)")
        }
        return t
    }

    /// Settles every unsettled item; returns their rowids. In one transaction, or on a disk with
    /// little room (FS-28) in as many as fit in it (`settleBudget`): one transaction for all of
    /// them needed room for all of them in the WAL and again in the database file, failed, and
    /// left the log at its largest, the disk full, every time.
    @discardableResult
    public func settle() throws -> [Int64] {
        guard try hasUnsettled() else { return [] }
        var all: [Int64] = []
        while true {
            let budget = settleBudget()
            let done = try settlingWrite({ db in try settle(db, writtenBefore: .max, limit: .max, givingWay: false, budget: budget) }, settled: \.rows)
            all += done.rows
            guard done.more, !done.rows.isEmpty else { return all }
        }
    }

    /// The bytes of files one settling transaction may take (FS-28): a settled file's row is
    /// written in the WAL, then again in the database file at the checkpoint, before the room of
    /// its unsettled bytes is free again; a quarter of the room the disk has leaves that twice.
    func settleBudget() -> Int64 { Int64(roomInPlace() / 4) }

    func settle(_ db: Database) throws -> [Int64] {
        try settle(db, writtenBefore: .max, limit: .max, givingWay: false).rows
    }

    /// The settler's batch: settles unsettled items last written at or before `writtenBefore`
    /// (nanoseconds), at most `limit` of them, in one transaction. It gives way to other writes:
    /// once one is waiting for the store's writer (a request's `mkdir`, `chmod`, `rename`), the
    /// transaction ends after the file being settled, so that write waits for one file's
    /// settling, not a batch's. Returns the rowids settled, whether more may be waiting (the
    /// batch was full, or it gave way), and whether a save in place was left to its writer.
    ///
    /// A save in place (`open(O_TRUNC)`, then the text written, then `close`) is several calls: a
    /// program descheduled between them on a loaded machine leaves its file empty, or half
    /// written, for longer than the settle window, and that is not its save (settled, the empty
    /// file conflicted with a remote edit and the rest of the text went on in the conflicted
    /// copy). Such an item settles once left alone for `inPlaceSaveQuietNs`, or once its save is
    /// `inPlaceSaveLongestNs` old (an editor saving in place every second, its saves one save, is
    /// still sent); anything that needs it settled (`settleNow`, `settledWrite`) settles it at once.
    public func settleGivingWay(writtenBefore: Int64, limit: Int) throws -> (rows: [Int64], more: Bool, held: Bool) {
        guard try hasUnsettled() else { return ([], false, false) }
        let budget = settleBudget()
        return try settlingWrite({ db in try settle(db, writtenBefore: writtenBefore, limit: limit, givingWay: true, budget: budget) }, settled: \.rows)
    }

    /// How long a save in place must be left alone before the settler takes it, and how long one
    /// waits at most (nanoseconds).
    static let inPlaceSaveQuietNs: Int64 = 1_500_000_000
    static let inPlaceSaveLongestNs: Int64 = 4_000_000_000

    /// Settles the unsettled items last written at or before `writtenBefore`, oldest first, at
    /// most `limit` of them and as many as fit in `budget` bytes (one at least); `givingWay` as
    /// `settleGivingWay` (saves in place wait for their writer).
    private func settle(_ db: Database, writtenBefore: Int64, limit: Int, givingWay: Bool, budget: Int64 = .max) throws -> (rows: [Int64], more: Bool, held: Bool) {
        var held: [Int64] = []
        if givingWay {
            let now = Self.ns(Date())
            for (r, began) in saveBases.savingInPlace() where now - began < Self.inPlaceSaveLongestNs {
                let t = try Int64.fetchOne(db.cachedStatement(sql: "SELECT mtime_ns FROM items WHERE rowid = ? AND unsettled = 1"), arguments: [r])
                if let t, now - t < Self.inPlaceSaveQuietNs { held.append(r) }
            }
        }
        let sized = try Row.fetchAll(db.cachedStatement(sql: "SELECT rowid, size FROM items INDEXED BY items_unsettled WHERE unsettled = 1 AND mtime_ns <= ? ORDER BY mtime_ns, rowid LIMIT ?"),
                                     arguments: [writtenBefore, limit == .max ? -1 : limit + held.count])
            .map { (rowid: $0[0] as Int64, size: $0[1] as Int64) }.filter { !held.contains($0.rowid) }.prefix(limit)
        var taken = 0, bytes: Int64 = 0
        for f in sized {
            guard taken == 0 || bytes + f.size <= budget else { break }
            bytes += f.size; taken += 1
        }
        let rows = sized.prefix(taken).map(\.rowid)
        let done = try settle(db, rows: rows, givingWay: givingWay)
        return (done, done.count < rows.count || taken < sized.count || rows.count == limit, !held.isEmpty)
    }

    /// Settles those of items `rowids` that are unsettled, in one transaction; returns them.
    @discardableResult
    public func settle(rowids: [Int64]) throws -> [Int64] {
        let isUnsettled = "SELECT unsettled = 1 FROM items WHERE rowid = ?"
        // A row not marked unsettled since it was last seen settled is not asked about. The
        // caller holds the mount's lock, under which files are written, and has waited for the
        // commit of its staged files: no marking of these rows is in flight during the read.
        let (maybe, mark) = maybeUnsettled.withLock { m in (rowids.filter { m.rows[$0] != nil }, m.marks) }
        guard !maybe.isEmpty else { return [] }
        // Rows settled already are found by a read: a write transaction would first wait for the
        // writer (the settler's commit of a copy in progress), for each attribute `cp -a` reads.
        let waiting = try readStatement { db in
            try maybe.filter { try Bool.fetchOne(db.cachedStatement(sql: isUnsettled), arguments: [$0]) == true }
        }
        seenSettled(maybe.filter { !waiting.contains($0) }, before: mark)
        guard !waiting.isEmpty else { return [] }
        return try settlingWrite({ db in
            let rows = try waiting.filter { try Bool.fetchOne(db.cachedStatement(sql: isUnsettled), arguments: [$0]) == true }
            try settle(db, rows: rows)
            return rows
        }, settled: { _ in waiting })
    }

    // MARK: rows that may be unsettled (`maybeUnsettled`)
    //
    // Every row with `unsettled = 1` is in `maybeUnsettled`: `markUnsettled` runs before the
    // statement that marks a row, and a row leaves only once seen settled by a read or a
    // transaction begun after its last marking (`seenSettled`). A row not in it has nothing to
    // settle, and `settle(rowids:)` does not ask the database about it (`cp -a` reads thirty
    // attributes of each original, and each read settled the original first).

    /// The rows a store opened now finds unsettled (left so by a store closed before).
    func loadUnsettledMarks() throws {
        let rows = try pool.read { db in try Int64.fetchAll(db, sql: "SELECT rowid FROM items INDEXED BY items_unsettled WHERE unsettled = 1") }
        maybeUnsettled.withLock { m in for r in rows { m.rows[r] = 0 } }
    }

    /// A write transaction that settles rows: those `settled` names (all of them settled when it
    /// commits) leave `maybeUnsettled` unless marked after it began.
    func settlingWrite<T>(_ body: (Database) throws -> T, settled: (T) -> [Int64]) throws -> T {
        // A tuple's elements are evaluated in order: the marks are read before the body runs.
        let (begun, out) = try write { db in (maybeUnsettled.withLock { $0.marks }, try body(db)) }
        seenSettled(settled(out), before: begun)
        return out
    }

    /// Row `r` is about to be marked unsettled (call before the statement runs).
    func markUnsettled(_ r: Int64) {
        maybeUnsettled.withLock { m in m.marks += 1; m.rows[r] = m.marks }
    }

    /// Rows seen settled by a read or a transaction that began when the marks stood at `mark`
    /// leave `maybeUnsettled`, unless marked since (their marking's statement may have come after).
    func seenSettled(_ rows: [Int64], before mark: UInt64) {
        guard !rows.isEmpty else { return }
        maybeUnsettled.withLock { m in
            for r in rows where (m.rows[r] ?? .max) <= mark { m.rows[r] = nil }
        }
    }

    /// Settles `rows`; `givingWay`: stops after a file once another write waits for the writer.
    /// Returns the rows settled.
    @discardableResult
    private func settle(_ db: Database, rows: [Int64], givingWay: Bool = false) throws -> [Int64] {
        var done: [Int64] = []
        for r in rows {
            if givingWay, !done.isEmpty, writersWaiting.load(ordering: .relaxed) > 0 { break }
            done.append(r)
            guard let cur = try Self.fetchItem(db, rowid: r) else { continue }
            let written = try currentBytes(db, cur)
            let now = try applyContent(db, cur, bytes: written, now: Date(timeIntervalSince1970: Double(cur.mtimeNs) / 1e9), mtimeNs: cur.mtimeNs)
            // The file's time stays what the kernel and editors saw at the write, unless the save
            // was merged (FS-29): the file then holds what its writer has not seen, and a newer
            // time tells editors to reload.
            let merged = now.raw.map { $0 != written } ?? false
            if merged || now.mtimeNs != cur.mtimeNs {
                try db.run("UPDATE items SET mtime_ns = ? WHERE rowid = ?", [merged ? max(Self.ns(Date()), cur.mtimeNs + 1) : cur.mtimeNs, r])
            }
        }
        if !done.isEmpty { try recheckBlobs(db) }
        return done
    }

    public func hasUnsettled() throws -> Bool {
        try readStatement { db in try db.exists("SELECT 1 FROM items INDEXED BY items_unsettled WHERE unsettled = 1") }
    }

    /// The file of an unsettled item, open for writing inside a transaction.
    struct UnsettledFile {
        let rowid: Int64
        let isBlob: Bool
        let limit: Int
        var size: Int
        var capacity: Int

        /// Makes sure `raw` has room for `needed` bytes (doubling, so appends stay linear).
        mutating func reserve(_ db: Database, _ needed: Int, limit: Int) throws {
            guard needed <= limit else { throw StoreError.tooLarge("a file of \(needed) bytes is past the limit of \(limit) bytes") }
            guard needed > capacity else { return }
            let newCapacity = min(limit, max(needed, capacity * 2, 4096))
            try db.run("UPDATE items SET raw = zeroblob(?) WHERE rowid = ? AND raw IS NULL", [newCapacity, rowid])
            if db.changesCount == 0 {
                let old = try Data.fetchOne(db.cachedStatement(sql: "SELECT raw FROM items WHERE rowid = ?"), arguments: [rowid]) ?? Data()
                var grown = [UInt8](old.prefix(size))
                grown.append(contentsOf: repeatElement(0, count: newCapacity - grown.count))
                try db.run("UPDATE items SET raw = ? WHERE rowid = ?", [Data(grown), rowid])
            }
            capacity = newCapacity
        }

        /// Writes bytes into `raw` in place (SQLite incremental blob I/O).
        func put(_ db: Database, at offset: Int, _ bytes: [UInt8]) throws {
            guard !bytes.isEmpty else { return }
            var blob: OpaquePointer?
            guard sqlite3_blob_open(db.sqliteConnection, "main", "items", "raw", rowid, 1, &blob) == SQLITE_OK, let blob else {
                throw StoreError.io("cannot open the bytes of item \(rowid): \(String(cString: sqlite3_errmsg(db.sqliteConnection)))")
            }
            defer { sqlite3_blob_close(blob) }
            let rc = bytes.withUnsafeBytes { sqlite3_blob_write(blob, $0.baseAddress, Int32($0.count), Int32(offset)) }
            guard rc == SQLITE_OK else { throw StoreError.io("cannot write the bytes of item \(rowid) (\(rc))") }
        }

        func finish(_ db: Database, size: Int) throws -> (size: Int64, mtimeNs: Int64) {
            let now = Store.ns(Date())
            try db.run("UPDATE items SET size = ?, mtime_ns = ?, unsettled = 1\(isBlob ? ", blob_ref = NULL" : "") WHERE rowid = ?",
                       [size, now, rowid])
            return (Int64(size), now)
        }
    }

    /// `patch`: the change builds on the file's bytes (a write, or a truncate to a length other
    /// than 0), not a whole new text (a truncate to 0 then writes, as `>` and editors save). A
    /// patch is made from the bytes the mount shows now, so the save that follows is not stale
    /// (FS-24): what the mount showed before a remote change is forgotten.
    /// `replacing`: the file was removed and made anew by the writer (`untrashEmptied`): what it
    /// writes replaces the item, as `patch` builds on it (the item as it is is the save's base).
    func openUnsettled(_ db: Database, _ rowid: Int64, patch: Bool, replacing: Bool = false, by writer: Writer = .unknown) throws -> UnsettledFile {
        // length() of a blob reads no content; anything else on `raw` would read it whole.
        guard let row = try db.row("SELECT type, size, unsettled, length(raw) AS capacity FROM items WHERE rowid = ?", [rowid]) else {
            throw StoreError.notFound("item \(rowid)")
        }
        let t: String = row["type"]
        let isBlob = TypeSchema.isBlobType(t)
        let limit = Int(Self.maxFileBytes(type: t))
        // It is marked unsettled when it is written (`UnsettledFile.finish`).
        markUnsettled(rowid)
        var f = UnsettledFile(rowid: rowid, isBlob: isBlob, limit: limit, size: row["size"], capacity: row["capacity"] ?? 0)
        if (row["unsettled"] as Int) == 0, !isBlob {
            // A save begins (FS-29, `Store+Save`); a truncate to nothing begins one in place.
            let onItem = (patch && f.size > 0) || replacing
            try beginSave(db, rowid, by: writer, patch: onItem, inPlace: !patch)
            if onItem { try db.run("UPDATE items SET shown_base = NULL WHERE rowid = ? AND shown_base IS NOT NULL", [rowid]) }
        }
        if (row["unsettled"] as Int) == 0 && (isBlob || row["capacity"] == nil) {
            // A settled blob (in `sqlar`) or a text known only by its properties: its bytes move to `raw`.
            guard let cur = try Self.fetchItem(db, rowid: rowid) else { throw StoreError.notFound("item \(rowid)") }
            let bytes = try currentBytes(db, cur)
            try db.run("UPDATE items SET raw = ? WHERE rowid = ?", [Data(bytes), rowid])
            f.size = bytes.count; f.capacity = bytes.count
        }
        return f
    }

    // MARK: new bytes become properties (every local save of a file lands here)

    /// The properties a text file gives: its front matter and body; the title from the file name
    /// unless the front matter names one.
    static func parseText(_ bytes: [UInt8], type t: TypeSchema, fileName: String?, previous: [String: JSONValue]) throws -> [String: JSONValue] {
        let parsed = try FrontMatter.parse(bytes, bodyField: t.bodyField, titleField: t.titleField)
        var props = parsed.properties
        if !parsed.hasTitleKey {
            if let f = fileName { props[t.titleField] = .string(titleFromFileName(f, type: t)) }
            else if let old = previous[t.titleField] { props[t.titleField] = old }
        }
        return props
    }

    /// Where new bytes of an item come from.
    enum ContentOrigin {
        /// A save from an editor's buffer, which may never have seen a remote change: merged with
        /// it (FS-24).
        case save
        /// An edit the store made on the current text (a tag written into a note): taken as it is.
        case currentText
    }

    /// Stores new bytes for `cur` and queues the change; returns the item as now stored.
    /// `mtimeNs`: the file's time, exactly, when it is not `now` (a settle keeps the time of the
    /// write; a `Date` holds nanoseconds only roughly).
    func applyContent(_ db: Database, _ cur: StoredItem, bytes: [UInt8], now: Date, mtimeNs: Int64? = nil,
                      origin: ContentOrigin = .save) throws -> StoredItem {
        let stored = cur.item
        // What the previous text said, for the tags it gave: its properties, or what could be
        // read of it when it did not parse.
        let saidBefore = cur.sync == .invalid ? cur.raw.flatMap { FrontMatter.salvage($0, bodyField: type(cur.item.type).bodyField) } : cur.item.properties
        var cur = cur
        let t = type(cur.item.type)
        let ts = Timestamp.format(now)
        cur.item.updatedAt = ts
        cur.mtimeNs = mtimeNs ?? Self.ns(now)
        cur.size = Int64(bytes.count)
        if TypeSchema.isBlobType(t.id) {
            guard Int64(bytes.count) <= Self.maxBlobBytes else { throw StoreError.tooLarge("blob of \(bytes.count) bytes") }
            let hash = try putBlob(db, bytes, hash: BlobHash.of(bytes))
            let old = cur.item.properties["blob_ref"]?.stringValue
            if old == hash, cur.sync == .synced || cur.sync == .pending {
                // The same bytes again (`cp -a` back over the file): nothing changes (FS-28).
                try db.run("UPDATE items SET raw = NULL, raw_head = NULL, size = ?, mtime_ns = ?, blob_ref = ?, unsettled = 0 WHERE rowid = ?", [bytes.count, cur.mtimeNs, hash, cur.rowid])
                return cur
            }
            cur = try applyBlob(db, cur, hash: hash, size: Int64(bytes.count), now: now)
            if let old, old != hash { try dropBlobIfUnused(db, old) }
            return cur
        }
        guard bytes.count <= Self.maxTextBytes else { throw StoreError.tooLarge("text file of \(bytes.count) bytes") }
        // A save from a buffer that never saw a remote change is merged with it (FS-24).
        let bytes = origin == .save ? try mergeStaleSave(db, cur, bytes, type: t, now: now) : bytes
        cur.size = Int64(bytes.count)
        cur.raw = bytes
        do {
            let before = cur.item.properties
            cur.item.properties = try Self.parseText(bytes, type: t, fileName: cur.fileName, previous: cur.item.properties)
            if cur.item.properties == before, cur.sync == .synced || cur.sync == .pending {
                // Text that says what the item already holds (a file copied out and back, a save
                // with no change): the bytes are kept, the item is not touched, and the queue only
                // if the text's head changed.
                cur.item.updatedAt = stored.updatedAt
                let (raw, head) = RawText.columns(bytes, properties: cur.item.properties, bodyField: t.bodyField)
                // The head the item had (unsettled bytes leave it in the row until they settle),
                // for a store that sends it.
                let headBefore = isLocalOnly ? head : try Data.fetchOne(db.cachedStatement(sql: "SELECT raw_head FROM items WHERE rowid = ?"), arguments: [cur.rowid])
                try db.run("UPDATE items SET raw = ?, raw_head = ?, size = ?, mtime_ns = ?, unsettled = 0 WHERE rowid = ?", [raw, head, bytes.count, cur.mtimeNs, cur.rowid])
                // Other bytes saying the same (front matter reordered, a comment): they travel as
                // the file's head (`fileForm`).
                if headBefore != head {
                    cur.unsettled = false
                    try enqueue(db, kind: .update, itemID: cur.item.id, payload: [
                        "extensions": .object(fileForm(cur)), "base_version": .int(Int64(cur.item.version)),
                    ], coalesce: true)
                }
                return cur
            }
            cur.sync = .pending; cur.syncError = nil
            let (stem, ext) = Names.stemAndExt(id: cur.item.id, type: t, properties: cur.item.properties, fileName: cur.fileName)
            cur.stem = stem; cur.ext = ext
            let (raw, head) = RawText.columns(bytes, properties: cur.item.properties, bodyField: t.bodyField)
            // What the text says (FS-26): its links go with the properties, in one write of the
            // row; its tags are written first, so a queued create takes them with the properties.
            let said = VaultText.read(properties: cur.item.properties, bodyField: t.bodyField)
            let retagged = try tagsAfterText(db, cur, before: saidBefore, said: said)
            if let retagged { try storeTags(db, cur, retagged.new, replacing: retagged.old) }
            try db.run("UPDATE items SET properties = ?, raw = ?, raw_head = ?, size = ?, stem = ?, ext = ?, updated_at = ?, mtime_ns = ?, sync = 'pending', sync_error = NULL, unsettled = 0, links = ?, \(Self.linksWritten) WHERE rowid = ?",
                           [JSONCoding.encode(cur.item.properties), raw, head, bytes.count, stem, ext, ts, cur.mtimeNs, Self.linksColumn(said.links), cur.rowid])
            cur.unsettled = false
            try enqueueItemChange(db, cur.item, row: cur)
            try enqueueFileTime(db, cur)
            // An item whose create is not waiting in the queue gets its new tags as their own change.
            if let retagged, try cur.item.version > 0 || !Self.pendingCreate(db, cur.item.id) {
                try enqueueTags(db, cur, retagged.new, before: retagged.old)
            }
        } catch let e as FrontMatterError {
            // FS-10: kept byte for byte, marked invalid, not queued until it parses again.
            cur.sync = .invalid; cur.syncError = e.description
            try db.run("UPDATE items SET raw = ?, raw_head = NULL, size = ?, updated_at = ?, mtime_ns = ?, sync = 'invalid', sync_error = ?, unsettled = 0 WHERE rowid = ?",
                           [Data(bytes), bytes.count, ts, cur.mtimeNs, e.description, cur.rowid])
            try followInvalidText(db, cur, bytes, before: saidBefore)
        }
        return cur
    }
}
