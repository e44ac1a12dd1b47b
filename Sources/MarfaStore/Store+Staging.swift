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
        return max(top, seq) + 1
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
        let f = try staging.createItem(n, rowid: rowids.next(.items, pool: pool))
        let t = type(n.type)
        // A usable file name is the name (FS-6); only another one needs the properties.
        let props = Names.isValidComponent(n.fileName) ? [:] : initialProperties(n, t)
        let (stem, ext) = Naming.stemAndExt(id: id, type: t, properties: props, fileName: n.fileName)
        return ItemSummary(rowid: f.key.rowid, id: id, type: n.type, stem: stem, ext: ext, size: f.size, mtimeNs: f.mtimeNs,
                           createdAt: Timestamp.format(Date(timeIntervalSince1970: Double(f.mtimeNs) / 1e9)), state: n.state, blobRef: nil)
    }

    /// Stages a new scratch file (FS-14).
    public func stageScratch(dir: String, name: String) throws -> ScratchFile {
        scratchFile(ofStaged: try staging.createScratch(dir: dir, name: name, rowid: rowids.next(.scratch, pool: pool)))!
    }

    public func scratchFile(ofStaged f: Staging.File) -> ScratchFile? {
        guard case .scratch(let dir, let name) = f.origin else { return nil }
        return ScratchFile(rowid: f.key.rowid, dir: dir, name: name, size: f.size, mtimeNs: f.mtimeNs)
    }

    /// Writes every staged file to the store in one transaction: new items as unsettled rows
    /// (they settle as any written file does), scratch files as scratch rows, an item's new bytes
    /// (a save over it) as its unsettled file; then starts a new journal generation.
    public func commitStaged() throws {
        let files = staging.all
        if files.isEmpty { return }
        let g = staging.generation
        try write { db in
            for f in files {
                switch f.origin {
                case .item(var n, let created):
                    n.content = f.bytes
                    _ = try insertItem(db, n, rowid: f.key.rowid, unsettled: true, createdNs: created, mtimeNs: f.mtimeNs)
                case .scratch(let dir, let name):
                    _ = try putScratch(db, dir: dir, name: name, data: f.bytes, rowid: f.key.rowid, mtimeNs: f.mtimeNs)
                case .overlay:
                    try absorbBytes(db, f.bytes, into: f.key.rowid, mtimeNs: f.mtimeNs)
                }
            }
            try db.run("INSERT OR REPLACE INTO meta(key, value) VALUES ('staging_generation', ?)", [String(g + 1)])
        }
        staging.clear()
        // Starting the journal over drops records an fsync may have made durable: the commit
        // that holds their files is made durable first.
        if staging.compactsNext { try syncDurably() }
        try staging.startGeneration(g + 1)
    }

    /// Commits what a killed mount left staged (its journal), before the store is used for
    /// anything else; then the journal is ready for new files. The mount, `import` and `resync`
    /// call this once, holding the store's lock.
    @discardableResult
    public func recoverStaged() throws -> Int {
        let g = try pool.read { db in
            try String.fetchOne(db, sql: "SELECT value FROM meta WHERE key = 'staging_generation'").flatMap { Int64($0) } ?? 0
        }
        // Blob files a killed mount was writing settle from their spool files.
        try recoverSpools()
        let (files, last) = try staging.recover(generation: g)
        guard !files.isEmpty else {
            try staging.startGeneration(g, fresh: true)
            return 0
        }
        // The journal is left as it is until the commit has made it history; the commit starts
        // a generation past every one it names.
        staging.restore(files, generation: last)
        try commitStaged()
        return files.count
    }
}
