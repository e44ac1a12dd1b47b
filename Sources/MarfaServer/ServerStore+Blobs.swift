import Crypto
import Foundation
import MarfaModel

/// Blobs (wire.md W-13): content-addressed by SHA-256, per tenant, served whole or by one range.
extension ServerStore {
    public struct BlobInfo: Sendable {
        public var hash: String
        public var mimeType: String
        public var size: Int
        var json: [String: JSONValue] {
            ["hash": .string(hash), "mime_type": .string(mimeType), "size": .int(Int64(size)), "size_bytes": .int(Int64(size))]
        }
    }

    static func blobHash(_ bytes: some DataProtocol) -> String { BlobHash.name(digest: SHA256.hash(data: bytes)) }

    static func checkedHash(_ s: String) throws -> String {
        guard BlobHash.isValid(s) else { throw APIError.validation("a blob hash is sha256: and 64 lowercase hex digits", field: "hash") }
        return s
    }

    /// `POST /blobs`: stores the bytes under the hash computed here. If the client names the hash it
    /// expects (`expected`), bytes that do not match it are refused and nothing is stored.
    public func putBlob(_ p: Principal, bytes: [UInt8], mimeType: String, expected: String?) throws -> (Int, [String: JSONValue]) {
        let hash = Self.blobHash(bytes)
        if let expected {
            guard try Self.checkedHash(expected) == hash else {
                throw APIError.validation("the bytes hash to \(hash), not \(expected)", field: "hash")
            }
        }
        return try write { db in
            if let r = try db.row("SELECT mime_type, size FROM blobs WHERE tenant_id = ? AND hash = ?", [p.tenantID, hash]) {
                return (201, BlobInfo(hash: hash, mimeType: r["mime_type"], size: r["size"]).json)
            }
            try db.execute("INSERT INTO blobs(tenant_id, hash, mime_type, size, data, created_at) VALUES (?, ?, ?, ?, ?, ?)", [p.tenantID, hash, mimeType, bytes.count, Data(bytes), Self.now()])
            return (201, BlobInfo(hash: hash, mimeType: mimeType, size: bytes.count).json)
        }
    }

    public func blobInfo(_ p: Principal, _ hash: String) throws -> BlobInfo {
        let hash = try Self.checkedHash(hash)
        return try read { db in
            guard let r = try db.row("SELECT mime_type, size FROM blobs WHERE tenant_id = ? AND hash = ?", [p.tenantID, hash]) else {
                throw APIError(404, "blob_not_found", "no blob \(hash)")
            }
            return BlobInfo(hash: hash, mimeType: r["mime_type"], size: r["size"])
        }
    }

    /// The bytes `range` of a blob (SQLite reads only that slice).
    public func blobBytes(_ p: Principal, _ hash: String, _ range: Range<Int>) throws -> Data {
        try read { db in
            try db.value(Data.self, "SELECT substr(data, CAST(? AS integer), CAST(? AS integer)) FROM blobs WHERE tenant_id = ? AND hash = ?", [range.lowerBound + 1, range.count, p.tenantID, hash]) ?? Data()
        }
    }

    /// W-13: a file item's `blob_ref`, and every `attachments[].blob_ref`, name a blob this
    /// tenant has uploaded (so a client uploads first, then creates the item).
    func checkBlobRefs(_ db: StoreTx, _ p: Principal, _ props: [String: JSONValue], type: String) throws {
        func known(_ v: JSONValue?, _ field: String) throws {
            guard let h = v?.stringValue, BlobHash.isValid(h) else {
                throw APIError(400, "invalid_properties", "\(field) is a blob hash (sha256: and 64 hex digits)", details: ["field": .string(field)])
            }
            guard try db.value(Bool.self, "SELECT EXISTS(SELECT 1 FROM blobs WHERE tenant_id = ? AND hash = ?)", [p.tenantID, h]) ?? false else {
                throw APIError(400, "invalid_properties", "\(field) names no uploaded blob: \(h) (POST /blobs first)", details: ["field": .string(field)])
            }
        }
        if TypeSchema.isBlobType(type) || props["blob_ref"] != nil, props["blob_ref"] != .null { try known(props["blob_ref"], "blob_ref") }
        guard let a = props["attachments"], a != .null else { return }
        guard case .array(let list) = a else {
            throw APIError(400, "invalid_properties", "attachments is an array of {blob_ref, mime_type, title?}", details: ["field": "attachments"])
        }
        for (i, entry) in list.enumerated() {
            guard case .object(let o) = entry, o["mime_type"]?.stringValue != nil else {
                throw APIError(400, "invalid_properties", "attachments[\(i)] is {blob_ref, mime_type, title?}", details: ["field": .string("attachments[\(i)]")])
            }
            try known(o["blob_ref"], "attachments[\(i)].blob_ref")
        }
    }

    /// A `Range` header against a blob of `size` bytes (RFC 9110 §14): nil serves the whole blob
    /// (no header, another unit, or several ranges); a single range that cannot be satisfied is 416.
    static func byteRange(_ header: String?, size: Int) throws -> Range<Int>? {
        guard let header, header.hasPrefix("bytes=") else { return nil }
        let spec = header.dropFirst(6).trimmingCharacters(in: .whitespaces)
        if spec.contains(",") { return nil }
        let unsatisfiable = APIError(416, "range_not_satisfiable", "range \(spec) does not fit a blob of \(size) bytes",
                                     details: ["size": .int(Int64(size))])
        guard let dash = spec.firstIndex(of: "-") else { throw unsatisfiable }
        let first = spec[..<dash], last = spec[spec.index(after: dash)...]
        func number(_ s: Substring) throws -> Int {
            guard !s.isEmpty, s.utf8.allSatisfy({ (48...57).contains($0) }) else { throw unsatisfiable }
            // Past 2^63: as large as any blob can be (an end is then the blob's last byte).
            return Int(s) ?? Int.max
        }
        if first.isEmpty {
            let n = try number(last)
            guard n > 0, size > 0 else { throw unsatisfiable }
            return max(0, size - n)..<size
        }
        let start = try number(first)
        let end = last.isEmpty ? size - 1 : min(try number(last), size - 1)
        guard start < size, start <= end else { throw unsatisfiable }
        return start..<(end + 1)
    }
}
