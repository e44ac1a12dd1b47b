import Foundation
import GRDB
import MarfaModel

/// What the filesystem needs of an item to name and stat it, without its content.
public struct ItemSummary: Hashable, Sendable {
    public var rowid: Int64
    public var id: String
    public var type: String
    public var stem: String
    public var ext: String
    public var size: Int64
    public var mtimeNs: Int64
    public var createdAt: String
    public var state: ItemState
    /// `properties.blob_ref` of blob items (FS-11).
    public var blobRef: String?
    /// Permission bits (FS-31); 0: the default, 0644.
    public var mode: UInt16 = 0

    init(row: Row) {
        rowid = row["rowid"]; id = row["id"]; type = row["type"]; stem = row["stem"]; ext = row["ext"]
        size = row["size"]; mtimeNs = row["mtime_ns"]; createdAt = row["created_at"]
        state = ItemState(rawValue: row["state"]) ?? .active
        blobRef = row["blob_ref"]
        mode = UInt16(truncatingIfNeeded: (row["mode"] as Int64?) ?? 0)
    }
    static let columns = "rowid, id, type, stem, ext, size, mtime_ns, created_at, state, blob_ref, mode"

}

/// An item with everything the store keeps about it.
public struct StoredItem: Sendable {
    public var rowid: Int64
    public var item: Item
    public var raw: [UInt8]?
    public var fileName: String?
    public var size: Int64
    public var mtimeNs: Int64
    public var sync: SyncState
    public var syncError: String?
    public var xattrs: [String: [UInt8]]
    /// Permission bits (FS-31); 0: the default.
    public var mode: UInt16
    public var stem: String
    public var ext: String
    /// What the mount showed before a remote change that no local save has followed yet (FS-24).
    public var shownBase: [UInt8]?
    /// Written bytes not parsed yet (`unsettled` 1, or 2 for a blob's spool file).
    public var unsettled: Bool

    /// An item as a row just written holds it (no read back).
    init(rowid: Int64, item: Item, raw: [UInt8]?, fileName: String?, size: Int64, mtimeNs: Int64, sync: SyncState,
         syncError: String?, stem: String, ext: String, unsettled: Bool) {
        self.rowid = rowid; self.item = item; self.raw = raw; self.fileName = fileName; self.size = size
        self.mtimeNs = mtimeNs; self.sync = sync; self.syncError = syncError; self.xattrs = [:]; self.mode = 0
        self.stem = stem; self.ext = ext; self.shownBase = nil; self.unsettled = unsettled
    }

    init(row: Row) {
        rowid = row["rowid"]
        stem = row["stem"]; ext = row["ext"]
        let props = JSONCoding.object(from: row["properties"])
        item = Item(id: row["id"], type: row["type"], properties: props, version: row["version"],
                    schemaVersion: row["schema_version"], source: row["source"], sourceID: row["source_id"],
                    timestamp: row["timestamp"], createdAt: row["created_at"], updatedAt: row["updated_at"],
                    state: ItemState(rawValue: row["state"]) ?? .active, tier: Tier(rawValue: row["tier"]) ?? .library)
        if let d: Data = row["raw"] { raw = [UInt8](d) } else { raw = RawText.join(head: row["raw_head"], properties: props) }
        fileName = row["file_name"]; size = row["size"]; mtimeNs = row["mtime_ns"]
        sync = SyncState(rawValue: row["sync"]) ?? .pending; syncError = row["sync_error"]
        xattrs = Xattrs.decode(row["xattrs"])
        mode = UInt16(truncatingIfNeeded: (row["mode"] as Int64?) ?? 0)
        shownBase = (row["shown_base"] as Data?).map { [UInt8]($0) }
        unsettled = ((row["unsettled"] as Int64?) ?? 0) != 0
    }

    public var summary: ItemSummary {
        var s = ItemSummary(rowid: rowid, id: item.id, type: item.type, stem: stem, ext: ext, size: size, mtimeNs: mtimeNs,
                            createdAt: item.createdAt, state: item.state)
        s.blobRef = TypeSchema.isBlobType(item.type) ? item.properties["blob_ref"]?.stringValue : nil
        s.mode = mode
        return s
    }
}

extension ItemSummary {
    public init(rowid: Int64, id: String, type: String, stem: String, ext: String, size: Int64, mtimeNs: Int64,
         createdAt: String, state: ItemState, blobRef: String? = nil, mode: UInt16 = 0) {
        self.rowid = rowid; self.id = id; self.type = type; self.stem = stem; self.ext = ext; self.size = size
        self.mtimeNs = mtimeNs; self.createdAt = createdAt; self.state = state; self.blobRef = blobRef; self.mode = mode
    }
}

public struct EdgeRecord: Hashable, Sendable {
    public var rowid: Int64
    public var edge: Edge
    public init(rowid: Int64, edge: Edge) { self.rowid = rowid; self.edge = edge }
    init(row: Row) {
        rowid = row["rowid"]
        edge = Edge(id: row["id"], sourceID: row["source_id"], targetID: row["target_id"], edgeType: row["edge_type"],
                    properties: JSONCoding.object(from: row["properties"]), createdAt: row["created_at"],
                    updatedAt: row["updated_at"])
    }
}

/// `fs.xattr`: other `user.*` attributes kept with an item, as JSON name → base64 (FS-17).
enum Xattrs {
    static func decode(_ text: String?) -> [String: [UInt8]] {
        guard let text else { return [:] }
        var out: [String: [UInt8]] = [:]
        for (k, v) in JSONCoding.object(from: text) {
            if let s = v.stringValue, let d = Data(base64Encoded: s) { out[k] = [UInt8](d) }
        }
        return out
    }
    static func encode(_ x: [String: [UInt8]]) -> String {
        JSONCoding.encode(x.mapValues { JSONValue.string(Data($0).base64EncodedString()) })
    }
}

extension Mutation {
    init(row: Row) {
        self.init(seq: row["seq"], id: row["id"], idempotencyKey: row["idempotency_key"],
                  kind: MutationKind(rawValue: row["kind"]) ?? .update, itemID: row["item_id"],
                  payload: JSONCoding.object(from: row["payload"]), createdAt: row["created_at"],
                  state: MutationState(rawValue: row["state"]) ?? .pending, attempts: row["attempts"], lastError: row["last_error"])
    }
}

/// A written text file stored once (FS-28): when its bytes end with its body property, the row
/// keeps only the bytes before the body (`raw_head`: the body field's name, NUL, the front
/// matter as written); the file is that head followed by the body.
enum RawText {
    /// (raw, raw_head) for a settled text file's bytes and the properties parsed from them.
    static func columns(_ bytes: [UInt8], properties: [String: JSONValue], bodyField: String) -> (raw: Data?, head: Data?) {
        guard case .string(let body)? = properties[bodyField], !bodyField.utf8.contains(0) else { return (Data(bytes), nil) }
        guard endsWith(bytes, body) else { return (Data(bytes), nil) }
        var head = Array(bodyField.utf8)
        head.append(0)
        head += bytes.prefix(bytes.count - body.utf8.count)
        return (nil, Data(head))
    }

    /// Whether `bytes` ends with `text`'s UTF-8, compared as memory: an import compares every
    /// note's body so, and a generic comparison of the two sequences went byte by byte.
    private static func endsWith(_ bytes: [UInt8], _ text: String) -> Bool {
        let n = text.utf8.count
        guard n <= bytes.count else { return false }
        if n == 0 { return true }
        return text.utf8.withContiguousStorageIfAvailable { t in
            bytes.withUnsafeBufferPointer { b in memcmp(b.baseAddress! + (b.count - n), t.baseAddress!, n) == 0 }
        } ?? bytes.suffix(n).elementsEqual(text.utf8)
    }

    /// The file's bytes from a head and the properties; nil without a head.
    static func join(head: Data?, properties: [String: JSONValue]) -> [UInt8]? {
        join(head: head) { properties[$0]?.stringValue }
    }

    /// The same from the properties' JSON without parsing it: the body alone is read out of it
    /// (`JSONParser.stringField`).
    static func join(head: Data?, propertiesJSON: String) -> [UInt8]? {
        guard let head, let nul = head.firstIndex(of: 0) else { return nil }
        var out = [UInt8]()
        out.reserveCapacity(head.count + propertiesJSON.utf8.count)
        out.append(contentsOf: head[(nul + 1)...])
        guard JSONParser.appendStringField(String(decoding: head[head.startIndex..<nul], as: UTF8.self), in: propertiesJSON, to: &out) else { return nil }
        return out
    }

    /// The head's bytes after its body field's name, then the body `body(field)` gives.
    private static func join(head: Data?, body: (String) -> String?) -> [UInt8]? {
        guard let head, let nul = head.firstIndex(of: 0) else { return nil }
        guard let text = body(String(decoding: head[head.startIndex..<nul], as: UTF8.self)) else { return nil }
        return [UInt8](head[(nul + 1)...]) + Array(text.utf8)
    }
}
