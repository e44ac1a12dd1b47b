import Foundation

/// What a queued mutation asks the server to do (wire.md §2, §4).
public enum MutationKind: String, Codable, Sendable, CaseIterable {
    case create            // POST /items
    case update            // PATCH /items/{id}
    case transition        // POST /items/{id}/transition
    case setTags = "set_tags"   // PUT /items/{id}/metadata
    case createEdge = "create_edge"  // POST /edges
    case deleteEdge = "delete_edge"  // DELETE /edges/{id}
    case uploadBlob = "upload_blob"  // POST /blobs
}

/// One queued local change, with the idempotency key it keeps on every retry (W-5).
public struct Mutation: Hashable, Sendable {
    public var seq: Int64
    public var id: String
    public var idempotencyKey: String
    public var kind: MutationKind
    public var itemID: String
    public var payload: [String: JSONValue]
    public var createdAt: String
    public var state: String
    public var attempts: Int
    public var lastError: String?

    public init(seq: Int64, id: String, idempotencyKey: String, kind: MutationKind, itemID: String,
                payload: [String: JSONValue], createdAt: String, state: String = "pending", attempts: Int = 0,
                lastError: String? = nil) {
        self.seq = seq; self.id = id; self.idempotencyKey = idempotencyKey; self.kind = kind; self.itemID = itemID
        self.payload = payload; self.createdAt = createdAt; self.state = state; self.attempts = attempts
        self.lastError = lastError
    }
}
