import Foundation
import MarfaModel

/// Files made through the mount start out staged (FS-14, FS-15): their bytes live in memory and
/// every change is appended to a journal file next to the store (`<store>-staged`) before the
/// request is answered, so a killed daemon loses nothing that was written. A staged file reaches
/// SQLite when the mount is quiet (the settle window), when it grows past `maxFileBytes`, or
/// when anything else must see it (a rename, an attribute, the queue): `Store.commitStaged`
/// writes every staged file in one transaction and starts a new journal generation. A burst of
/// new files, or an editor's temporary file, thus costs one append per request instead of a
/// transaction.
///
/// The journal: an 8-byte header (`MFSJ`, format 1), then records of `length u32, checksum u32
/// (FNV-1a of the payload), payload`. A record whose length or checksum does not hold ends the
/// journal (a write torn by the kill). Each commit appends a record that begins the next
/// generation (truncating the file first only once it has grown past `compactBytes`: a truncate
/// costs as much as an fsync); the store's `meta` row `staging_generation` names the generation
/// not yet committed. Recovery replays every generation from that one on: older ones were
/// committed, and a later one follows a commit a power cut may have undone.
///
/// Live changes and recovery apply records the same way (`apply(_:to:)`).
///
/// Not thread-safe on its own: the filesystem's lock guards it (and `Store.commitStaged`).
public final class Staging: @unchecked Sendable {
    public enum Kind: UInt8, Sendable { case item = 0, scratch = 1 }

    public struct Key: Hashable, Sendable {
        public var kind: Kind
        public var rowid: Int64
        public init(_ kind: Kind, _ rowid: Int64) { self.kind = kind; self.rowid = rowid }
    }

    /// What a staged file becomes when it is committed.
    public enum Origin: Sendable {
        /// A new item (its id minted at create, FS-22), with the time it was made.
        case item(NewItem, createdNs: Int64)
        /// A scratch file (FS-14) in a directory (`types/core.note`, `tags/x`).
        case scratch(dir: String, name: String)
        /// New bytes of an item that has its row (an editor's save over it, FS-13).
        case overlay
    }

    public struct File: Sendable {
        public var key: Key
        public var origin: Origin
        public var bytes: [UInt8]
        public var mtimeNs: Int64
        public var size: Int64 { Int64(bytes.count) }
    }

    /// A staged file larger than this is committed and written on in the store.
    public static let maxFileBytes = 1 << 20
    /// All staged bytes together; past this, everything staged is committed.
    public static let maxTotalBytes = 64 << 20

    public let path: String
    private var fd: Int32 = -1
    /// The journal's length (only this object writes it, always at the end).
    private var end: off_t = 0
    public private(set) var generation: Int64 = 0
    private var ready = false
    /// The generation a failed reset still owes.
    private var resetTo: Int64?
    private var files: [Key: File] = [:]
    public private(set) var totalBytes = 0
    /// Items with staged new bytes, for the sync engine's thread (its own lock).
    private let overlayLock = NSLock()
    private var overlays: Set<Int64> = []

    /// Whether item `rowid` has staged new bytes (safe from any thread).
    public func hasOverlay(_ rowid: Int64) -> Bool {
        overlayLock.lock(); defer { overlayLock.unlock() }
        return overlays.contains(rowid)
    }

    init(path: String) {
        self.path = path
    }

    deinit { if fd >= 0 { close(fd) } }

    public var isEmpty: Bool { files.isEmpty }
    /// Whether a staged file is a new one (no row yet), not new bytes of an existing item.
    public func isNew(_ key: Key) -> Bool {
        guard let f = files[key] else { return false }
        if case .overlay = f.origin { return false }
        return true
    }
    public var count: Int { files.count }
    public func file(_ key: Key) -> File? { files[key] }
    public func contains(_ key: Key) -> Bool { files[key] != nil }
    var all: [File] { files.values.sorted { ($0.key.kind.rawValue, $0.key.rowid) < ($1.key.kind.rawValue, $1.key.rowid) } }

    // MARK: changes (each appended to the journal before it is applied in memory)

    /// A new item (`item.id` already minted); its bytes come by `write`.
    public func createItem(_ item: NewItem, rowid: Int64) throws -> File {
        let now = Store.ns(Date())
        var n = item
        n.content = []
        return try record(.create(File(key: Key(.item, rowid), origin: .item(n, createdNs: now), bytes: [], mtimeNs: now)))
    }

    public func createScratch(dir: String, name: String, rowid: Int64) throws -> File {
        try record(.create(File(key: Key(.scratch, rowid), origin: .scratch(dir: dir, name: name), bytes: [], mtimeNs: Store.ns(Date()))))
    }

    /// Writes `data` at `offset` (zeros fill a gap); the caller checks the size limits.
    public func write(_ key: Key, offset: Int64, data: [UInt8]) throws -> File {
        try record(.write(key, offset: offset, data: data, mtimeNs: Store.ns(Date())))
    }

    public func truncate(_ key: Key, size: Int64) throws -> File {
        try record(.truncate(key, size: size, mtimeNs: Store.ns(Date())))
    }

    /// Sets a staged file's mtime (`touch -d`, `rsync -a`): a truncate to its own size.
    public func setMtime(_ key: Key, ns: Int64) throws -> File {
        guard let f = files[key] else { throw StoreError.notFound("staged file \(key.rowid)") }
        return try record(.truncate(key, size: f.size, mtimeNs: ns))
    }

    /// An editor's save (FS-13): item `target` takes the bytes of new staged file `source`, which
    /// is gone; the item's file is staged until the next commit. Returns the item's staged file.
    public func absorb(_ source: Key, into target: Int64) throws -> File {
        // The file keeps its time, as a rename keeps a file's (rsync sets it before the rename).
        let f = try record(.absorb(source, into: target, mtimeNs: files[source]?.mtimeNs ?? Store.ns(Date())))
        if case .overlay = f.origin { overlayLock.lock(); overlays.insert(target); overlayLock.unlock() }
        return f
    }

    /// Forgets a staged file (a scratch file removed before it was ever committed).
    public func drop(_ key: Key) throws {
        guard files[key] != nil else { return }
        _ = try record(.drop(key))
    }

    /// Makes every appended record durable (FS-15 `fsync` of a staged file).
    public func sync() throws {
        try openIfNeeded()
        guard fdatasync(fd) == 0 else { throw StoreError.io("cannot sync \(path): \(String(cString: strerror(errno)))") }
    }

    /// Appends a change to the journal, then applies it in memory; returns the file it leaves
    /// changed (for an absorb, the item's).
    @discardableResult
    private func record(_ rec: Record) throws -> File {
        if let k = rec.key, files[k] == nil { throw StoreError.notFound("staged file \(k.rowid)") }
        try append(rec)
        let touched = rec.touched
        totalBytes -= touched.reduce(0) { $0 + (files[$1]?.bytes.count ?? 0) }
        Self.apply(rec, to: &files)
        totalBytes += touched.reduce(0) { $0 + (files[$1]?.bytes.count ?? 0) }
        // What a drop leaves is nothing; its caller does not look.
        return touched.last.flatMap { files[$0] } ?? File(key: rec.key ?? Key(.item, 0), origin: .overlay, bytes: [], mtimeNs: 0)
    }

    /// What one record does to a set of staged files: live, and when a journal is replayed.
    static func apply(_ rec: Record, to files: inout [Key: File]) {
        func change(_ k: Key, _ body: (inout File) -> Void) {
            // Taken out of the table first, so the change does not copy the bytes.
            guard var f = files.removeValue(forKey: k) else { return }
            body(&f)
            files[k] = f
        }
        switch rec {
        case .begin: break
        case .create(let f): files[f.key] = f
        case .write(let k, let offset, let data, let t): change(k) { $0.bytes.put(data, at: Int(offset)); $0.mtimeNs = t }
        case .truncate(let k, let size, let t): change(k) { $0.bytes.resize(to: Int(size)); $0.mtimeNs = t }
        case .drop(let k): files.removeValue(forKey: k)
        case .absorb(let k, let target, let t):
            guard let src = files.removeValue(forKey: k) else { return }
            let tk = Key(.item, target)
            if files[tk] == nil { files[tk] = File(key: tk, origin: .overlay, bytes: [], mtimeNs: t) }
            change(tk) { $0.bytes = src.bytes; $0.mtimeNs = t }
        }
    }

    // MARK: commit and recovery (Store+Staging)

    /// Forgets every staged file once the store has committed them; the journal then starts its
    /// next generation (`startGeneration`).
    func clear() {
        files.removeAll()
        totalBytes = 0
        overlayLock.lock(); overlays.removeAll(); overlayLock.unlock()
    }

    /// Puts recovered files back in memory (their records are in the journal already).
    func restore(_ list: [File], generation g: Int64) {
        generation = g
        for f in list { files[f.key] = f; totalBytes += f.bytes.count }
        let restored = list.compactMap { f -> Int64? in if case .overlay = f.origin { return f.key.rowid }; return nil }
        overlayLock.lock(); overlays.formUnion(restored); overlayLock.unlock()
    }

    /// Whether the next generation starts the journal over (it has grown past `compactBytes`):
    /// the store's commit must be durable first, or a power cut could lose both.
    var compactsNext: Bool { end > Self.compactBytes }

    /// Starts generation `g` (the store's `meta` already says `g`); the journal starts over
    /// when it has grown past `compactBytes`, or when `fresh`.
    func startGeneration(_ g: Int64, fresh: Bool = false) throws {
        try openIfNeeded()
        ready = false
        resetTo = g
        generation = g
        end = lseek(fd, 0, SEEK_END)
        if fresh || end < 8 || end > Self.compactBytes {
            guard ftruncate(fd, 0) == 0 else { throw StoreError.io("cannot reset \(path): \(String(cString: strerror(errno)))") }
            end = 0
            var header = Array("MFSJ".utf8)
            Record.putU32(&header, 1)
            try writeAll(header)
        }
        ready = true
        try append(.begin(g))
    }

    /// The journal's size past which a new generation starts it over.
    static let compactBytes: off_t = 8 << 20

    /// The files the journal holds from generation `g` on (the ones the store has not committed),
    /// and the last generation it names.
    func recover(generation g: Int64) throws -> (files: [File], last: Int64) {
        guard let data = FileManager.default.contents(atPath: path) else { return ([], g) }
        let bytes = [UInt8](data)
        guard bytes.count >= 8, Array(bytes[0..<4]) == Array("MFSJ".utf8) else { return ([], g) }
        var r = Record.Reader(bytes: bytes, at: 4)
        guard (try? r.u32()) == 1 else { return ([], g) }
        var pos = 8
        var out: [Key: File] = [:]
        var current: Int64?
        while pos + 8 <= bytes.count {
            var h = Record.Reader(bytes: bytes, at: pos)
            guard let len = try? Int(h.u32()), let sum = try? h.u32(), pos + 8 + len <= bytes.count else { break }
            let payload = bytes[(pos + 8)..<(pos + 8 + len)]
            guard Record.checksum(payload) == sum, let rec = try? Record.decode(Array(payload)) else { break }
            if case .begin(let x) = rec {
                // Generations before `g` are committed. A later one follows a commit the store
                // may have lost (a power cut: its WAL was not synced): its files are kept too.
                if x <= g { out.removeAll() }
                current = max(current ?? x, x)
            }
            Self.apply(rec, to: &out)
            pos += 8 + len
        }
        // A record torn by the kill ends the journal: it is cut off, or the records appended from
        // now on would sit behind it, where the next recovery never reads.
        if pos < bytes.count {
            try openIfNeeded()
            guard ftruncate(fd, off_t(pos)) == 0 else { throw Spool.error("cannot cut the torn end of \(path)") }
        }
        guard let current, current >= g else { return ([], max(g, current ?? g)) }
        return (out.values.sorted { ($0.key.kind.rawValue, $0.key.rowid) < ($1.key.kind.rawValue, $1.key.rowid) }, current)
    }

    // MARK: the file

    private func openIfNeeded() throws {
        if fd >= 0 { return }
        fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw StoreError.io("cannot open \(path): \(String(cString: strerror(errno)))") }
    }

    private func append(_ rec: Record) throws {
        // Until the store's generation is known (recovery), or after a failed reset, nothing may be
        // appended: the records would belong to a generation recovery ignores.
        if !ready, let g = resetTo { try startGeneration(g) }
        guard ready else { throw StoreError.io("the staging journal \(path) is not ready") }
        var out = rec.encoded(headroom: 8)
        let payload = out.count - 8
        let sum = Record.checksum(out[8...])
        out.withUnsafeMutableBytes { b in
            b.storeBytes(of: UInt32(payload).littleEndian, toByteOffset: 0, as: UInt32.self)
            b.storeBytes(of: sum.littleEndian, toByteOffset: 4, as: UInt32.self)
        }
        let start = end
        do {
            try writeAll(out)
        } catch {
            // A record half written (a full disk) would end the journal for every later one.
            _ = ftruncate(fd, start)
            end = start
            throw error
        }
    }

    private func writeAll(_ bytes: [UInt8]) throws {
        var done = 0
        while done < bytes.count {
            let n = bytes.withUnsafeBytes { Foundation.write(fd, $0.baseAddress! + done, $0.count - done) }
            if n < 0 {
                if errno == EINTR { continue }
                throw Spool.error("cannot write \(path)")
            }
            done += n
            end += off_t(n)
        }
    }
}

/// A file's bytes in memory, changed as a write or a truncate changes a file.
extension Array where Element == UInt8 {
    /// Writes `data` at `offset`; zeros fill a gap.
    public mutating func put(_ data: [UInt8], at offset: Int) {
        let end = offset + data.count
        if count < end { append(contentsOf: repeatElement(0, count: end - count)) }
        replaceSubrange(offset..<end, with: data)
    }

    /// Cuts or extends (with zeros) to `size` bytes.
    public mutating func resize(to size: Int) {
        if count > size { removeSubrange(size...) } else { append(contentsOf: repeatElement(0, count: size - count)) }
    }
}

/// One journal record.
enum Record {
    /// Everything after this belongs to generation `g`.
    case begin(Int64)
    case create(Staging.File)
    case write(Staging.Key, offset: Int64, data: [UInt8], mtimeNs: Int64)
    case truncate(Staging.Key, size: Int64, mtimeNs: Int64)
    case drop(Staging.Key)
    case absorb(Staging.Key, into: Int64, mtimeNs: Int64)

    /// The staged file the record changes, which must exist (none for a create or a begin).
    var key: Staging.Key? {
        switch self {
        case .write(let k, _, _, _), .truncate(let k, _, _), .drop(let k), .absorb(let k, _, _): return k
        case .create, .begin: return nil
        }
    }

    /// Every staged file the record touches, the one it leaves changed last.
    var touched: [Staging.Key] {
        switch self {
        case .begin: return []
        case .create(let f): return [f.key]
        case .write(let k, _, _, _), .truncate(let k, _, _), .drop(let k): return [k]
        case .absorb(let k, let target, _): return [k, Staging.Key(.item, target)]
        }
    }

    /// The payload, after `headroom` zero bytes (room for the record's header).
    func encoded(headroom: Int = 0) -> [UInt8] {
        var o = [UInt8](repeating: 0, count: headroom)
        if case .write(_, _, let data, _) = self { o.reserveCapacity(headroom + data.count + 40) }
        switch self {
        case .begin(let g):
            o.append(6)
            Self.putI64(&o, g)
        case .create(let f):
            switch f.origin {
            case .item(let n, let created):
                o.append(1)
                Self.putI64(&o, f.key.rowid); Self.putI64(&o, created)
                Self.putString(&o, n.id ?? ""); Self.putString(&o, n.type); Self.putString(&o, n.fileName)
                Self.putU32(&o, UInt32(n.tags.count))
                for t in n.tags { Self.putString(&o, t) }
            case .scratch(let dir, let name):
                o.append(2)
                Self.putI64(&o, f.key.rowid); Self.putI64(&o, f.mtimeNs)
                Self.putString(&o, dir); Self.putString(&o, name)
            case .overlay:
                // Never written: an overlay begins with an `absorb` record.
                break
            }
        case .write(let k, let offset, let data, let t):
            o.append(3); o.append(k.kind.rawValue)
            Self.putI64(&o, k.rowid); Self.putI64(&o, t); Self.putI64(&o, offset)
            Self.putU32(&o, UInt32(data.count)); o += data
        case .truncate(let k, let size, let t):
            o.append(4); o.append(k.kind.rawValue)
            Self.putI64(&o, k.rowid); Self.putI64(&o, t); Self.putI64(&o, size)
        case .drop(let k):
            o.append(5); o.append(k.kind.rawValue)
            Self.putI64(&o, k.rowid)
        case .absorb(let k, let target, let t):
            o.append(7); o.append(k.kind.rawValue)
            Self.putI64(&o, k.rowid); Self.putI64(&o, target); Self.putI64(&o, t)
        }
        return o
    }

    static func decode(_ b: [UInt8]) throws -> Record {
        var r = Reader(bytes: b, at: 0)
        switch try r.u8() {
        case 1:
            let rowid = try r.i64(), created = try r.i64()
            let id = try r.string(), type = try r.string(), name = try r.string()
            var tags: [String] = []
            for _ in 0..<(try r.u32()) { tags.append(try r.string()) }
            let n = NewItem(id: id, type: type, fileName: name, tags: tags)
            return .create(Staging.File(key: .init(.item, rowid), origin: .item(n, createdNs: created), bytes: [], mtimeNs: created))
        case 2:
            let rowid = try r.i64(), t = try r.i64()
            let dir = try r.string(), name = try r.string()
            return .create(Staging.File(key: .init(.scratch, rowid), origin: .scratch(dir: dir, name: name), bytes: [], mtimeNs: t))
        case 3:
            let k = try r.key(), t = try r.i64(), offset = try r.i64()
            return .write(k, offset: offset, data: try r.bytes(Int(try r.u32())), mtimeNs: t)
        case 4:
            let k = try r.key(), t = try r.i64()
            return .truncate(k, size: try r.i64(), mtimeNs: t)
        case 5:
            return .drop(try r.key())
        case 6:
            return .begin(try r.i64())
        case 7:
            let k = try r.key(), target = try r.i64()
            return .absorb(k, into: target, mtimeNs: try r.i64())
        default:
            throw StoreError.io("unknown journal record")
        }
    }

    static func putU32(_ o: inout [UInt8], _ v: UInt32) { withUnsafeBytes(of: v.littleEndian) { o += $0 } }
    static func putI64(_ o: inout [UInt8], _ v: Int64) { withUnsafeBytes(of: v.littleEndian) { o += $0 } }
    static func putString(_ o: inout [UInt8], _ s: String) { putU32(&o, UInt32(s.utf8.count)); o += s.utf8 }

    /// FNV-1a, 32 bits.
    static func checksum(_ b: ArraySlice<UInt8>) -> UInt32 {
        var h: UInt32 = 2_166_136_261
        for x in b { h = (h ^ UInt32(x)) &* 16_777_619 }
        return h
    }

    struct Reader {
        let bytes: [UInt8]
        var at: Int
        mutating func bytes(_ n: Int) throws -> [UInt8] {
            guard n >= 0, at + n <= bytes.count else { throw StoreError.io("short journal record") }
            defer { at += n }
            return Array(bytes[at..<(at + n)])
        }
        mutating func u8() throws -> UInt8 { try bytes(1)[0] }
        mutating func u32() throws -> UInt32 {
            let b = try bytes(4)
            return b.withUnsafeBytes { UInt32(littleEndian: $0.loadUnaligned(as: UInt32.self)) }
        }
        mutating func i64() throws -> Int64 {
            let b = try bytes(8)
            return b.withUnsafeBytes { Int64(littleEndian: $0.loadUnaligned(as: Int64.self)) }
        }
        mutating func string() throws -> String {
            guard let s = String(validating: try bytes(Int(try u32())), as: UTF8.self) else { throw StoreError.io("bad text in a journal record") }
            return s
        }
        mutating func key() throws -> Staging.Key {
            guard let k = Staging.Kind(rawValue: try u8()) else { throw StoreError.io("bad kind in a journal record") }
            return Staging.Key(k, try i64())
        }
    }
}
