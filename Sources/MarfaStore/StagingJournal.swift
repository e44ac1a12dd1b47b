import Foundation
import MarfaModel

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
    case create(StagedFile)
    case write(StagedKey, offset: Int64, data: [UInt8], mtimeNs: Int64)
    case truncate(StagedKey, size: Int64, mtimeNs: Int64)
    case drop(StagedKey)
    case saveOver(StagedKey, into: Int64, mtimeNs: Int64)
    /// A new item renamed or moved before its row exists: its name, type and tags now.
    case move(StagedKey, type: String, fileName: String, tags: [String])

    /// The staged file the record changes, which must exist (none for a create or a begin).
    var key: StagedKey? {
        switch self {
        case .write(let k, _, _, _), .truncate(let k, _, _), .drop(let k), .saveOver(let k, _, _), .move(let k, _, _, _): return k
        case .create, .begin: return nil
        }
    }

    /// Every staged file the record touches, the one it leaves changed last.
    var touched: [StagedKey] {
        switch self {
        case .begin: return []
        case .create(let f): return [f.key]
        case .write(let k, _, _, _), .truncate(let k, _, _), .drop(let k), .move(let k, _, _, _): return [k]
        case .saveOver(let k, let target, _): return [k, StagedKey(.item, target)]
        }
    }

    /// The payload, after `headroom` zero bytes (room for the record's header).
    func encoded(headroom: Int = 0) -> [UInt8] {
        // Room for a write's data made once, before the headroom is filled.
        var o = [UInt8]()
        if case .write(_, _, let data, _) = self { o.reserveCapacity(headroom + data.count + 40) }
        o.append(contentsOf: repeatElement(0, count: headroom))
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
                // Never written: an overlay begins with a `saveOver` record.
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
        case .saveOver(let k, let target, let t):
            o.append(7); o.append(k.kind.rawValue)
            Self.putI64(&o, k.rowid); Self.putI64(&o, target); Self.putI64(&o, t)
        case .move(let k, let type, let name, let tags):
            o.append(8); o.append(k.kind.rawValue)
            Self.putI64(&o, k.rowid)
            Self.putString(&o, type); Self.putString(&o, name)
            Self.putU32(&o, UInt32(tags.count))
            for t in tags { Self.putString(&o, t) }
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
            return .create(StagedFile(key: .init(.item, rowid), origin: .item(n, createdNs: created), bytes: [], mtimeNs: created))
        case 2:
            let rowid = try r.i64(), t = try r.i64()
            let dir = try r.string(), name = try r.string()
            return .create(StagedFile(key: .init(.scratch, rowid), origin: .scratch(dir: dir, name: name), bytes: [], mtimeNs: t))
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
            return .saveOver(k, into: target, mtimeNs: try r.i64())
        case 8:
            let k = try r.key(), type = try r.string(), name = try r.string()
            var tags: [String] = []
            for _ in 0..<(try r.u32()) { tags.append(try r.string()) }
            return .move(k, type: type, fileName: name, tags: tags)
        default:
            throw StoreError.io("unknown journal record")
        }
    }

    static func putU32(_ o: inout [UInt8], _ v: UInt32) { withUnsafeBytes(of: v.littleEndian) { o += $0 } }
    static func putI64(_ o: inout [UInt8], _ v: Int64) { withUnsafeBytes(of: v.littleEndian) { o += $0 } }
    static func putString(_ o: inout [UInt8], _ s: String) { putU32(&o, UInt32(s.utf8.count)); o += s.utf8 }

    /// FNV-1a, 32 bits.
    static func checksum(_ b: ArraySlice<UInt8>) -> UInt32 {
        b.withUnsafeBufferPointer { p in
            var h: UInt32 = 2_166_136_261
            for x in p { h = (h ^ UInt32(x)) &* 16_777_619 }
            return h
        }
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
        mutating func key() throws -> StagedKey {
            guard let k = StagedKey.Kind(rawValue: try u8()) else { throw StoreError.io("bad kind in a journal record") }
            return StagedKey(k, try i64())
        }
    }
}

/// A staged file: an item's (its rowid, handed out before its row exists) or a scratch file's.
public struct StagedKey: Hashable, Sendable {
    public enum Kind: UInt8, Sendable { case item = 0, scratch = 1 }
    public var kind: Kind
    public var rowid: Int64
    public init(_ kind: Kind, _ rowid: Int64) { self.kind = kind; self.rowid = rowid }
}

/// A staged file's bytes and time, and what it becomes when it is committed.
public struct StagedFile: Sendable {
    public enum Origin: Sendable {
        /// A new item (its id minted at create, FS-22), with the time it was made.
        case item(NewItem, createdNs: Int64)
        /// A scratch file (FS-14) in a directory (`types/core.note`, `tags/x`).
        case scratch(dir: String, name: String)
        /// New bytes of an item that has its row (an editor's save over it, FS-13).
        case overlay
    }

    public var key: StagedKey
    public var origin: Origin
    public var bytes: [UInt8]
    public var mtimeNs: Int64
    public var size: Int64 { Int64(bytes.count) }
}

extension Staging {
    /// A staged file larger than this is committed and written on in the store.
    static let maxFileBytes = 1 << 20
    /// All staged bytes together; past this, everything staged is committed.
    static let maxTotalBytes = 64 << 20

    /// The journal's size past which a new generation starts it over.
    static let compactBytes: off_t = 8 << 20

    /// How far ahead of its records the journal is grown.
    static let growth: off_t = 1 << 20

    /// What the journal begins with: `MFSJ`, then its format (1).
    static let header: [UInt8] = { var h = Array("MFSJ".utf8); Record.putU32(&h, 1); return h }()

    /// What a journal's bytes hold from generation `g` on: the files (generations before `g` are
    /// committed), the last generation named, and where its whole records end (a record torn by
    /// a kill, or the zeros the file is grown in, end it). Nil: not a journal of this format.
    static func read(_ bytes: [UInt8], from g: Int64) -> (files: [Key: File], current: Int64?, end: Int)? {
        guard bytes.count >= header.count, Array(bytes[0..<header.count]) == header else { return nil }
        var pos = header.count
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
            apply(rec, to: &out)
            pos += 8 + len
        }
        return (out, current, pos)
    }

    /// Staged files in the order they are committed: items, then scratch files, by rowid.
    static func ordered(_ files: [Key: File]) -> [File] {
        files.values.sorted { ($0.key.kind.rawValue, $0.key.rowid) < ($1.key.kind.rawValue, $1.key.rowid) }
    }

    /// The records that make `files` again, as they are.
    static func records(of files: [File]) -> [Record] {
        files.flatMap { f -> [Record] in
            [.create(f), f.bytes.isEmpty ? .truncate(f.key, size: 0, mtimeNs: f.mtimeNs) : .write(f.key, offset: 0, data: f.bytes, mtimeNs: f.mtimeNs)]
        }
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
        case .saveOver(let k, let target, let t):
            guard let src = files.removeValue(forKey: k) else { return }
            let tk = Key(.item, target)
            if files[tk] == nil { files[tk] = File(key: tk, origin: .overlay, bytes: [], mtimeNs: t) }
            change(tk) { $0.bytes = src.bytes; $0.mtimeNs = t }
        case .move(let k, let type, let name, let tags):
            change(k) {
                guard case .item(var n, let created) = $0.origin else { return }
                n.type = type; n.fileName = name; n.tags = tags
                $0.origin = .item(n, createdNs: created)
            }
        }
    }
}
