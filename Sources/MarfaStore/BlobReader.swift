import Foundation
import GRDBSQLite
import MarfaModel

/// Reads ranges of cached blobs (FS-11) through SQLite's incremental blob I/O on a read-only
/// connection of its own, keeping a few blob handles open so sequential reads of a large blob
/// cost one seek each. Thread-safe.
public final class BlobReader: @unchecked Sendable {
    private let lock = NSLock()
    private var db: OpaquePointer?
    private var open: [(hash: String, handle: OpaquePointer, size: Int64, used: UInt64)] = []
    private var tick: UInt64 = 0
    private let path: String

    private var lastUse = Date.distantPast
    /// When the handles open now began to pin their snapshot.
    private var pinnedSince: Date?
    private var reaper: DispatchSourceTimer?

    init(path: String) throws {
        self.path = path
        // Open handles hold a read snapshot, which keeps SQLite from checkpointing the WAL:
        // close them once reads have paused, and at least every second while reads never pause
        // (else a file read over and over while others are written grows the WAL without bound).
        let t = DispatchSource.makeTimerSource(queue: .global(qos: .utility))
        t.schedule(deadline: .now() + 0.25, repeating: 0.25)
        t.setEventHandler { [weak self] in self?.closeIdle() }
        t.resume()
        reaper = t
    }

    private func closeIdle() {
        lock.lock(); defer { lock.unlock() }
        guard !open.isEmpty else { return }
        let now = Date()
        if now.timeIntervalSince(lastUse) > 0.2 || now.timeIntervalSince(pinnedSince ?? now) > 1 { dropAll() }
    }

    deinit {
        reaper?.cancel()
        for h in open { sqlite3_blob_close(h.handle) }
        if let db { sqlite3_close_v2(db) }
    }

    private func connection() -> OpaquePointer? {
        if let db { return db }
        var c: OpaquePointer?
        guard sqlite3_open_v2(path, &c, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nil) == SQLITE_OK else {
            if let c { sqlite3_close_v2(c) }
            return nil
        }
        sqlite3_exec(c, "PRAGMA mmap_size = 4294967296", nil, nil, nil)
        db = c
        return c
    }

    /// Bytes `offset..<offset+count` of the blob `hash`; nil when the blob is not cached.
    public func read(hash: String, offset: Int64, count: Int) -> [UInt8]? {
        lock.lock(); defer { lock.unlock() }
        tick += 1
        lastUse = Date()
        guard let entry = handle(hash) else { return nil }
        if offset >= entry.size { return [] }
        let n = Int(min(Int64(count), entry.size - offset))
        var buf = [UInt8](repeating: 0, count: n)
        let rc = buf.withUnsafeMutableBytes { sqlite3_blob_read(entry.handle, $0.baseAddress, Int32(n), Int32(offset)) }
        if rc != SQLITE_OK { dropAll(); return nil }
        return buf
    }

    public func size(hash: String) -> Int64? {
        lock.lock(); defer { lock.unlock() }
        return handle(hash)?.size
    }

    private func dropAll() {
        for h in open { sqlite3_blob_close(h.handle) }
        open.removeAll()
        pinnedSince = nil
    }

    private func handle(_ hash: String) -> (handle: OpaquePointer, size: Int64)? {
        if let found = lookup(hash) { return found }
        // Open handles pin an older read snapshot; a blob cached since then needs a fresh one.
        guard !open.isEmpty else { return nil }
        dropAll()
        return lookup(hash)
    }

    private func lookup(_ hash: String) -> (handle: OpaquePointer, size: Int64)? {
        if let i = open.firstIndex(where: { $0.hash == hash }) {
            open[i].used = tick
            return (open[i].handle, open[i].size)
        }
        guard let c = connection() else { return nil }
        var stmt: OpaquePointer?
        guard sqlite3_prepare_v2(c, "SELECT rowid, sz, length(data) FROM sqlar WHERE name = ?", -1, &stmt, nil) == SQLITE_OK else { return nil }
        defer { sqlite3_finalize(stmt) }
        let t = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
        sqlite3_bind_text(stmt, 1, hash, -1, t)
        guard sqlite3_step(stmt) == SQLITE_ROW else { return nil }
        let rowid = sqlite3_column_int64(stmt, 0)
        let sz = sqlite3_column_int64(stmt, 1)
        guard sqlite3_column_int64(stmt, 2) == sz else { return nil }  // compressed entries are not written here
        sqlite3_reset(stmt)
        var h: OpaquePointer?
        guard sqlite3_blob_open(c, "main", "sqlar", "data", rowid, 0, &h) == SQLITE_OK, let h else { return nil }
        if open.count >= 8, let lru = open.indices.min(by: { open[$0].used < open[$1].used }) {
            sqlite3_blob_close(open[lru].handle); open.remove(at: lru)
        }
        if open.isEmpty { pinnedSince = Date() }
        open.append((hash, h, sz, tick))
        return (h, sz)
    }
}
