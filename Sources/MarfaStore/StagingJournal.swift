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
    /// What writes staged files to the store (one transaction): `files`, in generation `g`; with
    /// `dead` (a commit in place), the journal's dead records named instead of generation `g + 1`.
    typealias Write = (_ files: [File], _ g: Int64, _ dead: Dead?) throws -> Void

    /// A commit begun by `beginCommit`: its files, and the generation their records are in.
    struct PendingCommit: Sendable {
        let files: [File]
        let generation: Int64
        /// Those of `files` unchanged since `quiet.since` (the others were staged too long).
        let quiet: Set<Key>
        /// Where generation `g + 1` begins in the journal (a commit that starts it).
        let nextGeneration: off_t
        /// A commit in place: the journal's dead records once it is done, and those it makes dead
        /// (`files`' records).
        let dead: Dead?
        var madeDead: [Range<off_t>] = []
    }

    /// A staged file larger than this is committed and written on in the store.
    static let maxFileBytes = 1 << 20
    /// All staged bytes together; past this, everything staged is committed.
    static let maxTotalBytes = 64 << 20

    /// The journal's size past which a new generation starts it over.
    static let compactBytes: off_t = 8 << 20

    /// How far ahead of its records the journal is grown.
    static let growth: off_t = 1 << 20

    /// Records a commit in place made dead in journal `journal` (FS-28): their files are in the
    /// store, their blocks given back (punched); a replay skips them, whatever they hold. Named in
    /// the store's `meta` (`staging_dead`), in the transaction that stores their files.
    struct Dead: Sendable, Equatable {
        let journal: UInt64
        /// Sorted, adjacent ones joined; each begins and ends where records do.
        let ranges: [Range<off_t>]

        init(journal: UInt64, ranges: [Range<off_t>]) {
            self.journal = journal
            var out: [Range<off_t>] = []
            for r in ranges.sorted(by: { $0.lowerBound < $1.lowerBound }) where !r.isEmpty {
                if let last = out.last, r.lowerBound <= last.upperBound {
                    out[out.count - 1] = last.lowerBound..<max(last.upperBound, r.upperBound)
                } else {
                    out.append(r)
                }
            }
            self.ranges = out
        }

        /// As `meta` holds it: the journal's identity, then `start-end` for each range.
        var text: String { ([String(journal)] + ranges.map { "\($0.lowerBound)-\($0.upperBound)" }).joined(separator: " ") }

        init?(text: String) {
            let parts = text.split(separator: " ")
            guard let first = parts.first, let id = UInt64(first) else { return nil }
            var ranges: [Range<off_t>] = []
            for p in parts.dropFirst() {
                let ends = p.split(separator: "-")
                guard ends.count == 2, let a = off_t(ends[0]), let b = off_t(ends[1]), a <= b else { return nil }
                ranges.append(a..<b)
            }
            self.init(journal: id, ranges: ranges)
        }
    }

    /// What a journal's bytes hold from generation `g` on: the files (generations before `g` are
    /// committed), the last generation named, where its whole records end (a record torn by a
    /// kill, or the zeros the file is grown in, end it), where each file's records are (`own`),
    /// and where generation `g` begins. The ranges in `skipping` (dead, `Dead`) are passed over.
    /// Nil: not a journal.
    static func read(_ bytes: [UInt8], from g: Int64, skipping dead: [Range<off_t>] = [])
        -> (files: [Key: File], current: Int64?, end: Int, owned: [Key: [Range<off_t>]], from: Int)? {
        guard let header = JournalFile.readHeader(bytes[...]) else { return nil }
        var pos = header.length
        var out: [Key: File] = [:], owned: [Key: [Range<off_t>]] = [:]
        var current: Int64?, from = pos
        var skip = dead[...]
        while true {
            while let d = skip.first, Int(d.lowerBound) <= pos {
                pos = max(pos, Int(d.upperBound))
                skip = skip.dropFirst()
            }
            guard pos + 8 <= bytes.count else { break }
            var h = Record.Reader(bytes: bytes, at: pos)
            guard let len = try? Int(h.u32()), let sum = try? h.u32(), pos + 8 + len <= bytes.count else { break }
            let payload = bytes[(pos + 8)..<(pos + 8 + len)]
            guard Record.checksum(payload) == sum, let rec = try? Record.decode(Array(payload)) else { break }
            if case .begin(let x) = rec {
                // Generations before `g` are committed. A later one follows a commit the store
                // may have lost (a power cut: its WAL was not synced): its files are kept too.
                if x <= g { out.removeAll(); owned.removeAll(); from = pos }
                current = max(current ?? x, x)
            }
            apply(rec, to: &out)
            own(rec, off_t(pos)..<off_t(pos + 8 + len), &owned)
            pos += 8 + len
        }
        return (out, current, min(pos, bytes.count), owned, from)
    }

    /// Which file's records `range` (holding `rec`) is among: the file the record leaves
    /// changed, which takes a saved-over source's too; a dropped file's go with their generation.
    static func own(_ rec: Record, _ range: Range<off_t>, _ owned: inout [Key: [Range<off_t>]]) {
        switch rec {
        case .begin: return
        case .drop(let k): owned[k] = nil
        case .saveOver(let k, let target, _):
            let source = owned.removeValue(forKey: k) ?? []
            owned[Key(.item, target), default: []] += source + [range]
        case .create(let f): owned[f.key, default: []].append(range)
        case .write(let k, _, _, _), .truncate(let k, _, _), .move(let k, _, _, _): owned[k, default: []].append(range)
        }
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
