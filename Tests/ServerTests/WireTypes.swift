import Foundation
import MarfaModel

/// The response bodies of wire.md as a third-party client would decode them: the server's answers
/// and upstream's fixtures must decode into them. Decoding is liberal (W-1): unknown fields
/// are ignored, and fields the reference server always sends but other servers may not are optional.

/// `metadata` beside an item (§2).
public struct ItemMetadata: Codable, Hashable, Sendable {
    public var itemID: String
    public var tags: [String]
    public var extensions: [String: JSONValue]?
    enum CodingKeys: String, CodingKey { case itemID = "item_id", tags, extensions }
}

/// `{item, metadata}`: single-item responses, and list rows with `include=metadata`.
public struct ItemEnvelope: Codable, Hashable, Sendable {
    public var item: Item
    public var metadata: ItemMetadata?
    /// A repeated create with a known id (W-1): nothing was written.
    public var acknowledged: Bool?
}

/// A page of a list (W-6).
public struct Page<Row: Codable & Sendable>: Codable, Sendable {
    public var data: [Row]
    public var cursor: String?
    public var hasMore: Bool
    enum CodingKeys: String, CodingKey { case data, cursor, hasMore = "has_more" }
}

/// An earlier snapshot of an item (`GET /items/{id}/versions`).
public struct ItemVersion: Codable, Hashable, Sendable {
    public var id: String?
    public var itemID: String?
    public var version: Int
    public var properties: [String: JSONValue]
    public var createdAt: String
    enum CodingKeys: String, CodingKey { case id, itemID = "item_id", version, properties, createdAt = "created_at" }
}

/// The W-3 error object.
public struct WireError: Codable, Hashable, Sendable {
    public var code: String
    public var message: String?
    public var status: Int?
    public var details: [String: JSONValue]?
}

/// Any refusal: `{"error": {…}}` (W-3), with the W-7 context when the code is `version_conflict`
/// or `ancestor_unavailable`.
public struct ErrorResponse: Codable, Hashable, Sendable {
    public struct Snapshot: Codable, Hashable, Sendable {
        public var version: Int
        public var properties: [String: JSONValue]
    }
    public var error: WireError
    public var current: Snapshot?
    public var ancestor: Snapshot?
    public var conflictingFields: [String]?
    public var mergePolicy: MergePolicy?
    public var requestedVersion: Int?
    enum CodingKeys: String, CodingKey {
        case error, current, ancestor, conflictingFields = "conflicting_fields", mergePolicy = "merge_policy"
        case requestedVersion = "requested_version"
    }
}

/// `POST /blobs` (W-13).
public struct BlobUploadResponse: Codable, Hashable, Sendable {
    public var hash: String
    public var mimeType: String?
    public var size: Int64?
    public var sizeBytes: Int64?
    enum CodingKeys: String, CodingKey { case hash, mimeType = "mime_type", size, sizeBytes = "size_bytes" }
}

/// An API key as `GET /keys` lists it; `key` (the plaintext) only in the answer to its creation (W-18).
public struct APIKey: Codable, Hashable, Sendable {
    public var id: String
    public var label: String
    public var createdAt: String
    public var role: String?
    public var source: String?
    public var key: String?
    public var isOperator: Bool?
    public var typePermissions: [String: String]?
    public var lastUsedAt: String?
    enum CodingKeys: String, CodingKey {
        case id, label, role, source, key, createdAt = "created_at", isOperator = "is_operator"
        case typePermissions = "type_permissions", lastUsedAt = "last_used_at"
    }
}

/// A tenant's settings the client reads: how long the event log is kept (W-17).
public struct SpaceConfig: Codable, Hashable, Sendable {
    public var eventLogRetentionHours: Int?
    public var trashRetentionDays: Int?
    enum CodingKeys: String, CodingKey { case eventLogRetentionHours = "event_log_retention_hours", trashRetentionDays = "trash_retention_days" }
}
